// DRY: find, for every token that could come next, how long a repeat it would extend.
//
// Context c[0..L-1] (only the last `window` tokens are looked at). A candidate t extends a repeat of
// length n when some earlier position j has c[j] = t and the n tokens before j equal the last n
// tokens of the context (c[j-n..j-1] == c[L-n..L-1]). The earlier occurrence c[j-n..j] must contain at
// least one generated token, so text copied from the prompt is not treated as a loop.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace deltabit {

struct DryMatch {
    int32_t token;
    int length;  // n: the repeat this token would extend
};

// Every candidate with a repeat of length ≥ min_length, each token once with its longest length.
std::vector<DryMatch> dry_find_repeats(std::span<const int32_t> tokens, std::span<const uint8_t> generated,
                                       int window, int min_length);

}  // namespace deltabit
