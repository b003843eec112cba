// The model forward pass on the GPU: the same loop as Model::forward (models/model.h) and the same
// blocks (models/blocks.h), with every op replaced by its CUDA twin (ops/<family>/*_cuda.h). CUDA builds only
// (DELTABIT_HAVE_CUDA).
//
// Weights. CudaModel uploads exactly what the CPU model bound (Model::parts()), once: quantised
// matrices (Q1_0, Q2_0, Q4_0, Q8_0) in the GEMV layout of ops/matmul/weight_repack.h, repacked and checked
// at upload; plain-float matrices (F32, F16, BF16) and the embedding table as they are; norm weights
// and the other vectors as F32. The host Model may be dropped afterwards.
//
// Numerics. Quantised matrices go through int8 kernels that quantise their input activations to int8
// per group of 128 (ops/matmul/matmul_cuda.h: the GEMV for decode and short prompts, the tensor-core GEMM of
// ops/matmul/gemm_cuda.h from kGemmMinTokens tokens, with the same per-token activation quantisation), so
// logits differ from the f32 CPU path by more than rounding; plain-float matrices use a naive fp32 kernel
// (ops/matmul/dense_cuda.h) and differ by rounding only. Prompts run the chunked delta rule and flash-style
// attention (an f32 cache) or the cached attention of the decode path (f16, kivi4).
//
// MoE layers copy the router's choices to the host (one synchronisation per MoE layer) and run the
// chosen experts' GEMVs from there: correct first, fused later.
//
// Decode. One token (T = 1) runs the decode kernels of ops/<family>/*_cuda.h — one seam kernel between
// blocks (residual add, RMS norm and the int8 quantisation of the normed state for every matrix that reads
// it); the matrices sharing that input in one GEMV launch (q/k/v; qkv/z/β/α) and the feed-forward's gate,
// up and SwiGLU in another, which also quantises its output for ffn_down; one attention prologue (norms,
// RoPE, cache store) and split-K attention that reads each KV row once for all its query heads; the
// gated DeltaNet step in two launches, from one copy of its state into the other (CudaLayerState), the
// second quantising its output for ssm_out. About ten launches per layer, each launched programmatically
// (ops/cuda/programmatic_launch.cuh) so that it starts, and streams its weights, while the one before it
// finishes. The step reads its token id and position from device memory, so the whole step is captured as a CUDA graph once per sequence state and DeltaNet copy, and
// replayed for every later token (CudaDecodeStats counts captures and replays). Greedy decoding copies
// back only the argmax's 4 bytes, and can run one step ahead of the host (argmax_and_step). MoE layers
// are captured too: their routing and experts never leave the device (ops/moe/moe_experts_cuda.h).
//
// Memory. Intermediates come from two DeviceArenas, one per shape class (the decode step; prompt chunks
// of at most kPromptChunk tokens), reset per layer, so steady-state calls allocate nothing.
//
// Files, one idea each: the sequence state (models/sequence_state_cuda.h), the scratch arena
// (models/device_arena.h), the weight upload (models/weights_cuda.h), the blocks and their matmuls
// (blocks_cuda.cpp), the layer loops and the calls (model_cuda.cpp), the decode step's graph and run-ahead
// (decode_graph_cuda.cpp), the batched step of several sequences (batch_step_cuda.cpp).
#pragma once

#if DELTABIT_HAVE_CUDA

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/cuda_buffer.h"
#include "models/device_arena.h"
#include "models/kv_format.h"
#include "models/model.h"
#include "models/sequence_state_cuda.h"
#include "models/state_image.h"
#include "models/weights_cuda.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/attention/attention_cuda.h"
#include "ops/delta_rule/delta_rule_cuda.h"
#include "ops/matmul/matmul_cuda.h"

