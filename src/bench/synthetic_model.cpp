#include "bench/synthetic_model.h"

#include "core/error.h"
#include "core/half.h"
#include "models/config_diffusion_gemma.h"
#include "models/config_loader.h"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <optional>
#include <thread>

namespace deltabit {

namespace {

// Qwen3.5 hybrids: layer i is full attention iff (i + 1) % 4 == 0 (transformers' full_attention_interval).
std::vector<LayerKind> hybrid_layers(int64_t n_layer) {
    std::vector<LayerKind> kinds(size_t(n_layer), LayerKind::linear_attention);
    for (int64_t i = 3; i < n_layer; i += 4) kinds[size_t(i)] = LayerKind::full_attention;
    return kinds;
}

ModelConfig qwen35_config(int64_t vocab, int64_t embd, int64_t ff, int64_t n_layer, int64_t heads, int64_t kv_heads,
                          int64_t head_dim, int64_t ssm_key_heads, int64_t ssm_value_heads, int64_t ssm_head_dim,
                          bool tied) {
    ModelConfig c;
    c.arch = Arch::qwen35;
    c.arch_name = "qwen35";
    c.n_vocab = vocab;
    c.n_embd = embd;
    c.n_ff = ff;
    c.context_length = 262144;
    c.rms_eps = 1e-6f;
    c.tied_embeddings = tied;
    c.n_head = heads;
    c.n_head_kv = kv_heads;
    c.head_dim = head_dim;
    c.rope_dim = head_dim / 4;  // partial_rotary_factor 0.25
    c.rope_theta = 1e7f;
    c.rope_sections = {11, 11, 10, 0};
    c.attn_output_gate = true;
    c.ssm_n_key_heads = ssm_key_heads;
    c.ssm_n_value_heads = ssm_value_heads;
    c.ssm_key_dim = ssm_head_dim;
    c.ssm_value_dim = ssm_head_dim;
    c.ssm_conv_kernel = 4;
    c.value_head_order = ValueHeadOrder::tiled;  // GGUF convention for qwen35
    c.layers = hybrid_layers(n_layer);
    c.layer_is_moe.assign(size_t(n_layer), false);
    return c;
}

ModelConfig qwen3_config(int64_t vocab, int64_t embd, int64_t ff, int64_t n_layer, int64_t heads, int64_t kv_heads,
                         int64_t head_dim, float rope_theta, bool tied) {
    ModelConfig c;
    c.arch = Arch::qwen3;
    c.arch_name = "qwen3";
    c.n_vocab = vocab;
    c.n_embd = embd;
    c.n_ff = ff;
    c.context_length = 40960;
    c.rms_eps = 1e-6f;
    c.tied_embeddings = tied;
    c.n_head = heads;
    c.n_head_kv = kv_heads;
    c.head_dim = head_dim;
    c.rope_dim = head_dim;
    c.rope_theta = rope_theta;
    c.layers.assign(size_t(n_layer), LayerKind::full_attention);
    c.layer_is_moe.assign(size_t(n_layer), false);
    return c;
}

// A DiffusionGemma text config as transformers writes it (sizes given, the rest of reference §1.3's values),
// read by the same loader a checkpoint's config.json goes through, so the geometry cannot drift from what
// loading the real file gives. Layers: `full_every`-th layer full attention (and the last, as transformers forces).
ModelConfig diffusion_gemma_config(int64_t vocab, int64_t embd, int64_t dense_ff, int64_t n_layer, int64_t full_every,
                                   int64_t heads, int64_t sliding_kv, int64_t sliding_head_dim, int64_t full_kv,
                                   int64_t full_head_dim, int64_t experts, int64_t top_k, int64_t expert_ff,
                                   int64_t window, int64_t canvas) {
    nlohmann::json layer_types = nlohmann::json::array();
    for (int64_t i = 0; i < n_layer; ++i)
        layer_types.push_back((i + 1) % full_every == 0 ? "full_attention" : "sliding_attention");
    const nlohmann::json text = {
        {"model_type", "diffusion_gemma_text"},
        {"vocab_size", vocab},
        {"hidden_size", embd},
        {"intermediate_size", dense_ff},
        {"num_hidden_layers", n_layer},
        {"layer_types", layer_types},
        {"num_attention_heads", heads},
        {"num_key_value_heads", sliding_kv},
        {"head_dim", sliding_head_dim},
        {"per_layer_config", {{"full_attention", {{"head_dim", full_head_dim}, {"num_key_value_heads", full_kv}}}}},
        {"num_experts", experts},
        {"top_k_experts", top_k},
        {"moe_intermediate_size", expert_ff},
        {"sliding_window", window},
        {"max_position_embeddings", 262144},
        {"rms_norm_eps", 1e-6},
        {"use_bidirectional_attention", "vision"},
        {"eos_token_id", {1, 106}},
        {"pad_token_id", 0}};
    const nlohmann::json root = {{"model_type", "diffusion_gemma"}, {"canvas_length", canvas}, {"text_config", text}};
    return diffusion_gemma_config_from_hf_json(root, "geometry config");
}

std::vector<Geometry> make_geometries() {
    std::vector<Geometry> g;
    // Qwen3.5-27B's text shape (THUDM/slime scripts/models/qwen3.5-27B.sh: 64 layers, hidden 5120, FFN 17408,
    // 24 query / 4 KV heads of 256, rotary 0.25 of base 1e7, vocab 248320, untied); DeltaNet 16 key / 48
    // value heads of 128 as issue #5 gives them. Bonsai-27B keeps this shape in Q1_0.
    g.push_back({"bonsai-27b",
                 "Bonsai-27B (Qwen3.5-27B shape): qwen35, 64 layers (every 4th full attention), hidden 5120, FFN 17408, "
                 "24/4 heads of 256, DeltaNet 16/48 heads of 128, vocab 248320",
                 qwen35_config(248320, 5120, 17408, 64, 24, 4, 256, 16, 48, 128, false)});
    // Qwen3-8B config.json (hidden 4096, intermediate 12288, 36 layers, 32/8 heads of 128, vocab 151936,
    // rope_theta 1e6, tie_word_embeddings false); Bonsai-8B is this shape in Q1_0.
    g.push_back({"bonsai-8b",
                 "Bonsai-8B (Qwen3-8B shape): qwen3, 36 layers, hidden 4096, FFN 12288, 32/8 heads of 128, vocab 151936",
                 qwen3_config(151936, 4096, 12288, 36, 32, 8, 128, 1e6f, false)});
    // Qwen3-4B config.json (hidden 2560, intermediate 9728, 36 layers, 32/8 heads of 128, vocab 151936,
    // rope_theta 1e6, tie_word_embeddings true).
    g.push_back({"bonsai-4b",
                 "Bonsai-4B (Qwen3-4B shape): qwen3, 36 layers, hidden 2560, FFN 9728, 32/8 heads of 128, vocab 151936, "
                 "tied",
                 qwen3_config(151936, 2560, 9728, 36, 32, 8, 128, 1e6f, true)});
    // Qwen3.5-0.8B (THUDM/slime scripts/models/qwen3.5-0.8B.sh: 24 layers, hidden 1024, FFN 3584, 8/2 heads of
    // 256, rotary 0.25 of base 1e7, vocab 248320, embeddings tied — no untie flag); DeltaNet 16 key / 16 value
    // heads of 128 (linear_num_key_heads / linear_num_value_heads of the Qwen3.5-0.8B config family, e.g.
    // huggingface.co/oopere/Qwen3.5-0.65B-Base-Rearchitected, which prunes layers only).
    g.push_back({"qwen35-0.8b",
                 "Qwen3.5-0.8B shape: qwen35, 24 layers (every 4th full attention), hidden 1024, FFN 3584, 8/2 heads "
                 "of 256, DeltaNet 16/16 heads of 128, vocab 248320, tied",
                 qwen35_config(248320, 1024, 3584, 24, 8, 2, 256, 16, 16, 128, true)});
    // Tiny shapes for smoke tests: every matrix row is one or two Q1_0 blocks; Hv ≠ Hk and tied/untied both
    // covered.
    // google/diffusiongemma-26B-A4B-it (../shared/reference/diffusion-gemma.md §1.3): hidden 2816, dense and
    // self-conditioning MLP 2112, 30 layers [sliding×5, full]×5, 16 query heads, sliding layers 8 KV heads of
    // 256, full layers 2 of 512, 128 experts top-8 of width 704, window 1024, vocab 262144, canvas 256.
    g.push_back({"diffusiongemma-26b-a4b",
                 "DiffusionGemma-26B-A4B shape: diffusion_gemma, 30 layers ([sliding x5, full] x5), hidden 2816, dense "
                 "MLP 2112, 16 heads (sliding 8 KV of 256, full 2 KV of 512), 128 experts top-8 of 704, window 1024, "
                 "vocab 262144, canvas 256",
                 diffusion_gemma_config(262144, 2816, 2112, 30, 6, 16, 8, 256, 2, 512, 128, 8, 704, 1024, 256),
                 DType::BF16});
    g.push_back({"tiny-qwen35", "tiny qwen35 for smoke tests: 4 layers, hidden 128, FFN 256, 2/1 heads of 64, "
                                "DeltaNet 2/4 heads of 32, vocab 512",
                 qwen35_config(512, 128, 256, 4, 2, 1, 64, 2, 4, 32, false)});
    g.push_back({"tiny-qwen3", "tiny qwen3 for smoke tests: 2 layers, hidden 128, FFN 384, 4/2 heads of 32, vocab 512, "
                               "tied",
                 qwen3_config(512, 128, 384, 2, 4, 2, 32, 1e6f, true)});
    g.push_back({"tiny-diffusiongemma",
                 "tiny diffusion_gemma for smoke tests: 4 layers (3 sliding, 1 full), hidden 128, dense MLP 128, 4 "
                 "heads (sliding 2 KV of 32, full 1 KV of 64), 8 experts top-2 of 64, window 8, vocab 512, canvas 16",
                 diffusion_gemma_config(512, 128, 128, 4, 4, 4, 2, 32, 1, 64, 8, 2, 64, 8, 16), DType::BF16});
    for (const Geometry& geometry : g)
        validate_model_config(geometry.config, "geometry " + geometry.name, gguf_field_names(geometry.config.arch_name));
    return g;
}

// ---- tensor list ----

class TensorList {
public:
    TensorList(DType matrix_dtype) : matrix_dtype_(matrix_dtype) {}

