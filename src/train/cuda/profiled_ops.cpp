// Each member: the span's kind, FLOPs and compulsory fp32 bytes, then the namespace function with the
// arguments as given (qualified: the unqualified name is the member itself).
#include "train/cuda/profiled_ops.h"

#include "backend/cuda_buffer.h"
#include "train/cuda/gemm.h"
#include "train/cuda/kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace deltabit::train::cuda {
namespace {

using Kind = ProfileKind;
constexpr double kF = 4.0;  // bytes per fp32 value

double d(int64_t v) { return double(v); }

std::string gemm_detail(const char* what, int64_t n, int64_t in, int64_t out) {
    return fmt::format("{} {} × {} → {}", what, n, in, out);
}

}  // namespace

double delta_rule_forward_flops(int64_t B, int64_t T, int64_t Hv, int64_t dk, int64_t dv) {
    const double L = d(kDeltaChunk), chunks = d((T + kDeltaChunk - 1) / kDeltaChunk);
    return d(B) * d(Hv) * chunks * (4 * L * L * d(dk) + 6 * L * d(dk) * d(dv) + 2 * L * L * d(dv));
}

double delta_rule_backward_flops(int64_t B, int64_t T, int64_t Hv, int64_t dk, int64_t dv) {
    const double L = d(kDeltaChunk), chunks = d((T + kDeltaChunk - 1) / kDeltaChunk);
    return d(B) * d(Hv) * chunks * (18 * L * d(dk) * d(dv) + 6 * L * L * d(dv) + 12 * L * L * d(dk));
}

double attention_forward_flops(int64_t B, int64_t T, int64_t Hq, int64_t dh) {
    return 4.0 * d(B) * d(Hq) * d(dh) * d(T) * d(T + 1) / 2.0;
}

void ProfiledOps::zero(float* p, int64_t n) {
    if (n <= 0) return;
    timed(Kind::zero_and_copy, 0, kF * d(n), [&] {
        deltabit::cuda::cuda_check(cudaMemset(p, 0, size_t(n) * sizeof(float)), "cudaMemset");
    });
}

void ProfiledOps::copy_device(float* dst, const float* src, int64_t n) {
    if (n <= 0) return;
    timed(Kind::zero_and_copy, 0, 2 * kF * d(n), [&] {
        deltabit::cuda::cuda_check(cudaMemcpy(dst, src, size_t(n) * sizeof(float), cudaMemcpyDeviceToDevice),
                                   "cudaMemcpy");
    });
}

void ProfiledOps::linear_forward(const float* x, const float* w, int64_t n, int64_t in, int64_t out, float* y,
                                 bool accumulate) {
    const auto launch = [&] { cuda::linear_forward(x, w, n, in, out, y, accumulate); };
    if (events == nullptr) return launch();
    const double bytes = kF * (d(n) * d(in) + d(in) * d(out) + d(n) * d(out) * (accumulate ? 2 : 1));
    timed(Kind::gemm_forward, 2 * d(n) * d(in) * d(out), bytes, launch, gemm_detail("forward", n, in, out));
}

void ProfiledOps::linear_backward_input(const float* dy, const float* w, int64_t n, int64_t in, int64_t out,
                                        float* dx, bool accumulate) {
    const auto launch = [&] { cuda::linear_backward_input(dy, w, n, in, out, dx, accumulate); };
    if (events == nullptr) return launch();
    const double bytes = kF * (d(n) * d(out) + d(in) * d(out) + d(n) * d(in) * (accumulate ? 2 : 1));
    timed(Kind::gemm_backward_data, 2 * d(n) * d(in) * d(out), bytes, launch, gemm_detail("backward data", n, in, out));
}

void ProfiledOps::linear_backward_weight(const float* dy, const float* x, int64_t n, int64_t in, int64_t out,
                                         float* dw) {
    const auto launch = [&] { cuda::linear_backward_weight(dy, x, n, in, out, dw); };
    if (events == nullptr) return launch();
    const double bytes = kF * (d(n) * d(out) + d(n) * d(in) + 2 * d(in) * d(out));
    timed(Kind::gemm_backward_weight, 2 * d(n) * d(in) * d(out), bytes, launch,
          gemm_detail("backward weight", n, in, out));
}

