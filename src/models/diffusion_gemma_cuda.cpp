// Host code only (the kernels are in ops/): a .cpp so that fmt's compile-time checks work, compiled to
// nothing in builds without CUDA. The order of the ops is models/diffusion_gemma.cpp's, line for line.
#include "models/diffusion_gemma_cuda.h"

#if DELTABIT_HAVE_CUDA

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "core/error.h"
#include "ops/attention/attention_cuda.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/matmul/dense_cuda.h"
#include "ops/matmul/dense_gemm_cuda.h"
#include "ops/matmul/gemm_cuda.h"
#include "ops/moe/moe_experts_cuda.h"

namespace deltabit {

namespace {

void check(cudaError_t status, const char* what) { cuda::cuda_check(status, what); }

const DiffusionGemmaWeights& diffusion_weights(const Model& model) {
    if (!model.parts().diffusion)
        fail("{}: {} is not a block-diffusion model", model.weights().source(), model.config().arch_name);
    return *model.parts().diffusion;
}

// √H rounded to fp32, as transformers' float32 embed_scale buffer (and the CPU's scaled_embedding).
float embedding_scale(int64_t n_embd) { return float(std::sqrt(double(n_embd))); }

std::vector<float> download_rows(const cuda::DeviceBuffer& b, int64_t n_floats) {
    std::vector<float> out(static_cast<size_t>(n_floats));
    if (n_floats > 0) b.download(out.data(), out.size() * sizeof(float));
    return out;
}

}  // namespace

std::vector<float> DiffusionCacheCuda::download_k(int64_t layer) const {
    const Layer& L = layers.at(size_t(layer));
    return download_rows(L.k, L.rows * L.row_floats);
}

std::vector<float> DiffusionCacheCuda::download_v(int64_t layer) const {
    const Layer& L = layers.at(size_t(layer));
    return download_rows(L.v, L.rows * L.row_floats);
}

void DiffusionCacheCuda::clear() {
    for (Layer& layer : layers) {
        layer.rows = 0;
        layer.first_position = 0;
    }
    length = 0;
}

DiffusionGemmaCuda::DiffusionGemmaCuda(const Model& model, const UploadProgress& progress) : config_(model.config()) {
    const DiffusionGemmaWeights& w = diffusion_weights(model);
    const ModelParts& parts = model.parts();
    const ModelConfig& c = config_;
    // A blocking stream: it orders after the synchronous uploads of the legacy stream.
    check(cudaStreamCreate(&stream_), "create stream");
    CudaUploads uploads;

    const WeightView& embd = parts.token_embd;
    token_embd_ = cuda::DeviceBuffer(size_t(embd.rows) * embd.row_bytes());
    token_embd_.upload(embd.data, token_embd_.bytes());
    token_embd_view_ = {token_embd_.get(), embd.dtype, embd.rows, embd.cols};
    output_norm_ = uploads.vector(parts.output_norm, c.n_embd);
    // The head is tied (bind_diffusion_gemma refuses a separate one): plain tables are read in place by the
    // fp32 product, a quantised one needs the GEMV layout beside the lookups' GGUF layout.
    if (embd.dtype == DType::F32 || embd.dtype == DType::F16 || embd.dtype == DType::BF16) {
        output_.rows = embd.rows;
        output_.cols = embd.cols;
        output_.plain_view = token_embd_view_;
    } else {
        output_ = uploads.matrix(parts.output, "output.weight");
    }
    sc_pre_norm_ = uploads.vector(w.sc_pre_norm, c.n_embd);
    sc_mlp_ = {uploads.matrix(w.sc_mlp.gate, "sc_gate.weight"), uploads.matrix(w.sc_mlp.up, "sc_up.weight"),
               uploads.matrix(w.sc_mlp.down, "sc_down.weight")};
    const double steps = double(w.layers.size() + 1);
    if (progress) progress(1.0 / steps);

    const int64_t D = c.n_embd, E = c.n_expert;
    layers_.reserve(w.layers.size());
    for (size_t l = 0; l < w.layers.size(); ++l) {
        const DiffusionGemmaLayer& src = w.layers[l];
        const LayerAttention& g = c.layer_attention[l];
        const std::string blk = fmt::format("blk.{}.", l);
        Layer& L = layers_.emplace_back();
        L.kind = src.kind;
        L.attn_norm = uploads.vector(src.attn_norm, D);
        L.q = uploads.matrix(src.q, blk + "attn_q.weight");
        L.k = uploads.matrix(src.k, blk + "attn_k.weight");
        if (!g.value_is_key) L.v = uploads.matrix(src.v, blk + "attn_v.weight");
        L.output = uploads.matrix(src.output, blk + "attn_output.weight");
        L.q_norm = uploads.vector(src.q_norm, g.head_dim);
        L.k_norm = uploads.vector(src.k_norm, g.head_dim);
        L.post_attention_norm = uploads.vector(src.post_attention_norm, D);
        L.ffn_norm = uploads.vector(src.ffn_norm, D);
        L.mlp = {uploads.matrix(src.mlp.gate, blk + "ffn_gate.weight"), uploads.matrix(src.mlp.up, blk + "ffn_up.weight"),
                 uploads.matrix(src.mlp.down, blk + "ffn_down.weight")};
        L.post_ffw_norm_1 = uploads.vector(src.post_ffw_norm_1, D);
        L.router = uploads.matrix(src.router, blk + "ffn_gate_inp.weight");
        L.router_scale = uploads.vector(src.router_scale, D);
        L.expert_scale = uploads.vector(src.expert_scale, E);
        L.expert_gate = uploads.matrix(src.expert_gate, blk + "ffn_gate_exps.weight");
        L.expert_up = uploads.matrix(src.expert_up, blk + "ffn_up_exps.weight");
        L.expert_down = uploads.matrix(src.expert_down, blk + "ffn_down_exps.weight");
        L.pre_ffw_norm_2 = uploads.vector(src.pre_ffw_norm_2, D);
        L.post_ffw_norm_2 = uploads.vector(src.post_ffw_norm_2, D);
        L.post_ffw_norm = uploads.vector(src.post_ffw_norm, D);
        L.decoder_scale = src.decoder_scale;
        L.encoder_scale = src.encoder_scale;
        if (progress) progress(double(l + 2) / steps);
    }
    vectors_ = std::move(uploads.vectors);
}

DiffusionGemmaCuda::~DiffusionGemmaCuda() {
    // No throw from a destructor: queued work must finish before the buffers it uses are freed.
    if (stream_ != nullptr) {
        cudaStreamSynchronize(stream_);
        cudaStreamDestroy(stream_);
    }
}

DiffusionCacheCuda DiffusionGemmaCuda::new_cache(int64_t capacity, int64_t max_canvas) const {
    const ModelConfig& c = config_;
    if (capacity < 1) fail("diffusion cache: a capacity of {} tokens; at least 1", capacity);
    if (max_canvas < 0) fail("diffusion cache: a canvas of at most {} tokens", max_canvas);
    DiffusionCacheCuda cache;
    cache.capacity = capacity;
    cache.max_new = std::max({max_canvas == 0 ? c.canvas_length : max_canvas, kEncodeChunk, int64_t(1)});
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        const LayerAttention& g = c.layer_attention[size_t(l)];
        DiffusionCacheCuda::Layer& L = cache.layers.emplace_back();
        L.row_floats = g.n_head_kv * g.head_dim;
        const int64_t kept = g.window > 0 ? std::min(capacity, g.window - 1) : capacity;
        L.row_capacity = kept + cache.max_new;
        L.k = cuda::DeviceBuffer(size_t(L.row_capacity * L.row_floats) * sizeof(float));
        L.v = cuda::DeviceBuffer(size_t(L.row_capacity * L.row_floats) * sizeof(float));
    }
    std::vector<int32_t> positions(size_t(capacity + cache.max_new));
    std::iota(positions.begin(), positions.end(), 0);
    cache.positions = cuda::DeviceBuffer(positions.size() * sizeof(int32_t));
    cache.positions.upload(positions.data(), cache.positions.bytes());
    return cache;
}