    // W[rows][cols], ggml shape {cols, rows}, in the list's matrix type or `dtype`.
    void matrix(std::string name, int64_t rows, int64_t cols, std::optional<DType> dtype = {}) {
        matrix3(std::move(name), 1, rows, cols, dtype);
    }
    // An expert stack, ggml shape {cols, rows, n}.
    void matrix3(std::string name, int64_t n, int64_t rows, int64_t cols, std::optional<DType> dtype = {}) {
        const DType type = dtype.value_or(matrix_dtype_);
        if (!row_fits_blocks(type, uint64_t(cols)))
            fail("synthetic model: tensor {}: row length {} is not a whole number of {}-value {} blocks", name, cols,
                 dtype_info(type).block_elems, dtype_name(type));
        std::vector<int64_t> shape = {cols, rows};
        if (n > 1) shape.push_back(n);
        specs_.push_back({std::move(name), std::move(shape), type, TensorRole::matrix});
    }
    void vector(std::string name, int64_t n, TensorRole role) { specs_.push_back({std::move(name), {n}, DType::F32, role}); }
    void conv(std::string name, int64_t kernel, int64_t channels) {
        specs_.push_back({std::move(name), {kernel, channels}, DType::F32, TensorRole::conv});
    }
    std::vector<TensorSpec> take() { return std::move(specs_); }

private:
    DType matrix_dtype_;
    std::vector<TensorSpec> specs_;
};

void add_ffn(TensorList& t, const std::string& blk, int64_t width, int64_t embd, const char* suffix,
             std::optional<DType> dtype = {}) {
    t.matrix(blk + "ffn_gate" + suffix + ".weight", width, embd, dtype);
    t.matrix(blk + "ffn_up" + suffix + ".weight", width, embd, dtype);
    t.matrix(blk + "ffn_down" + suffix + ".weight", embd, width, dtype);
}

// DiffusionGemma's tensors (docs/diffusion-gemma-tensors.md): the expert stacks in the list's matrix type,
// every other matrix in BF16 as the checkpoint stores it, the router in F32 as `deltabit convert` keeps it.
std::vector<TensorSpec> diffusion_gemma_tensors(const ModelConfig& c, DType expert_dtype) {
    constexpr DType kPlain = DType::BF16;
    TensorList t(expert_dtype);
    const int64_t D = c.n_embd;
    t.matrix("token_embd.weight", c.n_vocab, D, kPlain);  // also the LM head (tied)
    t.vector("output_norm.weight", D, TensorRole::norm);
    t.vector("sc_pre_norm.weight", D, TensorRole::norm);
    t.matrix("sc_gate.weight", c.n_ff, D, kPlain);
    t.matrix("sc_up.weight", c.n_ff, D, kPlain);
    t.matrix("sc_down.weight", D, c.n_ff, kPlain);
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        const std::string blk = fmt::format("blk.{}.", l);
        const LayerAttention& g = c.layer_attention[size_t(l)];
        for (const char* norm : {"attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm_1", "pre_ffw_norm_2",
                                 "post_ffw_norm_2", "post_ffw_norm"})
            t.vector(blk + norm + ".weight", D, TensorRole::norm);
        t.matrix(blk + "attn_q.weight", c.n_head * g.head_dim, D, kPlain);
        t.matrix(blk + "attn_k.weight", g.n_head_kv * g.head_dim, D, kPlain);
        if (!g.value_is_key) t.matrix(blk + "attn_v.weight", g.n_head_kv * g.head_dim, D, kPlain);
        t.matrix(blk + "attn_output.weight", D, c.n_head * g.head_dim, kPlain);
        t.vector(blk + "attn_q_norm.weight", g.head_dim, TensorRole::norm);
        t.vector(blk + "attn_k_norm.weight", g.head_dim, TensorRole::norm);
        add_ffn(t, blk, c.n_ff, D, "", kPlain);
        t.matrix(blk + "ffn_gate_inp.weight", c.n_expert, D, DType::F32);
        t.vector(blk + "ffn_gate_inp.scale", D, TensorRole::norm);
        t.vector(blk + "ffn_down_exps.scale", c.n_expert, TensorRole::norm);
        t.matrix3(blk + "ffn_gate_exps.weight", c.n_expert, c.expert_ff, D);
        t.matrix3(blk + "ffn_up_exps.weight", c.n_expert, c.expert_ff, D);
        t.matrix3(blk + "ffn_down_exps.weight", c.n_expert, D, c.expert_ff);
        // The layer scalars near 1, as the norms (transformers initialises them to exactly 1).
        t.vector(blk + "layer_output_scale.weight", 1, TensorRole::norm);
        t.vector(blk + "enc_layer_output_scale.weight", 1, TensorRole::norm);
    }
    return t.take();
}

// ---- filling ----

// SplitMix64 (Steele, Lea & Flood 2014) at position `index` of the stream `key`: a counter-based generator,
// so any thread can produce any position and the bytes do not depend on how the work was split.
uint64_t random_word(uint64_t key, uint64_t index) {
    uint64_t z = key + (index + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float unit_uniform(uint64_t word) { return float(word >> 40) * (1.0f / 16777216.0f); }  // [0, 1), 24 bits

uint64_t tensor_key(uint64_t seed, std::string_view name) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the name, then mixed with the seed
    for (char c : name) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
    return random_word(h, seed);
}

// RMS of a block's integer level when its code bits are uniformly random (core/quant_blocks.h):
// Q1_0 ±1; Q2_0 {−1, 0, 1, 2}: √1.5; Q4_0 q − 8 for q in 0..15: √21.5; Q8_0 −128..127: ≈ 128/√3.
double level_rms(DType t) {
    switch (t) {
        case DType::Q1_0: return 1.0;
        case DType::Q2_0: return std::sqrt(1.5);
        case DType::Q4_0: return std::sqrt(21.5);
        case DType::Q8_0: return std::sqrt((128.0 * 128.0 * 2.0 + 1.0) / 6.0);
        case DType::F32:
        case DType::F16:
        case DType::BF16: return 1.0;  // unused: fill_plain sets the scale itself
        default:
            fail("synthetic model: matrix type {} is not supported (q1_0, q2_0, q4_0, q8_0, f32, f16, bf16)",
                 dtype_name(t));
    }
}

bool plain_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// Elements [first, first + count) of a plain-float matrix: uniform in ±√3/√cols, so that a product with a
// unit-RMS input has about unit RMS (as the quantised blocks' scales give).
void fill_plain(uint8_t* data, DType dtype, int64_t cols, uint64_t key, int64_t first, int64_t count) {
    const float bound = float(std::sqrt(3.0 / double(cols)));
    for (int64_t i = first; i < first + count; ++i) {
        const float v = bound * (2.0f * unit_uniform(random_word(key, uint64_t(i))) - 1.0f);
        if (dtype == DType::F32) {
            std::memcpy(data + 4 * i, &v, 4);
        } else {
            const uint16_t h = dtype == DType::F16 ? float_to_half(v) : float_to_bf16(v);
            std::memcpy(data + 2 * i, &h, 2);
        }
    }
}

// Blocks [first, first + count) of a matrix: random codes, then the fp16 scale over the first two bytes.
// Plain-float matrices (one value a block) go to fill_plain.
void fill_blocks(uint8_t* data, DType dtype, int64_t cols, uint64_t key, int64_t first, int64_t count) {
    if (plain_float(dtype)) return fill_plain(data, dtype, cols, key, first, count);
    const DTypeInfo& info = dtype_info(dtype);
    const double scale = 1.0 / (std::sqrt(double(cols)) * level_rms(dtype));
    constexpr int kWordsPerBlock = 5;  // ≤ 32 code bytes, one word for the scale
    for (int64_t b = first; b < first + count; ++b) {
        uint8_t* block = data + uint64_t(b) * info.block_bytes;
        uint64_t words[kWordsPerBlock];
        for (int w = 0; w < kWordsPerBlock; ++w) words[w] = random_word(key, uint64_t(b) * kWordsPerBlock + w);
        std::memcpy(block + 2, words, info.block_bytes - 2);
        // ±25% around the target keeps scales distinct per block (a kernel that mixed up blocks shows);
        // the smallest value, for Q8_0 at 17408 columns, is ~7.6e-5, above fp16's smallest normal 6.1e-5.
        const uint16_t d = float_to_half(float(scale * (0.75 + 0.5 * unit_uniform(words[4]))));
        std::memcpy(block, &d, sizeof d);
    }
}

void fill_vector(float* out, int64_t n, TensorRole role, uint64_t key) {
    for (int64_t i = 0; i < n; ++i) {
        const float u = unit_uniform(random_word(key, uint64_t(i)));
        switch (role) {
            case TensorRole::norm: out[i] = 1.0f + 0.2f * (u - 0.5f); break;
            case TensorRole::conv: out[i] = u - 0.5f; break;
            case TensorRole::ssm_a: out[i] = -(1.0f + 15.0f * u); break;
            case TensorRole::dt_bias: {
                const double dt = std::exp(std::log(1e-3) + u * (std::log(1e-1) - std::log(1e-3)));
                out[i] = float(dt + std::log(-std::expm1(-dt)));  // softplus⁻¹(dt)
                break;
            }
            case TensorRole::matrix: break;  // not a vector
        }
    }
}

struct MatrixJob {
    uint8_t* data;
    DType dtype;
    int64_t cols;
    uint64_t key;
    int64_t first_block, n_blocks;
};

void run_jobs(const std::vector<MatrixJob>& jobs, int threads) {
    std::atomic<size_t> next{0};
    auto worker = [&] {
        for (size_t j = next++; j < jobs.size(); j = next++) {
            const MatrixJob& job = jobs[j];
            fill_blocks(job.data, job.dtype, job.cols, job.key, job.first_block, job.n_blocks);
        }
    };
    std::vector<std::thread> pool;
    for (int i = 1; i < threads; ++i) pool.emplace_back(worker);
    worker();
    for (std::thread& t : pool) t.join();
}

}  // namespace

const std::vector<Geometry>& known_geometries() {
    static const std::vector<Geometry> geometries = make_geometries();
    return geometries;
}

const Geometry& find_geometry(std::string_view name) {
    std::string names;
    for (const Geometry& g : known_geometries()) {
        if (g.name == name) return g;
        names += (names.empty() ? "" : ", ") + g.name;
    }
    fail("unknown geometry '{}' (known: {})", name, names);
}

std::vector<TensorSpec> geometry_tensors(const ModelConfig& c, DType matrix_dtype) {
    if (c.arch == Arch::diffusion_gemma) return diffusion_gemma_tensors(c, matrix_dtype);
    TensorList t(matrix_dtype);
    t.matrix("token_embd.weight", c.n_vocab, c.n_embd);
    t.vector("output_norm.weight", c.n_embd, TensorRole::norm);
    if (!c.tied_embeddings) t.matrix("output.weight", c.n_vocab, c.n_embd);
    const bool hybrid = c.arch != Arch::qwen3;
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        const std::string blk = fmt::format("blk.{}.", l);
        t.vector(blk + "attn_norm.weight", c.n_embd, TensorRole::norm);
        t.vector(blk + (hybrid ? "post_attention_norm.weight" : "ffn_norm.weight"), c.n_embd, TensorRole::norm);
        if (c.layers[size_t(l)] == LayerKind::full_attention) {
            t.matrix(blk + "attn_q.weight", c.n_head * c.head_dim * (c.attn_output_gate ? 2 : 1), c.n_embd);
            t.matrix(blk + "attn_k.weight", c.n_head_kv * c.head_dim, c.n_embd);
            t.matrix(blk + "attn_v.weight", c.n_head_kv * c.head_dim, c.n_embd);
            t.matrix(blk + "attn_output.weight", c.n_embd, c.n_head * c.head_dim);
            t.vector(blk + "attn_q_norm.weight", c.head_dim, TensorRole::norm);
            t.vector(blk + "attn_k_norm.weight", c.head_dim, TensorRole::norm);
        } else {
            const int64_t value_dim = c.ssm_n_value_heads * c.ssm_value_dim;
            t.matrix(blk + "attn_qkv.weight", c.ssm_conv_channels(), c.n_embd);
            t.matrix(blk + "attn_gate.weight", value_dim, c.n_embd);
            t.matrix(blk + "ssm_beta.weight", c.ssm_n_value_heads, c.n_embd);
            t.matrix(blk + "ssm_alpha.weight", c.ssm_n_value_heads, c.n_embd);
            t.matrix(blk + "ssm_out.weight", c.n_embd, value_dim);
            t.conv(blk + "ssm_conv1d.weight", c.ssm_conv_kernel, c.ssm_conv_channels());
            t.vector(blk + "ssm_a", c.ssm_n_value_heads, TensorRole::ssm_a);
            t.vector(blk + "ssm_dt.bias", c.ssm_n_value_heads, TensorRole::dt_bias);
            t.vector(blk + "ssm_norm.weight", c.ssm_value_dim, TensorRole::norm);
        }
        if (!c.layer_is_moe[size_t(l)]) {
            add_ffn(t, blk, c.n_ff, c.n_embd, "");
            continue;
        }
        t.matrix(blk + "ffn_gate_inp.weight", c.n_expert, c.n_embd);
        t.matrix3(blk + "ffn_gate_exps.weight", c.n_expert, c.expert_ff, c.n_embd);
        t.matrix3(blk + "ffn_up_exps.weight", c.n_expert, c.expert_ff, c.n_embd);
        t.matrix3(blk + "ffn_down_exps.weight", c.n_expert, c.n_embd, c.expert_ff);
        if (c.shared_expert_ff > 0) {
            add_ffn(t, blk, c.shared_expert_ff, c.n_embd, "_shexp");
            t.matrix(blk + "ffn_gate_inp_shexp.weight", 1, c.n_embd);
        }
    }
    return t.take();
}

