// The CUDA model's batched decode step (models/model_cuda.h forward_batch): one token of each of several
// sequences through the one layer loop (run_layers), the B rows sharing every matmul and each keeping its
// own attention and DeltaNet state. Host code only (the kernels are in ops/): a .cpp so that fmt's
// compile-time checks work, compiled to nothing in builds without CUDA.
//
// The stateful middle of a block runs once for all B rows, whatever B: each row's conv window, DeltaNet
// state, KV caches, position and split count are found through device tables (upload_deltanet_rows,
// upload_attention_rows: built on the host every step, the DeltaNet parity and each row's attention plan
// resolved there, one copy each before the step). The DeltaNet step is its two decode kernels in their rows
// forms (ops/delta_rule/delta_rule_cuda.h); an attention layer is a fixed handful of launches: the prologue,
// the split-K attention (one launch per cache format among the rows), its combine, and for kivi4 caches the
// two compress launches (ops/attention/attention_cuda.h). Each rows form runs the single-sequence kernel's
// body on row r's arguments, so a row is bit for bit what its own decode step computes. A batch that repeats
// (a server's steady batch) replays the whole step as a CUDA graph, which reads the tables the step uploaded.

#include "models/model_cuda.h"

#if DELTABIT_HAVE_CUDA

#include <algorithm>
#include <utility>
#include <vector>

#include "core/error.h"
#include "ops/attention/attention_cuda.h"
#include "ops/delta_rule/delta_rule_cuda.h"
#include "ops/matmul/gemm_cuda.h"