float* DiffusionGemmaCuda::temp(int64_t n_floats) {
    return static_cast<float*>(arena_->alloc(size_t(std::max<int64_t>(n_floats, 1)) * sizeof(float)));
}

int32_t* DiffusionGemmaCuda::temp_ids(int64_t n) {
    return static_cast<int32_t*>(arena_->alloc(size_t(std::max<int64_t>(n, 1)) * sizeof(int32_t)));
}

int64_t* DiffusionGemmaCuda::temp_spans(int64_t n) {
    return static_cast<int64_t*>(arena_->alloc(size_t(std::max<int64_t>(n, 1)) * sizeof(int64_t)));
}

void DiffusionGemmaCuda::begin_call(DeviceArena& arena) {
    // Growing frees the old buffer, which the previous call's kernels may still be reading.
    if (arena.overflowed()) check(cudaStreamSynchronize(stream_), "drain before growing the arena");
    arena.begin_call();
    arena_ = &arena;
}

void DiffusionGemmaCuda::matmul(const float* x, const CudaMatrix& w, int64_t T, float* y) {
    if (!w.quantized) {  // a canvas or a prompt chunk on the tensor cores (ops/matmul/dense_gemm_cuda.h)
        cuda::matmul_plain_any(x, w.plain_view, T, y, [&](size_t bytes) { return temp(int64_t((bytes + 3) / 4)); },
                               stream_);
        return;
    }
    const cuda::GemvWeightView view = w.gemv.view();
    const size_t bytes = cuda::prompt_scratch_bytes(view, T);
    cuda::matmul_prompt(x, view, T, y, temp(int64_t((bytes + 3) / 4)), stream_);
}

