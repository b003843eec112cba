// Host code only (the kernels are in ops/): a .cpp so that fmt's compile-time checks work, compiled
// to nothing in builds without CUDA.
#include "models/model_cuda.h"

#if DELTABIT_HAVE_CUDA

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>

#include "core/error.h"
#include "ops/activations.h"
#include "ops/dense_cuda.h"
#include "ops/ops_cuda.h"
#include "ops/weight_repack.h"

namespace deltabit {

namespace {

// As models/blocks.cpp: transformers' l2norm uses a fixed 1e-6 whatever rms_norm_eps is.
constexpr float kL2NormEps = 1e-6f;

void check(cudaError_t status, const char* what) { cuda::cuda_check(status, what); }

CudaMatrix upload_matrix(const WeightView& w, const std::string& name, int64_t& max_cols) {
    CudaMatrix m;
    m.rows = w.rows;
    m.cols = w.cols;
    max_cols = std::max(max_cols, w.cols);
    if (gemv_layout_supports(w.dtype)) {
        m.quantized = true;
        m.gemv = cuda::upload_gemv_weights(w, name.c_str());
        return m;
    }
    if (w.dtype != DType::F32 && w.dtype != DType::F16 && w.dtype != DType::BF16)
        fail("cuda model: {}: no CUDA matmul for dtype {}", name, dtype_name(w.dtype));
    const size_t bytes = size_t(w.rows) * w.row_bytes();
    m.plain = cuda::DeviceBuffer(bytes);
    m.plain.upload(w.data, bytes);
    m.plain_view = {m.plain.get(), w.dtype, w.rows, w.cols};
    return m;
}

}  // namespace

struct CudaModel::Layer {
    LayerKind kind = LayerKind::full_attention;
    bool moe = false;
    const float* attn_norm = nullptr;
    const float* ffn_norm = nullptr;
    // full attention
    CudaMatrix q, k, v, attn_output;
    const float* q_norm = nullptr;
    const float* k_norm = nullptr;
    // gated DeltaNet
    CudaMatrix qkv, z_gate, beta, alpha, ssm_output;
    const float* conv = nullptr;
    const float* ssm_a = nullptr;
    const float* dt_bias = nullptr;
    const float* ssm_norm = nullptr;
    // dense FFN, or the shared expert of a MoE layer
    CudaMatrix ffn_gate, ffn_up, ffn_down;
    // MoE
    CudaMatrix router, experts_gate, experts_up, experts_down, shared_gate;
    bool has_shared = false;
};

CudaSequenceState::CudaSequenceState(const ModelConfig& c, int64_t max_positions)
    : max_positions_(max_positions), layers_(size_t(c.n_layer())) {
    for (int64_t i = 0; i < c.n_layer(); ++i) {
        CudaLayerState& s = layers_[size_t(i)];
        if (c.layers[size_t(i)] == LayerKind::linear_attention) {
            const size_t conv = size_t((c.ssm_conv_kernel - 1) * c.ssm_conv_channels()) * sizeof(float);
            const size_t recurrent = size_t(c.ssm_n_value_heads * c.ssm_key_dim * c.ssm_value_dim) * sizeof(float);
            s.conv = cuda::DeviceBuffer(conv);
            s.recurrent = cuda::DeviceBuffer(recurrent);
            check(cudaMemset(s.conv.get(), 0, conv), "zero conv state");
            check(cudaMemset(s.recurrent.get(), 0, recurrent), "zero recurrent state");
        } else {
            const size_t kv = size_t(max_positions * c.n_head_kv * c.head_dim) * sizeof(float);
            s.k = cuda::DeviceBuffer(kv);
            s.v = cuda::DeviceBuffer(kv);
        }
    }
}

CudaModel::CudaModel(const Model& model) : config_(model.config()) {
    // A blocking stream: it orders after the synchronous uploads and memsets of the legacy stream.
    check(cudaStreamCreate(&stream_), "create stream");
    const ModelParts& parts = model.parts();
    const ModelConfig& c = config_;
    int64_t max_cols = 0;
    auto vector = [&](const float* host, int64_t n) {
        cuda::DeviceBuffer& b = vectors_.emplace_back(size_t(n) * sizeof(float));
        b.upload(host, size_t(n) * sizeof(float));
        return static_cast<const float*>(b.get<float>());
    };
    auto matrix = [&](const WeightView& w, const std::string& name) { return upload_matrix(w, name, max_cols); };

    const WeightView& embd = parts.token_embd;
    token_embd_ = cuda::DeviceBuffer(size_t(embd.rows) * embd.row_bytes());
    token_embd_.upload(embd.data, token_embd_.bytes());
    token_embd_view_ = {token_embd_.get(), embd.dtype, embd.rows, embd.cols};
    output_norm_ = vector(parts.output_norm, c.n_embd);
    output_ = matrix(parts.output, "output.weight");

    layers_.resize(parts.layers.size());
    for (size_t l = 0; l < parts.layers.size(); ++l) {
        const LayerWeights& src = parts.layers[l];
        Layer& L = layers_[l];
        const std::string blk = "blk." + std::to_string(l) + ".";
        L.kind = src.kind;
        L.moe = src.moe;
        L.attn_norm = vector(src.attn_norm, c.n_embd);
        L.ffn_norm = vector(src.ffn_norm, c.n_embd);
        if (src.kind == LayerKind::full_attention) {
            const AttentionWeights& a = src.attention;
            L.q = matrix(a.q, blk + "attn_q.weight");
            L.k = matrix(a.k, blk + "attn_k.weight");
            L.v = matrix(a.v, blk + "attn_v.weight");
            L.attn_output = matrix(a.output, blk + "attn_output.weight");
            L.q_norm = vector(a.q_norm, c.head_dim);
            L.k_norm = vector(a.k_norm, c.head_dim);
        } else {
            const DeltaNetWeights& d = src.deltanet;
            L.qkv = matrix(d.qkv, blk + "attn_qkv.weight");
            L.z_gate = matrix(d.gate, blk + "attn_gate.weight");
            L.beta = matrix(d.beta, blk + "ssm_beta.weight");
            L.alpha = matrix(d.alpha, blk + "ssm_alpha.weight");
            L.ssm_output = matrix(d.output, blk + "ssm_out.weight");
            L.conv = vector(d.conv, c.ssm_conv_channels() * c.ssm_conv_kernel);
            L.ssm_a = vector(d.ssm_a, c.ssm_n_value_heads);
            L.dt_bias = vector(d.dt_bias, c.ssm_n_value_heads);
            L.ssm_norm = vector(d.norm, c.ssm_value_dim);
        }
        const FfnWeights* ffn = src.moe ? (src.experts.has_shared ? &src.experts.shared : nullptr) : &src.ffn;
        if (ffn != nullptr) {
            L.ffn_gate = matrix(ffn->gate, blk + (src.moe ? "ffn_gate_shexp.weight" : "ffn_gate.weight"));
            L.ffn_up = matrix(ffn->up, blk + (src.moe ? "ffn_up_shexp.weight" : "ffn_up.weight"));
            L.ffn_down = matrix(ffn->down, blk + (src.moe ? "ffn_down_shexp.weight" : "ffn_down.weight"));
        }
        if (src.moe) {
            const MoeWeights& e = src.experts;
            L.router = matrix(e.router, blk + "ffn_gate_inp.weight");
            L.experts_gate = matrix(e.gate, blk + "ffn_gate_exps.weight");
            L.experts_up = matrix(e.up, blk + "ffn_up_exps.weight");
            L.experts_down = matrix(e.down, blk + "ffn_down_exps.weight");
            L.has_shared = e.has_shared;
            if (e.has_shared) L.shared_gate = matrix(e.shared_gate, blk + "ffn_gate_inp_shexp.weight");
        }
    }
    activations_ = std::make_unique<cuda::ActivationScratch>(max_cols);
}

CudaModel::~CudaModel() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);  // no throw from a destructor
}