ModelWeights synthetic_weights(const ModelConfig& config, std::string_view name, const SyntheticOptions& options) {
    level_rms(options.matrix_dtype);  // refuses an unsupported type before anything is allocated
    const std::string source = fmt::format("synthetic {} ({}, seed {})", name, dtype_name(options.matrix_dtype),
                                           options.seed);
    ModelWeights weights(config, source);
    // ~1M blocks per job (18 MB of Q1_0): enough jobs to balance 16 threads over a 27B model, few enough
    // that handing them out costs nothing.
    constexpr int64_t kBlocksPerJob = int64_t(1) << 20;
    std::vector<MatrixJob> jobs;
    for (const TensorSpec& spec : geometry_tensors(config, options.matrix_dtype)) {
        int64_t n = 1;
        for (int64_t d : spec.shape) n *= d;
        const uint64_t bytes = dtype_bytes(spec.dtype, uint64_t(n));
        void* data = weights.own(bytes);
        const uint64_t key = tensor_key(options.seed, spec.name);
        if (spec.role == TensorRole::matrix) {
            const int64_t blocks = n / int64_t(dtype_info(spec.dtype).block_elems);
            for (int64_t first = 0; first < blocks; first += kBlocksPerJob)
                jobs.push_back({static_cast<uint8_t*>(data), spec.dtype, spec.shape[0], key, first,
                                std::min(kBlocksPerJob, blocks - first)});
        } else {
            fill_vector(static_cast<float*>(data), n, spec.role, key);
        }
        weights.add({spec.name, spec.dtype, spec.shape, data, bytes, source + ": " + spec.name});
    }
    const int hardware = int(std::max(1u, std::thread::hardware_concurrency()));
    run_jobs(jobs, std::clamp(options.threads > 0 ? options.threads : hardware, 1, 16));
    return weights;
}

}  // namespace deltabit
