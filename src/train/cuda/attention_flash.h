// The flash-style tensor-core attention of the bf16 training path (attention_flash_kernels.cu): the same
// contract as attention_forward / attention_backward in kernels.h, which dispatch to it when the
// products run in bf16 (gemm.h), head_dim is one it is built for and the row arrays are 16-byte aligned
// (it moves rows 16 bytes at a time); fp32 products, other head dims and unaligned arrays keep the
// CUDA-core kernels (attention_kernels.cu), the oracle these are tested against.
#pragma once

#include <cstdint>

namespace deltabit::train::cuda {

bool flash_attention_supported(int64_t dh);  // head_dim 64 or 128
void attention_flash_forward(const float* q, const float* k, const float* v, int64_t B, int64_t T, int64_t Hq,
                             int64_t Hkv, int64_t dh, float scale, float* o, float* lse);
void attention_flash_backward(const float* q, const float* k, const float* v, const float* o, const float* lse,
                              const float* dout, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t dh,
                              float scale, float* dq, float* dk, float* dv, float* workspace);

}  // namespace deltabit::train::cuda
