// The device model's ops (train/cuda/kernels.h, gemm.h) as members that time themselves when a profile
// is on (`deltabit train --profile`, train/step_profile.h). TrainModel's layer code (train_model.cpp)
// derives from this, so its unqualified calls land here and read exactly as the plain calls; each
// member forwards its arguments unchanged to the namespace function of the same name. Off (events
// null), the cost is one branch per call; on, a pair of CUDA events around it (profile_events.h),
// which change nothing the kernels compute.
//
// Each span carries the FLOPs and the fp32 bytes its shapes imply (step_profile.h says how counted).
#pragma once

#include "train/cuda/profile_events.h"
#include "train/step_profile.h"

#include <chrono>
#include <cstdint>
#include <span>
#include <string>

namespace deltabit::train::cuda {

// FLOPs of the products the chunked delta rule's kernels compute (kernels.h), counted as
// bench/train_delta_rule_cuda.cpp counts them, per value head and chunk of L tokens:
//   forward  4L²dk (K Kᵀ, Q Kᵀ) + 6L·dk·dv (K S, Q S, Kᵀ V') + 2L²dv (T x, M V'; triangles)
//   backward 6L·dk·dv + 2L²dv (the carry) + 12L·dk·dv + 4L²dv + 12L²dk (the gradients)
double delta_rule_forward_flops(int64_t B, int64_t T, int64_t Hv, int64_t dk, int64_t dv);
double delta_rule_backward_flops(int64_t B, int64_t T, int64_t Hv, int64_t dk, int64_t dv);
// Causal attention forward: Q·Kᵀ and P·V over the T(T+1)/2 visible pairs (2 FLOPs a multiply-add).
double attention_forward_flops(int64_t B, int64_t T, int64_t Hq, int64_t dh);

class ProfiledOps {
public:
    ProfileEvents* events = nullptr;  // null: profiling off
    ProfilePass pass = ProfilePass::forward;

    // Times `launch` as one span of `kind` when profiling.
    template <typename Launch>
    void timed(ProfileKind kind, double flops, double bytes, Launch&& launch, std::string detail = {}) {
        if (events == nullptr) return launch();
        const int64_t span = events->begin(kind, pass, flops, bytes, std::move(detail));
        launch();
        events->end(span);
    }
    // Times a host call that blocks until the device is done (a download, a synchronisation).
    template <typename Wait>
    void host_wait(Wait&& wait) {
        if (events == nullptr) return wait();
        const auto start = std::chrono::steady_clock::now();
        wait();
        events->host(ProfileKind::host_wait,
                     std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }

    void zero(float* p, int64_t n);
    void copy_device(float* dst, const float* src, int64_t n);

    void linear_forward(const float* x, const float* w, int64_t n, int64_t in, int64_t out, float* y,
                        bool accumulate = false);
    void linear_backward_input(const float* dy, const float* w, int64_t n, int64_t in, int64_t out, float* dx,
                               bool accumulate = true);
    void linear_backward_weight(const float* dy, const float* x, int64_t n, int64_t in, int64_t out, float* dw);

    void rms_norm_forward(const float* x, const float* w, int64_t rows, int64_t dim, float eps, bool one_plus,
                          float* y, int64_t x_stride = 0);
    void rms_norm_backward(const float* x, const float* w, const float* dy, int64_t rows, int64_t dim, float eps,
                           bool one_plus, float* dx, float* dw, int64_t x_stride = 0, bool accumulate = true);
    void gated_rms_norm_forward(const float* x, const float* z, const float* w, int64_t rows, int64_t dim, float eps,
                                float* y);
    void gated_rms_norm_backward(const float* x, const float* z, const float* w, const float* dy, int64_t rows,
                                 int64_t dim, float eps, float* dx, float* dz, float* dw);
    void l2_norm_forward(const float* x, int64_t x_stride, int64_t N, int64_t heads, int64_t dim, float eps,
                         float scale, float* y);
    void l2_norm_backward(const float* x, int64_t x_stride, const float* dy, int64_t N, int64_t heads, int64_t dim,
                          float eps, float scale, float* dx);

    void swiglu_forward(const float* gate, const float* up, int64_t n, float* out);
    void swiglu_backward(const float* gate, const float* up, const float* dout, int64_t n, float* dgate, float* dup);
    void add_into(const float* x, int64_t n, float* y);
    void residual_add(const float* x, const float* delta, int64_t n, float* out);
    void embedding_forward(const float* embed, const int32_t* tokens, int64_t N, int64_t D, float* x);
    void embedding_backward(const float* dx, std::span<const int32_t> tokens, int64_t V, int64_t D, float* dembed);
    void rope_apply(float* x, int64_t B, int64_t T, int64_t heads, int64_t head_dim, int64_t rope_dim, float theta,
                    float direction);
    void sigmoid_gate_forward(const float* att, const float* gate, int64_t gate_stride, int64_t rows, int64_t width,
                              float* gated);
    void sigmoid_gate_backward(const float* att, const float* gate, int64_t gate_stride, const float* dgated,
                               int64_t rows, int64_t width, float* datt, float* dgate);
    void conv_silu_forward(const float* x, const float* w, int64_t B, int64_t T, int64_t C, int64_t K, int64_t split,
                           float* y_lo, float* y_hi);
    void conv_silu_backward(const float* x, const float* w, const float* dy_lo, const float* dy_hi, int64_t B,
                            int64_t T, int64_t C, int64_t K, int64_t split, float* dx, float* dw);
    void gdn_gates_forward(const float* b, const float* a, const float* a_log, const float* dt_bias, int64_t N,
                           int64_t Hv, float* beta, float* g);
    void gdn_gates_backward(const float* b, const float* a, const float* a_log, const float* dt_bias,
                            const float* dbeta, const float* dg, int64_t N, int64_t Hv, float* db, float* da,
                            float* da_log, float* ddt_bias);

    void attention_forward(const float* q, const float* k, const float* v, int64_t B, int64_t T, int64_t Hq,
                           int64_t Hkv, int64_t dh, float scale, float* o, float* lse);
    void attention_backward(const float* q, const float* k, const float* v, const float* o, const float* lse,
                            const float* dout, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t dh, float scale,
                            float* dq, float* dk, float* dv, float* workspace);
    void delta_rule_forward(const float* q, const float* k, const float* v, const float* g, const float* beta,
                            int64_t B, int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, float* o,
                            float* saved);
    void delta_rule_backward(const float* q, const float* k, const float* v, const float* g, const float* beta,
                             const float* dout, const float* saved, int64_t B, int64_t T, int64_t Hk, int64_t Hv,
                             int64_t dk, int64_t dv, float* dq, float* dk_out, float* dv_out, float* dg,
                             float* dbeta, float* scratch);

    void cross_entropy_rows(float* logits, const int32_t* targets, int64_t rows, int64_t V, float scale,
                            double* loss_sum);
    void cross_entropy_loss_rows(const float* logits, const int32_t* targets, int64_t rows, int64_t V,
                                 double* loss_sum);
};

}  // namespace deltabit::train::cuda

