// The chunked delta rule's forward, backward carry and gradients on tensor cores for the bf16 training
// path (delta_rule_chunked_mma_kernels.cu). The forward has the contract of delta_rule_forward in
// kernels.h and fills the same `saved` buffer (delta_rule_chunked_common.cuh); the carry is the first
// kernel of delta_rule_backward (dS at every chunk's end and W = Tᵀ dV' per token) and the gradients
// kernel the second (it reads those and `saved`; the fp32 reduction over value heads follows).
// delta_rule_forward / _backward dispatch to these when the products run in bf16 (gemm.h) and the key
// dim is one they are built for; fp32 products and other key dims keep the CUDA-core kernels, the
// oracle these are tested against.
#pragma once

#include <cstdint>

namespace deltabit::train::cuda {

bool delta_rule_mma_supported(int64_t dk);  // key dim 64 or 128
void delta_rule_mma_forward(const float* q, const float* k, const float* v, const float* g, const float* beta,
                            int64_t B, int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, float* o,
                            float* saved);
// dstates [B][Hv][chunks][dk][dv], w [B·T][Hv][dv] (delta_rule_backward's scratch); factors: saved's.
void delta_rule_mma_backward_carry(const float* q, const float* k, const float* beta, const float* dout,
                                   const float* factors, int64_t B, int64_t T, int64_t Hk, int64_t Hv, int64_t dk,
                                   int64_t dv, float* dstates, float* w);
// The backward's gradients from the forward's saved states and V' and the carry's dS and W: dv, dg, dβ
// overwritten (kernels.h's "(=)"), dq and dk per value head into dq_part, dk_part [B·T][Hv][dk] (plain
// stores; the reduction over a key head's value heads follows).
void delta_rule_mma_backward_gradients(const float* q, const float* k, const float* v, const float* g,
                                       const float* beta, const float* dout, const float* states,
                                       const float* v_new, const float* dstates, const float* w, int64_t B, int64_t T,
                                       int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, float* dv_out, float* dq_part,
                                       float* dk_part, float* dg, float* dbeta);

}  // namespace deltabit::train::cuda