namespace deltabit {

// What the decode path did, so tests and benchmarks can prove the fast path ran (STYLE habit 16).
struct CudaDecodeStats {
    int64_t graph_captures = 0;   // T = 1 steps recorded as a CUDA graph
    int64_t graph_replays = 0;    // T = 1 steps run by replaying it (run-ahead steps included)
    int64_t run_ahead_steps = 0;  // replays started by argmax_and_step before the host knew the token
    int64_t eager_steps = 0;      // T = 1 steps launched kernel by kernel (first step, graphs off)
    int64_t prompt_chunks = 0;    // T > 1 calls are cut into chunks of at most kPromptChunk tokens
    int64_t batch_steps = 0;      // forward_batch calls
    int64_t batch_rows = 0;       // rows (sequences) they stepped, all together
    int64_t batch_graph_captures = 0;  // batched steps recorded as a CUDA graph
    int64_t batch_graph_replays = 0;   // batched steps run by replaying one
    int64_t arena_allocations = 0;  // cudaMalloc calls of the scratch arenas, ever
    size_t prompt_arena_bytes = 0, decode_arena_bytes = 0;  // their buffers now (overflow not counted)
    bool folded_seams = false;      // the last T = 1 step enqueued folded its seams (set_seam_folding)
    int64_t step_kernels = 0;       // kernels in the last captured decode graph (one step's launch chain)
    int64_t moe_grouped_calls = 0;  // MoE FFNs enqueued as the grouped device path (ops/moe/moe_experts_cuda.h)
};

class CudaModel {
public:
    // Prompts are run in chunks of at most this many tokens, so the prompt arena is bounded whatever the
    // prompt length. The cut changes nothing on the prompt path (every op carries its state across calls
    // exactly), except that a one-token tail takes the decode kernels: the same math, other roundings.
    static constexpr int64_t kPromptChunk = kCudaMaxCallTokens;

    // Fraction of the upload done, reported after each layer (for a progress bar).
    using UploadProgress = std::function<void(double fraction)>;

    // Uploads `model`'s bound weights to device 0; Error when a matrix's dtype has no CUDA matmul.
    explicit CudaModel(const Model& model, const UploadProgress& progress = {});
    ~CudaModel();
    CudaModel(const CudaModel&) = delete;
    CudaModel& operator=(const CudaModel&) = delete;

    const ModelConfig& config() const { return config_; }
    CudaSequenceState new_sequence(int64_t max_positions, KvFormat kv = KvFormat::f32) const {
        return CudaSequenceState(config_, max_positions, kv);
    }

    // As Model::forward: logits [ids.size()][n_vocab] (copied to the host) for the tokens after
    // state.position(); advances the state. Error for a token id outside the vocabulary or a sequence
    // that would outgrow its KV capacity (the state is then unchanged).
    // With an observer, every named intermediate goes to it as Model::forward's does (the CPU's names,
    // models/blocks.h: blk.N.{attn.q,attn.k,attn.v,attn.gated,attn.out,gdn.conv_out,gdn.core_out,gdn.out,
    // moe.out,out}, [T][width] for each prompt chunk of T tokens). Such a call takes the prompt path for every
    // chunk, one token included, with the kernels that write each intermediate out (the conv unfused), and
    // synchronises at each name: a tool for bisecting a mismatch, not for speed. Without one nothing of it
    // runs.
    std::vector<float> forward(CudaSequenceState& state, std::span<const int32_t> ids,
                               const ActivationObserver* observer = nullptr);

    // Consumes `ids` and returns a DEVICE pointer to the last token's logits [n_vocab]; nothing is copied
    // to the host and nothing waits. Valid until the next call on this model. One id is one decode step:
    // a replay of the CUDA graph of the whole step (captured on the second step of a state, the first
    // running eagerly to size the decode arena). So are up to kStepPromptMaxTokens ids, one step each: the
    // step's fused kernels cost less than the prompt path's launches at these lengths (DELTABIT_PROMPT_STEPS=0
    // runs them as a prompt, for measuring). Same errors as forward().
    const float* forward_last(CudaSequenceState& state, std::span<const int32_t> ids);
    // H200, bench --first-tokens, 2026-12-02 (ms to the first token; prompt path → eager steps):
    // Bonsai-27B T = 2 13.9 → 7.2, 3: 17.0 → 10.8, 4: 20.1 → 14.5 (a step ~3.6 ms; the prompt path ~13.9 +
    // 3.1 a token below kGemmMinTokens, 20.0 at 8 with the GEMM); Bonsai-4B 2: 5.0 → 2.7, 3: 6.7 → 4.0,
    // 4: 8.3 → 5.8 (5.8 at 8). At 5 tokens steps lose to the GEMM that 8 tokens take.
    static constexpr int64_t kStepPromptMaxTokens = 4;

