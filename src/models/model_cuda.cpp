// Host code only (the kernels are in ops/): a .cpp so that fmt's compile-time checks work, compiled
// to nothing in builds without CUDA.
#include "models/model_cuda.h"

#if DELTABIT_HAVE_CUDA

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/env_switch.h"
#include "core/error.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/attention/attention_cuda.h"
#include "ops/matmul/dense_cuda.h"

namespace deltabit {

namespace {

void check(cudaError_t status, const char* what) { cuda::cuda_check(status, what); }

// The argmax result sits after the reduction's partials, 4-byte aligned.
size_t argmax_result_offset(int64_t n_vocab) { return (cuda::argmax_scratch_bytes(n_vocab) + 3) / 4 * 4; }

}  // namespace

CudaModel::CudaModel(const Model& model, const UploadProgress& progress) : config_(model.config()) {
    // An experiment switch for measuring what the fold saves (docs/bench.md): DELTABIT_SEAM_FOLD=0.
    seam_folding_ = env_switch("DELTABIT_SEAM_FOLD", true);
    rope_table_ = env_switch("DELTABIT_ROPE_TABLE", true);
    prompt_steps_ = env_switch("DELTABIT_PROMPT_STEPS", true);
    // A blocking stream: it orders after the synchronous uploads and memsets of the legacy stream.
    check(cudaStreamCreate(&stream_), "create stream");
    const ModelParts& parts = model.parts();
    const ModelConfig& c = config_;
    CudaUploads uploads;

    const WeightView& embd = parts.token_embd;
    token_embd_ = cuda::DeviceBuffer(size_t(embd.rows) * embd.row_bytes());
    token_embd_.upload(embd.data, token_embd_.bytes());
    token_embd_view_ = {token_embd_.get(), embd.dtype, embd.rows, embd.cols};
    output_norm_ = uploads.vector(parts.output_norm, c.n_embd);
    output_ = uploads.matrix(parts.output, "output.weight");
    // By layers, the embedding and LM head counted as one: matrices of one layer are about the same size.
    const double steps = double(parts.layers.size() + 1);
    if (progress) progress(1.0 / steps);

    layers_.reserve(parts.layers.size());
    for (size_t l = 0; l < parts.layers.size(); ++l) {
        layers_.push_back(upload_layer(parts.layers[l], c, int64_t(l), uploads));
        if (progress) progress(double(l + 2) / steps);
    }
    vectors_ = std::move(uploads.vectors);
    activations_ = std::make_unique<cuda::ActivationScratch>(uploads.max_cols);
    block_out_activations_ = std::make_unique<cuda::ActivationScratch>(uploads.max_cols);
    step_ = cuda::DeviceBuffer(2 * sizeof(int32_t));
    check(cudaMallocHost(&step_host_, 2 * sizeof(int32_t)), "pinned decode inputs");
    check(cudaEventCreateWithFlags(&step_uploaded_, cudaEventDisableTiming), "decode input event");
    check(cudaMallocHost(&token_host_, sizeof(int32_t)), "pinned run-ahead token");
    check(cudaEventCreateWithFlags(&token_ready_, cudaEventDisableTiming), "run-ahead token event");
    check(cudaMallocHost(&prompt_host_, 2 * size_t(kPromptChunk) * sizeof(int32_t)), "pinned prompt inputs");
    check(cudaEventCreateWithFlags(&prompt_uploaded_, cudaEventDisableTiming), "prompt input event");
    argmax_scratch_ = cuda::DeviceBuffer(argmax_result_offset(c.n_vocab) + sizeof(int32_t));
    batch_inputs_ = cuda::DeviceBuffer(2 * size_t(kPromptChunk) * sizeof(int32_t));
    const int64_t n_deltanet = std::count(c.layers.begin(), c.layers.end(), LayerKind::linear_attention);
    const size_t deltanet_row_bytes = size_t(n_deltanet * kPromptChunk) * sizeof(cuda::GdnDecodeRow);
    batch_deltanet_rows_ = cuda::DeviceBuffer(deltanet_row_bytes);
    if (deltanet_row_bytes != 0)
        check(cudaMallocHost(&batch_deltanet_rows_host_, deltanet_row_bytes), "pinned DeltaNet row table");
}

CudaModel::~CudaModel() {
    // No throw from a destructor: queued work must finish before the buffers it uses are freed.
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    for (const DecodeGraph& g : graphs_)
        if (g.exec != nullptr) cudaGraphExecDestroy(g.exec);
    for (const BatchGraph& g : batch_graphs_) cudaGraphExecDestroy(g.exec);
    if (step_uploaded_ != nullptr) cudaEventDestroy(step_uploaded_);
    if (row_ids_ready_ != nullptr) cudaEventDestroy(row_ids_ready_);
    if (row_ids_host_ != nullptr) cudaFreeHost(row_ids_host_);
    if (step_host_ != nullptr) cudaFreeHost(step_host_);
    if (token_ready_ != nullptr) cudaEventDestroy(token_ready_);
    if (token_host_ != nullptr) cudaFreeHost(token_host_);
    if (prompt_uploaded_ != nullptr) cudaEventDestroy(prompt_uploaded_);
    if (prompt_host_ != nullptr) cudaFreeHost(prompt_host_);
    if (batch_deltanet_rows_host_ != nullptr) cudaFreeHost(batch_deltanet_rows_host_);
    if (attention_rows_host_ != nullptr) cudaFreeHost(attention_rows_host_);
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

const cuda::QuantizedActivationsView* CudaModel::seam(Seams& s, const float* norm_w, int64_t T, int64_t first_row) {
    const ModelConfig& c = config_;
    const int64_t D = c.n_embd;
    if (!s.step) {
        if (s.pending != nullptr) cuda::axpy(1.0f, s.pending, s.x, T * D, stream_);
        s.pending = nullptr;
        cuda::rms_norm(s.x + first_row * D, norm_w, T - first_row, D, c.rms_eps, cuda::NormWeight::plain, s.h, stream_);
        return nullptr;
    }
    // Folded, the block output projection before did this seam (only the first runs as a kernel).
    if (s.fold && s.pending != nullptr) return &s.hq_folded;
    cuda::add_rms_norm_quantize(s.x, s.pending, norm_w, D, c.rms_eps, cuda::NormWeight::plain, s.h, s.hq, stream_);
    return &s.hq;
}

void CudaModel::run_layers(CudaSequenceState& state, const int32_t* d_ids, const int32_t* d_positions, int64_t T,
                           int64_t first_logit_row, float* logits, bool step) {
    const ModelConfig& c = config_;
    const int64_t D = c.n_embd, n_past = state.position();
    call_capacity_ = state.max_positions();
    Seams s;
    s.step = step;
    s.x = temp(T * D);
    s.h = temp(T * D);
    float* m = temp(T * D);
    // The step's rotation, once for all its attention layers, launched first: every prologue is two or more
    // launches later, so it may read the table before its wait (cuda::attention_decode_prologue).
    const double* rope_table = nullptr;
    const bool attends = std::any_of(layers_.begin(), layers_.end(),
                                     [](const CudaLayer& L) { return L.kind != LayerKind::linear_attention; });
    if (step && rope_table_ && attends && c.rope_dim > 0) {
        double* table = reinterpret_cast<double*>(temp(2 * cuda::rope_decode_table_doubles(c.rope_dim)));
        cuda::rope_decode_table(d_positions, c.rope_dim, c.rope_theta, table, stream_);
        rope_table = table;
    }
    cuda::embedding_lookup(token_embd_view_, d_ids, T, s.x, stream_);
    // The decode step's seams add the previous block's output m to x, norm x into h and quantise h once for
    // every matrix that reads it (ops/elementwise/elementwise_cuda.h add_rms_norm_quantize). hq lives in the shared activation
    // scratch: the block's first matmuls read it before anything else quantises there.
    // Folded (seams_foldable), only the first seam runs as a kernel: every block's output projection adds
    // into x and quantises the next block's input itself (cuda::gemv_quantized_add_norm, into hq_folded,
    // the same scratch), and h is never written — every matrix reading it takes the quantised form.
    if (step) {
        s.fold = seam_folding_ && seams_foldable();
        stats_.folded_seams = s.fold;
        s.hq = activations_->view(D);
        s.hq_folded = activations_->deferred_norm_view(D, c.rms_eps);
    }
    // Every block's intermediates are dead once its output is added to x: each block starts from here.
    const size_t block_mark = arena_->mark();
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        const CudaLayer& L = layers_[size_t(l)];
        observed_layer_ = l;
        arena_->rewind(block_mark);
        const cuda::QuantizedActivationsView* in = seam(s, L.attn_norm, T);
        const SeamFold into_ffn{s.x, L.ffn_norm, &s.hq_folded};
        const SeamFold* fold = s.fold ? &into_ffn : nullptr;
        if (!batch_.empty()) {
            if (L.kind == LayerKind::linear_attention)
                deltanet_rows(L.deltanet, s.h, l, m);
            else
                attention_rows(L.attention, s.h, l, m);
        } else if (L.kind == LayerKind::linear_attention) {
            deltanet_block(L.deltanet, s.h, in, T, state.parity(), state.layer(l), m, fold);
        } else {
            attention_block(L.attention, s.h, in, T, n_past, d_positions, state.layer(l), m, fold, rope_table);
        }
        s.pending = m;

        arena_->rewind(block_mark);
        in = seam(s, L.ffn_norm, T);
        const SeamFold into_next{s.x, l + 1 < c.n_layer() ? layers_[size_t(l + 1)].attn_norm : output_norm_,
                                 &s.hq_folded};
        if (L.moe)
            moe_ffn(L.experts, s.h, T, m);
        else
            swiglu_ffn(L.ffn, s.h, in, T, m, s.fold ? &into_next : nullptr);
        s.pending = m;
        if (observer_ != nullptr) {  // the prompt's seams (observed calls take no step): the add now
            cuda::axpy(1.0f, s.pending, s.x, T * D, stream_);
            s.pending = nullptr;
            observe("out", s.x, T * D);
        }
    }
    arena_->rewind(block_mark);
    const cuda::QuantizedActivationsView* in = seam(s, output_norm_, T, first_logit_row);
    if (in != nullptr && output_.quantized && output_.cols == D)
        cuda::gemv_quantized(*in, output_.gemv.view(), logits, stream_);
    else if (!batch_.empty())
        batch_matmul(s.h, T, {{&output_, logits}});
    else
        matmul(s.h, output_, T - first_logit_row, logits);
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
    run_layers(state, d_ids, d_positions, T, all_logits ? 0 : T - 1, logits, /*step=*/false);
    state.advance(T);
    ++stats_.prompt_chunks;
    return logits;
}


std::vector<float> CudaModel::forward(CudaSequenceState& state, std::span<const int32_t> ids,
                                     const ActivationObserver* observer) {
    check_call(state, ids);
    const int64_t T = int64_t(ids.size()), V = config_.n_vocab;
    if (T == 0) return {};
    std::vector<float> logits(size_t(T * V));
    const bool observed = observer != nullptr && *observer;
    if (observed) {
        // The prompt path, one token included (step_kernels), reset however the call ends.
        observer_ = observer;
        struct Unobserve {
            const ActivationObserver*& observer;
            ~Unobserve() { observer = nullptr; }
        } unobserve{observer_};
        for (int64_t first = 0; first < T; first += kPromptChunk) {
            const int64_t n = std::min(kPromptChunk, T - first);
            const float* d = prompt_chunk(state, ids.subspan(size_t(first), size_t(n)), true);
            check(cudaMemcpyAsync(logits.data() + first * V, d, size_t(n * V) * sizeof(float), cudaMemcpyDeviceToHost,
                                  stream_), "download logits");
        }
    } else if (T == 1) {
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

void CudaModel::argmax_rows(const float* device_logits, int64_t rows) {
    if (rows > row_ids_capacity_) {
        // The previous host copy may still be landing: wait before freeing it.
        if (row_ids_ready_ != nullptr) check(cudaEventSynchronize(row_ids_ready_), "argmax rows: drain");
        if (row_ids_host_ != nullptr) check(cudaFreeHost(row_ids_host_), "argmax rows: free host ids");
        row_ids_host_ = nullptr;
        row_ids_ = cuda::DeviceBuffer(size_t(rows) * sizeof(int32_t));
        check(cudaMallocHost(&row_ids_host_, size_t(rows) * sizeof(int32_t)), "argmax rows: host ids");
        row_ids_capacity_ = rows;
    }
    if (row_ids_ready_ == nullptr) check(cudaEventCreateWithFlags(&row_ids_ready_, cudaEventDisableTiming), "argmax rows: event");
    const int64_t V = config_.n_vocab;
    // One scratch for every row: the launches are ordered on the stream.
    for (int64_t i = 0; i < rows; ++i)
        cuda::argmax(device_logits + i * V, V, argmax_scratch_.get(), row_ids_.get<int32_t>() + i, stream_);
    check(cudaMemcpyAsync(row_ids_host_, row_ids_.get(), size_t(rows) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_),
          "argmax rows: download");
    check(cudaEventRecord(row_ids_ready_, stream_), "argmax rows: record");
    row_ids_count_ = rows;
    row_ids_waited_ = false;
}

int32_t CudaModel::row_argmax(int64_t row) {
    if (row < 0 || row >= row_ids_count_)
        fail("cuda model: row_argmax({}) of a batch of {} rows", row, row_ids_count_);
    if (!row_ids_waited_) {
        check(cudaEventSynchronize(row_ids_ready_), "argmax rows: wait");
        row_ids_waited_ = true;
    }
    return row_ids_host_[row];
}

CudaDecodeStats CudaModel::decode_stats() const {
    CudaDecodeStats s = stats_;
    s.arena_allocations = decode_arena_.allocations() + prompt_arena_.allocations() + batch_arena_.allocations();
    s.prompt_arena_bytes = prompt_arena_.capacity();
    s.decode_arena_bytes = decode_arena_.capacity();
    return s;
}

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
