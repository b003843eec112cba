// CUDA matrix product for decode (n_tokens = 1): y[n] = Σ_k x[k] · W[n][k], the GPU twin of
// ops/matmul.h's cpu::matmul for T = 1, with weights in the GEMV layout (ops/matmul/weight_repack.h) and
// every pointer on the device.
//
//   x  [K]        f32, device
//   w  W[N][K]    GemvWeightView: codes plane + fp16 scales plane, device
//   y  [N]        f32, device; must not overlap x or the scratch
//
// Numerics (why it is not dot_row exactly). Streaming 1-bit weights at the HBM roofline leaves about
// one instruction per weight, so the kernel multiplies integer codes by int8 activations with dp4a
// (4 products per instruction) instead of converting every weight to float. The activations are
// first quantised once per call, per group of 128 inputs:
//
//   scale_g = max|x| / 127 over the group,  q = clamp(round_half_even(x · (127 / max|x|)), −127, 127),
//   sum_g = Σ q over the group (Q1_0 needs it: Σ sign·q = 2·Σ_{bit=1} q − Σ q).
//
// Each weight block's integer dot is exact; then y[n] = Σ_blocks d_w · scale_g · dot in fp32. So y
// equals the reference dot_row applied to the dequantised activations q·scale_g up to fp32 rounding of
// that last sum; against the unquantised x it differs by at most Σ_k |w_k| · scale_g(k) / 2.
//
// Supported: Q1_0, Q2_0 (group 128), Q2_0_G64, Q4_0, Q8_0; K a multiple of the block size (the last
// activation group may be partial). Any N: launches are split to stay inside grid limits.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/cuda_buffer.h"
#include "core/dtype.h"
#include "ops/matmul/weight_repack.h"