    // The index of the largest logit, ties to the lowest id (sampling/sampler.h argmax_lowest_id),
    // computed on the GPU; copies back 4 bytes. A logit that is not finite makes it cuda::argmax's report
    // instead (a negative id, core/non_finite_choice.h).
    int32_t argmax(const float* device_logits);
    // The argmax of each of `rows` rows of device_logits [rows][n_vocab] (a batch's, forward_batch), enqueued
    // with one copy of the ids back and nothing waited for: row_argmax(i) then waits once for the whole
    // batch instead of a round trip a row. The ids are each row's argmax() (the same kernel), valid until the
    // next argmax_rows call.
    void argmax_rows(const float* device_logits, int64_t rows);
    int32_t row_argmax(int64_t row);

    // Greedy run-ahead (the CUDA engine's, runtime/engine.h): the argmax of `device_logits` (logits of
    // `state`'s last token, on the device) is written straight into the decode step's input, the step that
    // consumes it is started (a graph replay), and the id is returned as soon as the argmax is known — the
    // step still runs while the host looks at the id. The state is then one step ahead: keep it (that
    // step's logits are at *step_logits, valid as forward_last's) or undo it (CudaSequenceState::undo_step:
    // an EOS the host sees late costs nothing but the step). nullopt, with nothing started, when the step
    // cannot be replayed from a captured graph yet (graphs off, MoE layers, the state's first steps) or the
    // sequence is full; the caller then takes argmax() and forward_last(). A non-finite report (a negative
    // id, as argmax()) has started the step all the same, on an id outside the vocabulary — its embedding
    // row reads as NaN (cuda::embedding_lookup never reads out of bounds) — so the caller undoes it.
    std::optional<int32_t> argmax_and_step(CudaSequenceState& state, const float* device_logits,
                                           const float** step_logits);

    // One decode step of several sequences together (the server's continuous batching): row i feeds
    // ids[i] to *states[i]. The rows share every weight read — Q1_0 matrices through the few-token
    // tensor-core GEMM (up to kSmallGemmMaxTokens rows; more take the prompt GEMM), so the weights stream
    // once for the batch — while each row's attention and DeltaNet step run on its own state (its KV cache
    // and length; its conv and recurrent copies) through the decode step's kernels, one launch per row
    // (batch_step_cuda.cpp). Returns DEVICE logits [B][n_vocab], valid until the next call on this model.
    // Every state advances one decode step (undoable, as a step of forward_last). Errors as forward(),
    // checked for every row before any state changes; a state given twice is an Error. Rounding: each
    // row's activations are quantised per group of 128 as a decode GEMV's, but the seams are the prompt's
    // (an add and an RMS norm, not the step's fused kernel).
    const float* forward_batch(std::span<CudaSequenceState* const> states, std::span<const int32_t> ids);

    // Decode-step graphs on (default) or off (every step eager; the test of graph = eager uses it).
    void set_decode_graphs(bool enabled);
    // The decode step's seams folded into the GEMVs beside them (run_layers) when the model allows it
    // (default on; DELTABIT_SEAM_FOLD=0 in the environment starts it off), or one seam kernel each. Drops
    // captured graphs. Whether the last step folded: decode_stats().folded_seams.
    void set_seam_folding(bool enabled);
    // The decode step computes its rope angles once (cuda::rope_decode_table) for every attention prologue to
    // read before its wait, or (off) each prologue thread forms its own after it — the same bits. Default on
    // (Bonsai-4B tg128 +3%, docs/bench.md); DELTABIT_ROPE_TABLE=0 in the environment starts it off. Drops
    // captured graphs.
    void set_rope_table(bool enabled);
    CudaDecodeStats decode_stats() const;

    cudaStream_t stream() const { return stream_; }

private:
    // A seam of the decode step folded into the block output projection before it (run_layers): the
    // projection adds into the residual stream and quantises the next block's normed input into `next`.
    struct SeamFold {
        float* residual;
        const float* norm_w;                        // the next block's norm (plain weights)
        const cuda::QuantizedActivationsView* next;  // a deferred-norm view of activations_
    };

    // Intermediates of the running call, from the current arena (decode or prompt).
    float* temp(int64_t n_floats);
    int32_t* temp_ids(int64_t n);