namespace deltabit {

namespace {

void check(cudaError_t status, const char* what) { cuda::cuda_check(status, what); }

// As models/blocks.cpp: transformers' l2norm uses a fixed 1e-6 whatever rms_norm_eps is.
constexpr float kL2NormEps = 1e-6f;

}  // namespace

const float* CudaModel::forward_batch(std::span<CudaSequenceState* const> states, std::span<const int32_t> ids) {
    const int64_t B = int64_t(states.size());
    if (B == 0) fail("cuda forward_batch: no sequences to step");
    if (ids.size() != states.size())
        fail("cuda forward_batch: {} token ids for {} sequences (one each)", ids.size(), states.size());
    if (B > kPromptChunk) fail("cuda forward_batch: {} sequences, at most {} in one step", B, kPromptChunk);
    for (int64_t i = 0; i < B; ++i) {
        if (states[size_t(i)] == nullptr) fail("cuda forward_batch: sequence {} is null", i);
        check_call(*states[size_t(i)], ids.subspan(size_t(i), 1));
        for (int64_t j = 0; j < i; ++j)
            if (states[size_t(j)] == states[size_t(i)])
                fail("cuda forward_batch: sequences {} and {} are the same sequence (one token each per step)", j, i);
    }

    // The arena's growth frees the buffer the graphs point into.
    if (batch_arena_.overflowed()) release_batch_graphs();
    begin_call(batch_arena_);
    // The pinned prompt inputs, as prompt_chunk's (rewritten once the last copy from them has run), copied
    // into batch_inputs_, where a captured step reads them.
    check(cudaEventSynchronize(prompt_uploaded_), "wait for the previous prompt inputs");
    int32_t* host_ids = prompt_host_;
    int32_t* host_positions = prompt_host_ + kPromptChunk;
    int32_t* d_ids = batch_inputs_.get<int32_t>();
    int32_t* d_positions = d_ids + kPromptChunk;
    for (int64_t i = 0; i < B; ++i) {
        host_ids[i] = ids[size_t(i)];
        host_positions[i] = int32_t(states[size_t(i)]->position());
    }
    check(cudaMemcpyAsync(d_ids, host_ids, size_t(B) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_), "upload ids");
    check(cudaMemcpyAsync(d_positions, host_positions, size_t(B) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
          "upload positions");
    upload_deltanet_rows(states);
    upload_attention_rows(states);
    check(cudaEventRecord(prompt_uploaded_, stream_), "record prompt inputs");

    batch_ = states;
    struct Unbatch {
        std::span<CudaSequenceState* const>& batch;
        ~Unbatch() { batch = {}; }
    } unbatch{batch_};
    // What a captured step bakes in: B (the arena's layout, the tables' strides) and each attention layer's
    // plan (its split grid, the formats it launches for, its scratch). Which states fill the rows, and at
    // which position and DeltaNet parity, is in the tables uploaded above, so one graph serves every batch
    // of this shape: a server's batch keeps its graph when one conversation ends and another takes its row.
    std::vector<int64_t> shape{B};
    for (const cuda::AttentionRowsPlan& plan : attention_rows_plans_) {
        shape.push_back(plan.max_splits);
        for (const bool format : plan.formats) shape.push_back(format);
    }
    const bool repeated = shape == last_shape_;
    last_shape_ = shape;

    const float* logits = nullptr;
    auto found = std::find_if(batch_graphs_.begin(), batch_graphs_.end(), [&](const BatchGraph& g) { return g.shape == shape; });
    if (found != batch_graphs_.end()) {
        std::rotate(batch_graphs_.begin(), found, found + 1);  // most recently used first
        check(cudaGraphLaunch(batch_graphs_.front().exec, stream_), "replay batched step");
        logits = batch_graphs_.front().logits;
        ++stats_.batch_graph_replays;
    } else if (graphs_enabled_ && repeated) {
        cudaGraph_t graph = record_graph([&] { logits = enqueue_batch_step(B); }, "batched step graph");
        if (batch_arena_.overflowed()) {
            // More scratch than the arena holds (a batch larger than any before): eager now, and the next
            // call grows the arena.
            cudaGraphDestroy(graph);
            batch_arena_.rewind(0);
            logits = enqueue_batch_step(B);
        } else {
            cudaGraphExec_t exec = nullptr;
            const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
            cudaGraphDestroy(graph);
            check(status, "instantiate batched step");
            if (batch_graphs_.size() == kBatchGraphs) {
                check(cudaStreamSynchronize(stream_), "drain before dropping a batched step graph");
                cudaGraphExecDestroy(batch_graphs_.back().exec);
                batch_graphs_.pop_back();
            }
            batch_graphs_.insert(batch_graphs_.begin(), BatchGraph{std::move(shape), exec, logits});
            check(cudaGraphLaunch(exec, stream_), "run batched step");
            ++stats_.batch_graph_captures;
        }
    } else {
        logits = enqueue_batch_step(B);
    }
    for (CudaSequenceState* s : states) s->advance_step();
    ++stats_.batch_steps;
    stats_.batch_rows += B;
    return logits;
}

const float* CudaModel::enqueue_batch_step(int64_t B) {
    float* logits = temp(B * config_.n_vocab);
    int32_t* d_ids = batch_inputs_.get<int32_t>();
    run_layers(*batch_[0], d_ids, d_ids + kPromptChunk, B, 0, logits, /*step=*/false);
    return logits;
}

void CudaModel::release_batch_graphs() {
    if (batch_graphs_.empty()) return;
    check(cudaStreamSynchronize(stream_), "drain before releasing batched step graphs");
    for (const BatchGraph& g : batch_graphs_) cudaGraphExecDestroy(g.exec);
    batch_graphs_.clear();
}

void CudaModel::upload_attention_rows(std::span<CudaSequenceState* const> states) {
    const ModelConfig& c = config_;
    const int64_t B = int64_t(states.size());
    const auto attends = [](const CudaLayer& L) { return L.kind != LayerKind::linear_attention; };
    const int64_t n_attention = std::count_if(layers_.begin(), layers_.end(), attends);
    attention_rows_plans_.assign(size_t(n_attention), {});
    if (n_attention == 0) return;
    if (attention_rows_host_ == nullptr) {  // once, for the most rows a step takes: graphs point into it
        const size_t bytes = size_t(n_attention * kPromptChunk) * sizeof(cuda::AttentionRow);
        check(cudaMallocHost(&attention_rows_host_, bytes), "pinned attention rows");
        attention_rows_ = cuda::DeviceBuffer(bytes);
    }
    const int64_t per_head = c.attn_output_gate ? 2 * c.head_dim : c.head_dim;
    for (int64_t i = 0; i < B; ++i) {
        CudaSequenceState& sequence = *states[size_t(i)];
        // The grid its own decode step plans (attention_block: for its capacity), per cache format — a
        // sequence's layers may differ in format (layer_kv_format), and the split count with it.
        const cuda::CachedAttentionDims dims{1, c.n_head, c.n_head_kv, c.head_dim, sequence.max_positions(), per_head};
        int64_t a = 0;
        for (int64_t l = 0; l < int64_t(layers_.size()); ++l) {
            if (!attends(layers_[size_t(l)])) continue;
            const CudaLayerState& state = sequence.layer(l);
            cuda::AttentionRow& row = attention_rows_host_[a * B + i];
            row = cuda::attention_row(state.k.view, state.v.view, sequence.position(), dims);
            attention_rows_plans_[size_t(a)].add(row);
            ++a;
        }
    }
    check(cudaMemcpyAsync(attention_rows_.get(), attention_rows_host_, size_t(n_attention * B) * sizeof(cuda::AttentionRow),
                          cudaMemcpyHostToDevice, stream_),
          "upload attention rows");
}

void CudaModel::attention_rows(const CudaAttentionWeights& w, const float* x, int64_t layer, float* out) {
    const ModelConfig& c = config_;
    const int64_t B = int64_t(batch_.size());
    const int64_t H = c.n_head, H_kv = c.n_head_kv, dh = c.head_dim;
    const bool gated = c.attn_output_gate;
    const int64_t per_head = gated ? 2 * dh : dh;

    float* q_full = temp(B * H * per_head);
    float* k_raw = temp(B * H_kv * dh);
    float* v_raw = temp(B * H_kv * dh);
    batch_matmul(x, B, {{&w.q, q_full}, {&w.k, k_raw}, {&w.v, v_raw}});

    // This layer's rows in the step's table ([attention layer][row], upload_attention_rows).
    const int64_t attention_layer = std::count_if(layers_.begin(), layers_.begin() + layer, [](const CudaLayer& L) {
        return L.kind != LayerKind::linear_attention;
    });
    const cuda::AttentionRow* rows = attention_rows_.get<cuda::AttentionRow>() + attention_layer * B;
    const cuda::AttentionRowsPlan& plan = attention_rows_plans_[size_t(attention_layer)];
    const cuda::AttentionPrologueDims prologue{H, H_kv, dh, per_head, c.rope_dim, c.rope_theta, c.rms_eps};
    // max_keys: unused by the rows form (each row's splits are in the table).
    const cuda::CachedAttentionDims dims{1, H, H_kv, dh, 1, per_head};
    float* scratch = temp(int64_t(cuda::attention_decode_rows_scratch_floats(dims, plan)));
    float* q = temp(B * H * dh);
    float* attended = temp(B * H * dh);
    cuda::attention_decode_prologue_rows(q_full, k_raw, v_raw, w.q_norm, w.k_norm, rows, B, prologue, q, stream_);
    cuda::attention_cached_rows(q, rows, plan, gated ? q_full + dh : nullptr, dims, scratch, attended, stream_);
    if (plan.formats[size_t(cuda::KvElement::kivi4)]) {
        // What every kivi4 row's single step compresses (compress_kv), the rows of other formats left alone.
        const auto kivi = std::find_if(batch_.begin(), batch_.end(), [&](CudaSequenceState* s) {
            return s->layer(layer).k.view.element == cuda::KvElement::kivi4;
        });
        const cuda::KiviLayout& layout = (*kivi)->layer(layer).k.view.kivi;
        cuda::kivi_compress_rows(rows, B, layout, H_kv * dh, /*keys=*/true, stream_);
        cuda::kivi_compress_rows(rows, B, layout, H_kv * dh, /*keys=*/false, stream_);
    }
    batch_matmul(attended, B, {{&w.output, out}});
}

void CudaModel::deltanet_rows(const CudaDeltaNetWeights& w, const float* x, int64_t layer, float* out) {
    const ModelConfig& c = config_;
    const int64_t B = int64_t(batch_.size());
    const int64_t H_v = c.ssm_n_value_heads;
    const int64_t key_dim = c.ssm_n_key_heads * c.ssm_key_dim, value_dim = H_v * c.ssm_value_dim;
    const int64_t channels = c.ssm_conv_channels();
    const cuda::KeyHeadMap key_head_map =
        c.value_head_order == ValueHeadOrder::tiled ? cuda::KeyHeadMap::tiled : cuda::KeyHeadMap::grouped;

    float* mixed = temp(B * channels);
    float* z = temp(B * value_dim);
    float* b = temp(B * H_v);
    float* a = temp(B * H_v);
    batch_matmul(x, B, {{&w.qkv, mixed}, {&w.gate, z}, {&w.beta, b}, {&w.alpha, a}});

    float* q = temp(B * key_dim);
    float* k = temp(B * key_dim);
    float* v = temp(B * value_dim);
    float* beta = temp(B * H_v);
    float* g = temp(B * H_v);
    float* normed = temp(B * value_dim);
    const cuda::GdnDecodeDims dims{c.ssm_n_key_heads, H_v, c.ssm_key_dim, c.ssm_value_dim, c.ssm_conv_kernel,
                                   key_head_map};
    // Every row in one launch of each kernel, each row's state found through the row table.
    const cuda::GdnDecodeRow* rows = deltanet_rows_table(layer);
    cuda::gdn_decode_prepare_rows(mixed, b, a, w.conv, rows, B, w.ssm_a, w.dt_bias, dims, kL2NormEps, q, k, v, beta, g,
                                  stream_);
    cuda::gdn_decode_recurrent_rows(q, k, v, beta, g, z, w.norm, c.rms_eps, dims, rows, B, normed, stream_);
    batch_matmul(normed, B, {{&w.output, out}});
}

void CudaModel::upload_deltanet_rows(std::span<CudaSequenceState* const> states) {
    const int64_t B = int64_t(states.size());
    cuda::GdnDecodeRow* host = batch_deltanet_rows_host_;
    int64_t n = 0;
    for (int64_t l = 0; l < config_.n_layer(); ++l) {
        if (config_.layers[size_t(l)] != LayerKind::linear_attention) continue;
        for (int64_t i = 0; i < B; ++i) {
            // Reads copy `parity`, writes the other: the row's step stays undoable, as a single step's.
            const int p = states[size_t(i)]->parity();
            CudaLayerState& state = states[size_t(i)]->layer(l);
            host[n++] = {state.conv[p].get<float>(), state.conv[p ^ 1].get<float>(), state.recurrent[p].get<float>(),
                         state.recurrent[p ^ 1].get<float>()};
        }
    }
    if (n != 0)
        check(cudaMemcpyAsync(batch_deltanet_rows_.get(), host, size_t(n) * sizeof(cuda::GdnDecodeRow),
                              cudaMemcpyHostToDevice, stream_),
              "upload DeltaNet row table");
}

const cuda::GdnDecodeRow* CudaModel::deltanet_rows_table(int64_t layer) const {
    const auto& kinds = config_.layers;
    const int64_t slot = std::count(kinds.begin(), kinds.begin() + layer, LayerKind::linear_attention);
    return batch_deltanet_rows_.get<cuda::GdnDecodeRow>() + slot * int64_t(batch_.size());
}

void CudaModel::batch_matmul(const float* x, int64_t B,
                             std::initializer_list<std::pair<const CudaMatrix*, float*>> outputs) {
    cuda::QuantizedActivationRows rows;  // quantised by the first matrix that takes the small GEMM
    for (const auto& [w, y] : outputs) {
        const bool small = B > 1 && B <= cuda::kSmallGemmMaxTokens && w->quantized && w->gemv.dtype == DType::Q1_0 &&
                           w->cols % cuda::kActivationGroup == 0;
        if (!small) {
            matmul(x, *w, B, y);
            continue;
        }
        if (rows.q == nullptr) {
            rows = cuda::activation_rows_view(temp(int64_t((cuda::activation_rows_bytes(B, w->cols) + 3) / 4)), B, w->cols);
            cuda::quantize_activation_rows(x, rows, stream_);
        }
        cuda::gemm_q1_0_small(rows, w->gemv.view(), y, stream_);
    }
}

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
