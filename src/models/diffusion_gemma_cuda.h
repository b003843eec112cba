// DiffusionGemma on the GPU: the CUDA twin of models/diffusion_gemma.h, op for op in the CPU's order
// (../shared/reference/diffusion-gemma.md §2), every op the CUDA twin of the CPU reference's
// (ops/<family>/*_cuda.h). CUDA builds only (DELTABIT_HAVE_CUDA).
//
// Not CudaModel's layer loop (models/model_cuda.h; STYLE habit 18): that loop is the autoregressive
// step, with its seams folded into int8 GEMVs and a KV cache of positions; this model's layer differs in
// every block (models/diffusion_gemma.h says how) and its cache is two-pass, written by encode() and read
// by denoise(). What is shared is below the loop: the op kernels, the weight upload (models/weights_cuda.h),
// the scratch arena (models/device_arena.h).
//
// Weights: uploaded once from what the CPU model bound (Model::parts() and its DiffusionGemmaWeights):
// matrices as CudaUploads makes them (quantised ones in the GEMV layout, F32/F16/BF16 as stored), vectors
// as F32, the embedding table as stored (the lookups read it in the GGUF layout). The tied LM head reads
// that same table when it is plain floats; a quantised table gets a second, GEMV-layout copy for the head.
// The host Model may be dropped afterwards.
//
// Numerics: plain-float matrices run matmul_plain_any (ops/matmul/dense_gemm_cuda.h: from 8 tokens cuBLAS,
// F32 in fp32 and BF16 on a two-part bf16 split of the activations, fp32-class either way; below, the naive
// fp32 kernel), the soft embedding of a BF16 or F32 table the same way (soft_embedding_gemm), and every other
// op its fp32 twin, so with plain weights (the fixtures) the logits differ from the CPU's (double sums) by
// fp32-class rounding and summation order only. Quantised matrices take the engine's int8-activation
// products (ops/matmul/gemm_cuda.h matmul_prompt), which round more.
//
// The cache (DiffusionCacheCuda): per layer, K and V as f32 rows [rows][n_kv_head][head_dim], oldest first,
// as the CPU's DiffusionCache; behind the kept rows there is room for the rows one call adds, where each
// layer writes its new K/V so that attention reads one contiguous [cache ++ new] span. encode() keeps them
// (a sliding layer then moves its last window − 1 rows to the front, through scratch, never with an
// overlapping copy); denoise() leaves them where the next call overwrites them: the kept rows, and
// `length`, never change — the cache is read-only to the decoder, as transformers has it.
//
// Scratch: two DeviceArenas, one for encode() chunks and one for denoise() calls, rewound per layer, so that
// steady-state calls allocate nothing (stats().arena_allocations counts every cudaMalloc they made). Summed
// from diffusion_gemma_cuda.cpp's allocations for the released geometry, bf16 (plain) matrices, a canvas of 256,
// before the tensor-core products' own scratch: the denoise arena holds 73.9 MiB (64.3 without
// self-conditioning: its input, soft embedding, output and MLP hidden rows are 9.6), most of it one full
// layer's (61.5: q and the attention output 8 MiB each, the grouped experts' rows 27.5); the logits
// [256][262144] (256 MiB) are the caller's. The tensor-core products add their split activations: most of it
// the soft embedding's probabilities and their three bf16 parts, 640 MiB at L 256 and V 262,144. An encode chunk of 256
// needs 64.3 MiB. Quantised matrices add their prompt-GEMM scratch (ops/matmul/gemm_cuda.h).
#pragma once

#if DELTABIT_HAVE_CUDA

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "backend/cuda_buffer.h"
#include "models/device_arena.h"
#include "models/diffusion_gemma.h"
#include "models/model.h"
#include "models/weights_cuda.h"