    void matmul(const float* x, const CudaMatrix& w, int64_t first_row, int64_t n_rows, int64_t n_tokens, float* y);
    void matmul(const float* x, const CudaMatrix& w, int64_t n_tokens, float* y) {
        matmul(x, w, 0, w.rows, n_tokens, y);
    }
    // Whether every matrix runs the quantised GEMV with K = cols and one dtype (so one launch can take them).
    static bool all_quantized(std::initializer_list<const CudaMatrix*> matrices, int64_t cols);
    // x's int8 activations: *xq when the caller has them (the decode step's seams quantise as they norm),
    // else quantised now into the shared scratch.
    const cuda::QuantizedActivationsView& quantized(const float* x, int64_t cols, const cuda::QuantizedActivationsView* xq);
    // One token, several matrices reading the same x (xq: x already quantised, or nullptr): quantised once
    // and launched together when they all are quantised alike.
    void matmul_shared_input(const float* x, const cuda::QuantizedActivationsView* xq,
                             std::initializer_list<std::pair<const CudaMatrix*, float*>> outputs);
    // A prompt's T tokens, several matrices reading the same x: x's rows prepared once for all of them
    // (cuda::prepare_prompt_rows) when they are quantised alike and the GEMM takes T, else one matmul each.
    void matmul_prompt_group(const float* x, int64_t T, std::initializer_list<std::pair<const CudaMatrix*, float*>> outputs);
    // Whether a block of T tokens takes the decode step's kernels (one token, no observer) or the prompt's.
    bool step_kernels(int64_t T) const { return T == 1 && observer_ == nullptr; }
    // A named intermediate of the current layer (device memory, n floats) to the observer, if any.
    void observe(std::string_view what, const float* device, int64_t n);
    // Blocks of T tokens reading the normed hidden state x; xq is its quantised form when T = 1 and the
    // decode seam made it (else nullptr).
    // Each takes its weights as the CPU block does (models/blocks.h), uploaded.
    void attention_block(const CudaAttentionWeights& w, const float* x, const cuda::QuantizedActivationsView* xq,
                         int64_t T, int64_t n_past, const int32_t* d_positions, CudaLayerState& state, float* out,
                         const SeamFold* fold = nullptr, const double* rope_table = nullptr);
    // kivi4: quantises what the call's T tokens (after position *d_n_past) pushed out of the window.
    void compress_kv(CudaLayerState& state, const int32_t* d_n_past, int64_t T);
    void deltanet_block(const CudaDeltaNetWeights& w, const float* x, const cuda::QuantizedActivationsView* xq,
                        int64_t T, int parity, CudaLayerState& state, float* out, const SeamFold* fold = nullptr);
    void swiglu_ffn(const CudaFfnWeights& w, const float* x, const cuda::QuantizedActivationsView* xq, int64_t T,
                    float* out, const SeamFold* fold = nullptr);
    // A decode block's output projection: out = w·in (in_q: in already quantised, or nullptr), or with
    // `fold` the seam after it folded in (cuda::gemv_quantized_add_norm): fold->residual += w·in and the
    // next block's normed input quantised into fold->next (out unused).
    void block_output_matmul(const float* in, const cuda::QuantizedActivationsView* in_q, const CudaMatrix& w,
                             float* out, const SeamFold* fold);
    // Whether every seam of the decode step can fold: no MoE layer and every matrix that writes or reads
    // a seam quantised alike with K = n_embd where it reads one (run_layers).
    bool seams_foldable() const;
    void moe_ffn(const CudaMoeWeights& w, const float* x, int64_t T, float* out);
    // The blocks of a batched step (forward_batch): B = batch_.size() rows, row i on batch_[i]'s layer
    // `layer`; projections shared. The attention middle takes every row in each launch (the rows forms of
    // ops/attention/attention_cuda.h, reading the step's table of rows, upload_attention_rows).
    void attention_rows(const CudaAttentionWeights& w, const float* x, int64_t layer, float* out);
    void deltanet_rows(const CudaDeltaNetWeights& w, const float* x, int64_t layer, float* out);
    // The DeltaNet row table of a batched step (batch_deltanet_rows_) for `states`, uploaded on stream_.
    // Only between forward_batch's wait for prompt_uploaded_ and its record of it.
    void upload_deltanet_rows(std::span<CudaSequenceState* const> states);
    // Layer `layer`'s entries of that table, one per row of the running batch.
    const cuda::GdnDecodeRow* deltanet_rows_table(int64_t layer) const;
    // The batched step's matmuls: the B rows of x through every matrix of `outputs` (all reading x) — Q1_0
    // ones by the few-token tensor-core GEMM (ops/matmul/gemm_cuda.h gemm_q1_0_small) on the rows
    // quantised once, as each decode GEMV quantises its token; the others (and B = 1 or past
    // kSmallGemmMaxTokens) as matmul().
    void batch_matmul(const float* x, int64_t B, std::initializer_list<std::pair<const CudaMatrix*, float*>> outputs);

