// The CUDA model's blocks and the matmuls they share (models/model_cuda.h). Host code only (the kernels are in ops/): a .cpp so that fmt's compile-time checks work, compiled
// to nothing in builds without CUDA.
#include "models/model_cuda.h"

#if DELTABIT_HAVE_CUDA

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/attention/attention_cuda.h"
#include "ops/delta_rule/delta_rule_cuda.h"
#include "ops/matmul/dense_cuda.h"
#include "ops/matmul/dense_gemm_cuda.h"
#include "ops/matmul/gemm_cuda.h"
#include "ops/moe/moe_experts_cuda.h"

namespace deltabit {

namespace {

// As models/blocks.cpp: transformers' l2norm uses a fixed 1e-6 whatever rms_norm_eps is.
constexpr float kL2NormEps = 1e-6f;

void check(cudaError_t status, const char* what) { cuda::cuda_check(status, what); }

}  // namespace

void CudaModel::matmul(const float* x, const CudaMatrix& w, int64_t first_row, int64_t n_rows, int64_t n_tokens,
                       float* y) {
    if (!w.quantized) {
        // Prompts and canvases on the tensor cores (cuBLAS; BF16 and F32 weights, fp32-class results), decode
        // and the rest on the naive kernel (ops/matmul/dense_gemm_cuda.h).
        cuda::matmul_plain_any(x, w.plain_view.slice_rows(first_row, n_rows), n_tokens, y,
                               [&](size_t bytes) { return temp(int64_t((bytes + 3) / 4)); }, stream_);
        return;
    }
    const cuda::GemvWeightView view = w.gemv.view().slice_rows(first_row, n_rows);
    // Prompts: one tensor-core GEMM (ops/matmul/gemm_cuda.h matmul_prompt) — for Q1_0 on Hopper on f16 activations
    // (unless DELTABIT_GEMM_F16=0), otherwise on every token's activations quantised exactly as a decode step
    // quantises its one token (the GEMV's terms, summed in another order). Below cuda::kGemmMinTokens the
    // per-token GEMV.
    if (n_tokens > 1) {
        const size_t bytes = cuda::prompt_scratch_bytes(view, n_tokens);
        cuda::matmul_prompt(x, view, n_tokens, y, temp(int64_t((bytes + 3) / 4)), stream_);
        return;
    }
    cuda::matmul(x, view, 1, y, *activations_, stream_);
}

void CudaModel::matmul_prompt_group(const float* x, int64_t T,
                                    std::initializer_list<std::pair<const CudaMatrix*, float*>> outputs) {
    const CudaMatrix& first = *outputs.begin()->first;
    bool shared = T >= cuda::kGemmMinTokens;
    for (const auto& o : outputs) shared = shared && all_quantized({&first, o.first}, first.cols);
    if (!shared) {
        for (const auto& [w, y] : outputs) matmul(x, *w, T, y);
        return;
    }
    // One dtype and one K: each separate matmul would have prepared these same rows.
    const size_t bytes = cuda::prompt_scratch_bytes(first.gemv.view(), T);
    const cuda::PromptRows rows =
        cuda::prepare_prompt_rows(x, first.gemv.view(), T, temp(int64_t((bytes + 3) / 4)), stream_);
    for (const auto& [w, y] : outputs) cuda::gemm_prompt_rows(rows, w->gemv.view(), y, stream_);
}

bool CudaModel::all_quantized(std::initializer_list<const CudaMatrix*> matrices, int64_t cols) {
    return std::all_of(matrices.begin(), matrices.end(), [&](const CudaMatrix* w) {
        return w->quantized && w->cols == cols && w->gemv.dtype == (*matrices.begin())->gemv.dtype;
    });
}

const cuda::QuantizedActivationsView& CudaModel::quantized(const float* x, int64_t cols,
                                                           const cuda::QuantizedActivationsView* xq) {
    if (xq != nullptr) return *xq;
    quantized_ = activations_->view(cols);
    cuda::quantize_activations(x, quantized_, stream_);
    return quantized_;
}

void CudaModel::matmul_shared_input(const float* x, const cuda::QuantizedActivationsView* xq,
                                    std::initializer_list<std::pair<const CudaMatrix*, float*>> outputs) {
    const int64_t cols = outputs.begin()->first->cols;
    bool shared = outputs.size() <= size_t(cuda::kMaxGemvGroup);
    for (const auto& o : outputs) shared = shared && all_quantized({outputs.begin()->first, o.first}, cols);
    if (!shared) {
        for (const auto& [w, y] : outputs) matmul(x, *w, 1, y);
        return;
    }
    // The same int8 activations each separate matmul would compute, computed once (or already by the
    // seam that wrote x), and every matrix's rows in one launch.
    const cuda::QuantizedActivationsView& q = quantized(x, cols, xq);
    std::vector<cuda::GemvOutput> group;
    for (const auto& [w, y] : outputs) group.push_back({w->gemv.view(), y});
    cuda::gemv_quantized_group(q, group, stream_);
}

void CudaModel::block_output_matmul(const float* in, const cuda::QuantizedActivationsView* in_q, const CudaMatrix& w,
                                    float* out, const SeamFold* fold) {
    if (fold == nullptr) {
        if (in_q != nullptr)
            cuda::gemv_quantized(*in_q, w.gemv.view(), out, stream_);
        else
            matmul(in, w, 1, out);
        return;
    }
    // The fold writes the next block's input into activations_, so its own input is quantised elsewhere.
    cuda::QuantizedActivationsView q = in_q != nullptr ? *in_q : block_out_activations_->view(w.cols);
    if (in_q == nullptr) cuda::quantize_activations(in, q, stream_);
    cuda::gemv_quantized_add_norm(q, w.gemv.view(), fold->residual, fold->norm_w, *fold->next, stream_);
}

bool CudaModel::seams_foldable() const {
    const int64_t D = config_.n_embd;
    if (!(output_.quantized && output_.cols == D)) return false;
    return std::all_of(layers_.begin(), layers_.end(), [&](const CudaLayer& L) {
        const bool block = L.kind == LayerKind::linear_attention
                               ? all_quantized({&L.deltanet.qkv, &L.deltanet.gate, &L.deltanet.beta, &L.deltanet.alpha}, D) && L.deltanet.output.quantized
                               : all_quantized({&L.attention.q, &L.attention.k, &L.attention.v}, D) && L.attention.output.quantized;
        const bool ffn = all_quantized({&L.ffn.gate, &L.ffn.up}, D) && L.ffn.gate.rows == L.ffn.up.rows &&
                         L.ffn.down.quantized;
        return !L.moe && block && ffn;
    });
}

void CudaModel::attention_block(const CudaAttentionWeights& w, const float* x, const cuda::QuantizedActivationsView* xq,
                                int64_t T, int64_t n_past, const int32_t* d_positions, CudaLayerState& state,
                                float* out, const SeamFold* fold, const double* rope_table) {
    const ModelConfig& c = config_;
    const int64_t H = c.n_head, H_kv = c.n_head_kv, dh = c.head_dim;
    const bool gated = c.attn_output_gate;
    const int64_t per_head = gated ? 2 * dh : dh;

    if (step_kernels(T)) {
        // The decode step: the position is d_positions[0], read on the device (a graph replays this for
        // every position). q_proj's per-head [q_h | gate_h] rows are read in place, not split.
        float* q_full = temp(H * per_head);
        float* k_raw = temp(H_kv * dh);
        float* v_raw = temp(H_kv * dh);
        matmul_shared_input(x, xq, {{&w.q, q_full}, {&w.k, k_raw}, {&w.v, v_raw}});
        const cuda::AttentionPrologueDims prologue{H, H_kv, dh, per_head, c.rope_dim, c.rope_theta, c.rms_eps};
        const cuda::CachedAttentionDims dims{1, H, H_kv, dh, call_capacity_, per_head};
        // Scratch for the most splits any capacity plans, so the decode arena (and a graph captured in
        // it) suits every sequence whatever its capacity.
        cuda::CachedAttentionDims largest = dims;
        largest.max_keys = std::numeric_limits<int32_t>::max();
        float* scratch = temp(int64_t(cuda::attention_decode_scratch_floats(largest)));
        float* attended = temp(H * dh);
        const float* gate = gated ? q_full + dh : nullptr;
        float* q = temp(H * dh);
        cuda::attention_decode_prologue(q_full, k_raw, v_raw, w.q_norm, w.k_norm, d_positions, prologue, state.k.view,
                                        state.v.view, q, stream_, rope_table);
        cuda::attention_cached(q, state.k.view, state.v.view, gate, d_positions, dims, scratch, attended, stream_);
        compress_kv(state, d_positions, 1);
        block_output_matmul(attended, nullptr, w.output, out, fold);
        return;
    }

    // New keys and values go straight into an f32 cache at positions n_past .. n_past+T−1; a half or
    // kivi4 cache gets them through kv_store.
    const bool f32_cache = state.k.view.element == cuda::KvElement::f32;
    float* k_cache = state.k.data.get<float>();
    float* v_cache = state.v.data.get<float>();
    float* k_new = f32_cache ? k_cache + n_past * H_kv * dh : temp(T * H_kv * dh);
    float* v_new = f32_cache ? v_cache + n_past * H_kv * dh : temp(T * H_kv * dh);
    float* k_raw = temp(T * H_kv * dh);
    float* q_full = temp(T * H * per_head);
    matmul_prompt_group(x, T, {{&w.q, q_full}, {&w.k, k_raw}, {&w.v, v_new}});
    // With the output gate, q_proj's rows interleave per head: [q_h (dh) | gate_h (dh)].
    float* q = temp(T * H * dh);
    float* gate = gated ? temp(T * H * dh) : nullptr;
    const size_t row = size_t(dh) * sizeof(float), pitch = size_t(per_head) * sizeof(float);
    check(cudaMemcpy2DAsync(q, row, q_full, pitch, row, size_t(T * H), cudaMemcpyDeviceToDevice, stream_), "split q");
    if (gated)
        check(cudaMemcpy2DAsync(gate, row, q_full + dh, pitch, row, size_t(T * H), cudaMemcpyDeviceToDevice, stream_),
              "split gate");

    float* q_normed = temp(T * H * dh);
    cuda::rms_norm(q, w.q_norm, T * H, dh, c.rms_eps, cuda::NormWeight::plain, q_normed, stream_);
    cuda::rms_norm(k_raw, w.k_norm, T * H_kv, dh, c.rms_eps, cuda::NormWeight::plain, k_new, stream_);
    cuda::rope_neox(q_normed, d_positions, T, H, dh, c.rope_dim, c.rope_theta, stream_);
    cuda::rope_neox(k_new, d_positions, T, H_kv, dh, c.rope_dim, c.rope_theta, stream_);
    observe("attn.q", q_normed, T * H * dh);
    observe("attn.k", k_new, T * H_kv * dh);
    observe("attn.v", v_new, T * H_kv * dh);

    float* attended = temp(T * H * dh);
    if (f32_cache) {
        const cuda::AttentionDims dims{T, n_past, H, H_kv, dh};
        cuda::attention_prefill(q_normed, k_cache, v_cache, gate, dims, attended, stream_);
        observe("attn.gated", attended, T * H * dh);
        matmul(attended, w.output, T, out);
        observe("attn.out", out, T * c.n_embd);
        return;
    }
    // A half or kivi4 cache: the chunk's keys and values rounded into it first, then read back with the
    // history, so every query sees what a later decode step will see (the decode kernel's contract).
    cuda::kv_store(k_new, T, H_kv * dh, d_positions, state.k.view, stream_);
    cuda::kv_store(v_new, T, H_kv * dh, d_positions, state.v.view, stream_);
    const cuda::AttentionDims prefill_dims{T, n_past, H, H_kv, dh};
    if (state.k.view.element == cuda::KvElement::f16 && cuda::attention_prefill_mma_supported(prefill_dims)) {
        cuda::attention_prefill_mma(q_normed, state.k.data.get<uint16_t>(), state.v.data.get<uint16_t>(), gate,
                                    prefill_dims, attended, stream_);
    } else if (state.k.view.element == cuda::KvElement::f16 && (dh <= 128 || n_past == 0)) {
        // Head sizes the tensor-core kernel does not take. The flash kernel is fp32 on CUDA cores; the
        // decode kernel below, on tensor cores, wins once the history is long for large heads.
        const cuda::AttentionDims dims{T, n_past, H, H_kv, dh};
        cuda::attention_prefill_half_cache(q_normed, state.k.data.get<uint16_t>(), state.v.data.get<uint16_t>(), gate,
                                           dims, attended, stream_);
    } else {
        // d_positions[0] = n_past.
        const cuda::CachedAttentionDims dims{T, H, H_kv, dh, n_past + T, dh};
        float* scratch = temp(int64_t(cuda::attention_decode_scratch_floats(dims)));
        cuda::attention_cached(q_normed, state.k.view, state.v.view, gate, d_positions, dims, scratch, attended,
                               stream_);
        compress_kv(state, d_positions, T);
    }
    observe("attn.gated", attended, T * H * dh);
    matmul(attended, w.output, T, out);
    observe("attn.out", out, T * c.n_embd);
}

void CudaModel::compress_kv(CudaLayerState& state, const int32_t* d_n_past, int64_t T) {
    if (state.k.view.element != cuda::KvElement::kivi4) return;
    const int64_t row = config_.n_head_kv * config_.head_dim;
    cuda::kivi_compress(state.k.view, row, d_n_past, T, stream_);
    cuda::kivi_compress(state.v.view, row, d_n_past, T, stream_);
}

void CudaModel::deltanet_block(const CudaDeltaNetWeights& w, const float* x, const cuda::QuantizedActivationsView* xq,
                               int64_t T, int parity, CudaLayerState& state, float* out, const SeamFold* fold) {
    const ModelConfig& c = config_;
    const int64_t H_k = c.ssm_n_key_heads, H_v = c.ssm_n_value_heads, d_k = c.ssm_key_dim, d_v = c.ssm_value_dim;
    const int64_t key_dim = H_k * d_k, value_dim = H_v * d_v, channels = c.ssm_conv_channels();
    const cuda::KeyHeadMap key_head_map =
        c.value_head_order == ValueHeadOrder::tiled ? cuda::KeyHeadMap::tiled : cuda::KeyHeadMap::grouped;

    if (step_kernels(T)) {
        // The decode step: conv, norms and gates in one launch, recurrence and gated norm in another.
        float* mixed = temp(channels);
        float* z = temp(value_dim);
        float* b = temp(H_v);
        float* a = temp(H_v);
        matmul_shared_input(x, xq, {{&w.qkv, mixed}, {&w.gate, z}, {&w.beta, b}, {&w.alpha, a}});
        float* q = temp(key_dim);
        float* k = temp(key_dim);
        float* v = temp(value_dim);
        float* beta = temp(H_v);
        float* g = temp(H_v);
        const cuda::GdnDecodeDims dims{H_k, H_v, d_k, d_v, c.ssm_conv_kernel, key_head_map};
        // Reads copy `parity`, writes the other (CudaLayerState): the step stays undoable.
        cuda::gdn_decode_prepare(mixed, b, a, w.conv, state.conv[parity].get<float>(), state.conv[parity ^ 1].get<float>(),
                                 w.ssm_a, w.dt_bias, dims, kL2NormEps, q, k, v, beta, g, stream_);
        float* normed = temp(value_dim);
        // The recurrence also quantises its output for ssm_out when the groups of 128 fall inside heads.
        const bool quantize_out = d_v % cuda::kActivationGroup == 0 && all_quantized({&w.output}, value_dim);
        const cuda::QuantizedActivationsView normed_q = block_out_activations_->view(value_dim);
        cuda::gdn_decode_recurrent(q, k, v, beta, g, z, w.norm, c.rms_eps, dims, state.recurrent[parity].get<float>(),
                                   state.recurrent[parity ^ 1].get<float>(), normed, stream_,
                                   quantize_out ? &normed_q : nullptr);
        block_output_matmul(normed, quantize_out ? &normed_q : nullptr, w.output, out, fold);
        return;
    }

    float* mixed = temp(T * channels);
    float* z = temp(T * value_dim);
    float* b = temp(T * H_v);
    float* a = temp(T * H_v);
    matmul_prompt_group(x, T, {{&w.qkv, mixed}, {&w.gate, z}, {&w.beta, b}, {&w.alpha, a}});

    // Channels are [q (key_dim) | k (key_dim) | v (value_dim)].
    float* q_normed = temp(T * key_dim);
    float* k_normed = temp(T * key_dim);
    float* v = temp(T * value_dim);
    // Observed, the conv's output is written out (the fused kernel keeps it in registers).
    if (cuda::conv1d_split_l2_supported(d_k, c.ssm_conv_kernel) && observer_ == nullptr) {
        cuda::conv1d_split_l2(mixed, w.conv, state.conv[parity].get<float>(), T, H_k, d_k, value_dim,
                              c.ssm_conv_kernel, kL2NormEps, q_normed, k_normed, v, stream_);
    } else {
        float* conv = temp(T * channels);
        cuda::conv1d_causal_silu(mixed, w.conv, state.conv[parity].get<float>(), T, channels, c.ssm_conv_kernel, conv,
                                 stream_);
        observe("gdn.conv_out", conv, T * channels);
        const size_t pitch = size_t(channels) * sizeof(float);
        float* q = temp(T * key_dim);
        float* k = temp(T * key_dim);
        check(cudaMemcpy2DAsync(q, size_t(key_dim) * 4, conv, pitch, size_t(key_dim) * 4, size_t(T),
                                cudaMemcpyDeviceToDevice, stream_), "split conv q");
        check(cudaMemcpy2DAsync(k, size_t(key_dim) * 4, conv + key_dim, pitch, size_t(key_dim) * 4, size_t(T),
                                cudaMemcpyDeviceToDevice, stream_), "split conv k");
        check(cudaMemcpy2DAsync(v, size_t(value_dim) * 4, conv + 2 * key_dim, pitch, size_t(value_dim) * 4,
                                size_t(T), cudaMemcpyDeviceToDevice, stream_), "split conv v");
        cuda::l2_norm(q, T * H_k, d_k, kL2NormEps, q_normed, stream_);
        cuda::l2_norm(k, T * H_k, d_k, kL2NormEps, k_normed, stream_);
    }

    float* beta = temp(T * H_v);
    float* g = temp(T * H_v);
    cuda::gdn_gates(b, a, w.ssm_a, w.dt_bias, T, H_v, beta, g, stream_);

    const cuda::DeltaRuleDims dims{T, H_k, H_v, d_k, d_v, key_head_map};
    float* o = temp(T * value_dim);
    void* workspace = temp(int64_t((cuda::delta_rule_chunked_workspace_bytes(dims) + 3) / 4));
    cuda::gated_delta_rule_chunked(q_normed, k_normed, v, g, beta, dims, state.recurrent[parity].get<float>(), o, workspace,
                                   stream_);
    observe("gdn.core_out", o, T * value_dim);
    float* normed = temp(T * value_dim);
    cuda::gated_rms_norm(o, z, w.norm, T * H_v, d_v, c.rms_eps, normed, stream_);
    matmul(normed, w.output, T, out);
    observe("gdn.out", out, T * c.n_embd);
}

void CudaModel::swiglu_ffn(const CudaFfnWeights& w, const float* x, const cuda::QuantizedActivationsView* xq, int64_t T,
                           float* out, const SeamFold* fold) {
    const CudaMatrix &gate = w.gate, &up = w.up, &down = w.down;
    const int64_t width = gate.rows;
    float* act = temp(T * width);
    if (!batch_.empty()) {  // a batched step's rows (batch_matmul)
        float* g = temp(T * width);
        float* u = temp(T * width);
        batch_matmul(x, T, {{&gate, g}, {&up, u}});
        cuda::swiglu(g, u, T * width, act, stream_);
        batch_matmul(act, T, {{&down, out}});
        return;
    }
    if (step_kernels(T) && gate.rows == up.rows && all_quantized({&gate, &up}, gate.cols)) {
        // Both products and the SwiGLU in one launch (ops/matmul/matmul_cuda.h), which also quantises the result
        // for ffn_down when that is quantised.
        const bool quantize_act = all_quantized({&down}, width);
        const cuda::QuantizedActivationsView act_q = block_out_activations_->view(width);
        cuda::gemv_quantized_swiglu(quantized(x, gate.cols, xq), gate.gemv.view(), up.gemv.view(), act, stream_,
                                    quantize_act ? &act_q : nullptr);
        block_output_matmul(act, quantize_act ? &act_q : nullptr, down, out, fold);
        return;
    }
    if (fold != nullptr) fail("cuda swiglu_ffn: a folded seam needs the fused SwiGLU GEMV (seams_foldable)");
    float* g = temp(T * width);
    float* u = temp(T * width);
    if (step_kernels(T)) {
        matmul_shared_input(x, xq, {{&gate, g}, {&up, u}});
    } else {
        matmul_prompt_group(x, T, {{&gate, g}, {&up, u}});
    }
    if (T >= cuda::kGemmMinTokens && all_quantized({&down}, width)) {
        // The activations go straight into ffn_down's prompt rows (on the f16 path without an fp32 copy):
        // what matmul(act, down) would prepare, bit for bit.
        const size_t bytes = cuda::prompt_scratch_bytes(down.gemv.view(), T);
        const cuda::PromptRows rows = cuda::prepare_prompt_rows_swiglu(g, u, act, down.gemv.view(), T,
                                                                       temp(int64_t((bytes + 3) / 4)), stream_);
        cuda::gemm_prompt_rows(rows, down.gemv.view(), out, stream_);
        return;
    }
    cuda::swiglu(g, u, T * width, act, stream_);
    matmul(act, down, T, out);
}

// Everything on the device, nothing read back (so a decode step with MoE layers is one graph): the router's
// ids and weights feed the grouped experts (ops/moe/moe_experts_cuda.h), which also add the shared expert
// under its sigmoid gate.
void CudaModel::moe_ffn(const CudaMoeWeights& w, const float* x, int64_t T, float* out) {
    const ModelConfig& c = config_;
    const int64_t D = c.n_embd, E = c.n_expert, top_k = c.n_expert_used;

    float* logits = temp(T * E);
    matmul(x, w.router, T, logits);
    int32_t* ids = temp_ids(T * top_k);
    float* weights = temp(T * top_k);
    cuda::moe_router(logits, T, E, top_k, c.norm_topk_prob, ids, weights, stream_);

    cuda::MoeExpertsArgs a;
    a.x = x;
    a.n_tokens = T;
    a.dim = D;
    a.n_expert = E;
    a.expert_ff = c.expert_ff;
    a.top_k = top_k;
    a.ids = ids;
    a.weights = weights;
    a.gate = expert_view(w.gate);
    a.up = expert_view(w.up);
    a.down = expert_view(w.down);
    a.activation = cuda::GluActivation::silu;
    if (w.has_shared) {
        float* shared = temp(T * D);
        float* shared_gate = temp(T);
        swiglu_ffn(w.shared, x, nullptr, T, shared);
        matmul(x, w.shared_gate, T, shared_gate);
        a.shared = shared;
        a.shared_gate = shared_gate;
    }
    a.out = out;
    const size_t bytes = cuda::moe_experts_scratch_bytes(a);
    cuda::moe_experts(a, temp(int64_t((bytes + 3) / 4)), stream_);
    ++stats_.moe_grouped_calls;
    observe("moe.out", out, T * D);
}

void CudaModel::observe(std::string_view what, const float* device, int64_t n) {
    if (observer_ == nullptr) return;
    std::vector<float> host(static_cast<size_t>(n));
    check(cudaMemcpyAsync(host.data(), device, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost, stream_),
          "copy an observed intermediate");
    check(cudaStreamSynchronize(stream_), "observe");
    (*observer_)(fmt::format("blk.{}.{}", observed_layer_, what), host.data(), n);
}

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