// down(gelu_tanh(gate·x) ⊙ up·x), no biases: the dense MLP and the self-conditioning MLP.
void DiffusionGemmaCuda::gelu_mlp(const CudaFfnWeights& w, const float* x, int64_t T, float* out) {
    const int64_t width = w.gate.rows;
    float* gate = temp(T * width);
    float* up = temp(T * width);
    matmul(x, w.gate, T, gate);
    matmul(x, w.up, T, up);
    cuda::gelu_glu(gate, up, T * width, gate, stream_);
    matmul(gate, w.down, T, out);
}

void DiffusionGemmaCuda::observe(int64_t layer, std::string_view what, const float* device, int64_t n) {
    if (observer_ == nullptr) return;
    std::vector<float> host(static_cast<size_t>(n));
    check(cudaMemcpyAsync(host.data(), device, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost, stream_),
          "copy an observed intermediate");
    check(cudaStreamSynchronize(stream_), "observe");
    (*observer_)(layer < 0 ? std::string(what) : fmt::format("blk.{}.{}", layer, what), host.data(), n);
}

void DiffusionGemmaCuda::layer_forward(int64_t l, float* x, int64_t T, const int32_t* d_positions,
                                       const DiffusionCacheCuda::Layer& cached, bool causal) {
    const ModelConfig& c = config_;
    const Layer& L = layers_[size_t(l)];
    const LayerAttention& g = c.layer_attention[size_t(l)];
    const int64_t D = c.n_embd, H = c.n_head, H_kv = g.n_head_kv, dh = g.head_dim;
    const float eps = c.rms_eps;

    // ---- attention (reference §2.3) ----
    float* h = temp(T * D);
    cuda::rms_norm(x, L.attn_norm, T, D, eps, cuda::NormWeight::plain, h, stream_);
    // The new keys and values go straight behind the kept rows: attention reads [cache ++ new] as one span.
    // Nothing before the caller's keep_new_rows counts them as kept.
    const int64_t S0 = cached.rows, S = S0 + T, row = H_kv * dh;
    float* k = cached.k.get<float>() + S0 * row;
    float* v = cached.v.get<float>() + S0 * row;
    float* q = temp(T * H * dh);
    matmul(h, L.q, T, q);
    matmul(h, L.k, T, k);
    if (g.value_is_key)  // the raw projection, before k_norm and RoPE
        check(cudaMemcpyAsync(v, k, size_t(T * row) * sizeof(float), cudaMemcpyDeviceToDevice, stream_), "v = k");
    else
        matmul(h, L.v, T, v);
    cuda::rms_norm(q, L.q_norm, T * H, dh, eps, cuda::NormWeight::plain, q, stream_);
    cuda::rms_norm(k, L.k_norm, T * H_kv, dh, eps, cuda::NormWeight::plain, k, stream_);
    cuda::rms_norm(v, nullptr, T * H_kv, dh, eps, cuda::NormWeight::none, v, stream_);
    cuda::rope_proportional(q, d_positions, T, H, dh, g.rope_pairs, g.rope_theta, stream_);
    cuda::rope_proportional(k, d_positions, T, H_kv, dh, g.rope_pairs, g.rope_theta, stream_);
    observe(l, "attn.q", q, T * H * dh);
    observe(l, "attn.k", k, T * row);
    observe(l, "attn.v", v, T * row);

    // The encoder: causal within the window; the decoder: the whole span, the cache (for sliding layers
    // already only the last W − 1 tokens) and every canvas token, with no mask.
    int64_t* begin = temp_spans(T);
    int64_t* end = temp_spans(T);
    cuda::diffusion_key_spans(T, S0, causal, g.window, begin, end, stream_);
    float* attended = temp(T * H * dh);
    cuda::attention_spans(q, cached.k.get<float>(), cached.v.get<float>(), {T, S, H, H_kv, dh}, 1.0, begin, end,
                          attended, stream_);
    float* a = temp(T * D);
    matmul(attended, L.output, T, a);
    cuda::rms_norm(a, L.post_attention_norm, T, D, eps, cuda::NormWeight::plain, a, stream_);
    cuda::add_scale(x, a, T * D, 1.0f, x, stream_);  // x += a, rounded once as the CPU's
    observe(l, "attn.out", x, T * D);

    // ---- dense MLP beside the MoE (reference §2.4–2.5) ----
    float* dense = temp(T * D);
    cuda::rms_norm(x, L.ffn_norm, T, D, eps, cuda::NormWeight::plain, h, stream_);
    gelu_mlp(L.mlp, h, T, dense);
    cuda::rms_norm(dense, L.post_ffw_norm_1, T, D, eps, cuda::NormWeight::plain, dense, stream_);

    // The router reads the residual stream itself: scale-free norm, its learned scale, 1/√H.
    const int64_t E = c.n_expert, top_k = c.n_expert_used;
    float* z = temp(T * D);
    float* router_logits = temp(T * E);
    cuda::rms_norm(x, nullptr, T, D, eps, cuda::NormWeight::none, z, stream_);
    cuda::scale_columns(z, L.router_scale, T, D, 1.0 / std::sqrt(double(D)), z, stream_);
    matmul(z, L.router, T, router_logits);
    int32_t* ids = temp_ids(T * top_k);
    float* weights = temp(T * top_k);
    cuda::moe_router(router_logits, T, E, top_k, true, ids, weights, stream_);

    // The experts on pre_ffw_norm_2(x), grouped by expert on the device: renormalised top-k weight times
    // the chosen expert's own scale, GELU GLU.
    float* moe = temp(T * D);
    cuda::rms_norm(x, L.pre_ffw_norm_2, T, D, eps, cuda::NormWeight::plain, h, stream_);
    cuda::MoeExpertsArgs m;
    m.x = h;
    m.n_tokens = T;
    m.dim = D;
    m.n_expert = E;
    m.expert_ff = c.expert_ff;
    m.top_k = top_k;
    m.ids = ids;
    m.weights = weights;
    m.expert_scale = L.expert_scale;
    m.gate = expert_view(L.expert_gate);
    m.up = expert_view(L.expert_up);
    m.down = expert_view(L.expert_down);
    m.activation = cuda::GluActivation::gelu_tanh;
    m.out = moe;
    const size_t bytes = cuda::moe_experts_scratch_bytes(m);
    cuda::moe_experts(m, temp(int64_t((bytes + 3) / 4)), stream_);
    cuda::rms_norm(moe, L.post_ffw_norm_2, T, D, eps, cuda::NormWeight::plain, moe, stream_);
    cuda::add_scale(dense, moe, T * D, 1.0f, dense, stream_);
    cuda::rms_norm(dense, L.post_ffw_norm, T, D, eps, cuda::NormWeight::plain, dense, stream_);

    // layer_scalar scales the whole stream, residual included.
    cuda::add_scale(x, dense, T * D, causal ? L.encoder_scale : L.decoder_scale, x, stream_);
    observe(l, "out", x, T * D);
}