void ProfiledOps::rms_norm_forward(const float* x, const float* w, int64_t rows, int64_t dim, float eps, bool one_plus,
                                   float* y, int64_t x_stride) {
    timed(Kind::norm, 0, 2 * kF * d(rows) * d(dim),
          [&] { cuda::rms_norm_forward(x, w, rows, dim, eps, one_plus, y, x_stride); });
}

// Reads x, dy; writes dx (and reads it when accumulating).
void ProfiledOps::rms_norm_backward(const float* x, const float* w, const float* dy, int64_t rows, int64_t dim,
                                    float eps, bool one_plus, float* dx, float* dw, int64_t x_stride, bool accumulate) {
    timed(Kind::norm, 0, (accumulate ? 4 : 3) * kF * d(rows) * d(dim),
          [&] { cuda::rms_norm_backward(x, w, dy, rows, dim, eps, one_plus, dx, dw, x_stride, accumulate); });
}

void ProfiledOps::gated_rms_norm_forward(const float* x, const float* z, const float* w, int64_t rows, int64_t dim,
                                         float eps, float* y) {
    timed(Kind::norm, 0, 3 * kF * d(rows) * d(dim), [&] { cuda::gated_rms_norm_forward(x, z, w, rows, dim, eps, y); });
}

// Reads x, z, dy; writes dx, dz (both overwritten).
void ProfiledOps::gated_rms_norm_backward(const float* x, const float* z, const float* w, const float* dy,
                                          int64_t rows, int64_t dim, float eps, float* dx, float* dz, float* dw) {
    timed(Kind::norm, 0, 5 * kF * d(rows) * d(dim),
          [&] { cuda::gated_rms_norm_backward(x, z, w, dy, rows, dim, eps, dx, dz, dw); });
}

void ProfiledOps::l2_norm_forward(const float* x, int64_t x_stride, int64_t N, int64_t heads, int64_t dim, float eps,
                                  float scale, float* y) {
    timed(Kind::norm, 0, 2 * kF * d(N) * d(heads) * d(dim),
          [&] { cuda::l2_norm_forward(x, x_stride, N, heads, dim, eps, scale, y); });
}

// Reads x, dy; writes dx (overwritten).
void ProfiledOps::l2_norm_backward(const float* x, int64_t x_stride, const float* dy, int64_t N, int64_t heads,
                                   int64_t dim, float eps, float scale, float* dx) {
    timed(Kind::norm, 0, 3 * kF * d(N) * d(heads) * d(dim),
          [&] { cuda::l2_norm_backward(x, x_stride, dy, N, heads, dim, eps, scale, dx); });
}

void ProfiledOps::swiglu_forward(const float* gate, const float* up, int64_t n, float* out) {
    timed(Kind::pointwise, 0, 3 * kF * d(n), [&] { cuda::swiglu_forward(gate, up, n, out); });
}

void ProfiledOps::swiglu_backward(const float* gate, const float* up, const float* dout, int64_t n, float* dgate,
                                  float* dup) {
    // Reads gate, up, dout; writes dgate, dup (overwritten).
    timed(Kind::pointwise, 0, 5 * kF * d(n), [&] { cuda::swiglu_backward(gate, up, dout, n, dgate, dup); });
}

void ProfiledOps::add_into(const float* x, int64_t n, float* y) {
    timed(Kind::pointwise, 0, 3 * kF * d(n), [&] { cuda::add_into(x, n, y); });
}

void ProfiledOps::residual_add(const float* x, const float* delta, int64_t n, float* out) {
    timed(Kind::pointwise, 0, 3 * kF * d(n), [&] { cuda::residual_add(x, delta, n, out); });
}

void ProfiledOps::embedding_forward(const float* embed, const int32_t* tokens, int64_t N, int64_t D, float* x) {
    timed(Kind::embedding, 0, 2 * kF * d(N) * d(D), [&] { cuda::embedding_forward(embed, tokens, N, D, x); });
}

