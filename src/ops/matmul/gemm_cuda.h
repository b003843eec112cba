// The prompt (T > 1) matrix products on tensor cores, against the CPU reference ops/matmul.h:
//   gemm_quant_cuda.cu   y = x · Wᵀ for quantised W on int8 tensor cores
//   gemm_half_cuda.cu    y = x · Wᵀ for Q1_0 W on f16 activations (Hopper's prompt matmul for Q1_0)
// Decode's GEMVs are ops/matmul/matmul_cuda.h; the model picks by T.
//
// Common to all: every array pointer is on the device and the work is enqueued on `stream` (nothing waits
// for it); a launch error throws deltabit::Error naming the kernel; empty shapes (0 rows, 0 tokens) launch
// nothing; grids follow ops/cuda/cuda_launch.h, so any length that fits in memory runs. Arithmetic is fp32
// where the references use double: the differences are summation order and rounding, bounded in
// tests/cuda/op_parity.h and stated per kernel below.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda_buffer.h"
#include "ops/matmul.h"
#include "ops/matmul/matmul_cuda.h"

namespace deltabit::cuda {

// ---- quantised GEMM (gemm_quant_cuda.cu) ----
//
//   x  [T][K]  f32, quantised per row and per group of 128 exactly as the decode GEMV does
//              (quantize_activations, matmul_cuda.h): q int8, scale = max|x|/127
//   w  W[N][K] GemvWeightView (the GEMV layout of ops/matmul/weight_repack.h; no second copy of the weights)
//   y  [T][N]  f32
//
// Numerics: per output, per weight-scale group (128 weights for Q1_0 and Q2_0, 64 for Q2_0_G64, 32
// for Q4_0 and Q8_0) one exact int32 dot from the tensor cores (mma.sync m16n8k32 s8·s8→s32, weight
// levels expanded to int8 in registers; or, the wgmma tile, wgmma m64n128k32 on Q1_0 bits expanded to
// bytes in shared memory), then y += float(dot) · (d_w · scale_x)
// by fmaf in fp32, in k order. Each term is bit for bit the GEMV's term for the same weights (the
// GEMV forms the same product d_w · scale_x and an exact integer dot), so y equals the GEMV's y up to
// fp32 summation order, and cpu::matmul_int8_activations's up to fp32 rounding of that last sum.

// Int8 activations of T rows: row t's codes at q + t·groups·128 (zero beyond K), its per-group
// {scale, sum} at meta + t·groups, groups = activation_groups(K).
struct QuantizedActivationRows {
    int8_t* q = nullptr;
    ActivationGroupMeta* meta = nullptr;
    int64_t rows = 0;  // T
    int64_t cols = 0;  // K
};
struct ActivationRowsScratch {
    DeviceBuffer buffer;
    int64_t max_rows = 0, max_cols = 0;
    ActivationRowsScratch(int64_t max_rows, int64_t max_cols);
    QuantizedActivationRows view(int64_t rows, int64_t cols) const;  // Error when it does not fit
};
// The same layout in caller-owned device memory (e.g. a per-call arena): bytes needed, and the view
// of `buffer` (16-byte aligned) holding rows × cols.
size_t activation_rows_bytes(int64_t rows, int64_t cols);
QuantizedActivationRows activation_rows_view(void* buffer, int64_t rows, int64_t cols);
// One launch when K is a multiple of 128 (the rows are then one flat vector), else one per row.
void quantize_activation_rows(const float* x, const QuantizedActivationRows& out, cudaStream_t stream);

// Block tiles: tokens × weight rows. m16 serves short prompts without paying for 64 idle token rows
// (its 4 warps split K, so that few tiles still fill the GPU). wgmma_m128_n128: Hopper's warpgroup tensor
// cores (ops/matmul/gemm_wgmma_cuda.h), Q1_0 only, in an sm_90a build on a compute capability 9.0 device — its
// y is the mma.sync tiles' bit for bit. wgmma_ws_m128_n128: the same tile warp-specialised, the same
// conditions and the same y — the automatic choice for Q1_0 prompts there (DELTABIT_GEMM_WS=0: not).
// wgmma_ws_m64/m32/m16_n128: that kernel with 64, 32 or 16 tokens a tile — the automatic choice for Q1_0
// prompts of ≤ 64 tokens, and for a longer prompt's last weight rows when one launch's last round of
// 128-token tiles would leave most SMs idle (ws_tail_plan; DELTABIT_GEMM_WS_NARROW=0: neither).
enum class GemmTile : uint8_t {
    automatic,
    m16_n64,
    m64_n128,
    m128_n128,
    wgmma_m128_n128,
    wgmma_ws_m128_n128,
    wgmma_ws_m64_n128,
    wgmma_ws_m32_n128,
    wgmma_ws_m16_n128,
    half_m128_n256,  // gemm_q1_0_half's tiles (f16 activations; not gemm_quantized's)
    half_m64_n256,
    half_m32_n256,
    half_m16_n256,
    half_m128_n128,
    half_m64_n128,
    half_m32_n128,
    half_m16_n128,
};
const char* gemm_tile_name(GemmTile t);
// Whether gemm_quantized can run `tile` for weights of type t here (automatic: always).
bool gemm_tile_supported(GemmTile tile, DType t);

struct GemmLaunchReport {
    GemmTile tile = GemmTile::automatic;  // the tile that ran
    int64_t tiles = 0;                    // block tiles covering T × N
    int64_t blocks = 0;                   // blocks launched (≤ tiles; each walks tiles grid-stride)
    // The automatic choice may run a Q1_0 matrix's last weight rows as a second launch of a narrower
    // warp-specialised tile, so that its last round of tiles fills the GPU: that tile and those rows (0: one
    // launch of `tile` covered everything).
    GemmTile tail_tile = GemmTile::automatic;
    int64_t tail_rows = 0;
    int splits = 1;  // the f16 GEMM's split k: blocks of a cluster sharing each tile's k-tiles
};

// y = x · Wᵀ for already quantised rows. Supported: the GEMV layout's dtypes (Q1_0, Q2_0, Q2_0_G64,
// Q4_0, Q8_0). Error on mismatched shapes or an unsupported dtype. `max_blocks` (0 = the grid cap of
// ops/cuda/cuda_launch.h) lets tests force blocks to walk several tiles.
GemmLaunchReport gemm_quantized(const QuantizedActivationRows& x, const GemvWeightView& w, float* y,
                                cudaStream_t stream, GemmTile tile = GemmTile::automatic, int64_t max_blocks = 0);

// Below this many tokens the per-token decode GEMV is faster than the tensor-core GEMM (both read
// the weights from memory; the GEMM's narrowest tile costs about the same at any T ≤ 16). Measured with
// bench/prefill_cuda.cpp on an H200, Q1_0, weights rotating past the L2 (2026-12-02): the warp-specialised
// 16-token tile wins from T = 4 on 10240 × 5120, T = 5..6 on 17408 × 5120 (the FFN, most of a layer's
// weights), T = 7..8 on 5120 × 17408 (at T = 2 it is 1.5–3.3× slower than two GEMVs).
inline constexpr int64_t kGemmMinTokens = cpu::kPromptGemmMinTokens;  // = 8 (ops/matmul.h)

// The prompt-path twin of cpu::matmul_int8_activations for quantised W: T < kGemmMinTokens runs the
// decode GEMV per token, else quantise all rows into `scratch` and one GEMM. Returns whether the GEMM ran
// (so callers and tests can see the path).
bool matmul_prefill(const float* x, const GemvWeightView& w, int64_t n_tokens, float* y,
                    const ActivationRowsScratch& scratch, cudaStream_t stream);
// The same with the quantised rows in `rows` (n_tokens × w.cols, from activation_rows_view).
bool matmul_prefill(const float* x, const GemvWeightView& w, int64_t n_tokens, float* y,
                    const QuantizedActivationRows& rows, cudaStream_t stream);

// ---- Q1_0 GEMM on f16 activations (gemm_half_cuda.cu) ----
//
//   x  [T][K]  f16, each token's row scaled by its power of two 2^e_t and rounded to nearest even
//              (round_activation_rows_f16; ops/matmul/f16_activations.h), with 2^−e_t beside it
//   w  W[N][K] Q1_0 GemvWeightView, K a multiple of 128
//   y  [T][N]  f32, y = (Σ_k (±d_w) · h) · 2^−e_t
//
// Numerics: each ±d_w (an fp16 scale, so exact in f16) times h is exact, and the products are summed in
// fp32 by the tensor cores in an order of their own (k-steps of 16 in k order, each step's 16 products in
// any order), then scaled exactly. y equals cpu::matmul_f16_activations (ops/matmul.h) up to that fp32
// summation; no int8 rounding of the activations at all (closer to the fp32 model than gemm_quantized).
// Warp-specialised wgmma tiles of 128, 64, 32 or 16 tokens × 256 or 128 weight rows; sm_90a build on a
// compute capability 9.0 device only (half_gemm_available).
struct HalfActivationRows {
    uint16_t* h = nullptr;       // [rows][cols] binary16
    float* inv_scale = nullptr;  // [rows] 2^−e_t
    int64_t rows = 0, cols = 0;
    float* partials = nullptr;   // room for split k's partial sums (partial_floats of them); none: no split
    size_t partial_floats = 0;
};
// The rows, their scales and room for split k's partial sums (a tile's sums for every block of the device;
// ~17 MB on an H200 for 128 rows and more, a few MB for short prompts).
size_t half_activation_rows_bytes(int64_t rows, int64_t cols);
HalfActivationRows half_activation_rows_view(void* buffer, int64_t rows, int64_t cols);  // buffer 16-byte aligned
// cols a multiple of 4 (round_rows_f16_cuda.cu).
void round_activation_rows_f16(const float* x, const HalfActivationRows& out, cudaStream_t stream);
// The rows of silu(gate) · up ([rows][cols] each, 16-byte aligned) rounded the same way, without the fp32
// products going through memory: the bits of cuda::swiglu then round_activation_rows_f16.
void round_swiglu_rows_f16(const float* gate, const float* up, const HalfActivationRows& out, cudaStream_t stream);
bool half_gemm_available();
// half_gemm_available() unless DELTABIT_GEMM_F16=0 (on by default since its copies went through the copy
// engine: Bonsai-27B pp512 87 ms against 102 with the int8 GEMM, docs/bench-notes.md; =0 measures the int8 path).
bool half_prompt_gemm_enabled();
// Whether matmul_prompt takes this GEMM for `tokens` rows of w: Q1_0, at least kGemmMinTokens tokens, and
// half_prompt_gemm_enabled().
bool half_gemm_serves(const GemvWeightView& w, int64_t tokens);
// Tokens a tile of a half tile, 0 for the others.
int half_tile_tokens(GemmTile t);
// `tile` automatic or a half tile; automatic picks the tile from measured costs of a round of tiles and may
// run a matrix's last weight rows on a second, narrower tile (tail_tile, tail_rows), as gemm_quantized does.
// Error on other weights or shapes.
// `splits` (a named tile only; 0 = 1): each tile's k-tiles shared by that many blocks of a cluster, the blocks'
// sums added in rank order through the rows' partials (for tests and benchmarks; automatic picks its own).
GemmLaunchReport gemm_q1_0_half(const HalfActivationRows& x, const GemvWeightView& w, float* y, cudaStream_t stream,
                                GemmTile tile = GemmTile::automatic, int64_t max_blocks = 0, int splits = 0);

// ---- Q1_0 products of a few tokens on int8 tensor cores (gemm_small_cuda.cu) ----
//
// y[T][N] = x · Wᵀ for 1 ≤ T ≤ kSmallGemmMaxTokens rows already quantised (quantize_activation_rows), W Q1_0
// in the GEMV layout with K a multiple of 128: the batched decode step's matmuls (models/model_cuda.h
// forward_batch), where the prompt GEMMs' token tiles of 16 or more cost several decode GEMVs. The weights
// are the mma's M side and the tokens one n8 tile, so each weight is read once for every token. Numerics: the decode GEMV's terms — each
// group's exact integer dot, 2·Σ bit·q − Σ q, times d_w · scale_x in fp32 — summed by fmaf over a warp's
// groups (every kWarps-th) and the warps' sums added in warp order: within gemm_quantized's bound of
// cpu::matmul_int8_activations. Error for other weights or shapes.
inline constexpr int64_t kSmallGemmMaxTokens = 8;
void gemm_q1_0_small(const QuantizedActivationRows& x, const GemvWeightView& w, float* y, cudaStream_t stream);
// Its kernels, one chosen by DELTABIT_SMALL_GEMM_WIDE (read once; unset: split) until the GPU has measured
// them: split gives a block 32 rows and splits K over its 8 warps; the wide kernels give each warp its own
// rows and all of K, a block's warps sharing each chunk of activations — wide64: 4 warps × 16 rows,
// wide128: 4 × 32, wide256: 8 × 32 (the value of DELTABIT_SMALL_GEMM_WIDE). All give the same bits.
enum class SmallGemmKernel : uint8_t { split, wide64, wide128, wide256 };
SmallGemmKernel small_gemm_kernel();
void gemm_q1_0_small(const QuantizedActivationRows& x, const GemvWeightView& w, float* y, cudaStream_t stream,
                     SmallGemmKernel kernel);

// The prompt matmul the model runs: the f16 GEMM where half_gemm_serves, else matmul_prefill (int8).
// `scratch` holds prompt_scratch_bytes(w, n_tokens) bytes of device memory, 16-byte aligned: the rows of
// the rounding that path takes (the f16 rows are twice the int8 ones and carry the split-k workspace; a
// matrix of the same dtype and K takes the same path).
enum class PromptMatmulPath : uint8_t { gemv, int8_gemm, f16_gemm };
size_t prompt_scratch_bytes(const GemvWeightView& w, int64_t n_tokens);
PromptMatmulPath matmul_prompt(const float* x, const GemvWeightView& w, int64_t n_tokens, float* y, void* scratch,
                               cudaStream_t stream);
// matmul_prompt in two steps, for several matrices reading one input (a layer's q, k and v, say): the rows
// prepared once — rounded to f16 or quantised to int8, as matmul_prompt would for `like` — then one GEMM per
// matrix. n_tokens ≥ kGemmMinTokens. gemm_prompt_rows refuses a matrix that matmul_prompt would have given
// the other rounding (another dtype), so every product's numerics stay matmul_prompt's.
struct PromptRows {
    PromptMatmulPath path = PromptMatmulPath::int8_gemm;  // int8_gemm or f16_gemm
    HalfActivationRows half;
    QuantizedActivationRows int8;
};
PromptRows prepare_prompt_rows(const float* x, const GemvWeightView& like, int64_t n_tokens, void* scratch,
                               cudaStream_t stream);
void gemm_prompt_rows(const PromptRows& rows, const GemvWeightView& w, float* y, cudaStream_t stream);
// prepare_prompt_rows of swiglu(gate, up) (the FFN's activations for ffn_down, `like`): on the f16 path
// computed and rounded in one pass (round_swiglu_rows_f16); on the int8 path written to `act`
// (n_tokens × like.cols floats) by cuda::swiglu and quantised from there. The same rows either way.
PromptRows prepare_prompt_rows_swiglu(const float* gate, const float* up, float* act, const GemvWeightView& like,
                                      int64_t n_tokens, void* scratch, cudaStream_t stream);

}  // namespace deltabit::cuda
