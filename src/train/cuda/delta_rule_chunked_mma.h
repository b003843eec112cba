// The chunked delta rule's forward on tensor cores for the bf16 training path
// (delta_rule_chunked_mma_kernels.cu): the contract of delta_rule_forward in kernels.h, the same
// `saved` buffer (delta_rule_chunked_common.cuh) for the fp32 backward to read. delta_rule_forward
// dispatches to it when the products run in bf16 (gemm.h) and the key dim is one it is built for; fp32
// products and other key dims keep the CUDA-core kernels, the oracle it is tested against.
#pragma once

#include <cstdint>

namespace deltabit::train::cuda {

bool delta_rule_mma_supported(int64_t dk);  // key dim 64 or 128
void delta_rule_mma_forward(const float* q, const float* k, const float* v, const float* g, const float* beta,
                            int64_t B, int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, float* o,
                            float* saved);

}  // namespace deltabit::train::cuda