namespace deltabit::cuda {

inline constexpr int kActivationGroup = 128;

// Weights in the GEMV layout on the device (non-owning).
struct GemvWeightView {
    const uint8_t* codes = nullptr;    // rows × gemv_code_row_bytes(dtype, cols), 16-byte aligned rows
    // rows × cols / block_elems fp16 bits. The warp-specialised GEMM copies whole 4-byte words (each
    // aligned, holding the scale it wants), so bytes past the last scale must be readable:
    // upload_gemv_weights pads the plane to a multiple of 16 bytes.
    const uint16_t* scales = nullptr;
    DType dtype = DType::Q1_0;
    int64_t rows = 0;  // N
    int64_t cols = 0;  // K
    // Rows first .. first + count − 1 of the same planes (the scales may then start mid-word).
    GemvWeightView slice_rows(int64_t first, int64_t count) const {
        return {codes + size_t(first) * gemv_code_row_bytes(dtype, cols),
                scales + size_t(first) * size_t(cols / dtype_info(dtype).block_elems), dtype, count, cols};
    }
};

// Owner of one uploaded matrix. upload_gemv_weights repacks on the host, proves the repack against
// the original (verify_gemv_repack) and uploads both planes; the original can be released after.
struct GemvWeights {
    DeviceBuffer codes;
    DeviceBuffer scales;
    DType dtype = DType::Q1_0;
    int64_t rows = 0;
    int64_t cols = 0;
    GemvWeightView view() const { return {codes.get<uint8_t>(), scales.get<uint16_t>(), dtype, rows, cols}; }
};
GemvWeights upload_gemv_weights(const WeightView& host_weights, const char* name);
GemvWeights upload_gemv_weights(const GemvRepacked& packed);

// Quantised activations: q int8[groups·128] (zero beyond K), then per group {scale, sum}.
struct ActivationGroupMeta {
    float scale;
    int32_t sum;
};
struct QuantizedActivationsView {
    int8_t* q = nullptr;
    ActivationGroupMeta* meta = nullptr;
    int64_t cols = 0;
    // One counter per group, zero between launches: a kernel whose blocks each produce part of a group
    // counts arrivals here, and the block completing a group quantises it (then sets the counter back
    // to zero). From ActivationScratch; nullptr where no such kernel writes the view.
    int32_t* arrivals = nullptr;
    // A deferred RMS norm (ActivationScratch::deferred_norm_view, written by gemv_quantized_add_norm): the
    // codes then quantise g = x ⊙ w, the norm's input times its weights, and norm_sum_sq[group] holds Σx²
    // over the group's inputs. The activations the codes stand for are rms_norm(x)·w = r·g with
    // r = 1/sqrt(Σ_groups norm_sum_sq / cols + norm_eps), one number per row, which every GEMV reading the
    // view multiplies into the group scales as it loads them. nullptr: the codes quantise the activations.
    float* norm_sum_sq = nullptr;
    float norm_eps = 0.0f;
};
inline int64_t activation_groups(int64_t k) { return (k + kActivationGroup - 1) / kActivationGroup; }
// Scratch for activations of up to `max_cols` inputs (and their zeroed arrival counters); one per stream.
struct ActivationScratch {
    DeviceBuffer buffer;
    int64_t max_cols = 0;
    explicit ActivationScratch(int64_t max_cols);
    QuantizedActivationsView view(int64_t cols) const;
    // The same scratch as the output of gemv_quantized_add_norm and the input of the GEMVs after it.
    QuantizedActivationsView deferred_norm_view(int64_t cols, float norm_eps) const;
};
// Kernels that write activations in the plain meaning (everything but gemv_quantized_add_norm) refuse a
// deferred-norm view: its consumers would apply a norm scale from sums nobody wrote.
void require_plain_view(const QuantizedActivationsView& view, const char* who);

// x[K] f32 → int8 groups of 128 with scale and sum, as above. One tiny launch; share the result among
// all matrices that read the same x (q/k/v/gate, ffn gate/up).
void quantize_activations(const float* x, const QuantizedActivationsView& out, cudaStream_t stream);

// How a GEMV launch is shaped; chosen by plan_gemv, overridable for tests and the benchmark. Each thread
// streams its rows' codes into registers, a grid of as many blocks as stay resident walking row tiles; it
// can request only its first batch of codes before the kernel before it has finished
// (ops/cuda/programmatic_launch.cuh).
struct GemvLaunchConfig {
    int lanes_per_row = 8;      // threads splitting one row's K (8, 16 or 32)
    int rows_per_thread = 2;    // rows sharing each activation load in registers (2 or 4)
    int warps_per_block = 4;    // 1..8
    int64_t max_blocks = 0;     // row tiles per launch; 0 = the device's grid limit (tests lower it to force splits)
    int64_t max_grid = 0;       // blocks per launch; 0 = as many as stay resident (tests lower it so that
                                // each block walks many tiles)
    // Code loads a thread requests at once (16; 8 or 4 with rows_per_thread 2). The registers holding
    // them are most of the kernel's (~165 a thread at 16 with its rolling batches, 96 at 8, ~80 at 4: ptxas,
    // CUDA 13) and decide how many blocks an SM holds; a row whose units a lane owns fit a batch of fewer loads
    // is served by the same loads in one batch with fewer registers. The same terms in the same order: y equal
    // bit for bit.
    int loads_in_flight = 16;
};
// Which kernel a plan is for: the plain one (a matrix, a group, add-norm) or a SwiGLU pair's (2N rows). Their
// registers can differ enough to change how many blocks an SM holds (ptxas, CUDA 13, at commit d4101fa: Q1_0 at
// 4 loads 90 plain, 80 SwiGLU — five blocks of 128 threads an SM against six; both 80 again since c49b6c5).
enum class GemvKind { plain, swiglu };
// The planned shape: lanes per row from the row count, 2 rows per thread, loads in flight by
// planned_gemv_loads.
GemvLaunchConfig plan_gemv(DType t, int64_t rows, int64_t cols, GemvKind kind = GemvKind::plain);
// The fewest loads in flight (4, 8, else 16) that hold every unit a lane owns of a row of `cols` inputs split
// lanes_per_row ways, rows_per_thread rows a thread (planned_gemv_loads' last resort).
// DELTABIT_GEMV_LOADS_IN_FLIGHT=16, 8 or 4 makes plan_gemv take that number wherever it is compiled (an
// experiment switch; any other value is an error).
int planned_loads_in_flight(DType t, int64_t cols, int lanes_per_row, int rows_per_thread);
// The loads in flight plan_gemv gives `config` (its lanes and rows a thread) over `rows` × `cols`: 16 where
// that takes the tiles in one round of resident blocks; else the most of 8 and 4 whose smaller kernel takes
// them in one round, even with a lane's row in several batches (the Bonsai-8B SwiGLU at 4 loads: 758 vs 713
// tok/s); else planned_loads_in_flight where it takes fewer rounds (one batch); else 16. Two rounds for
// three at two batches did not pay (Bonsai-27B SwiGLU at 8 loads: 290.6 vs 291.3).
int planned_gemv_loads(DType t, const GemvLaunchConfig& config, int64_t rows, int64_t cols,
                       GemvKind kind = GemvKind::plain);
// Rounds of resident blocks the kernel of `config` and `kind` takes over `rows` rows of K = cols (a SwiGLU
// pair: 2N rows; a group: its rows together, one tile more a matrix at most): ceil(tiles / (blocks an SM · SMs)).
// 0 where no kernel is compiled for config or there is no device.
int64_t gemv_tile_rounds(DType t, const GemvLaunchConfig& config, int64_t rows, int64_t cols,
                         GemvKind kind = GemvKind::plain);

// What a call did, so callers and tests can see which path ran and how it was split.
struct GemvLaunchReport {
    GemvLaunchConfig config;
    // Row tiles of warps_per_block·(32/lanes_per_row)·rows_per_thread rows (SwiGLU: of that many
    // outputs / rows_per_thread); a group counts each matrix's tiles, each matrix starting a new tile.
    int64_t blocks = 0;
    int launches = 0;      // kernel launches after splitting along N
};

// y = W·x for already quantised activations.
GemvLaunchReport gemv_quantized(const QuantizedActivationsView& x, const GemvWeightView& w, float* y,
                                cudaStream_t stream, const GemvLaunchConfig& config);
GemvLaunchReport gemv_quantized(const QuantizedActivationsView& x, const GemvWeightView& w, float* y,
                                cudaStream_t stream);

// Several matrices reading the same x, in ONE launch: the rows of all of them in one grid (so small
// matrices such as DeltaNet's β and α no longer pay a launch and a half-empty grid each). All share the
// dtype and K; each has its own output. y is bit for bit what gemv_quantized gives each matrix alone
// with the same launch config (a row's terms are summed in the same order). The planned config is
// plan_gemv for the total row count.
inline constexpr int kMaxGemvGroup = 4;
struct GemvOutput {
    GemvWeightView w;
    float* y = nullptr;
};
GemvLaunchReport gemv_quantized_group(const QuantizedActivationsView& x, std::span<const GemvOutput> outputs,
                                      cudaStream_t stream, const GemvLaunchConfig& config);
GemvLaunchReport gemv_quantized_group(const QuantizedActivationsView& x, std::span<const GemvOutput> outputs,
                                      cudaStream_t stream);

// The feed-forward's first half in one launch: y[i] = silu(gate·x)[i] · (up·x)[i] (ops/swiglu.h's
// SwiGLU of the two GEMVs). Each thread computes row i of gate and row i of up together, so the two
// products never leave registers; rows_per_thread must be 2 (the pair), and a tile (GemvLaunchReport's
// blocks) is warps·(32/lanes) outputs. Bit for bit gemv_quantized of each matrix with the same config
// followed by cuda::swiglu. The planned config is plan_gemv for 2N rows, GemvKind::swiglu.
//
// With y_quantized (a view of N inputs with arrival counters, NOT the one x lives in) it also writes y's
// int8 activations for the next matmul, bit for bit quantize_activations(y): the block that completes a
// group of 128 outputs quantises it (ops: QuantizedActivationsView::arrivals) — one launch fewer.
GemvLaunchReport gemv_quantized_swiglu(const QuantizedActivationsView& x, const GemvWeightView& gate,
                                       const GemvWeightView& up, float* y, cudaStream_t stream,
                                       const GemvLaunchConfig& config,
                                       const QuantizedActivationsView* y_quantized = nullptr);
GemvLaunchReport gemv_quantized_swiglu(const QuantizedActivationsView& x, const GemvWeightView& gate,
                                       const GemvWeightView& up, float* y, cudaStream_t stream,
                                       const QuantizedActivationsView* y_quantized = nullptr);

// The decode step's seam between two blocks, folded into the GEMV that ends the first (the block's
// output projection) and the GEMVs that start the second (ops/elementwise/residual_norm_cuda.cu is the unfolded seam):
//   residual[n] += (W·x)[n]                       (the residual stream, updated in place; the float
//                                                   result is x + y of the seam bit for bit)
//   out: the int8 groups of g = residual ⊙ norm_w and each group's Σ residual², in a deferred-norm view
//        (out.norm_sum_sq set, out.norm_eps the norm's eps; a view of N inputs with arrival counters,
//        not x's scratch).
// The block completing a group of 128 rows quantises it (as gemv_quantized_swiglu's y_quantized), with
// one warp: g's codes are quantize_activations(g) bit for bit; Σ is that warp's sum (fmaf over each lane's
// four values in order, then a butterfly over the lanes). A GEMV reading `out` then sees the codes of
// rms_norm(residual)·norm_w (NormWeight::plain): its group scale times r of the norm (see
// QuantizedActivationsView), r computed from the group sums in a fixed order by every block alike.
// Against the seam's h = x·r·w quantised, a code can differ by one where h·127/max|h| lands within an
// fp32 rounding of a half-integer: both are that quantiser of the same activations.
GemvLaunchReport gemv_quantized_add_norm(const QuantizedActivationsView& x, const GemvWeightView& w, float* residual,
                                         const float* norm_w, const QuantizedActivationsView& out, cudaStream_t stream,
                                         const GemvLaunchConfig& config);
GemvLaunchReport gemv_quantized_add_norm(const QuantizedActivationsView& x, const GemvWeightView& w, float* residual,
                                         const float* norm_w, const QuantizedActivationsView& out,
                                         cudaStream_t stream);

// The twin of cpu::matmul: quantise x into `scratch`, then the GEMV. n_tokens must be 1 (prefill has
// its own path); throws deltabit::Error otherwise or when shapes disagree.
void matmul(const float* x, const GemvWeightView& w, int64_t n_tokens, float* y, const ActivationScratch& scratch,
            cudaStream_t stream = nullptr);

}  // namespace deltabit::cuda