    void check_call(const CudaSequenceState& state, std::span<const int32_t> ids) const;
    // What the layer loop carries between blocks: the residual stream x, the normed input h, the block output
    // not yet added to x; on the decode step (`step`) the quantised forms of h, and whether the seams fold.
    struct Seams {
        bool step = false;  // the decode step's seam kernels (else an add and an RMS norm, the prompt's)
        bool fold = false;  // step: folded into the block output projections (seams_foldable)
        float* x = nullptr;
        float* h = nullptr;
        const float* pending = nullptr;
        cuda::QuantizedActivationsView hq, hq_folded;
    };
    // The seam before a block, or before the LM head: x += s.pending, then x's rows from first_row normed by
    // norm_w into h. The step's seam is one kernel that also quantises h for every matrix reading it, and
    // returns that form (folded, the block output projection before did all of it); the prompt's returns
    // nullptr.
    const cuda::QuantizedActivationsView* seam(Seams& s, const float* norm_w, int64_t T, int64_t first_row = 0);
    // The one layer loop, driven by each layer's kind as Model::forward's: T tokens whose ids and positions are
    // on the device; the final norm of the rows from `first_logit_row` and their logits into `logits`. `step`:
    // the decode step's seams (T = 1: add, norm and quantisation in one kernel, folded into the GEMVs where
    // seams_foldable, and the rope table), else the prompt's. The blocks pick their kernels by T.
    void run_layers(CudaSequenceState& state, const int32_t* d_ids, const int32_t* d_positions, int64_t T,
                    int64_t first_logit_row, float* logits, bool step);
    // T > 1: one chunk; logits of every token (all_logits) or of the last one, into `logits`.
    const float* prompt_chunk(CudaSequenceState& state, std::span<const int32_t> ids, bool all_logits);
    // T = 1: the step of one token, replayed from the graph when it can be (captured first where none is,
    // unless !may_capture: then eager).
    const float* decode_step(CudaSequenceState& state, int32_t id, bool may_capture = true);
    // The kernels of one decode step, reading step_ (what the graph records); returns the logits.
    const float* enqueue_decode_step(CudaSequenceState& state);
    // False (nothing captured) when the step outgrew the decode arena: it then runs eagerly.
    bool capture_decode_graph(CudaSequenceState& state);
    void release_graph();
    // What `enqueue` launches on the stream, recorded as a graph (destroyed if it throws); `what` names it in errors.
    cudaGraph_t record_graph(const std::function<void()>& enqueue, const char* what);
    // Makes `arena` the running call's, grown first if the last call overflowed it.
    void begin_call(DeviceArena& arena);

    ModelConfig config_;
    cudaStream_t stream_ = nullptr;
    std::vector<cuda::DeviceBuffer> vectors_;  // norm weights, conv, ssm_a, dt_bias
    cuda::DeviceBuffer token_embd_;
    WeightView token_embd_view_;               // data on the device
    const float* output_norm_ = nullptr;
    CudaMatrix output_;
    std::vector<CudaLayer> layers_;
    std::unique_ptr<cuda::ActivationScratch> activations_;
    cuda::QuantizedActivationsView quantized_;  // what quantized() last wrote into activations_
    // A block's inner output quantised by the kernel that makes it (the DeltaNet recurrence, the SwiGLU
    // GEMV) for the block's last matmul: a second scratch, since the SwiGLU GEMV still reads activations_.
    std::unique_ptr<cuda::ActivationScratch> block_out_activations_;