void DiffusionGemmaCuda::keep_new_rows(DiffusionCacheCuda& cache, int64_t T) {
    const ModelConfig& c = config_;
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        DiffusionCacheCuda::Layer& layer = cache.layers[size_t(l)];
        const int64_t window = c.layer_attention[size_t(l)].window;
        layer.rows += T;
        if (window <= 0 || layer.rows <= window - 1) continue;
        // Keep the last W − 1: rows [drop, rows) to the front. The two ranges overlap when drop < W − 1
        // (cudaMemcpy's result is then undefined), so the rows go through scratch unless they are apart.
        const int64_t keep = window - 1, drop = layer.rows - keep;
        const size_t bytes = size_t(keep * layer.row_floats) * sizeof(float);
        for (cuda::DeviceBuffer* b : {&layer.k, &layer.v}) {
            float* data = b->get<float>();
            const float* from = data + drop * layer.row_floats;
            if (drop >= keep) {
                check(cudaMemcpyAsync(data, from, bytes, cudaMemcpyDeviceToDevice, stream_), "keep the window");
            } else {
                float* staged = temp(keep * layer.row_floats);
                check(cudaMemcpyAsync(staged, from, bytes, cudaMemcpyDeviceToDevice, stream_), "stage the window");
                check(cudaMemcpyAsync(data, staged, bytes, cudaMemcpyDeviceToDevice, stream_), "keep the window");
            }
        }
        layer.rows = keep;
        layer.first_position += drop;
    }
}