// Reads dx once and each row of dembed that a token of the batch names once, and writes that row back
// (the runs' partial rows, ≤ 2N/64 of them, and the plan's ints are left out: ≤ 4% of dx at D = 768).
void ProfiledOps::embedding_backward(const float* dx, std::span<const int32_t> tokens, int64_t V, int64_t D,
                                     float* dembed) {
    const auto launch = [&] { cuda::embedding_backward(dx, tokens, V, D, dembed); };
    if (events == nullptr) return launch();
    std::vector<bool> seen(size_t(std::max<int64_t>(V, 0)));
    int64_t distinct = 0;
    for (int32_t t : tokens)
        if (t >= 0 && t < V && !seen[size_t(t)]) {
            seen[size_t(t)] = true;
            ++distinct;
        }
    timed(Kind::embedding, 0, kF * (d(int64_t(tokens.size())) + 2 * d(distinct)) * d(D), launch);
}

void ProfiledOps::rope_apply(float* x, int64_t B, int64_t T, int64_t heads, int64_t head_dim, int64_t rope_dim,
                             float theta, float direction) {
    timed(Kind::pointwise, 0, 2 * kF * d(B) * d(T) * d(heads) * d(rope_dim),
          [&] { cuda::rope_apply(x, B, T, heads, head_dim, rope_dim, theta, direction); });
}

void ProfiledOps::sigmoid_gate_forward(const float* att, const float* gate, int64_t gate_stride, int64_t rows,
                                       int64_t width, float* gated) {
    timed(Kind::pointwise, 0, 3 * kF * d(rows) * d(width),
          [&] { cuda::sigmoid_gate_forward(att, gate, gate_stride, rows, width, gated); });
}

// Reads att, gate, dgated; writes datt, dgate (overwritten).
void ProfiledOps::sigmoid_gate_backward(const float* att, const float* gate, int64_t gate_stride, const float* dgated,
                                        int64_t rows, int64_t width, float* datt, float* dgate) {
    timed(Kind::pointwise, 0, 5 * kF * d(rows) * d(width),
          [&] { cuda::sigmoid_gate_backward(att, gate, gate_stride, dgated, rows, width, datt, dgate); });
}

void ProfiledOps::conv_silu_forward(const float* x, const float* w, int64_t B, int64_t T, int64_t C, int64_t K,
                                    int64_t split, float* y_lo, float* y_hi) {
    timed(Kind::causal_conv, 2 * d(B) * d(T) * d(C) * d(K), 2 * kF * d(B) * d(T) * d(C),
          [&] { cuda::conv_silu_forward(x, w, B, T, C, K, split, y_lo, y_hi); });
}

// Reads x, dy; writes dx (overwritten).
void ProfiledOps::conv_silu_backward(const float* x, const float* w, const float* dy_lo, const float* dy_hi, int64_t B,
                                     int64_t T, int64_t C, int64_t K, int64_t split, float* dx, float* dw) {
    timed(Kind::causal_conv, 4 * d(B) * d(T) * d(C) * d(K), 3 * kF * d(B) * d(T) * d(C),
          [&] { cuda::conv_silu_backward(x, w, dy_lo, dy_hi, B, T, C, K, split, dx, dw); });
}

void ProfiledOps::gdn_gates_forward(const float* b, const float* a, const float* a_log, const float* dt_bias, int64_t N,
                                    int64_t Hv, float* beta, float* g) {
    timed(Kind::pointwise, 0, 4 * kF * d(N) * d(Hv),
          [&] { cuda::gdn_gates_forward(b, a, a_log, dt_bias, N, Hv, beta, g); });
}

void ProfiledOps::gdn_gates_backward(const float* b, const float* a, const float* a_log, const float* dt_bias,
                                     const float* dbeta, const float* dg, int64_t N, int64_t Hv, float* db, float* da,
                                     float* da_log, float* ddt_bias) {
    // Reads b, a, dbeta, dg; writes db, da (overwritten).
    timed(Kind::pointwise, 0, 6 * kF * d(N) * d(Hv), [&] {
        cuda::gdn_gates_backward(b, a, a_log, dt_bias, dbeta, dg, N, Hv, db, da, da_log, ddt_bias);
    });
}