    DeviceArena decode_arena_, prompt_arena_;
    DeviceArena* arena_ = nullptr;  // the running call's
    // The decode step's inputs on the device, {token id, position}, refreshed before each step from a
    // pinned host copy (the event says when that copy may be rewritten); the graph reads them.
    cuda::DeviceBuffer step_;
    int32_t* step_host_ = nullptr;
    cudaEvent_t step_uploaded_ = nullptr;
    cuda::DeviceBuffer argmax_scratch_;  // partials, then the 4-byte result at the end
    // argmax_rows: the ids on the device, their pinned host copy and the event that says it has landed.
    cuda::DeviceBuffer row_ids_;
    int32_t* row_ids_host_ = nullptr;
    int64_t row_ids_capacity_ = 0, row_ids_count_ = 0;
    cudaEvent_t row_ids_ready_ = nullptr;
    bool row_ids_waited_ = false;
    bool graphs_enabled_ = true;
    bool seam_folding_ = true;           // set_seam_folding
    bool rope_table_ = true;             // set_rope_table
    bool prompt_steps_ = true;           // DELTABIT_PROMPT_STEPS: short prompts as decode steps (forward_last)
    bool decode_sized_ = false;          // an eager step has sized the decode arena
    // The decode step of one state, captured once per parity of its DeltaNet copies (each reads one copy
    // and writes the other).
    struct DecodeGraph {
        cudaGraphExec_t exec = nullptr;
        const float* logits = nullptr;  // where the graph leaves the logits (decode_arena_)
    };
    DecodeGraph graphs_[2];
    uint64_t graph_state_id_ = 0;        // the state whose buffers the graphs were captured with
    int32_t* token_host_ = nullptr;      // pinned: the run-ahead argmax's id, copied back
    cudaEvent_t token_ready_ = nullptr;
    // A prompt chunk's token ids and positions (kPromptChunk each), pinned: a copy from pageable memory
    // would first wait for the stream to drain, so each chunk after the first would start on an idle GPU
    // while the host enqueues its ~1800 kernels. The event says when the last chunk's copy has run.
    int32_t* prompt_host_ = nullptr;
    cudaEvent_t prompt_uploaded_ = nullptr;
    // The running call's sequence capacity (the decode grid is planned for it).
    int64_t call_capacity_ = 0;
    CudaDecodeStats stats_;
    // The running forward_batch call's states, row by row (empty otherwise): run_layers then takes the
    // batched blocks.
    std::span<CudaSequenceState* const> batch_;
    // Batched steps as CUDA graphs (batch_step_cuda.cpp), keyed by the step's shape: B and each attention
    // layer's plan (split grid and cache formats). Every row's state, position and DeltaNet parity is read
    // from the tables the step uploads (batch_inputs_, batch_deltanet_rows_, attention_rows_), so a graph
    // serves any batch of its shape, whichever conversations fill the rows. Captured when a step has the
    // previous call's shape (a server's steady batch), the first time eagerly: a shape that changes every
    // step never pays a capture.
    struct BatchGraph {
        std::vector<int64_t> shape;  // B, then per attention layer: max splits, formats present (f32, f16, kivi4)
        cudaGraphExec_t exec = nullptr;
        const float* logits = nullptr;  // where the graph leaves them (batch_arena_)
    };
    static constexpr size_t kBatchGraphs = 4;  // kept, the least recently used dropped
    std::vector<BatchGraph> batch_graphs_;
    std::vector<int64_t> last_shape_;  // the previous forward_batch call's
    DeviceArena batch_arena_;
    cuda::DeviceBuffer batch_inputs_;   // kPromptChunk ids, then kPromptChunk positions
    // Each row's DeltaNet buffers for the batched step's rows kernels (cuda::GdnDecodeRow, [DeltaNet layer][row]
    // for the step's B rows, room for kPromptChunk): read copy `parity`, write the other, resolved on the
    // host. Rewritten before every batched step, replays included — the table is where a captured graph
    // finds its rows' states, and another batch may have overwritten it since — from a pinned host copy
    // (one cudaMemcpyAsync), guarded like prompt_host_ by prompt_uploaded_.
    cuda::DeviceBuffer batch_deltanet_rows_;
    cuda::GdnDecodeRow* batch_deltanet_rows_host_ = nullptr;
    const float* enqueue_batch_step(int64_t B);
    void release_batch_graphs();
    // The batched step's table of attention rows (cuda::AttentionRow, [attention layer][row]: every row's
    // caches of that layer, its position and its split count), built in pinned memory and uploaded with one
    // copy before the step, into the device buffer the step's rows launches (and graphs of it) read. The
    // pinned copy is rewritten only after prompt_uploaded_ (recorded after this copy) has passed.
    void upload_attention_rows(std::span<CudaSequenceState* const> states);
    cuda::AttentionRow* attention_rows_host_ = nullptr;  // pinned, kPromptChunk rows of every attention layer
    cuda::DeviceBuffer attention_rows_;                  // its device copy, allocated once (graphs point into it)
    std::vector<cuda::AttentionRowsPlan> attention_rows_plans_;  // the running step's, per attention layer
    // The running forward call's observer (forward), or nullptr; the layer its names are of.
    const ActivationObserver* observer_ = nullptr;
    int64_t observed_layer_ = 0;
};

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