void DiffusionGemmaCuda::encode(DiffusionCacheCuda& cache, std::span<const int32_t> ids,
                                const ActivationObserver* observer) {
    const ModelConfig& c = config_;
    const int64_t T = int64_t(ids.size()), D = c.n_embd;
    if (int64_t(cache.layers.size()) != c.n_layer())
        fail("encode: the cache has {} layers but the model has {}", cache.layers.size(), c.n_layer());
    // The device cannot throw: everything that can be wrong is refused here, before anything changes.
    for (int64_t t = 0; t < T; ++t)
        if (ids[size_t(t)] < 0 || ids[size_t(t)] >= c.n_vocab)
            fail("encode: token id {} at index {} is outside the vocabulary of {}", ids[size_t(t)], t, c.n_vocab);
    if (cache.length + T > cache.capacity)
        fail("encode: {} tokens after position {} exceed the cache's capacity of {}", T, cache.length, cache.capacity);
    if (T == 0) return;
    // transformers replaces image placeholders by pad before the lookup (reference §2.6); with no vision
    // tower here, that is all an image token does.
    std::vector<int32_t> text_ids(ids.begin(), ids.end());
    for (int32_t& id : text_ids)
        if (id == c.image_token_id) id = int32_t(c.pad_id);

    observer_ = observer != nullptr && *observer ? observer : nullptr;
    struct Unobserve {
        const ActivationObserver*& observer;
        ~Unobserve() { observer = nullptr; }
    } unobserve{observer_};
    // Chunks of at most max_new tokens (the room behind each layer's kept rows). A chunk's tokens see
    // exactly the keys they would in one call — a sliding layer keeps the W − 1 a later chunk needs — so
    // the chunking changes summation order at most.
    for (int64_t first = 0; first < T; first += cache.max_new) {
        const int64_t n = std::min(cache.max_new, T - first);
        begin_call(encode_arena_);
        int32_t* d_ids = temp_ids(n);
        check(cudaMemcpyAsync(d_ids, text_ids.data() + first, size_t(n) * sizeof(int32_t), cudaMemcpyHostToDevice,
                              stream_), "upload ids");
        const int32_t* d_positions = cache.positions.get<int32_t>() + cache.length;
        float* x = temp(n * D);
        cuda::embedding_lookup(token_embd_view_, d_ids, n, x, stream_);
        cuda::add_scale(x, nullptr, n * D, embedding_scale(D), x, stream_);
        const size_t layer_mark = arena_->mark();
        for (int64_t l = 0; l < c.n_layer(); ++l) {
            arena_->rewind(layer_mark);
            layer_forward(l, x, n, d_positions, cache.layers[size_t(l)], true);
        }
        arena_->rewind(layer_mark);
        keep_new_rows(cache, n);
        cache.length += n;
        ++stats_.encode_chunks;
    }
    // The ids' host copy is staged by the copy itself (pageable memory): nothing here must outlive it.
}

