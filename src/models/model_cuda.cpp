// Host code only (the kernels are in ops/): a .cpp so that fmt's compile-time checks work, compiled
// to nothing in builds without CUDA.
#include "models/model_cuda.h"

#if DELTABIT_HAVE_CUDA

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/env_switch.h"
#include "core/error.h"
#include "models/kv_cache.h"
#include "models/sequence_state.h"
#include "ops/activations.h"
#include "ops/decode_cuda.h"
#include "ops/dense_cuda.h"
#include "ops/ops_cuda.h"
#include "ops/prefill_cuda.h"
#include "ops/weight_repack.h"

namespace deltabit {

namespace {

// As models/blocks.cpp: transformers' l2norm uses a fixed 1e-6 whatever rms_norm_eps is.
constexpr float kL2NormEps = 1e-6f;

void check(cudaError_t status, const char* what) { cuda::cuda_check(status, what); }

// The argmax result sits after the reduction's partials, 4-byte aligned.
size_t argmax_result_offset(int64_t n_vocab) { return (cuda::argmax_scratch_bytes(n_vocab) + 3) / 4 * 4; }

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

// A seam of the decode step folded into the block output projection before it (decode_layers): the
// projection adds into the residual stream and quantises the next block's normed input into `next`.
struct CudaModel::SeamFold {
    float* residual;
    const float* norm_w;                        // the next block's norm (plain weights)
    const cuda::QuantizedActivationsView* next;  // a deferred-norm view of activations_
};

namespace {

std::atomic<uint64_t> next_state_id{1};

cuda::KvElement kv_element(KvFormat kv) {
    switch (kv) {
        case KvFormat::f32: return cuda::KvElement::f32;
        case KvFormat::f16: return cuda::KvElement::f16;
        case KvFormat::kivi4: return cuda::KvElement::kivi4;
    }
    return cuda::KvElement::f32;
}

// The kivi4 layout of models/kv_cache.h. The ring holds the settled residual window (at most
// kKiviResidual + kKiviGroup − 1 rows) plus the rows of one call, all live at once until the call's
// compress.
cuda::KiviLayout kivi_layout() {
    cuda::KiviLayout k;
    k.sinks = kKiviSinks;
    k.residual = kKiviResidual;
    k.block = kKiviGroup;
    k.value_group = kKiviGroup;
    k.ring_rows = kKiviResidual + kKiviGroup + kCudaMaxCallTokens;
    return k;
}

// A store of `capacity` positions of `row` elements, allocated for its format.
CudaKvSide make_kv_side(KvFormat kv, KvSide side, int64_t capacity, int64_t row) {
    CudaKvSide s;
    s.view.element = kv_element(kv);
    if (kv != KvFormat::kivi4) {
        s.data = cuda::DeviceBuffer(size_t(capacity * row) * cuda::kv_element_bytes(s.view.element));
        s.view.data = s.data.get();
        return s;
    }
    const cuda::KiviLayout k = kivi_layout();
    const int64_t middle = std::max<int64_t>(capacity - k.sinks, 0);  // positions the codes can ever hold
    const int64_t params = side == KvSide::keys ? middle / k.block * row : middle * (row / k.value_group);
    s.data = cuda::DeviceBuffer(size_t((k.sinks + k.ring_rows) * row) * sizeof(float));
    s.codes = cuda::DeviceBuffer(size_t(middle * row / 2));
    s.min = cuda::DeviceBuffer(size_t(params) * sizeof(uint16_t));
    s.scale = cuda::DeviceBuffer(size_t(params) * sizeof(uint16_t));
    s.view.data = s.data.get();
    s.view.codes = s.codes.get<uint8_t>();
    s.view.min = s.min.get<uint16_t>();
    s.view.scale = s.scale.get<uint16_t>();
    s.view.keys = side == KvSide::keys;
    s.view.kivi = k;
    return s;
}

}  // namespace

CudaSequenceState::CudaSequenceState(const ModelConfig& c, int64_t max_positions, KvFormat kv)
    : config_(c), max_positions_(max_positions), kv_format_(kv), kv_row_(c.n_head_kv * c.head_dim),
      id_(next_state_id.fetch_add(1)), layers_(size_t(c.n_layer())) {
    if (max_positions < 0) fail("cuda sequence state: max_positions {} is negative", max_positions);
    if (kv == KvFormat::kivi4 && c.head_dim % kKiviGroup != 0)
        fail("cuda sequence state: kivi4 quantises values in groups of {} channels within a head, but head_dim is {}",
             kKiviGroup, c.head_dim);
    for (int64_t i = 0; i < c.n_layer(); ++i) {
        CudaLayerState& s = layers_[size_t(i)];
        if (c.layers[size_t(i)] == LayerKind::linear_attention) {
            const size_t conv = size_t((c.ssm_conv_kernel - 1) * c.ssm_conv_channels()) * sizeof(float);
            const size_t recurrent = size_t(c.ssm_n_value_heads * c.ssm_key_dim * c.ssm_value_dim) * sizeof(float);
            for (int copy = 0; copy < 2; ++copy) {
                s.conv[copy] = cuda::DeviceBuffer(conv);
                s.recurrent[copy] = cuda::DeviceBuffer(recurrent);
                if (conv != 0) check(cudaMemset(s.conv[copy].get(), 0, conv), "zero conv state");
                check(cudaMemset(s.recurrent[copy].get(), 0, recurrent), "zero recurrent state");
            }
        } else {
            const KvFormat layer_kv = layer_kv_format(c, kv, i);  // kivi4 keeps an attending layer 0 in f16
            s.k = make_kv_side(layer_kv, KvSide::keys, max_positions, kv_row_);
            s.v = make_kv_side(layer_kv, KvSide::values, max_positions, kv_row_);
        }
    }
}

void CudaSequenceState::kv_side_chunks(const CudaKvSide& side, const std::string& prefix, int64_t position,
                                       bool checkpoint_only, std::vector<DeviceChunk>& out) const {
    const int64_t row = kv_row_;
    if (side.view.element != cuda::KvElement::kivi4) {
        if (checkpoint_only) return;  // a plain cache is cut back, never restored
        const size_t bytes = size_t(position * row) * cuda::kv_element_bytes(side.view.element);
        out.push_back({prefix, bytes, {{&side.data, 0, bytes}}});
        return;
    }
    const cuda::KiviLayout& k = side.view.kivi;
    const KiviSplit split = kivi_split(position);
    const size_t row_bytes = size_t(row) * sizeof(float);
    // The residual positions [sinks + quantised, position) in the ring, in order: one or two runs.
    DeviceChunk residual{prefix + ".residual", size_t(split.residual) * row_bytes, {}};
    for (int64_t p = split.sinks + split.quantised; p < position;) {
        const int64_t slot = cuda::kv_data_row(side.view, p);
        const int64_t run = std::min(position - p, k.sinks + k.ring_rows - slot);
        residual.pieces.push_back({&side.data, size_t(slot) * row_bytes, size_t(run) * row_bytes});
        p += run;
    }
    if (checkpoint_only) {
        out.push_back(std::move(residual));
        return;
    }
    const int64_t params = side.view.keys ? split.quantised / k.block * row : split.quantised * (row / k.value_group);
    const size_t sink_bytes = size_t(split.sinks) * row_bytes, code_bytes = size_t(split.quantised * row / 2),
                 param_bytes = size_t(params) * sizeof(uint16_t);
    out.push_back({prefix + ".sink", sink_bytes, {{&side.data, 0, sink_bytes}}});
    out.push_back({prefix + ".codes", code_bytes, {{&side.codes, 0, code_bytes}}});
    out.push_back({prefix + ".min", param_bytes, {{&side.min, 0, param_bytes}}});
    out.push_back({prefix + ".scale", param_bytes, {{&side.scale, 0, param_bytes}}});
    out.push_back(std::move(residual));
}

std::vector<CudaSequenceState::DeviceChunk> CudaSequenceState::device_chunks(int64_t position,
                                                                             bool checkpoint_only) const {
    std::vector<DeviceChunk> out;
    for (size_t l = 0; l < layers_.size(); ++l) {
        const CudaLayerState& s = layers_[l];
        const std::string blk = "blk." + std::to_string(l) + ".";
        if (config_.layers[l] == LayerKind::linear_attention) {
            const cuda::DeviceBuffer& conv = s.conv[parity_];
            const cuda::DeviceBuffer& recurrent = s.recurrent[parity_];
            out.push_back({blk + "gdn.conv", conv.bytes(), {{&conv, 0, conv.bytes()}}});
            out.push_back({blk + "gdn.recurrent", recurrent.bytes(), {{&recurrent, 0, recurrent.bytes()}}});
        } else {
            kv_side_chunks(s.k, blk + "attn.k", position, checkpoint_only, out);
            kv_side_chunks(s.v, blk + "attn.v", position, checkpoint_only, out);
        }
    }
    // The CPU state defines the layout; a difference is a bug here, not bad input.
    const std::vector<StateChunkSpec> layout = checkpoint_only ? state_checkpoint_layout(config_, kv_format_, position)
                                                               : state_image_layout(config_, kv_format_, position);
    bool same = layout.size() == out.size();
    for (size_t i = 0; same && i < out.size(); ++i) same = layout[i].name == out[i].name && layout[i].bytes == out[i].bytes;
    if (!same)
        throw std::logic_error("cuda sequence state: device chunks differ from the CPU state layout at position " +
                               std::to_string(position));
    return out;
}

// Plain cudaMemcpy on the legacy stream: it waits for the model's stream (a blocking stream), so nothing
// still queued for this state can run during or after the copy.
void CudaSequenceState::download(const DeviceChunk& chunk, StateChunk& into) {
    into.name = chunk.name;
    into.bytes.resize(chunk.bytes);
    size_t at = 0;
    for (const DevicePiece& piece : chunk.pieces) {
        if (piece.bytes != 0) piece.buffer->download(into.bytes.data() + at, piece.bytes, piece.offset);
        at += piece.bytes;
    }
}

void CudaSequenceState::upload(const DeviceChunk& chunk, const StateChunk& from) {
    size_t at = 0;
    for (const DevicePiece& piece : chunk.pieces) {
        if (piece.bytes != 0)
            const_cast<cuda::DeviceBuffer*>(piece.buffer)->upload(from.bytes.data() + at, piece.bytes, piece.offset);
        at += piece.bytes;
    }
}

StateImage CudaSequenceState::save() const {
    StateImage image;
    image.position = position_;
    image.kv_format = kv_format_;
    for (const DeviceChunk& chunk : device_chunks(position_, false)) download(chunk, image.chunks.emplace_back());
    return image;
}

namespace {
const StateChunk& chunk_named(const std::vector<StateChunk>& chunks, const std::string& name) {
    return *std::find_if(chunks.begin(), chunks.end(), [&](const StateChunk& c) { return c.name == name; });
}
}  // namespace

void CudaSequenceState::load(const StateImage& image) {
    if (image.kv_format == kv_format_ && image.position > max_positions_)
        fail("cuda sequence state: load: the image is at position {}, this sequence holds at most {}", image.position,
             max_positions_);
    validate_state_image(config_, kv_format_, image);
    for (const DeviceChunk& chunk : device_chunks(image.position, false)) upload(chunk, chunk_named(image.chunks, chunk.name));
    position_ = image.position;
    undoable_ = false;
}

void CudaSequenceState::undo_step() {
    if (!undoable_) throw std::logic_error("cuda sequence state: undo_step with no decode step to undo");
    --position_;
    parity_ ^= 1;
    undoable_ = false;
}

StateCheckpoint CudaSequenceState::checkpoint() const {
    StateCheckpoint cp;
    cp.position = position_;
    for (const DeviceChunk& chunk : device_chunks(position_, true)) download(chunk, cp.chunks.emplace_back());
    return cp;
}

void CudaSequenceState::restore(const StateCheckpoint& cp) {
    validate_state_checkpoint(config_, kv_format_, cp);
    if (cp.position > position_)
        fail("cuda sequence state: restore: the checkpoint is at position {}, past this sequence's position {} "
             "(its KV cache does not hold those tokens)", cp.position, position_);
    const std::vector<DeviceChunk> expected = device_chunks(cp.position, true);
    for (const DeviceChunk& chunk : expected) upload(chunk, chunk_named(cp.chunks, chunk.name));
    position_ = cp.position;
    undoable_ = false;
}

// ---- DeviceArena ----

namespace {
constexpr size_t kArenaAlign = 256;
size_t align_up(size_t n) { return (n + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }
}  // namespace

void* DeviceArena::alloc(size_t bytes) {
    const size_t size = align_up(std::max<size_t>(bytes, 1));
    const size_t offset = used_;
    used_ += size;
    high_water_ = std::max(high_water_, used_);
    if (used_ <= buffer_.bytes()) return buffer_.get<char>() + offset;
    for (Slab& slab : overflow_)
        if (slab.begin <= offset && used_ <= slab.begin + slab.memory.bytes())
            return slab.memory.get<char>() + (offset - slab.begin);
    constexpr size_t kMinSlab = size_t(64) << 20;
    ++allocations_;
    Slab& slab = overflow_.emplace_back(Slab{cuda::DeviceBuffer(std::max({size, kMinSlab, offset})), offset});
    return slab.memory.get<char>();
}

bool DeviceArena::begin_call() {
    used_ = 0;
    if (overflow_.empty()) return false;
    overflow_.clear();
    buffer_ = cuda::DeviceBuffer();  // free first: the old and the new need not fit together
    buffer_ = cuda::DeviceBuffer(high_water_);
    ++allocations_;
    return true;
}

CudaModel::CudaModel(const Model& model, const UploadProgress& progress) : config_(model.config()) {
    // An experiment switch for measuring what the fold saves (docs/bench.md): DELTABIT_SEAM_FOLD=0.
    seam_folding_ = env_switch("DELTABIT_SEAM_FOLD", true);
    rope_table_ = env_switch("DELTABIT_ROPE_TABLE", true);
    prompt_steps_ = env_switch("DELTABIT_PROMPT_STEPS", true);
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
    // By layers, the embedding and LM head counted as one: matrices of one layer are about the same size.
    const double steps = double(parts.layers.size() + 1);
    if (progress) progress(1.0 / steps);

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
        if (progress) progress(double(l + 2) / steps);
    }
    activations_ = std::make_unique<cuda::ActivationScratch>(max_cols);
    block_out_activations_ = std::make_unique<cuda::ActivationScratch>(max_cols);
    for (const Layer& L : layers_) graphable_ = graphable_ && !L.moe;
    step_ = cuda::DeviceBuffer(2 * sizeof(int32_t));
    check(cudaMallocHost(&step_host_, 2 * sizeof(int32_t)), "pinned decode inputs");
    check(cudaEventCreateWithFlags(&step_uploaded_, cudaEventDisableTiming), "decode input event");
    check(cudaMallocHost(&token_host_, sizeof(int32_t)), "pinned run-ahead token");
    check(cudaEventCreateWithFlags(&token_ready_, cudaEventDisableTiming), "run-ahead token event");
    check(cudaMallocHost(&prompt_host_, 2 * size_t(kPromptChunk) * sizeof(int32_t)), "pinned prompt inputs");
    check(cudaEventCreateWithFlags(&prompt_uploaded_, cudaEventDisableTiming), "prompt input event");
    argmax_scratch_ = cuda::DeviceBuffer(argmax_result_offset(c.n_vocab) + sizeof(int32_t));
}

CudaModel::~CudaModel() {
    // No throw from a destructor: queued work must finish before the buffers it uses are freed.
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    for (const DecodeGraph& g : graphs_)
        if (g.exec != nullptr) cudaGraphExecDestroy(g.exec);
    if (step_uploaded_ != nullptr) cudaEventDestroy(step_uploaded_);
    if (step_host_ != nullptr) cudaFreeHost(step_host_);
    if (token_ready_ != nullptr) cudaEventDestroy(token_ready_);
    if (token_host_ != nullptr) cudaFreeHost(token_host_);
    if (prompt_uploaded_ != nullptr) cudaEventDestroy(prompt_uploaded_);
    if (prompt_host_ != nullptr) cudaFreeHost(prompt_host_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

float* CudaModel::temp(int64_t n_floats) {
    return static_cast<float*>(arena_->alloc(size_t(std::max<int64_t>(n_floats, 1)) * sizeof(float)));
}

int32_t* CudaModel::temp_ids(int64_t n) {
    return static_cast<int32_t*>(arena_->alloc(size_t(std::max<int64_t>(n, 1)) * sizeof(int32_t)));
}

void CudaModel::begin_call(DeviceArena& arena) {
    // Growing frees the old buffer, which the previous call's kernels may still be reading.
    if (arena.overflowed()) check(cudaStreamSynchronize(stream_), "drain before growing the arena");
    if (arena.begin_call() && &arena == &decode_arena_) release_graph();  // it points into the old buffer
    arena_ = &arena;
}

void CudaModel::matmul(const float* x, const CudaMatrix& w, int64_t first_row, int64_t n_rows, int64_t n_tokens,
                       float* y) {
    if (!w.quantized) {
        cuda::matmul_plain(x, w.plain_view.slice_rows(first_row, n_rows), n_tokens, y, stream_);
        return;
    }
    const cuda::GemvWeightView view = w.gemv.view().slice_rows(first_row, n_rows);
    // Prompts: one tensor-core GEMM (ops/prefill_cuda.h matmul_prompt) — for Q1_0 on Hopper on f16 activations
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
    return std::all_of(layers_.begin(), layers_.end(), [&](const Layer& L) {
        const bool block = L.kind == LayerKind::linear_attention
                               ? all_quantized({&L.qkv, &L.z_gate, &L.beta, &L.alpha}, D) && L.ssm_output.quantized
                               : all_quantized({&L.q, &L.k, &L.v}, D) && L.attn_output.quantized;
        const bool ffn = all_quantized({&L.ffn_gate, &L.ffn_up}, D) && L.ffn_gate.rows == L.ffn_up.rows &&
                         L.ffn_down.quantized;
        return !L.moe && block && ffn;
    });
}

void CudaModel::attention_block(const Layer& L, const float* x, const cuda::QuantizedActivationsView* xq, int64_t T,
                                int64_t n_past, const int32_t* d_positions, CudaLayerState& state, float* out,
                                const SeamFold* fold, const double* rope_table) {
    const ModelConfig& c = config_;
    const int64_t H = c.n_head, H_kv = c.n_head_kv, dh = c.head_dim;
    const bool gated = c.attn_output_gate;
    const int64_t per_head = gated ? 2 * dh : dh;

    if (T == 1) {
        // The decode step: the position is d_positions[0], read on the device (a graph replays this for
        // every position). q_proj's per-head [q_h | gate_h] rows are read in place, not split.
        float* q_full = temp(H * per_head);
        float* k_raw = temp(H_kv * dh);
        float* v_raw = temp(H_kv * dh);
        matmul_shared_input(x, xq, {{&L.q, q_full}, {&L.k, k_raw}, {&L.v, v_raw}});
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
        cuda::attention_decode_prologue(q_full, k_raw, v_raw, L.q_norm, L.k_norm, d_positions, prologue, state.k.view,
                                        state.v.view, q, stream_, rope_table);
        cuda::attention_cached(q, state.k.view, state.v.view, gate, d_positions, dims, scratch, attended, stream_);
        compress_kv(state, d_positions, 1);
        block_output_matmul(attended, nullptr, L.attn_output, out, fold);
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
    matmul_prompt_group(x, T, {{&L.q, q_full}, {&L.k, k_raw}, {&L.v, v_new}});
    // With the output gate, q_proj's rows interleave per head: [q_h (dh) | gate_h (dh)].
    float* q = temp(T * H * dh);
    float* gate = gated ? temp(T * H * dh) : nullptr;
    const size_t row = size_t(dh) * sizeof(float), pitch = size_t(per_head) * sizeof(float);
    check(cudaMemcpy2DAsync(q, row, q_full, pitch, row, size_t(T * H), cudaMemcpyDeviceToDevice, stream_), "split q");
    if (gated)
        check(cudaMemcpy2DAsync(gate, row, q_full + dh, pitch, row, size_t(T * H), cudaMemcpyDeviceToDevice, stream_),
              "split gate");

    float* q_normed = temp(T * H * dh);
    cuda::rms_norm(q, L.q_norm, T * H, dh, c.rms_eps, cuda::NormWeight::plain, q_normed, stream_);
    cuda::rms_norm(k_raw, L.k_norm, T * H_kv, dh, c.rms_eps, cuda::NormWeight::plain, k_new, stream_);
    cuda::rope_neox(q_normed, d_positions, T, H, dh, c.rope_dim, c.rope_theta, stream_);
    cuda::rope_neox(k_new, d_positions, T, H_kv, dh, c.rope_dim, c.rope_theta, stream_);

    float* attended = temp(T * H * dh);
    if (f32_cache) {
        const cuda::AttentionDims dims{T, n_past, H, H_kv, dh};
        cuda::attention_prefill(q_normed, k_cache, v_cache, gate, dims, attended, stream_);
        matmul(attended, L.attn_output, T, out);
        return;
    }
    // A half or kivi4 cache: the chunk's keys and values rounded into it first, then read back with the
    // history, so every query sees what a later decode step will see (the decode kernel's contract).
    cuda::kv_store(k_new, T, H_kv * dh, d_positions, state.k.view, stream_);
    cuda::kv_store(v_new, T, H_kv * dh, d_positions, state.v.view, stream_);
    if (state.k.view.element == cuda::KvElement::f16 && (dh <= 128 || n_past == 0)) {
        // The flash kernel is fp32 on CUDA cores; the decode kernel below, on tensor cores, wins once the
        // history is long for heads of 256 (H200: Bonsai-4B, heads of 128, pp512 67.8 → 42.4 ms and pp4096
        // 530 → 363 ms with it; Bonsai-27B, heads of 256, pp4096 0.99 → 1.07 s with it on every chunk, pp512
        // about even).
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
    matmul(attended, L.attn_output, T, out);
}

void CudaModel::compress_kv(CudaLayerState& state, const int32_t* d_n_past, int64_t T) {
    if (state.k.view.element != cuda::KvElement::kivi4) return;
    const int64_t row = config_.n_head_kv * config_.head_dim;
    cuda::kivi_compress(state.k.view, row, d_n_past, T, stream_);
    cuda::kivi_compress(state.v.view, row, d_n_past, T, stream_);
}

void CudaModel::deltanet_block(const Layer& L, const float* x, const cuda::QuantizedActivationsView* xq, int64_t T,
                               int parity, CudaLayerState& state, float* out, const SeamFold* fold) {
    const ModelConfig& c = config_;
    const int64_t H_k = c.ssm_n_key_heads, H_v = c.ssm_n_value_heads, d_k = c.ssm_key_dim, d_v = c.ssm_value_dim;
    const int64_t key_dim = H_k * d_k, value_dim = H_v * d_v, channels = c.ssm_conv_channels();
    const cuda::KeyHeadMap key_head_map =
        c.value_head_order == ValueHeadOrder::tiled ? cuda::KeyHeadMap::tiled : cuda::KeyHeadMap::grouped;

    if (T == 1) {
        // The decode step: conv, norms and gates in one launch, recurrence and gated norm in another.
        float* mixed = temp(channels);
        float* z = temp(value_dim);
        float* b = temp(H_v);
        float* a = temp(H_v);
        matmul_shared_input(x, xq, {{&L.qkv, mixed}, {&L.z_gate, z}, {&L.beta, b}, {&L.alpha, a}});
        float* q = temp(key_dim);
        float* k = temp(key_dim);
        float* v = temp(value_dim);
        float* beta = temp(H_v);
        float* g = temp(H_v);
        const cuda::GdnDecodeDims dims{H_k, H_v, d_k, d_v, c.ssm_conv_kernel, key_head_map};
        // Reads copy `parity`, writes the other (CudaLayerState): the step stays undoable.
        cuda::gdn_decode_prepare(mixed, b, a, L.conv, state.conv[parity].get<float>(), state.conv[parity ^ 1].get<float>(),
                                 L.ssm_a, L.dt_bias, dims, kL2NormEps, q, k, v, beta, g, stream_);
        float* normed = temp(value_dim);
        // The recurrence also quantises its output for ssm_out when the groups of 128 fall inside heads.
        const bool quantize_out = d_v % cuda::kActivationGroup == 0 && all_quantized({&L.ssm_output}, value_dim);
        const cuda::QuantizedActivationsView normed_q = block_out_activations_->view(value_dim);
        cuda::gdn_decode_recurrent(q, k, v, beta, g, z, L.ssm_norm, c.rms_eps, dims, state.recurrent[parity].get<float>(),
                                   state.recurrent[parity ^ 1].get<float>(), normed, stream_,
                                   quantize_out ? &normed_q : nullptr);
        block_output_matmul(normed, quantize_out ? &normed_q : nullptr, L.ssm_output, out, fold);
        return;
    }

    float* mixed = temp(T * channels);
    float* z = temp(T * value_dim);
    float* b = temp(T * H_v);
    float* a = temp(T * H_v);
    matmul_prompt_group(x, T, {{&L.qkv, mixed}, {&L.z_gate, z}, {&L.beta, b}, {&L.alpha, a}});

    // Channels are [q (key_dim) | k (key_dim) | v (value_dim)].
    float* q_normed = temp(T * key_dim);
    float* k_normed = temp(T * key_dim);
    float* v = temp(T * value_dim);
    if (cuda::conv1d_split_l2_supported(d_k, c.ssm_conv_kernel)) {
        cuda::conv1d_split_l2(mixed, L.conv, state.conv[parity].get<float>(), T, H_k, d_k, value_dim,
                              c.ssm_conv_kernel, kL2NormEps, q_normed, k_normed, v, stream_);
    } else {
        float* conv = temp(T * channels);
        cuda::conv1d_causal_silu(mixed, L.conv, state.conv[parity].get<float>(), T, channels, c.ssm_conv_kernel, conv,
                                 stream_);
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
    cuda::gdn_gates(b, a, L.ssm_a, L.dt_bias, T, H_v, beta, g, stream_);

    const cuda::DeltaRuleDims dims{T, H_k, H_v, d_k, d_v, key_head_map};
    float* o = temp(T * value_dim);
    void* workspace = temp(int64_t((cuda::delta_rule_chunked_workspace_bytes(dims) + 3) / 4));
    cuda::gated_delta_rule_chunked(q_normed, k_normed, v, g, beta, dims, state.recurrent[parity].get<float>(), o, workspace,
                                   stream_);
    float* normed = temp(T * value_dim);
    cuda::gated_rms_norm(o, z, L.ssm_norm, T * H_v, d_v, c.rms_eps, normed, stream_);
    matmul(normed, L.ssm_output, T, out);
}

void CudaModel::swiglu_ffn(const CudaMatrix& gate, const CudaMatrix& up, const CudaMatrix& down, const float* x,
                           const cuda::QuantizedActivationsView* xq, int64_t T, float* out, const SeamFold* fold) {
    const int64_t width = gate.rows;
    float* act = temp(T * width);
    if (T == 1 && gate.rows == up.rows && all_quantized({&gate, &up}, gate.cols)) {
        // Both products and the SwiGLU in one launch (ops/matmul_cuda.h), which also quantises the result
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
    if (T == 1) {
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
        swiglu_ffn(L.ffn_gate, L.ffn_up, L.ffn_down, x, nullptr, T, shared);
        matmul(x, L.shared_gate, T, d_shared_gate);
        std::vector<float> shared_gate(static_cast<size_t>(T));
        check(cudaMemcpyAsync(shared_gate.data(), d_shared_gate, size_t(T) * sizeof(float), cudaMemcpyDeviceToHost,
                              stream_), "shared gate");
        check(cudaStreamSynchronize(stream_), "shared gate sync");
        for (int64_t t = 0; t < T; ++t)
            cuda::axpy(float(cpu::sigmoid(shared_gate[size_t(t)])), shared + t * D, out + t * D, D, stream_);
    }
}

void CudaModel::check_call(const CudaSequenceState& state, std::span<const int32_t> ids) const {
    const ModelConfig& c = config_;
    const int64_t T = int64_t(ids.size());
    if (state.n_layer() != c.n_layer())
        fail("cuda forward: the sequence state has {} layers but the model has {}", state.n_layer(), c.n_layer());
    // The device cannot throw: ids and capacity are checked here, before any state changes.
    for (int64_t t = 0; t < T; ++t)
        if (ids[size_t(t)] < 0 || ids[size_t(t)] >= c.n_vocab)
            fail("cuda forward: token id {} at index {} is outside the vocabulary of {}", ids[size_t(t)], t, c.n_vocab);
    if (state.position() + T > state.max_positions())
        fail("cuda forward: {} tokens after position {} exceed the sequence's KV capacity of {}", T, state.position(),
             state.max_positions());
}

void CudaModel::run_layers(CudaSequenceState& state, const int32_t* d_ids, const int32_t* d_positions, int64_t T,
                           int64_t first_logit_row, float* logits) {
    const ModelConfig& c = config_;
    const int64_t D = c.n_embd, n_past = state.position();
    call_capacity_ = state.max_positions();
    float* x = temp(T * D);
    float* h = temp(T * D);
    float* m = temp(T * D);
    cuda::embedding_lookup(token_embd_view_, d_ids, T, x, stream_);
    // Every block's intermediates are dead once its output is added to x: each block starts from here.
    const size_t block_mark = arena_->mark();
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        const Layer& L = layers_[size_t(l)];
        arena_->rewind(block_mark);
        cuda::rms_norm(x, L.attn_norm, T, D, c.rms_eps, cuda::NormWeight::plain, h, stream_);
        if (L.kind == LayerKind::linear_attention)
            deltanet_block(L, h, nullptr, T, state.parity(), state.layer(l), m);
        else
            attention_block(L, h, nullptr, T, n_past, d_positions, state.layer(l), m);
        cuda::axpy(1.0f, m, x, T * D, stream_);

        arena_->rewind(block_mark);
        cuda::rms_norm(x, L.ffn_norm, T, D, c.rms_eps, cuda::NormWeight::plain, h, stream_);
        if (L.moe)
            moe_ffn(L, h, T, m);
        else
            swiglu_ffn(L.ffn_gate, L.ffn_up, L.ffn_down, h, nullptr, T, m);
        cuda::axpy(1.0f, m, x, T * D, stream_);
    }
    arena_->rewind(block_mark);
    const int64_t rows = T - first_logit_row;
    cuda::rms_norm(x + first_logit_row * D, output_norm_, rows, D, c.rms_eps, cuda::NormWeight::plain, h, stream_);
    matmul(h, output_, rows, logits);
}

const float* CudaModel::prompt_chunk(CudaSequenceState& state, std::span<const int32_t> ids, bool all_logits) {
    const int64_t T = int64_t(ids.size()), n_past = state.position();
    if (T > kPromptChunk) fail("cuda prompt chunk: {} tokens, at most {}", T, kPromptChunk);
    begin_call(prompt_arena_);
    int32_t* d_ids = temp_ids(T);
    int32_t* d_positions = temp_ids(T);
    float* logits = temp((all_logits ? T : 1) * config_.n_vocab);
    // The pinned inputs (prompt_host_), rewritten once the previous chunk's copy has run: the host stays
    // at most one chunk ahead of the GPU, and the GPU never waits for the host between chunks.
    check(cudaEventSynchronize(prompt_uploaded_), "wait for the previous prompt inputs");
    int32_t* host_ids = prompt_host_;
    int32_t* host_positions = prompt_host_ + kPromptChunk;
    std::copy(ids.begin(), ids.end(), host_ids);
    for (int64_t t = 0; t < T; ++t) host_positions[t] = int32_t(n_past + t);
    check(cudaMemcpyAsync(d_ids, host_ids, size_t(T) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_), "upload ids");
    check(cudaMemcpyAsync(d_positions, host_positions, size_t(T) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
          "upload positions");
    check(cudaEventRecord(prompt_uploaded_, stream_), "record prompt inputs");
    run_layers(state, d_ids, d_positions, T, all_logits ? 0 : T - 1, logits);
    state.advance(T);
    ++stats_.prompt_chunks;
    return logits;
}

void CudaModel::decode_layers(CudaSequenceState& state, const int32_t* d_token, const int32_t* d_position,
                              float* logits) {
    const ModelConfig& c = config_;
    const int64_t D = c.n_embd;
    call_capacity_ = state.max_positions();
    float* x = temp(D);
    float* h = temp(D);
    float* m = temp(D);
    // The step's rotation, once for all its attention layers, launched first: every prologue is two or more
    // launches later, so it may read the table before its wait (cuda::attention_decode_prologue).
    const double* rope_table = nullptr;
    const bool attends = std::any_of(layers_.begin(), layers_.end(),
                                     [](const Layer& L) { return L.kind != LayerKind::linear_attention; });
    if (rope_table_ && attends && c.rope_dim > 0) {
        double* table = reinterpret_cast<double*>(temp(2 * cuda::rope_decode_table_doubles(c.rope_dim)));
        cuda::rope_decode_table(d_position, c.rope_dim, c.rope_theta, table, stream_);
        rope_table = table;
    }
    cuda::embedding_lookup(token_embd_view_, d_token, 1, x, stream_);
    // Each seam adds the previous block's output m to x, norms x into h and quantises h once for every
    // matrix that reads it (ops/decode_cuda.h add_rms_norm_quantize). hq lives in the shared activation
    // scratch: the block's first matmuls read it before anything else quantises there.
    // Folded (seams_foldable), only the first seam runs as a kernel: every block's output projection adds
    // into x and quantises the next block's input itself (cuda::gemv_quantized_add_norm, into hq_folded,
    // the same scratch), and h is never written — every matrix reading it takes the quantised form.
    const bool fold = seam_folding_ && seams_foldable();
    stats_.folded_seams = fold;
    const cuda::QuantizedActivationsView hq = activations_->view(D);
    const cuda::QuantizedActivationsView hq_folded = activations_->deferred_norm_view(D, c.rms_eps);
    const cuda::QuantizedActivationsView* block_in = &hq;
    const float* pending = nullptr;  // the block output not yet added to x
    const size_t block_mark = arena_->mark();
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        const Layer& L = layers_[size_t(l)];
        arena_->rewind(block_mark);
        if (!fold || l == 0) {
            cuda::add_rms_norm_quantize(x, pending, L.attn_norm, D, c.rms_eps, cuda::NormWeight::plain, h, hq, stream_);
            block_in = &hq;
        }
        const SeamFold into_ffn{x, L.ffn_norm, &hq_folded};
        if (L.kind == LayerKind::linear_attention)
            deltanet_block(L, h, block_in, 1, state.parity(), state.layer(l), m, fold ? &into_ffn : nullptr);
        else
            attention_block(L, h, block_in, 1, state.position(), d_position, state.layer(l), m,
                            fold ? &into_ffn : nullptr, rope_table);

        arena_->rewind(block_mark);
        if (fold) {
            block_in = &hq_folded;
        } else {
            cuda::add_rms_norm_quantize(x, m, L.ffn_norm, D, c.rms_eps, cuda::NormWeight::plain, h, hq, stream_);
            block_in = &hq;
        }
        const SeamFold into_next{x, l + 1 < c.n_layer() ? layers_[size_t(l + 1)].attn_norm : output_norm_, &hq_folded};
        if (L.moe)
            moe_ffn(L, h, 1, m);
        else
            swiglu_ffn(L.ffn_gate, L.ffn_up, L.ffn_down, h, block_in, 1, m, fold ? &into_next : nullptr);
        pending = m;
        if (fold) block_in = &hq_folded;
    }
    arena_->rewind(block_mark);
    if (!fold) {
        cuda::add_rms_norm_quantize(x, pending, output_norm_, D, c.rms_eps, cuda::NormWeight::plain, h, hq, stream_);
        block_in = &hq;
    }
    if (output_.quantized && output_.cols == D)
        cuda::gemv_quantized(*block_in, output_.gemv.view(), logits, stream_);
    else
        matmul(h, output_, 1, logits);
}

const float* CudaModel::enqueue_decode_step(CudaSequenceState& state) {
    const int32_t* d_token = step_.get<int32_t>();
    float* logits = temp(config_.n_vocab);
    if (config_.n_embd <= cuda::kResidualNormMaxDim)
        decode_layers(state, d_token, d_token + 1, logits);
    else
        run_layers(state, d_token, d_token + 1, 1, 0, logits);
    return logits;
}

namespace {

// Kernel nodes of a captured graph (its memcpy/memset nodes, if any, not counted); 0 when it cannot be read.
int64_t kernel_nodes(cudaGraph_t graph) {
    size_t count = 0;
    if (cudaGraphGetNodes(graph, nullptr, &count) != cudaSuccess) return 0;
    std::vector<cudaGraphNode_t> nodes(count);
    if (cudaGraphGetNodes(graph, nodes.data(), &count) != cudaSuccess) return 0;
    int64_t kernels = 0;
    for (cudaGraphNode_t node : nodes) {
        cudaGraphNodeType type{};
        if (cudaGraphNodeGetType(node, &type) == cudaSuccess && type == cudaGraphNodeTypeKernel) ++kernels;
    }
    return kernels;
}

}  // namespace

bool CudaModel::capture_decode_graph(CudaSequenceState& state) {
    if (graph_state_id_ != state.id()) release_graph();
    DecodeGraph& slot = graphs_[state.parity()];
    cudaGraph_t graph = nullptr;
    // Relaxed: the GEMV launcher queries the device (attributes, occupancy) while it is being recorded.
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "begin decode graph capture");
    const float* logits = nullptr;
    try {
        logits = enqueue_decode_step(state);
    } catch (...) {
        cudaStreamEndCapture(stream_, &graph);
        if (graph != nullptr) cudaGraphDestroy(graph);
        throw;
    }
    check(cudaStreamEndCapture(stream_, &graph), "end decode graph capture");
    if (arena_->overflowed()) {
        // The step needs more scratch than the eager step that sized the arena (not expected: its size
        // does not depend on the sequence). Run this step eagerly; the next call grows the arena and
        // captures again.
        cudaGraphDestroy(graph);
        arena_->rewind(0);
        return false;
    }
    stats_.step_kernels = kernel_nodes(graph);
    cudaGraphExec_t exec = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check(status, "instantiate decode graph");
    slot.exec = exec;
    slot.logits = logits;
    graph_state_id_ = state.id();
    ++stats_.graph_captures;
    return true;
}

void CudaModel::release_graph() {
    for (DecodeGraph& g : graphs_) {
        if (g.exec != nullptr) cudaGraphExecDestroy(g.exec);
        g = DecodeGraph{};
    }
    graph_state_id_ = 0;
}

const float* CudaModel::decode_step(CudaSequenceState& state, int32_t id, bool may_capture) {
    begin_call(decode_arena_);
    // The pinned inputs may be rewritten once the previous step's upload has read them.
    check(cudaEventSynchronize(step_uploaded_), "wait for the previous decode inputs");
    step_host_[0] = id;
    step_host_[1] = int32_t(state.position());
    check(cudaMemcpyAsync(step_.get(), step_host_, 2 * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
          "upload decode inputs");
    check(cudaEventRecord(step_uploaded_, stream_), "record decode inputs");

    const float* logits = nullptr;
    bool graph = graphs_enabled_ && graphable_ && decode_sized_;
    if (graph && (graph_state_id_ != state.id() || graphs_[state.parity()].exec == nullptr))
        graph = may_capture && capture_decode_graph(state);
    if (graph) {
        const DecodeGraph& g = graphs_[state.parity()];
        check(cudaGraphLaunch(g.exec, stream_), "replay decode graph");
        ++stats_.graph_replays;
        logits = g.logits;
    } else {
        logits = enqueue_decode_step(state);
        ++stats_.eager_steps;
        decode_sized_ = true;  // the arena grows to this step's needs at the next call
    }
    state.advance_step();
    return logits;
}

std::optional<int32_t> CudaModel::argmax_and_step(CudaSequenceState& state, const float* device_logits,
                                                  const float** step_logits) {
    // Only a captured graph: it proves the decode arena is sized (no call below can reallocate it while
    // the argmax still reads logits that live there).
    if (!(graphs_enabled_ && graphable_ && decode_sized_) || graph_state_id_ != state.id() ||
        graphs_[state.parity()].exec == nullptr || state.position() >= state.max_positions())
        return std::nullopt;
    check(cudaEventSynchronize(step_uploaded_), "wait for the previous decode inputs");
    step_host_[1] = int32_t(state.position());
    check(cudaMemcpyAsync(step_.get<int32_t>() + 1, step_host_ + 1, sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
          "upload decode position");
    check(cudaEventRecord(step_uploaded_, stream_), "record decode inputs");
    // The argmax writes the step's token id in place; a copy of it comes back while the step runs.
    cuda::argmax(device_logits, config_.n_vocab, argmax_scratch_.get(), step_.get<int32_t>(), stream_);
    check(cudaMemcpyAsync(token_host_, step_.get<int32_t>(), sizeof(int32_t), cudaMemcpyDeviceToHost, stream_),
          "download run-ahead token");
    check(cudaEventRecord(token_ready_, stream_), "record run-ahead token");
    begin_call(decode_arena_);
    const DecodeGraph& g = graphs_[state.parity()];
    check(cudaGraphLaunch(g.exec, stream_), "replay decode graph");
    ++stats_.graph_replays;
    ++stats_.run_ahead_steps;
    state.advance_step();
    *step_logits = g.logits;
    check(cudaEventSynchronize(token_ready_), "wait for the run-ahead token");
    return *token_host_;
}

std::vector<float> CudaModel::forward(CudaSequenceState& state, std::span<const int32_t> ids) {
    check_call(state, ids);
    const int64_t T = int64_t(ids.size()), V = config_.n_vocab;
    if (T == 0) return {};
    std::vector<float> logits(size_t(T * V));
    if (T == 1) {
        const float* d = decode_step(state, ids[0]);
        check(cudaMemcpyAsync(logits.data(), d, size_t(V) * sizeof(float), cudaMemcpyDeviceToHost, stream_),
              "download logits");
    } else {
        for (int64_t first = 0; first < T; first += kPromptChunk) {
            const int64_t n = std::min(kPromptChunk, T - first);
            const float* d = prompt_chunk(state, ids.subspan(size_t(first), size_t(n)), true);
            check(cudaMemcpyAsync(logits.data() + first * V, d, size_t(n * V) * sizeof(float), cudaMemcpyDeviceToHost,
                                  stream_), "download logits");
        }
    }
    check(cudaStreamSynchronize(stream_), "forward sync");
    return logits;
}

const float* CudaModel::forward_last(CudaSequenceState& state, std::span<const int32_t> ids) {
    check_call(state, ids);
    const int64_t T = int64_t(ids.size());
    if (T == 0) fail("cuda forward_last: no tokens to consume");
    if (T == 1) return decode_step(state, ids[0]);
    const float* logits = nullptr;
    if (T <= kStepPromptMaxTokens && prompt_steps_) {
        // A few tokens: one decode step each (~420 launches a Bonsai-27B step, with fused seams and DeltaNet
        // kernels) instead of the prompt path's ~1600 launches, which the host cannot issue as fast as the
        // GPU runs them at these lengths. Eager steps: a graph captured here would be this state's, and the
        // capture costs more than it saves over a few tokens (the next decode step captures it). The matmuls
        // round as this short a prompt's do (the per-token GEMV); the delta rule runs recurrently.
        for (const int32_t id : ids) logits = decode_step(state, id, false);
        return logits;
    }
    for (int64_t first = 0; first < T; first += kPromptChunk) {
        const int64_t n = std::min(kPromptChunk, T - first);
        logits = prompt_chunk(state, ids.subspan(size_t(first), size_t(n)), false);
    }
    return logits;
}

int32_t CudaModel::argmax(const float* device_logits) {
    auto* result = reinterpret_cast<int32_t*>(argmax_scratch_.get<char>() + argmax_result_offset(config_.n_vocab));
    cuda::argmax(device_logits, config_.n_vocab, argmax_scratch_.get(), result, stream_);
    int32_t id = 0;
    check(cudaMemcpyAsync(&id, result, sizeof(int32_t), cudaMemcpyDeviceToHost, stream_), "download argmax");
    check(cudaStreamSynchronize(stream_), "argmax sync");
    return id;
}

void CudaModel::set_decode_graphs(bool enabled) { graphs_enabled_ = enabled; }

void CudaModel::set_seam_folding(bool enabled) {
    // The captured steps have the other seams; a replay in flight must end before its graph goes.
    check(cudaStreamSynchronize(stream_), "drain before changing the decode step");
    release_graph();
    seam_folding_ = enabled;
}

void CudaModel::set_rope_table(bool enabled) {
    // As set_seam_folding: the captured steps read (or do not read) the table.
    check(cudaStreamSynchronize(stream_), "drain before changing the decode step");
    release_graph();
    rope_table_ = enabled;
}

CudaDecodeStats CudaModel::decode_stats() const {
    CudaDecodeStats s = stats_;
    s.arena_allocations = decode_arena_.allocations() + prompt_arena_.allocations();
    s.prompt_arena_bytes = prompt_arena_.capacity();
    s.decode_arena_bytes = decode_arena_.capacity();
    return s;
}

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
