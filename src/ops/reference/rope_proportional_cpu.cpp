#include "ops/rope_proportional.h"

#include "ops/rope.h"

namespace deltabit::cpu {

void rope_proportional(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_head, int64_t head_dim,
                       int64_t n_pairs, float theta) {
    rope_rotate_pairs(x, positions, n_tokens, n_head, head_dim, head_dim / 2, n_pairs, head_dim, theta);
}

}  // namespace deltabit::cpu