void DiffusionGemmaCuda::denoise(const DiffusionCacheCuda& cache, const int32_t* canvas, int64_t L,
                                 const float* self_conditioning, float* logits, const ActivationObserver* observer) {
    const ModelConfig& c = config_;
    const int64_t D = c.n_embd, V = c.n_vocab;
    if (int64_t(cache.layers.size()) != c.n_layer())
        fail("denoise: the cache has {} layers but the model has {}", cache.layers.size(), c.n_layer());
    if (L < 1 || L > cache.max_new)
        fail("denoise: a canvas of {} tokens; this cache takes 1 to {}", L, cache.max_new);
    observer_ = observer != nullptr && *observer ? observer : nullptr;
    struct Unobserve {
        const ActivationObserver*& observer;
        ~Unobserve() { observer = nullptr; }
    } unobserve{observer_};
    begin_call(denoise_arena_);
    const int32_t* d_positions = cache.positions.get<int32_t>() + cache.length;
    float* x = temp(L * D);
    cuda::embedding_lookup(token_embd_view_, canvas, L, x, stream_);
    cuda::add_scale(x, nullptr, L * D, embedding_scale(D), x, stream_);

    // Self-conditioning (reference §2.7): the expected embedding under the previous step's distribution
    // through the SC MLP, added before a scale-free norm. Without logits the branch is exactly zero
    // (RMSNorm(0) = 0 and no biases), so skipping it is exact.
    if (self_conditioning != nullptr) {
        float* soft = temp(L * D);
        float* sig = temp(L * D);
        if (cuda::plain_gemm_applies(token_embd_view_.dtype, L)) {  // p against the table on the tensor cores
            const size_t bytes = cuda::soft_embedding_gemm_scratch_bytes(token_embd_view_, L);
            cuda::soft_embedding_gemm(self_conditioning, token_embd_view_, L, soft, temp(int64_t((bytes + 3) / 4)),
                                      stream_);
        } else {
            cuda::soft_embedding(self_conditioning, token_embd_view_, L, soft, stream_);
        }
        cuda::add_scale(soft, nullptr, L * D, embedding_scale(D), soft, stream_);
        cuda::rms_norm(soft, sc_pre_norm_, L, D, c.rms_eps, cuda::NormWeight::plain, soft, stream_);
        gelu_mlp(sc_mlp_, soft, L, sig);
        observe(-1, "self_conditioning", sig, L * D);
        cuda::add_scale(x, sig, L * D, 1.0f, x, stream_);
    }
    cuda::rms_norm(x, nullptr, L, D, c.rms_eps, cuda::NormWeight::none, x, stream_);
    observe(-1, "canvas_in", x, L * D);

    const size_t layer_mark = arena_->mark();
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        arena_->rewind(layer_mark);
        layer_forward(l, x, L, d_positions, cache.layers[size_t(l)], false);
    }
    arena_->rewind(layer_mark);
    float* h = temp(L * D);
    cuda::rms_norm(x, output_norm_, L, D, c.rms_eps, cuda::NormWeight::plain, h, stream_);
    matmul(h, output_, L, logits);
    if (c.final_logit_softcap > 0.0f) cuda::softcap(logits, L * V, c.final_logit_softcap, logits, stream_);
    ++stats_.denoise_calls;
}