namespace deltabit {

// One sequence's encoder cache on the device. Made by DiffusionGemmaCuda::new_cache; read-only to callers.
struct DiffusionCacheCuda {
    struct Layer {
        cuda::DeviceBuffer k, v;      // [row_capacity][n_kv_head][head_dim] f32; rows [0, rows) kept
        int64_t rows = 0;             // kept rows (a sliding layer: at most window − 1)
        int64_t first_position = 0;   // position of row 0 (sliding layers drop the oldest rows)
        int64_t row_capacity = 0;     // kept rows at most + the rows one call adds
        int64_t row_floats = 0;       // n_kv_head · head_dim
    };
    std::vector<Layer> layers;
    int64_t length = 0;       // tokens encoded so far; the next token's position
    int64_t capacity = 0;     // tokens encode() may hold in all (length never passes it)
    int64_t max_new = 0;      // most rows one call adds: an encode chunk, or a canvas of at most this
    cuda::DeviceBuffer positions;  // int32 0, 1, ..., capacity + max_new − 1: a call at p reads from p

    // Layer l's kept K or V rows, copied to the host ([rows][n_kv_head][head_dim]); synchronises.
    std::vector<float> download_k(int64_t layer) const;
    std::vector<float> download_v(int64_t layer) const;
    // Forgets every encoded token (length 0, no rows kept): a new sequence's cache without allocating.
    // The rows' bytes stay (nothing reads past `rows`); host fields only, so work already enqueued is unaffected.
    void clear();
};

// What the calls did, so tests can see the steady state allocates nothing (STYLE habit 16).
struct DiffusionCudaStats {
    int64_t encode_chunks = 0;      // encode() runs its tokens in chunks of at most the cache's max_new
    int64_t denoise_calls = 0;
    int64_t arena_allocations = 0;  // cudaMalloc calls of the scratch arenas, ever
    int64_t io_allocations = 0;     // cudaMalloc calls of the host-call denoise's input and logit buffers
    size_t encode_arena_bytes = 0, denoise_arena_bytes = 0;  // their buffers now
};

class DiffusionGemmaCuda {
public:
    // Fraction of the upload done, reported after each layer (for a progress bar).
    using UploadProgress = std::function<void(double fraction)>;

    // Uploads a diffusion_gemma model's bound weights to the current device. Error when `model` is not a
    // block-diffusion model or a matrix's dtype has no CUDA matmul.
    explicit DiffusionGemmaCuda(const Model& model, const UploadProgress& progress = {});
    ~DiffusionGemmaCuda();
    DiffusionGemmaCuda(const DiffusionGemmaCuda&) = delete;
    DiffusionGemmaCuda& operator=(const DiffusionGemmaCuda&) = delete;

    const ModelConfig& config() const { return config_; }
    // Every call is enqueued on this stream; device pointers given to denoise() must be ready on it.
    cudaStream_t stream() const { return stream_; }

    // A cache for up to `capacity` encoded tokens, with room behind each layer's kept rows for max_new =
    // max(max_canvas (0: the config's canvas_length), kEncodeChunk) rows: denoise() takes canvases of up to
    // max_new tokens, and encode() runs longer inputs in chunks of max_new. Error for a capacity below 1.
    static constexpr int64_t kEncodeChunk = 256;
    DiffusionCacheCuda new_cache(int64_t capacity, int64_t max_canvas = 0) const;

    // As DiffusionGemma::encode: ids (host) at positions cache.length .. and appended to the cache.
    // Error, with the cache unchanged, for a token outside the vocabulary or for ids that would take the
    // cache past its capacity. Synchronises before it returns only with an observer.
    void encode(DiffusionCacheCuda& cache, std::span<const int32_t> ids, const ActivationObserver* observer = nullptr);

