// How the GPU's token choosers (cuda::argmax, ops/elementwise/elementwise_cuda.h; cuda::GpuSampler, sampling/sampler_cuda.h)
// report logits that are not finite. A NaN or ±inf logit means the weights or activations broke (the CPU
// engine refuses them before sampling); the choosers already read every logit, so the same pass notes the
// lowest index holding one and returns it encoded as a negative id in place of a token. The id the host
// copies back anyway carries the verdict, and only the failure path reads a logit back.
#pragma once

#include <cstdint>

namespace deltabit {

// Index 0 → −1, index 1 → −2, …: a token id is never negative, and every index below 2^31 − 1 has a code.
constexpr int32_t non_finite_choice(int64_t index) { return int32_t(-1 - index); }
constexpr bool is_non_finite_choice(int32_t id) { return id < 0; }
constexpr int64_t non_finite_index(int32_t choice) { return -1 - int64_t(choice); }

}  // namespace deltabit