std::vector<float> DiffusionGemmaCuda::denoise(const DiffusionCacheCuda& cache, std::span<const int32_t> canvas,
                                               std::span<const float> self_conditioning,
                                               const ActivationObserver* observer) {
    const ModelConfig& c = config_;
    const int64_t L = int64_t(canvas.size()), V = c.n_vocab;
    if (L == 0) return {};
    for (int64_t t = 0; t < L; ++t)
        if (canvas[size_t(t)] < 0 || canvas[size_t(t)] >= V)
            fail("denoise: token id {} at index {} is outside the vocabulary of {}", canvas[size_t(t)], t, V);
    if (!self_conditioning.empty() && int64_t(self_conditioning.size()) != L * V)
        fail("denoise: self-conditioning logits hold {} values; a canvas of {} needs {} × {} = {}",
             self_conditioning.size(), L, L, V, L * V);
    if (L > cache.max_new) fail("denoise: a canvas of {} tokens; this cache takes 1 to {}", L, cache.max_new);
    // The inputs and the logits in buffers of their own (the device call's arena is rewound by it), grown
    // when too small and then reused: a steady state of host calls allocates nothing either.
    auto fit = [&](cuda::DeviceBuffer& b, size_t bytes) -> void* {
        if (b.bytes() < bytes) {
            check(cudaStreamSynchronize(stream_), "drain before growing a host-call buffer");
            b = cuda::DeviceBuffer();
            b = cuda::DeviceBuffer(bytes);
            ++stats_.io_allocations;
        }
        return b.get();
    };
    auto* d_canvas = static_cast<int32_t*>(fit(io_canvas_, size_t(L) * sizeof(int32_t)));
    auto* d_logits = static_cast<float*>(fit(io_logits_, size_t(L * V) * sizeof(float)));
    float* d_sc = nullptr;
    check(cudaMemcpyAsync(d_canvas, canvas.data(), size_t(L) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
          "upload the canvas");
    if (!self_conditioning.empty()) {
        d_sc = static_cast<float*>(fit(io_self_conditioning_, self_conditioning.size_bytes()));
        check(cudaMemcpyAsync(d_sc, self_conditioning.data(), self_conditioning.size_bytes(), cudaMemcpyHostToDevice,
                              stream_), "upload the self-conditioning logits");
    }
    denoise(cache, d_canvas, L, d_sc, d_logits, observer);
    std::vector<float> logits(size_t(L * V));
    check(cudaMemcpyAsync(logits.data(), d_logits, logits.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_),
          "download logits");
    check(cudaStreamSynchronize(stream_), "denoise sync");
    return logits;
}

DiffusionCudaStats DiffusionGemmaCuda::stats() const {
    DiffusionCudaStats s = stats_;
    s.arena_allocations = encode_arena_.allocations() + denoise_arena_.allocations();
    s.encode_arena_bytes = encode_arena_.capacity();
    s.denoise_arena_bytes = denoise_arena_.capacity();
    return s;
}

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