    // As DiffusionGemma::denoise, device in and device out: the canvas ids [L] (device), the previous
    // step's temperature-scaled logits [L][n_vocab] as self-conditioning (device) or nullptr (the first step
    // of a block: the branch is then exactly zero and skipped), and the softcapped logits written to
    // logits[L][n_vocab] (device; must not overlap the inputs). Enqueued on stream(): nothing is copied to
    // or from the host and nothing waits (unless the arena must grow: the first calls of a new L), so a
    // denoising loop can run without host round trips. The cache is read, never written.
    // Ids cannot be checked here: one outside the vocabulary reads as a NaN row (cuda::embedding_lookup)
    // and poisons its logits. Error for L outside 1 .. cache.max_new.
    // With an observer: every named intermediate (the CPU's names: canvas_in, self_conditioning,
    // blk.N.{attn.q,attn.k,attn.v,attn.out,out}) is copied to it, synchronising at each — for bisecting.
    void denoise(const DiffusionCacheCuda& cache, const int32_t* canvas, int64_t L, const float* self_conditioning,
                 float* logits, const ActivationObserver* observer = nullptr);
    // The same from and to the host (for tests and host loops): the canvas is checked against the
    // vocabulary and the self-conditioning logits (empty: none) against L·n_vocab, as the CPU's.
    std::vector<float> denoise(const DiffusionCacheCuda& cache, std::span<const int32_t> canvas,
                               std::span<const float> self_conditioning = {},
                               const ActivationObserver* observer = nullptr);

    DiffusionCudaStats stats() const;

private:
    struct Layer {
        LayerKind kind = LayerKind::sliding_attention;
        const float* attn_norm = nullptr;
        CudaMatrix q, k, v, output;  // v empty on full layers (V = K)
        const float *q_norm = nullptr, *k_norm = nullptr, *post_attention_norm = nullptr;
        const float* ffn_norm = nullptr;
        CudaFfnWeights mlp;
        const float* post_ffw_norm_1 = nullptr;
        CudaMatrix router;
        const float *router_scale = nullptr, *expert_scale = nullptr;
        CudaMatrix expert_gate, expert_up, expert_down;
        const float *pre_ffw_norm_2 = nullptr, *post_ffw_norm_2 = nullptr, *post_ffw_norm = nullptr;
        float decoder_scale = 1.0f, encoder_scale = 1.0f;
    };

    float* temp(int64_t n_floats);
    int32_t* temp_ids(int64_t n);
    int64_t* temp_spans(int64_t n);
    void begin_call(DeviceArena& arena);
    void matmul(const float* x, const CudaMatrix& w, int64_t T, float* y);
    void gelu_mlp(const CudaFfnWeights& w, const float* x, int64_t T, float* out);
    void observe(int64_t layer, std::string_view what, const float* device, int64_t n);
    // One layer over x[T][n_embd] in place (models/diffusion_gemma.cpp layer_forward): the T new tokens'
    // K/V are written into `cached`'s rows [rows, rows + T), and attention reads rows [0, rows + T) with the
    // spans of cpu::diffusion_key_spans. Changes none of `cached`'s fields.
    void layer_forward(int64_t l, float* x, int64_t T, const int32_t* d_positions, const DiffusionCacheCuda::Layer& cached,
                       bool causal);
    // The rows a chunk of T tokens added to every layer kept: rows += T, a sliding layer's last window − 1
    // moved to the front.
    void keep_new_rows(DiffusionCacheCuda& cache, int64_t T);

    ModelConfig config_;
    cudaStream_t stream_ = nullptr;
    std::vector<cuda::DeviceBuffer> vectors_;
    cuda::DeviceBuffer token_embd_;
    WeightView token_embd_view_;  // data on the device, the GGUF layout
    const float* output_norm_ = nullptr;
    CudaMatrix output_;           // the tied head: token_embd_ itself when plain (plain_view), else a GEMV copy
    const float* sc_pre_norm_ = nullptr;
    CudaFfnWeights sc_mlp_;
    std::vector<Layer> layers_;

    DeviceArena encode_arena_, denoise_arena_;
    // The host-call denoise's canvas, self-conditioning logits and logits on the device, grown as needed.
    cuda::DeviceBuffer io_canvas_, io_self_conditioning_, io_logits_;
    DeviceArena* arena_ = nullptr;  // the running call's
    DiffusionCudaStats stats_;
    // The running call's observer, or nullptr.
    const ActivationObserver* observer_ = nullptr;
};

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
