// The trainer's CPU reference ops: forward and backward of every block of the qwen35 models, in double.
// They are the oracle that the CUDA training kernels are checked against, so they stay naive: loops
// that read like ../shared/reference/qwen35-transformers.md §2. They are not the engine's src/ops
// (which are float, forward-only and write in place): a backward needs double precision for finite
// differences and the forward's saved inputs, so each op here is a pure function of its arguments.
//
// Conventions: every tensor is row-major, the last index contiguous; shapes are given in brackets.
// A backward takes the forward's inputs and the gradient of the loss with respect to the output (dy)
// and ADDS the gradients of its inputs into the d* buffers (so a tensor used twice accumulates), which
// the caller zeroes once. Parameter names follow Hugging Face (1+w norms stored as w, A_log, grouped
// value heads): the export converts to the engine's GGUF conventions.
#pragma once

#include <cmath>
#include <cstdint>

namespace deltabit::train::ref {

// y[n][out] = x[n][in] · W[out][in]ᵀ (nn.Linear without bias).
void linear_forward(const double* x, const double* w, int64_t n, int64_t in, int64_t out, double* y);
void linear_backward(const double* x, const double* w, const double* dy, int64_t n, int64_t in, int64_t out,
                     double* dx, double* dw);

// RMS norm over rows of `dim`: y = x / sqrt(mean(x²) + eps) · (one_plus ? 1 + w : w).
void rms_norm_forward(const double* x, const double* w, int64_t rows, int64_t dim, double eps, bool one_plus,
                      double* y);
void rms_norm_backward(const double* x, const double* w, const double* dy, int64_t rows, int64_t dim, double eps,
                       bool one_plus, double* dx, double* dw);

// out = silu(gate) · up, elementwise over n.
void swiglu_forward(const double* gate, const double* up, int64_t n, double* out);
void swiglu_backward(const double* gate, const double* up, const double* dout, int64_t n, double* dgate,
                     double* dup);

// Split-half (NeoX) rotary embedding on the first rope_dim dims of each head of x[T][heads][head_dim],
// token t at position t (a training sequence starts at 0). inv_freq and the angle are formed in fp32
// as transformers forms them; cos/sin in double. In place; the backward rotates dy by −angle.
void rope_forward(double* x, int64_t T, int64_t heads, int64_t head_dim, int64_t rope_dim, float theta);
void rope_backward(double* dy, int64_t T, int64_t heads, int64_t head_dim, int64_t rope_dim, float theta);

// Causal GQA attention core: o[T][Hq][dh] = softmax(q·kᵀ·scale, causal) · v, query head h reading
// kv head h / (Hq/Hkv); q[T][Hq][dh], k, v [T][Hkv][dh]. The backward recomputes the probabilities.
struct AttentionShape {
    int64_t T, n_head, n_head_kv, head_dim;
    double scale;
};
void attention_forward(const double* q, const double* k, const double* v, const AttentionShape& s, double* o);
void attention_backward(const double* q, const double* k, const double* v, const double* dout,
                        const AttentionShape& s, double* dq, double* dk, double* dv);

// Depthwise causal conv over time then SiLU: y[t][c] = silu(Σ_j w[c][j] · x[t−(K−1)+j][c]), zeros
// before t = 0; x[T][C], w[C][K].
void conv_silu_forward(const double* x, const double* w, int64_t T, int64_t C, int64_t K, double* y);
void conv_silu_backward(const double* x, const double* w, const double* dy, int64_t T, int64_t C, int64_t K,
                        double* dx, double* dw);

// Row L2 norm with the squared-sum epsilon of transformers' l2norm: y = x / sqrt(Σx² + eps) · scale.
void l2_norm_forward(const double* x, int64_t rows, int64_t dim, double eps, double scale, double* y);
void l2_norm_backward(const double* x, const double* dy, int64_t rows, int64_t dim, double eps, double scale,
                      double* dx);

// DeltaNet gates per token and value head: beta = sigmoid(b), g = −exp(A_log) · softplus(a + dt_bias);
// b, a [T][Hv]; A_log, dt_bias [Hv]. softplus(x) = x above 20, as torch's.
void gdn_gates_forward(const double* b, const double* a, const double* a_log, const double* dt_bias, int64_t T,
                       int64_t Hv, double* beta, double* g);
void gdn_gates_backward(const double* b, const double* a, const double* a_log, const double* dt_bias,
                        const double* dbeta, const double* dg, int64_t T, int64_t Hv, double* db, double* da,
                        double* da_log, double* ddt_bias);

// The gated delta rule in its recurrent form from a zero state, per value head i using key head
// i / (Hv/Hk) (grouped, as transformers): S ← e^g S; δ = β (v − Sᵀk); S ← S + k δᵀ; o = Sᵀq.
// q, k [T][Hk][dk] (already normalised and scaled), v [T][Hv][dv], g, beta [T][Hv]; o [T][Hv][dv].
struct DeltaRuleShape {
    int64_t T, n_key_heads, n_value_heads, key_dim, value_dim;
};
void delta_rule_forward(const double* q, const double* k, const double* v, const double* g, const double* beta,
                        const DeltaRuleShape& s, double* o);
// Replays the forward to keep every state S_t, then walks back.
void delta_rule_backward(const double* q, const double* k, const double* v, const double* g, const double* beta,
                         const double* dout, const DeltaRuleShape& s, double* dq, double* dk, double* dv,
                         double* dg, double* dbeta);

// The DeltaNet output norm per value head: y = w ⊙ x / sqrt(mean(x²) + eps) ⊙ silu(z); x, z [rows][dim],
// w [dim] (plain w, not 1 + w).
void gated_rms_norm_forward(const double* x, const double* z, const double* w, int64_t rows, int64_t dim,
                            double eps, double* y);
void gated_rms_norm_backward(const double* x, const double* z, const double* w, const double* dy, int64_t rows,
                             int64_t dim, double eps, double* dx, double* dz, double* dw);

// The LM head fused with cross entropy: mean over the n positions with target ≥ 0 of
// −log softmax(x · Wᵀ)[target], x[n][D], W[V][D]. Logits are formed for `chunk` positions at a time,
// so at most chunk·V values exist at once. Returns the summed (not mean) loss and the count through
// *n_counted; the backward adds scale · d(sum)/dx and /dW (scale = 1/count for the mean).
double lm_head_cross_entropy_forward(const double* x, const double* w, const int32_t* targets, int64_t n, int64_t D,
                                     int64_t V, int64_t chunk, int64_t* n_counted);
void lm_head_cross_entropy_backward(const double* x, const double* w, const int32_t* targets, int64_t n, int64_t D,
                                    int64_t V, int64_t chunk, double scale, double* dx, double* dw);

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace deltabit::train::ref
