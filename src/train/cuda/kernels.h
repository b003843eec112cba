// The CUDA twins of the trainer's CPU reference ops (train/reference_ops.h): same formulas, same
// layouts, fp32 on the device instead of double on the host. Every pointer is device memory (but for
// embedding_backward's host tokens); every launch goes on the default stream.
//
// Gradients, two contracts, each op's stated at it:
//   += : a parameter's gradient (dw) always, and an activation gradient that several ops add into
//        (the residual stream's dx): the op ADDS, as the reference does, and the caller zeroes once.
//   =  : an activation gradient that one op alone produces (marked "(=)"): the op OVERWRITES it, so
//        the caller neither zeroes it first (a memset of the whole tensor) nor makes the kernel read it.
//
// A training batch is B sequences of T tokens stored as N = B·T rows; ops that look across time (rope
// positions, attention, the causal conv, the delta rule) take B and T and never cross a sequence.
//
// Plain declarations without CUDA types, so C++ tests and the model code include them without nvcc.
#pragma once

#include <cstdint>
#include <span>

namespace deltabit::train::cuda {

// ---- norms (norm_kernels.cu) ----

// y = x / sqrt(mean(x²) + eps) · (one_plus ? 1 + w : w) over rows of dim; y [rows][dim]. Row r of x
// starts at x + r·x_stride (0: dim, packed; wider: the attention's q read in place from q|gate).
void rms_norm_forward(const float* x, const float* w, int64_t rows, int64_t dim, float eps, bool one_plus, float* y,
                      int64_t x_stride = 0);
// dx += … (accumulate) or dx (=) …, laid out as x; dw += … (dw may be null; its sum over rows in a fixed
// order, no atomics). dy [rows][dim].
void rms_norm_backward(const float* x, const float* w, const float* dy, int64_t rows, int64_t dim, float eps,
                       bool one_plus, float* dx, float* dw, int64_t x_stride = 0, bool accumulate = true);
// y = w ⊙ x / sqrt(mean(x²) + eps) ⊙ silu(z) (the DeltaNet output norm; plain w).
void gated_rms_norm_forward(const float* x, const float* z, const float* w, int64_t rows, int64_t dim, float eps,
                            float* y);
// dx (=), dz (=), dw += (in a fixed order).
void gated_rms_norm_backward(const float* x, const float* z, const float* w, const float* dy, int64_t rows,
                             int64_t dim, float eps, float* dx, float* dz, float* dw);
// y = x / sqrt(Σx² + eps) · scale over N tokens of `heads` rows of dim; token n's rows start at
// x + n·x_stride (x_stride ≥ heads·dim: the DeltaNet reads q and k in place from the conv's output);
// y is [N][heads][dim]. The backward's dx (=) is laid out as x (same stride), dy as y.
void l2_norm_forward(const float* x, int64_t x_stride, int64_t N, int64_t heads, int64_t dim, float eps, float scale,
                     float* y);
void l2_norm_backward(const float* x, int64_t x_stride, const float* dy, int64_t N, int64_t heads, int64_t dim,
                      float eps, float scale, float* dx);

// ---- pointwise and across-time ops (pointwise_kernels.cu) ----

// out = silu(gate) · up over n; the backward's dgate (=), dup (=).
void swiglu_forward(const float* gate, const float* up, int64_t n, float* out);
void swiglu_backward(const float* gate, const float* up, const float* dout, int64_t n, float* dgate, float* dup);
// y += x over n.
void add_into(const float* x, int64_t n, float* y);
// out = x + delta over n (a residual in one pass, not a copy then an add_into; out may be x).
void residual_add(const float* x, const float* delta, int64_t n, float* out);
// x[N][D] = embed[tokens[n]] (embedding_kernels.cu).
void embedding_forward(const float* embed, const int32_t* tokens, int64_t N, int64_t D, float* x);
// dembed[v] += Σ dx[n] over the rows with tokens[n] = v, in a fixed order (no atomics: the rows grouped
// by token on the host, then summed in runs; the file says how). `tokens` are the batch's host tokens
// (N = their count, each in 0..V−1, else an error naming it); the plan's upload waits for the kernels
// before it on the stream.
void embedding_backward(const float* dx, std::span<const int32_t> tokens, int64_t V, int64_t D, float* dembed);
// Split-half rotary embedding in place on x[B·T][heads][head_dim] (row n is position n mod T), the
// angle in fp32 and cos/sin of it, as the reference; direction −1 is the backward (the transpose).
void rope_apply(float* x, int64_t B, int64_t T, int64_t heads, int64_t head_dim, int64_t rope_dim, float theta,
                float direction);
// gated[r][c] = att[r][c] · sigmoid(gate[r][c]) over rows of width, att and gated [rows][width], gate's
// row r at gate + r·gate_stride (the attention's gate read in place from q|gate). Backward: datt (=)
// dgated · s, dgate (=) dgated · att · s(1 − s), dgate laid out as gate.
void sigmoid_gate_forward(const float* att, const float* gate, int64_t gate_stride, int64_t rows, int64_t width,
                          float* gated);
void sigmoid_gate_backward(const float* att, const float* gate, int64_t gate_stride, const float* dgated, int64_t rows,
                           int64_t width, float* datt, float* dgate);
// Depthwise causal conv then SiLU per sequence: y[b][t][c] = silu(Σ_j w[c][j] x[b][t−(K−1)+j][c]), x
// [B·T][C]. y's channels [0, split) land in y_lo [B·T][split], the rest in y_hi [B·T][C − split] (the
// DeltaNet's q|k and v, apart without a copy); the backward reads dy from dy_lo, dy_hi the same way.
// Backward: dx (=, may be null), dw += (may be null; in a fixed order).
void conv_silu_forward(const float* x, const float* w, int64_t B, int64_t T, int64_t C, int64_t K, int64_t split,
                       float* y_lo, float* y_hi);
void conv_silu_backward(const float* x, const float* w, const float* dy_lo, const float* dy_hi, int64_t B, int64_t T,
                        int64_t C, int64_t K, int64_t split, float* dx, float* dw);
// beta = sigmoid(b), g = −exp(A_log)·softplus(a + dt_bias); b, a, beta, g [N][Hv]. Backward: db (=),
// da (=), da_log +=, ddt_bias += (sums over rows in a fixed order).
void gdn_gates_forward(const float* b, const float* a, const float* a_log, const float* dt_bias, int64_t N,
                       int64_t Hv, float* beta, float* g);
void gdn_gates_backward(const float* b, const float* a, const float* a_log, const float* dt_bias, const float* dbeta,
                        const float* dg, int64_t N, int64_t Hv, float* db, float* da, float* da_log,
                        float* ddt_bias);

// ---- causal GQA attention (attention_kernels.cu) ----

// o[B·T][Hq][dh] = softmax(q·kᵀ·scale, causal)·v per sequence; q [B·T][Hq][dh], k, v [B·T][Hkv][dh].
// lse[B·T][Hq] keeps each row's log-sum-exp for the backward. T up to kAttentionMaxT.
inline constexpr int64_t kAttentionMaxT = 8192;
void attention_forward(const float* q, const float* k, const float* v, int64_t B, int64_t T, int64_t Hq,
                       int64_t Hkv, int64_t dh, float scale, float* o, float* lse);
// dq (=), dk (=), dv (=), each element written once; workspace: B·T·Hq floats (the rows' Σ dout·o).
void attention_backward(const float* q, const float* k, const float* v, const float* o, const float* lse,
                        const float* dout, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t dh, float scale,
                        float* dq, float* dk, float* dv, float* workspace);

// ---- the gated delta rule (delta_rule_chunked_kernels.cu) ----

// The chunked (WY) form per sequence from a zero state, in chunks of kDeltaChunk tokens: the math of
// train/reference_delta_chunked.h, whose oracle is ref::delta_rule_forward/backward.
// q, k [B·T][Hk][dk] (normalised, q scaled); v [B·T][Hv][dv]; g, beta [B·T][Hv]; o [B·T][Hv][dv];
// value head h reads key head h / (Hv/Hk). dk ≤ kDeltaMaxKeyDim (the kernels keep a chunk's keys and
// queries in shared memory). The forward fills `saved` (delta_rule_saved_floats: the state entering
// every chunk, every token's δ and every chunk's T and M), which the backward reads with the same
// inputs; the backward needs `scratch` (delta_rule_scratch_floats: dS at every chunk's end, Tᵀ dV'
// per token, and per-value-head dq, dk before the sum over a key head's value heads).
// Memory: saved ≈ B·Hv·(T/64)·(dk·dv + 8320) + B·T·Hv·dv floats, scratch ≈ B·Hv·(T/64)·dk·dv +
// B·T·Hv·(dv + 2·dk) floats: 76 MB each for 32 × 512 tokens and 3 heads of 64 × 128; one scratch for
// every layer, and one `saved` too unless run.activations keeps each layer's (train_model.cpp).
inline constexpr int64_t kDeltaChunk = 64;
inline constexpr int64_t kDeltaMaxKeyDim = 128;
int64_t delta_rule_saved_floats(int64_t B, int64_t T, int64_t Hv, int64_t dk, int64_t dv);
int64_t delta_rule_scratch_floats(int64_t B, int64_t T, int64_t Hv, int64_t dk, int64_t dv);
void delta_rule_forward(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t B,
                        int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, float* o, float* saved);
// dq (=), dk_out (=) (the sums over the Hv/Hk value heads of a key head), dv_out (=), dg (=), dbeta (=):
// every element written once, each token by the block of its chunk and value head.
void delta_rule_backward(const float* q, const float* k, const float* v, const float* g, const float* beta,
                         const float* dout, const float* saved, int64_t B, int64_t T, int64_t Hk, int64_t Hv,
                         int64_t dk, int64_t dv, float* dq, float* dk_out, float* dv_out, float* dg, float* dbeta,
                         float* scratch);

// ---- the LM head's softmax and cross entropy (loss_kernels.cu) ----

// On a chunk of logits[rows][V] in place: per row with target ≥ 0, loss_sum += logsumexp − logit[target]
// (double atomics) and the row becomes scale·(softmax − onehot); rows with target < 0 become 0.
void cross_entropy_rows(float* logits, const int32_t* targets, int64_t rows, int64_t V, float scale,
                        double* loss_sum);
// Loss only (logits untouched).
void cross_entropy_loss_rows(const float* logits, const int32_t* targets, int64_t rows, int64_t V, double* loss_sum);

// ---- optimizer and QAT (optimizer_kernels.cu) ----

// *sum_sq (double, device) += Σ g².
void sum_of_squares(const float* g, int64_t n, double* sum_sq);
// Per-value flags of the AdamW kernel: no decay (norms, vectors), decay (matrices, embeddings), and a
// decayed hidden matrix (ParameterInfo::hidden_matrix), which optimizer.kind = "muon" leaves to Muon.
inline constexpr uint8_t kAdamFlagNoDecay = 0, kAdamFlagDecay = 1, kAdamFlagHiddenMatrix = 2;
// AdamW on n values with per-value flags, gradient scaled by grad_scale (the clip factor) first; the
// same fp32 arithmetic order as train/optimizer.cpp. skip_hidden: values flagged hidden matrix are
// left alone (Muon updates them).
void adamw_update(float* params, const float* grads, float* m, float* v, const uint8_t* flags, int64_t n,
                  bool skip_hidden, float grad_scale, float beta1, float beta2, double correction1, double correction2,
                  double lr, double eps, double weight_decay);
// Muon (train/muon.h), pointwise parts; the Newton–Schulz products are train/cuda/muon_update.cpp's.
// momentum ← μ·momentum + grad_scale·g; u = g' + μ·momentum (nesterov) or momentum, over g[rows][cols];
// u is written [cols][rows] when transposed.
void muon_momentum(const float* grads, float* momentum, int64_t rows, int64_t cols, float grad_scale, float mu,
                   bool nesterov, bool transposed, float* u);
// x *= 1 / (√(*sum_sq) + eps), *sum_sq a device double.
void scale_by_inverse_norm(float* x, int64_t n, const double* sum_sq, double eps);
// gram_sq ← b·gram + c·gram_sq (in place) over n_gram; next = a·x over n_x.
void newton_schulz_pointwise(const float* gram, float* gram_sq, int64_t n_gram, const float* x, float* next,
                             int64_t n_x, float a, float b, float c);
// params[rows][cols] ← params − lr·(scale·O + weight_decay·params), O = x, or xᵀ (x [cols][rows]) when
// transposed; in double per value, as train/muon.cpp.
void muon_apply(float* params, const float* x, int64_t rows, int64_t cols, bool transposed, double lr, double scale,
                double weight_decay);
// QAT forward weights of one binarised tensor (rows × row_len, row_len % 128 == 0): out = Q1_0(w)
// dequantised at lambda = 1, else w + λ(ŵ − w), bit for bit as train/qat.cpp.
void qat_binarise(const float* w, int64_t rows, int64_t row_len, float lambda, bool full, float* out);

}  // namespace deltabit::train::cuda