float* CudaModel::temp(int64_t n_floats) {
    return temp_.emplace_back(size_t(std::max<int64_t>(n_floats, 1)) * sizeof(float)).get<float>();
}

int32_t* CudaModel::temp_ids(int64_t n) {
    return temp_.emplace_back(size_t(std::max<int64_t>(n, 1)) * sizeof(int32_t)).get<int32_t>();
}

void CudaModel::matmul(const float* x, const CudaMatrix& w, int64_t first_row, int64_t n_rows, int64_t n_tokens,
                       float* y) {
    if (!w.quantized) {
        cuda::matmul_plain(x, w.plain_view.slice_rows(first_row, n_rows), n_tokens, y, stream_);
        return;
    }
    cuda::GemvWeightView view = w.gemv.view();
    view.codes += size_t(first_row) * gemv_code_row_bytes(view.dtype, view.cols);
    view.scales += size_t(first_row) * size_t(view.cols / dtype_info(view.dtype).block_elems);
    view.rows = n_rows;
    // One GEMV per token: the decode kernel is the only quantised matmul on the GPU so far, and it gives
    // a prompt exactly the per-token activation quantisation that decoding the same tokens would.
    for (int64_t t = 0; t < n_tokens; ++t) cuda::matmul(x + t * w.cols, view, 1, y + t * n_rows, *activations_, stream_);
}