void ProfiledOps::attention_forward(const float* q, const float* k, const float* v, int64_t B, int64_t T, int64_t Hq,
                                    int64_t Hkv, int64_t dh, float scale, float* o, float* lse) {
    // Reads q, k, v; writes o and the log-sum-exp.
    timed(Kind::attention_forward, attention_forward_flops(B, T, Hq, dh),
          kF * d(B) * d(T) * (2 * d(Hq) * d(dh) + 2 * d(Hkv) * d(dh) + d(Hq)),
          [&] { cuda::attention_forward(q, k, v, B, T, Hq, Hkv, dh, scale, o, lse); });
}

void ProfiledOps::attention_backward(const float* q, const float* k, const float* v, const float* o, const float* lse,
                                     const float* dout, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t dh,
                                     float scale, float* dq, float* dk, float* dv, float* workspace) {
    // Five products (S recomputed, dV, dP, dQ, dK) against the forward's two; q, o, dout read and dq
    // written per query head, k, v read and dk, dv written per kv head (overwritten: kernels.h's "(=)").
    timed(Kind::attention_backward, 2.5 * attention_forward_flops(B, T, Hq, dh),
          kF * d(B) * d(T) * (4 * d(Hq) * d(dh) + 4 * d(Hkv) * d(dh) + d(Hq)),
          [&] { cuda::attention_backward(q, k, v, o, lse, dout, B, T, Hq, Hkv, dh, scale, dq, dk, dv, workspace); });
}

void ProfiledOps::delta_rule_forward(const float* q, const float* k, const float* v, const float* g, const float* beta,
                                     int64_t B, int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, float* o,
                                     float* saved) {
    const double N = d(B) * d(T);
    // Reads q, k, v, g, β; writes o and the saved states, δ and factors.
    const double bytes = kF * (N * (2 * d(Hk) * d(dk) + 2 * d(Hv) * d(dv) + 2 * d(Hv)) +
                               d(delta_rule_saved_floats(B, T, Hv, dk, dv)));
    timed(Kind::delta_rule_forward, delta_rule_forward_flops(B, T, Hv, dk, dv), bytes,
          [&] { cuda::delta_rule_forward(q, k, v, g, beta, B, T, Hk, Hv, dk, dv, o, saved); });
}

void ProfiledOps::delta_rule_backward(const float* q, const float* k, const float* v, const float* g,
                                      const float* beta, const float* dout, const float* saved, int64_t B, int64_t T,
                                      int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, float* dq, float* dk_out,
                                      float* dv_out, float* dg, float* dbeta, float* scratch) {
    const double N = d(B) * d(T);
    // Inputs and dout read, the saved buffer read, the scratch written and read, the five gradients
    // written (overwritten: kernels.h's "(=)").
    const double inputs = N * (2 * d(Hk) * d(dk) + d(Hv) * d(dv) + 2 * d(Hv));
    const double bytes = kF * (inputs + N * d(Hv) * d(dv) + d(delta_rule_saved_floats(B, T, Hv, dk, dv)) +
                               2 * d(delta_rule_scratch_floats(B, T, Hv, dk, dv)) + inputs);
    timed(Kind::delta_rule_backward, delta_rule_backward_flops(B, T, Hv, dk, dv), bytes, [&] {
        cuda::delta_rule_backward(q, k, v, g, beta, dout, saved, B, T, Hk, Hv, dk, dv, dq, dk_out, dv_out, dg, dbeta,
                                  scratch);
    });
}

void ProfiledOps::cross_entropy_rows(float* logits, const int32_t* targets, int64_t rows, int64_t V, float scale,
                                     double* loss_sum) {
    timed(Kind::lm_head_loss, 0, 2 * kF * d(rows) * d(V),
          [&] { cuda::cross_entropy_rows(logits, targets, rows, V, scale, loss_sum); });
}

void ProfiledOps::cross_entropy_loss_rows(const float* logits, const int32_t* targets, int64_t rows, int64_t V,
                                          double* loss_sum) {
    timed(Kind::lm_head_loss, 0, kF * d(rows) * d(V),
          [&] { cuda::cross_entropy_loss_rows(logits, targets, rows, V, loss_sum); });
}

}  // namespace deltabit::train::cuda
