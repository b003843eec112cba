// Which settings of left-to-right decoding the block-diffusion loop has no use for, and why: one table for
// `deltabit run`/`chat` (their flags) and the server (its request fields). Depends on nothing, so the
// request parser (and its fuzz target) can use it without the model code.
#pragma once

#include <string_view>

namespace deltabit {

// Why a setting of left-to-right decoding has no place in the block loop, in words the commands and the
// server refuse it with; nullptr for a setting the loop has. Settings by their sampling names:
// temperature, top_k, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty,
// penalty_last_n, dry, stop, logprobs, tools, echo.
const char* diffusion_inapplicable_reason(std::string_view setting);

}  // namespace deltabit