void CudaModel::attention_block(const Layer& L, const float* x, int64_t T, int64_t n_past, CudaLayerState& state,
                                float* out) {
    const ModelConfig& c = config_;
    const int64_t H = c.n_head, H_kv = c.n_head_kv, dh = c.head_dim;
    const bool gated = c.attn_output_gate;
    const int64_t per_head = gated ? 2 * dh : dh;

    float* q_full = temp(T * H * per_head);
    matmul(x, L.q, T, q_full);
    // With the output gate, q_proj's rows interleave per head: [q_h (dh) | gate_h (dh)].
    float* q = temp(T * H * dh);
    float* gate = gated ? temp(T * H * dh) : nullptr;
    const size_t row = size_t(dh) * sizeof(float), pitch = size_t(per_head) * sizeof(float);
    check(cudaMemcpy2DAsync(q, row, q_full, pitch, row, size_t(T * H), cudaMemcpyDeviceToDevice, stream_), "split q");
    if (gated)
        check(cudaMemcpy2DAsync(gate, row, q_full + dh, pitch, row, size_t(T * H), cudaMemcpyDeviceToDevice, stream_),
              "split gate");

    // New keys and values go straight into the cache at positions n_past .. n_past+T−1.
    float* k_cache = state.k.get<float>();
    float* v_cache = state.v.get<float>();
    float* k_new = k_cache + n_past * H_kv * dh;
    float* k_raw = temp(T * H_kv * dh);
    matmul(x, L.k, T, k_raw);
    matmul(x, L.v, T, v_cache + n_past * H_kv * dh);

    float* q_normed = temp(T * H * dh);
    cuda::rms_norm(q, L.q_norm, T * H, dh, c.rms_eps, cuda::NormWeight::plain, q_normed, stream_);
    cuda::rms_norm(k_raw, L.k_norm, T * H_kv, dh, c.rms_eps, cuda::NormWeight::plain, k_new, stream_);
    std::vector<int32_t> positions(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) positions[size_t(t)] = int32_t(n_past + t);
    int32_t* d_positions = temp_ids(T);
    // Pageable source: the copy has taken the bytes when the call returns, so `positions` may die.
    check(cudaMemcpyAsync(d_positions, positions.data(), size_t(T) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
          "upload positions");
    cuda::rope_neox(q_normed, d_positions, T, H, dh, c.rope_dim, c.rope_theta, stream_);
    cuda::rope_neox(k_new, d_positions, T, H_kv, dh, c.rope_dim, c.rope_theta, stream_);

    float* attended = temp(T * H * dh);
    const cuda::AttentionDims dims{T, n_past, H, H_kv, dh};
    cuda::attention(q_normed, k_cache, v_cache, gate, dims, attended, stream_);
    matmul(attended, L.attn_output, T, out);
}

void CudaModel::deltanet_block(const Layer& L, const float* x, int64_t T, CudaLayerState& state, float* out) {
    const ModelConfig& c = config_;
    const int64_t H_k = c.ssm_n_key_heads, H_v = c.ssm_n_value_heads, d_k = c.ssm_key_dim, d_v = c.ssm_value_dim;
    const int64_t key_dim = H_k * d_k, value_dim = H_v * d_v, channels = c.ssm_conv_channels();

    float* mixed = temp(T * channels);
    float* z = temp(T * value_dim);
    float* b = temp(T * H_v);
    float* a = temp(T * H_v);
    matmul(x, L.qkv, T, mixed);
    matmul(x, L.z_gate, T, z);
    matmul(x, L.beta, T, b);
    matmul(x, L.alpha, T, a);

    float* conv = temp(T * channels);
    cuda::conv1d_causal_silu(mixed, L.conv, state.conv.get<float>(), T, channels, c.ssm_conv_kernel, conv, stream_);

    // Channels are [q (key_dim) | k (key_dim) | v (value_dim)].
    float* q = temp(T * key_dim);
    float* k = temp(T * key_dim);
    float* v = temp(T * value_dim);
    const size_t pitch = size_t(channels) * sizeof(float);
    check(cudaMemcpy2DAsync(q, size_t(key_dim) * 4, conv, pitch, size_t(key_dim) * 4, size_t(T),
                            cudaMemcpyDeviceToDevice, stream_), "split conv q");
    check(cudaMemcpy2DAsync(k, size_t(key_dim) * 4, conv + key_dim, pitch, size_t(key_dim) * 4, size_t(T),
                            cudaMemcpyDeviceToDevice, stream_), "split conv k");
    check(cudaMemcpy2DAsync(v, size_t(value_dim) * 4, conv + 2 * key_dim, pitch, size_t(value_dim) * 4, size_t(T),
                            cudaMemcpyDeviceToDevice, stream_), "split conv v");
    float* q_normed = temp(T * key_dim);
    float* k_normed = temp(T * key_dim);
    cuda::l2_norm(q, T * H_k, d_k, kL2NormEps, q_normed, stream_);
    cuda::l2_norm(k, T * H_k, d_k, kL2NormEps, k_normed, stream_);

    float* beta = temp(T * H_v);
    float* g = temp(T * H_v);
    cuda::gdn_gates(b, a, L.ssm_a, L.dt_bias, T, H_v, beta, g, stream_);

    const cuda::DeltaRuleDims dims{T, H_k, H_v, d_k, d_v,
                                   c.value_head_order == ValueHeadOrder::tiled ? cuda::KeyHeadMap::tiled
                                                                               : cuda::KeyHeadMap::grouped};
    float* o = temp(T * value_dim);
    cuda::gated_delta_rule_recurrent(q_normed, k_normed, v, g, beta, dims, state.recurrent.get<float>(), o, stream_);
    float* normed = temp(T * value_dim);
    cuda::gated_rms_norm(o, z, L.ssm_norm, T * H_v, d_v, c.rms_eps, normed, stream_);
    matmul(normed, L.ssm_output, T, out);
}

void CudaModel::swiglu_ffn(const CudaMatrix& gate, const CudaMatrix& up, const CudaMatrix& down, const float* x,
                           int64_t T, float* out) {
    const int64_t width = gate.rows;
    float* g = temp(T * width);
    float* u = temp(T * width);
    float* act = temp(T * width);
    matmul(x, gate, T, g);
    matmul(x, up, T, u);
    cuda::swiglu(g, u, T * width, act, stream_);
    matmul(act, down, T, out);
}

void CudaModel::moe_ffn(const Layer& L, const float* x, int64_t T, float* out) {
    const ModelConfig& c = config_;
    const int64_t D = c.n_embd, E = c.n_expert, top_k = c.n_expert_used, F = c.expert_ff;

    float* logits = temp(T * E);
    matmul(x, L.router, T, logits);
    int32_t* d_ids = temp_ids(T * top_k);
    float* d_weights = temp(T * top_k);
    cuda::moe_router(logits, T, E, top_k, c.norm_topk_prob, d_ids, d_weights, stream_);
    std::vector<int32_t> ids(size_t(T * top_k));
    std::vector<float> weights(size_t(T * top_k));
    check(cudaMemcpyAsync(ids.data(), d_ids, ids.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_), "router ids");
    check(cudaMemcpyAsync(weights.data(), d_weights, weights.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_),
          "router weights");
    check(cudaStreamSynchronize(stream_), "router sync");

    check(cudaMemsetAsync(out, 0, size_t(T * D) * sizeof(float), stream_), "zero moe out");
    float* gate = temp(F);
    float* up = temp(F);
    float* act = temp(F);
    float* down = temp(D);
    for (int64_t t = 0; t < T; ++t) {
        const float* xt = x + t * D;
        for (int64_t j = 0; j < top_k; ++j) {
            const int64_t e = ids[size_t(t * top_k + j)];
            matmul(xt, L.experts_gate, e * F, F, 1, gate);
            matmul(xt, L.experts_up, e * F, F, 1, up);
            cuda::swiglu(gate, up, F, act, stream_);
            matmul(act, L.experts_down, e * D, D, 1, down);
            cuda::axpy(weights[size_t(t * top_k + j)], down, out + t * D, D, stream_);
        }
    }
    if (L.has_shared) {
        float* shared = temp(T * D);
        float* d_shared_gate = temp(T);
        swiglu_ffn(L.ffn_gate, L.ffn_up, L.ffn_down, x, T, shared);
        matmul(x, L.shared_gate, T, d_shared_gate);
        std::vector<float> shared_gate(static_cast<size_t>(T));
        check(cudaMemcpyAsync(shared_gate.data(), d_shared_gate, size_t(T) * sizeof(float), cudaMemcpyDeviceToHost,
                              stream_), "shared gate");
        check(cudaStreamSynchronize(stream_), "shared gate sync");
        for (int64_t t = 0; t < T; ++t)
            cuda::axpy(float(cpu::sigmoid(shared_gate[size_t(t)])), shared + t * D, out + t * D, D, stream_);
    }
}

std::vector<float> CudaModel::forward(CudaSequenceState& state, std::span<const int32_t> ids) {
    const ModelConfig& c = config_;
    const int64_t T = int64_t(ids.size()), D = c.n_embd;
    if (state.n_layer() != c.n_layer())
        fail("cuda forward: the sequence state has {} layers but the model has {}", state.n_layer(), c.n_layer());
    if (T == 0) return {};
    // The device cannot throw: ids and capacity are checked here, before any state changes.
    for (int64_t t = 0; t < T; ++t)
        if (ids[size_t(t)] < 0 || ids[size_t(t)] >= c.n_vocab)
            fail("cuda forward: token id {} at index {} is outside the vocabulary of {}", ids[size_t(t)], t, c.n_vocab);
    const int64_t n_past = state.position();
    if (n_past + T > state.max_positions())
        fail("cuda forward: {} tokens after position {} exceed the sequence's KV capacity of {}", T, n_past,
             state.max_positions());

    int32_t* d_ids = temp_ids(T);
    check(cudaMemcpyAsync(d_ids, ids.data(), size_t(T) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_), "upload ids");
    float* x = temp(T * D);
    float* h = temp(T * D);
    float* m = temp(T * D);
    cuda::embedding_lookup(token_embd_view_, d_ids, T, x, stream_);
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        const Layer& L = layers_[size_t(l)];
        cuda::rms_norm(x, L.attn_norm, T, D, c.rms_eps, cuda::NormWeight::plain, h, stream_);
        if (L.kind == LayerKind::linear_attention)
            deltanet_block(L, h, T, state.layer(l), m);
        else
            attention_block(L, h, T, n_past, state.layer(l), m);
        cuda::axpy(1.0f, m, x, T * D, stream_);

        cuda::rms_norm(x, L.ffn_norm, T, D, c.rms_eps, cuda::NormWeight::plain, h, stream_);
        if (L.moe)
            moe_ffn(L, h, T, m);
        else
            swiglu_ffn(L.ffn_gate, L.ffn_up, L.ffn_down, h, T, m);
        cuda::axpy(1.0f, m, x, T * D, stream_);
    }
    cuda::rms_norm(x, output_norm_, T, D, c.rms_eps, cuda::NormWeight::plain, h, stream_);
    float* d_logits = temp(T * c.n_vocab);
    matmul(h, output_, T, d_logits);
    std::vector<float> logits(size_t(T * c.n_vocab));
    check(cudaMemcpyAsync(logits.data(), d_logits, logits.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_),
          "download logits");
    check(cudaStreamSynchronize(stream_), "forward sync");
    temp_.clear();  // the stream has drained: nothing reads these any more
    state.advance(T);
    return logits;
}

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
