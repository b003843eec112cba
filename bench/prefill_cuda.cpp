// Micro-benchmark of the prefill kernels (ops/prefill_cuda.h) on Bonsai-27B / Qwen3.5-27B shapes, each
// figure printed next to its ceiling.
//
//   bench_prefill_cuda [gemm] [pipelines] [half] [crossover] [delta] [attention]    (none named: every section)
//
// Sections:
//   1. Q1_0 GEMM at T = 512 (pp512) for every matrix of a Bonsai-27B layer and the LM head, each tile
//      and the automatic choice: TFLOP/s = 2·T·N·K / time, against the H200's dense bf16 tensor-core
//      rate measured on this workplace's machines (769–798 TFLOP/s, 8192³ bf16 products through
//      PyTorch: .library/device/KINDS.md; 790 used). Then the whole model's matmuls at pp512 (64
//      layers: 48 DeltaNet, 16 attention, every FFN, the LM head) as one figure.
//   1b. The warp-specialised tile's stage rings on Bonsai-27B and Bonsai-4B matrices, beside the other tiles.
//   1c. The Q1_0 GEMM on f16 activations (gemm_q1_0_half, what the model runs on Hopper) against the int8
//       one on the same matrices: each tile, the automatic choice, the whole matmul with its rounding.
//   2. Prompt lengths T = 1 .. 64: T decode GEMVs (quantise + GEMV per token) against one GEMM (quantise
//      rows + GEMM) — where kGemmMinTokens comes from — and the warp-specialised kernel's narrowest tile
//      covering T (16, 32 or 64 tokens; the automatic choice there now). Weights rotate over copies
//      ≥ 3× the L2, as in a real forward pass where each matrix is read once.
//   3. Gated delta rule, Bonsai-27B heads (16 key / 48 value, 128 × 128): the recurrent kernel against
//      the chunked one, in GB/s of the bytes the op must move (q, k, v, g, β, out, state in and out)
//      against the measured copy bandwidth.
//   4. Attention prefill, Qwen3.5-27B geometry (24 / 4 heads, head_dim 256): the fp32 flash-style kernel
//      (f32 cache, CUDA cores) against the tensor-core one (f16 cache), TFLOP/s = 4·d·H·Σ_t visible(t)
//      (the tensor-core kernel does twice these products: q and the weights enter as hi + lo).
// Time: each measurement is a CUDA graph of back-to-back calls, replayed and timed with events; the
// median replay divided by the calls.
//
// Measured (H200, 2026-11-29, same build as a passing test_prefill_* run; the copy figure then came from
// graph memcpy nodes, 2713 GB/s — the percentages in 3. below are against ~4250 GB/s, the eager copy):
//   1. pp512 Q1_0, µs (tile m64 unless noted) / TFLOP/s: ssm_qkv 265 / 202, ssm_gate 172 / 187,
//      ssm_beta/alpha 24.4 (m16) / 10, ssm_out 211 / 153, attn_q+gate 289 / 223, attn_k/v 63.6 (m16) / 84,
//      ffn_gate/up 455 / 200, ffn_down 567 / 160, lm_head 5543 / 235 (30% of bf16 peak); the m128 tile
//      was 30–50% slower than m64 everywhere. Whole model's matmuls at pp512: 152.7 ms, 172 TFLOP/s
//      (21.7% of 790) with m64 on every matrix; ~147 ms with m16 on the 48- and 1024-row ones, as the
//      automatic choice now does (per-matrix times above; not re-measured as one figure).
//      2026-11-30, the wgmma column (Q1_0 warpgroup tile, ops/matmul/gemm_wgmma_cuda.h), µs, m64 beside: ssm_qkv
//      252 (266), ssm_gate 172 (172), ssm_out 213 (211), attn_q+gate 255 (289), attn_out 212 (212),
//      ffn_gate/up 413 (456), ffn_down 538 (569), lm_head 4733 (5544); whole model 138.6 ms, 189 TFLOP/s
//      (24.0%) with the automatic choice (was 146.9). ncu: 8 warps an SM (255 registers), 6 cycles between a
//      warp's instructions, ~600 instructions a warp per k-tile: latency-bound, the tensor cores mostly idle.
//      2026-12-02, the ws column (warp-specialised tile, now the automatic choice), µs: ssm_qkv 141.6,
//      ssm_gate 95.1, ssm_out 113.4, attn_q+gate 140.6, attn_k/v 48.0 (m16: 63.4), attn_out 114.2,
//      ffn_gate/up 236.1, ffn_down 302.4, lm_head 2628.8 (495 TFLOP/s); whole model 79.96 ms, 328 TFLOP/s
//      (41.5%). Section 1b (stage rings, µs, default 8 stages with copies arriving): ffn_gate/up 233.5,
//      lm_head 2541.5; Bonsai-4B ffn_gate/up 74.6, lm_head 828.1 (m64 143.1 / 1788.8).
//   2. GEMM faster than T decode GEMVs from T = 6 (10240 × 5120), 8 (17408 × 5120), 12 (5120 × 17408);
//      the m16 tile costs 34 / 57 / 86 µs at any T ≤ 16 for these, the GEMV 6.7 / 8.7 / 10.6 µs a token.
//   3. Delta rule T = 512: recurrent 428 µs (94 GB/s, 2.2% of copy), chunked 321 µs (125 GB/s, 2.9%),
//      1.3×; T = 4096: 3360 → 2525 µs, 1.3×.
//   4. Attention T = 512: 642 → 257 µs (12.5 TFLOP/s, 19% of fp32 peak), 2.5×; T = 4096: 40.9 → 11.8 ms
//      (17.4 TFLOP/s, 26%), 3.5×; T = 512 after 8192: 18.8 → 7.8 ms, 2.4×.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#ifdef DELTABIT_HAVE_CUDA
#include <cuda_runtime.h>

#include "backend/cuda_buffer.h"
#include "backend/cuda_probe.h"
#include "core/half.h"
#include "ops/matmul/gemm_wgmma_cuda.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/attention/attention_cuda.h"
#include "ops/delta_rule/delta_rule_cuda.h"
#include "ops/matmul/gemm_cuda.h"
#endif

#ifndef DELTABIT_HAVE_CUDA
int main() {
    std::puts("bench_prefill_cuda: built without CUDA");
    return 0;
}
#else

namespace {

using namespace deltabit;
using namespace deltabit::cuda;

constexpr double kBf16PeakTflops = 790.0;  // measured here (KINDS.md), dense bf16
constexpr double kFp32PeakTflops = 67.0;   // H100/H200 SXM datasheet, fp32 FMA

uint64_t next_random(uint64_t& s) {  // xorshift64*
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ull;
}

std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t cols, uint64_t seed) {
    const DTypeInfo& info = dtype_info(t);
    std::vector<uint8_t> bytes(size_t(rows) * dtype_bytes(t, uint64_t(cols)));
    for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
        const uint64_t r = next_random(seed);
        std::memcpy(&bytes[i], &r, 8);
    }
    for (size_t b = 0; b < bytes.size(); b += info.block_bytes) {
        const uint16_t d = float_to_half(0.01f + float(next_random(seed) % 1000) * 1e-5f);
        std::memcpy(&bytes[b], &d, sizeof d);
    }
    return bytes;
}

std::vector<float> random_floats(size_t n, uint64_t seed, float lo, float hi) {
    std::vector<float> v(n);
    for (float& x : v) x = lo + (hi - lo) * float(next_random(seed) % 1000001) * 1e-6f;
    return v;
}

template <typename T>
DeviceBuffer upload(const std::vector<T>& v) {
    DeviceBuffer b(v.size() * sizeof(T));
    b.upload(v.data(), b.bytes());
    return b;
}

class Timer {
public:
    Timer() {
        cuda_check(cudaEventCreate(&start_), "event");
        cuda_check(cudaEventCreate(&stop_), "event");
    }
    ~Timer() {
        cudaEventDestroy(start_);
        cudaEventDestroy(stop_);
    }
    // µs per call: `calls` calls of body(i) captured in one graph, median of 7 replays after a warm-up.
    template <typename F>
    double graph_us(cudaStream_t stream, int calls, F&& body) {
        body(0);  // outside the capture: first-call attribute setup, warm caches
        cuda_check(cudaStreamSynchronize(stream), "warm-up");
        cudaGraph_t graph{};
        cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "begin capture");
        for (int i = 0; i < calls; ++i) body(i);
        cuda_check(cudaStreamEndCapture(stream, &graph), "end capture");
        cudaGraphExec_t exec{};
        cuda_check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
        cuda_check(cudaGraphLaunch(exec, stream), "replay");
        std::vector<double> ms;
        for (int r = 0; r < 7; ++r) {
            cuda_check(cudaEventRecord(start_, stream), "record");
            cuda_check(cudaGraphLaunch(exec, stream), "replay");
            cuda_check(cudaEventRecord(stop_, stream), "record");
            cuda_check(cudaEventSynchronize(stop_), "sync");
            float t = 0;
            cuda_check(cudaEventElapsedTime(&t, start_, stop_), "elapsed");
            ms.push_back(t);
        }
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        std::sort(ms.begin(), ms.end());
        return ms[3] * 1e3 / calls;
    }

private:
    cudaEvent_t start_{}, stop_{};
};

// Eager copies, not graph memcpy nodes: captured device-to-device copies measured 2713 GB/s on an
// H200 where eager ones (bench_gemv_cuda) measure ~4250 — the eager figure is the ceiling kernels see.
double copy_bandwidth_gbs(cudaStream_t stream) {
    const size_t bytes = size_t(1) << 30;
    DeviceBuffer a(bytes), b(bytes);
    cuda_check(cudaMemset(a.get(), 1, bytes), "memset");
    cudaEvent_t start{}, stop{};
    cuda_check(cudaEventCreate(&start), "event");
    cuda_check(cudaEventCreate(&stop), "event");
    std::vector<double> ms;
    for (int r = 0; r < 6; ++r) {
        cuda_check(cudaEventRecord(start, stream), "record");
        for (int i = 0; i < 10; ++i)
            cuda_check(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, stream), "copy");
        cuda_check(cudaEventRecord(stop, stream), "record");
        cuda_check(cudaEventSynchronize(stop), "sync");
        float t = 0;
        cuda_check(cudaEventElapsedTime(&t, start, stop), "elapsed");
        if (r > 0) ms.push_back(t);  // the first is a warm-up
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::sort(ms.begin(), ms.end());
    return 2.0 * double(bytes) * 10 / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

// Weights of one shape, in `copies` device copies (rotated so that no call finds them in L2).
struct RotatingWeights {
    GemvWeights w;
    DeviceBuffer codes, scales;
    int copies = 1;
    RotatingWeights(DType t, int64_t n, int64_t k, size_t l2_bytes, bool rotate) {
        const std::vector<uint8_t> host = random_weights(t, n, k, uint64_t(n * 31 + k) | 1);
        w = upload_gemv_weights(WeightView{host.data(), t, n, k}, "bench");
        const size_t cb = w.codes.bytes(), sb = w.scales.bytes();
        copies = rotate ? int(std::max<size_t>(1, 3 * l2_bytes / (cb + sb) + 1)) : 1;
        codes = DeviceBuffer(cb * copies);
        scales = DeviceBuffer(sb * copies);
        for (int c = 0; c < copies; ++c) {
            cuda_check(cudaMemcpy(codes.get<uint8_t>() + c * cb, w.codes.get(), cb, cudaMemcpyDeviceToDevice), "copy");
            cuda_check(cudaMemcpy(scales.get<uint8_t>() + c * sb, w.scales.get(), sb, cudaMemcpyDeviceToDevice), "copy");
        }
    }
    GemvWeightView view(int i) const {
        GemvWeightView v = w.view();
        v.codes = codes.get<uint8_t>() + size_t(i % copies) * w.codes.bytes();
        v.scales = reinterpret_cast<const uint16_t*>(scales.get<uint8_t>() + size_t(i % copies) * w.scales.bytes());
        return v;
    }
};

struct MatrixShape {
    const char* name;
    int64_t n, k;
    int per_model;  // matrices of this shape in one Bonsai-27B forward pass
};
// Bonsai-27B (qwen35): 48 DeltaNet layers (qkv, z gate, beta, alpha, out), 16 attention layers (q with
// its gate, k, v, out), 64 FFNs (gate, up, down), the LM head.
constexpr MatrixShape kModelShapes[] = {
    {"ssm_qkv", 10240, 5120, 48},  {"ssm_gate", 6144, 5120, 48}, {"ssm_beta/alpha", 48, 5120, 96},
    {"ssm_out", 5120, 6144, 48},   {"attn_q+gate", 12288, 5120, 16}, {"attn_k/v", 1024, 5120, 32},
    {"attn_out", 5120, 6144, 16},  {"ffn_gate/up", 17408, 5120, 128}, {"ffn_down", 5120, 17408, 64},
    {"lm_head", 248320, 5120, 1},
};

// One matrix's GEMM at T tokens: its weights, activations quantised once, and a tile's time per call.
struct GemmCase {
    RotatingWeights w;
    DeviceBuffer x, y;
    ActivationRowsScratch scratch;
    QuantizedActivationRows xq;
    double flops;
    int calls;  // per timed graph: ~2 ms of work at 300 TFLOP/s
    GemmCase(const MatrixShape& s, int64_t T, cudaStream_t stream)
        : w(DType::Q1_0, s.n, s.k, 0, false),
          x(upload(random_floats(size_t(T * s.k), 7, -1.0f, 1.0f))),
          y(size_t(T * s.n) * sizeof(float)),
          scratch(T, s.k),
          xq(scratch.view(T, s.k)),
          flops(2.0 * double(T) * double(s.n) * double(s.k)),
          calls(int(std::clamp(2e-3 / (flops / 300e12), 3.0, 200.0))) {
        quantize_activation_rows(x.get<float>(), xq, stream);
    }
    double tile_us(Timer& timer, cudaStream_t stream, GemmTile tile) {
        return timer.graph_us(stream, calls, [&](int) { gemm_quantized(xq, w.view(0), y.get<float>(), stream, tile); });
    }
};

// The automatic choice's tile, and its tail launch when it cut the matrix (ws_tail_plan):
// "wgmma_ws_m128_n128 + 512 rows wgmma_ws_m16_n128".
std::string chosen_text(const GemmLaunchReport& r) {
    std::string text = gemm_tile_name(r.tile);
    if (r.tail_rows > 0)
        text += " + " + std::to_string(r.tail_rows) + " rows " + gemm_tile_name(r.tail_tile);
    if (r.splits > 1) text += " split " + std::to_string(r.splits);
    return text;
}

void bench_gemm(cudaStream_t stream, Timer& timer) {
    const int64_t T = 512;
    std::printf("\n== 1. Q1_0 GEMM, T = %lld (pp%lld); TFLOP/s = 2·T·N·K / time; %% of %.0f TFLOP/s dense bf16\n",
                (long long)T, (long long)T, kBf16PeakTflops);
    std::printf("%-15s %7s %6s | %9s %9s %9s %9s %9s | %-48s %9s %7s %5s | %9s\n", "matrix", "N", "K", "m16 us",
                "m64 us", "m128 us", "wgmma us", "ws us", "auto", "us", "TFLOP/s", "%", "+quant us");
    double model_flops = 0, model_us = 0;
    for (const MatrixShape& s : kModelShapes) {
        GemmCase g(s, T, stream);
        auto& [w, x, y, scratch, xq, flops, calls] = g;
        auto time_tile = [&](GemmTile tile) { return g.tile_us(timer, stream, tile); };
        const double us16 = time_tile(GemmTile::m16_n64), us64 = time_tile(GemmTile::m64_n128),
                     us128 = time_tile(GemmTile::m128_n128), us_auto = time_tile(GemmTile::automatic);
        const bool wgmma = gemm_tile_supported(GemmTile::wgmma_m128_n128, DType::Q1_0);
        const double us_wgmma = wgmma ? time_tile(GemmTile::wgmma_m128_n128) : std::nan("");
        const double us_ws = wgmma ? time_tile(GemmTile::wgmma_ws_m128_n128) : std::nan("");
        const GemmLaunchReport chosen = gemm_quantized(xq, w.view(0), y.get<float>(), stream);
        const double us_full = timer.graph_us(stream, calls, [&](int) {
            matmul_prefill(x.get<float>(), w.view(0), T, y.get<float>(), scratch, stream);
        });
        const double tflops = flops / us_auto / 1e6;
        std::printf("%-15s %7lld %6lld | %9.1f %9.1f %9.1f %9.1f %9.1f | %-48s %9.1f %7.0f %5.1f | %9.1f\n", s.name,
                    (long long)s.n, (long long)s.k, us16, us64, us128, us_wgmma, us_ws, chosen_text(chosen).c_str(),
                    us_auto, tflops, 100 * tflops / kBf16PeakTflops, us_full);
        model_flops += flops * s.per_model;
        model_us += us_full * s.per_model;
    }
    const double tflops = model_flops / model_us / 1e6;
    std::printf("whole model pp%lld matmuls (quantise + GEMM, %d layers + LM head): %.2f ms, %.0f TFLOP/s = %.1f%% of "
                "%.0f; %.0f tok/s from the matmuls alone\n",
                (long long)T, 64, model_us / 1e3, tflops, 100 * tflops / kBf16PeakTflops, kBf16PeakTflops,
                double(T) / (model_us * 1e-6));
}

// The warp-specialised tile's stage rings (ops/matmul/gemm_wgmma_cuda.h ws_pipeline_name), on Bonsai-27B's and
// Bonsai-4B's (Qwen3-4B shape: hidden 2560, FFN 9728, 32/8 heads of 128, vocab 151936) larger matrices,
// beside the tiles the automatic choice weighs against it. µs per GEMM at T = 512.
void bench_ws_pipelines(cudaStream_t stream, Timer& timer) {
    const int64_t T = 512;
    const bool wgmma = gemm_tile_supported(GemmTile::wgmma_ws_m128_n128, DType::Q1_0);
    if (!wgmma) {
        std::puts("\n== 1b. warp-specialised GEMM pipelines: needs sm_90a machine code on a compute 9.0 device");
        return;
    }
    const int pipelines = detail::ws_pipeline_count();
    std::printf("\n== 1b. warp-specialised GEMM pipelines, Q1_0, T = %lld, µs (pipeline %d is the default)\n",
                (long long)T, detail::kDefaultWsPipeline);
    for (int p = 0; p < pipelines; ++p) std::printf("  pipeline %d: %s\n", p, detail::ws_pipeline_name(p).c_str());
    std::printf("%-18s %7s %6s | %8s %8s %8s |", "matrix", "N", "K", "m16", "m64", "wgmma");
    for (int p = 0; p < pipelines; ++p) std::printf(" %7s%d", "ws", p);
    std::printf(" | %8s %s\n", "auto", "(tile)");
    const MatrixShape shapes[] = {
        {"27b ssm_qkv", 10240, 5120, 0},   {"27b attn_k/v", 1024, 5120, 0}, {"27b ffn_gate/up", 17408, 5120, 0},
        {"27b ffn_down", 5120, 17408, 0},  {"27b lm_head", 248320, 5120, 0}, {"4b attn_q", 4096, 2560, 0},
        {"4b attn_k/v", 1024, 2560, 0},    {"4b attn_out", 2560, 4096, 0},  {"4b ffn_gate/up", 9728, 2560, 0},
        {"4b ffn_down", 2560, 9728, 0},    {"4b lm_head", 151936, 2560, 0},
    };
    for (const MatrixShape& s : shapes) {
        GemmCase g(s, T, stream);
        std::printf("%-18s %7lld %6lld | %8.1f %8.1f %8.1f |", s.name, (long long)s.n, (long long)s.k,
                    g.tile_us(timer, stream, GemmTile::m16_n64), g.tile_us(timer, stream, GemmTile::m64_n128),
                    g.tile_us(timer, stream, GemmTile::wgmma_m128_n128));
        for (int p = 0; p < pipelines; ++p)
            std::printf(" %8.1f", timer.graph_us(stream, g.calls, [&](int) {
                detail::gemm_q1_0_wgmma_ws(g.xq, g.w.view(0), g.y.get<float>(), stream, 0, p);
            }));
        std::printf(" | %8.1f %s\n", g.tile_us(timer, stream, GemmTile::automatic),
                    chosen_text(gemm_quantized(g.xq, g.w.view(0), g.y.get<float>(), stream)).c_str());
    }
}

// The Q1_0 prompt GEMM on f16 activations (gemm_q1_0_half) against the int8 one, at T = 512, on Bonsai-27B's
// and Bonsai-4B's matrices: each tile, the automatic choice, and the whole matmul the model runs (rounding
// or quantising the activations + GEMM: matmul_prompt vs matmul_prefill). The model lines weigh each shape
// by its count in one forward pass (Bonsai-4B: 36 layers of q, k, v, out, gate, up, down, and the LM head).
void bench_half(cudaStream_t stream, Timer& timer) {
    const int64_t T = 512;
    if (!half_gemm_available()) {
        std::puts("\n== 1c. f16-activation GEMM: needs sm_90a machine code on a compute 9.0 device");
        return;
    }
    std::printf("\n== 1c. Q1_0 GEMM on f16 activations vs int8, T = %lld, µs; TFLOP/s of the f16 matmul\n", (long long)T);
    if (!half_prompt_gemm_enabled())
        std::puts("   (DELTABIT_GEMM_F16=0: matmul_prompt takes the int8 path, so the f16 mm column is int8 too)");
    constexpr GemmTile kTiles[] = {GemmTile::half_m128_n256, GemmTile::half_m64_n256, GemmTile::half_m32_n256,
                                   GemmTile::half_m16_n256,  GemmTile::half_m128_n128, GemmTile::half_m64_n128,
                                   GemmTile::half_m32_n128,  GemmTile::half_m16_n128};
    std::printf("%-18s %7s %6s | %7s %7s %7s %7s | %7s %7s %7s %7s | %-40s %8s | %9s %9s %7s %5s\n", "matrix", "N", "K",
                "128x256", "64x256", "32x256", "16x256", "128x128", "64x128", "32x128", "16x128", "auto", "us",
                "int8 mm", "f16 mm", "TFLOP/s", "%");
    const MatrixShape shapes[] = {
        {"27b ssm_qkv", 10240, 5120, 48},     {"27b ssm_gate", 6144, 5120, 48}, {"27b ssm_beta/alpha", 48, 5120, 96},
        {"27b ssm_out", 5120, 6144, 48},      {"27b attn_q+gate", 12288, 5120, 16}, {"27b attn_k/v", 1024, 5120, 32},
        {"27b attn_out", 5120, 6144, 16},     {"27b ffn_gate/up", 17408, 5120, 128}, {"27b ffn_down", 5120, 17408, 64},
        {"27b lm_head", 248320, 5120, 1},     {"4b attn_q", 4096, 2560, 36},   {"4b attn_k/v", 1024, 2560, 72},
        {"4b attn_out", 2560, 4096, 36},      {"4b ffn_gate/up", 9728, 2560, 72}, {"4b ffn_down", 2560, 9728, 36},
        {"4b lm_head", 151936, 2560, 1},
    };
    double flops[2] = {0, 0}, us_int8[2] = {0, 0}, us_f16[2] = {0, 0};
    for (const MatrixShape& s : shapes) {
        GemmCase g(s, T, stream);
        DeviceBuffer scratch(half_activation_rows_bytes(T, s.k));
        const HalfActivationRows rows = half_activation_rows_view(scratch.get(), T, s.k);
        round_activation_rows_f16(g.x.get<float>(), rows, stream);
        auto tile_us = [&](GemmTile tile) {
            return timer.graph_us(stream, g.calls, [&](int) { gemm_q1_0_half(rows, g.w.view(0), g.y.get<float>(), stream, tile); });
        };
        double us[8];
        for (int i = 0; i < 8; ++i) us[i] = tile_us(kTiles[i]);
        const double autom = tile_us(GemmTile::automatic);
        const GemmLaunchReport chosen = gemm_q1_0_half(rows, g.w.view(0), g.y.get<float>(), stream);
        const double mm_int8 = timer.graph_us(stream, g.calls, [&](int) {
            matmul_prefill(g.x.get<float>(), g.w.view(0), T, g.y.get<float>(), g.scratch, stream);
        });
        const double mm_f16 = timer.graph_us(stream, g.calls, [&](int) {
            matmul_prompt(g.x.get<float>(), g.w.view(0), T, g.y.get<float>(), scratch.get(), stream);
        });
        const double tflops = g.flops / mm_f16 / 1e6;
        std::printf("%-18s %7lld %6lld | %7.1f %7.1f %7.1f %7.1f | %7.1f %7.1f %7.1f %7.1f | %-40s %8.1f | %9.1f %9.1f "
                    "%7.0f %5.1f\n",
                    s.name, (long long)s.n, (long long)s.k, us[0], us[1], us[2], us[3], us[4], us[5], us[6], us[7],
                    chosen_text(chosen).c_str(), autom, mm_int8, mm_f16, tflops, 100 * tflops / kBf16PeakTflops);
        const int model = s.name[0] == '4' ? 1 : 0;
        flops[model] += g.flops * s.per_model;
        us_int8[model] += mm_int8 * s.per_model;
        us_f16[model] += mm_f16 * s.per_model;
    }
    for (int model = 0; model < 2; ++model) {
        const double t8 = flops[model] / us_int8[model] / 1e6, t16 = flops[model] / us_f16[model] / 1e6;
        std::printf("%s pp%lld matmuls: int8 %.2f ms (%.1f%% of %.0f), f16 %.2f ms (%.1f%%)\n",
                    model == 0 ? "Bonsai-27B" : "Bonsai-4B", (long long)T, us_int8[model] / 1e3,
                    100 * t8 / kBf16PeakTflops, kBf16PeakTflops, us_f16[model] / 1e3, 100 * t16 / kBf16PeakTflops);
    }
}

// Split k of the f16 GEMM: the automatic choice's tile with each tile's k-tiles shared by 1 .. 8 blocks of a
// cluster, on the shapes whose tiles do not fill the GPU (few weight rows, or few tokens); what the planner's
// split cost (gemm_half_cuda.cu kSplitCost) is calibrated on.
void bench_half_splits(cudaStream_t stream, Timer& timer) {
    if (!half_gemm_available()) return;
    std::printf("\n== 1d. f16 GEMM split k: µs with each tile's k-tiles over S blocks of a cluster (the automatic tile)\n");
    const detail::HalfGemmClusters clusters = detail::half_gemm_device_clusters();
    std::printf("   clusters that run at once: S=2 %d, S=3 %d, S=4 %d, S=6 %d, S=8 %d (of %d SMs)\n", clusters.of[2],
                clusters.of[3], clusters.of[4], clusters.of[6], clusters.of[8], clusters.of[1]);
    std::printf("%-22s %5s %6s %6s | %-34s %8s | %8s %8s %8s %8s %8s %8s\n", "matrix", "T", "N", "K", "auto", "us", "S=1",
                "S=2", "S=3", "S=4", "S=6", "S=8");
    struct SplitShape {
        const char* name;
        int64_t tokens, n, k;
    };
    const SplitShape shapes[] = {{"27b ffn_down", 512, 5120, 17408}, {"27b ssm_out", 512, 5120, 6144},
                                 {"27b ssm_gate", 512, 6144, 5120},  {"27b attn_k/v", 512, 1024, 5120},
                                 {"27b ssm_beta/alpha", 512, 48, 5120}, {"27b ffn_gate/up", 16, 17408, 5120},
                                 {"27b ffn_down", 16, 5120, 17408},  {"27b ffn_down", 64, 5120, 17408},
                                 {"27b ssm_qkv", 16, 10240, 5120},   {"4b ffn_down", 512, 2560, 9728}};
    for (const SplitShape& s : shapes) {
        GemmCase g(MatrixShape{s.name, s.n, s.k, 1}, s.tokens, stream);
        DeviceBuffer scratch(half_activation_rows_bytes(s.tokens, s.k));
        const HalfActivationRows rows = half_activation_rows_view(scratch.get(), s.tokens, s.k);
        round_activation_rows_f16(g.x.get<float>(), rows, stream);
        const GemmLaunchReport chosen = gemm_q1_0_half(rows, g.w.view(0), g.y.get<float>(), stream);
        const double autom = timer.graph_us(stream, g.calls, [&](int) {
            gemm_q1_0_half(rows, g.w.view(0), g.y.get<float>(), stream);
        });
        std::printf("%-22s %5lld %6lld %6lld | %-34s %8.1f |", s.name, (long long)s.tokens, (long long)s.n,
                    (long long)s.k, chosen_text(chosen).c_str(), autom);
        for (int splits : {1, 2, 3, 4, 6, 8}) {
            if (s.k / 128 < 4 * splits) {
                std::printf(" %8s", "-");
                continue;
            }
            std::printf(" %8.1f", timer.graph_us(stream, g.calls, [&](int) {
                gemm_q1_0_half(rows, g.w.view(0), g.y.get<float>(), stream, chosen.tile, 0, splits);
            }));
        }
        std::printf("\n");
    }
}

void bench_crossover(cudaStream_t stream, Timer& timer, size_t l2_bytes) {
    std::printf("\n== 2. GEMV per token vs one GEMM, Q1_0, weights rotating past the L2 (µs per matmul of T tokens)\n");
    const MatrixShape shapes[] = {{"ssm_qkv", 10240, 5120, 0}, {"ffn_gate/up", 17408, 5120, 0}, {"ffn_down", 5120, 17408, 0}};
    const int64_t lengths[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
    for (const MatrixShape& s : shapes) {
        RotatingWeights w(DType::Q1_0, s.n, s.k, l2_bytes, true);
        const int64_t t_max = 64;
        const std::vector<float> x_host = random_floats(size_t(t_max * s.k), 9, -1.0f, 1.0f);
        DeviceBuffer x = upload(x_host), y(size_t(t_max * s.n) * sizeof(float));
        const ActivationRowsScratch rows(t_max, s.k);
        const ActivationScratch one(s.k);
        // The warp-specialised kernel's narrow tiles: the narrowest that covers T.
        const bool narrow = gemm_tile_supported(GemmTile::wgmma_ws_m16_n128, DType::Q1_0);
        std::printf("%-12s %6s | %10s %10s %7s | %10s\n", s.name, "T", "GEMV×T", "GEMM", "ratio", "ws narrow");
        int64_t crossover = -1;
        for (int64_t T : lengths) {
            const int calls = 2 * w.copies;
            const double gemv = timer.graph_us(stream, calls, [&](int i) {
                for (int64_t t = 0; t < T; ++t)
                    matmul(x.get<float>() + t * s.k, w.view(i), 1, y.get<float>() + t * s.n, one, stream);
            });
            const double gemm = timer.graph_us(stream, calls, [&](int i) {
                const QuantizedActivationRows xq = rows.view(T, s.k);
                quantize_activation_rows(x.get<float>(), xq, stream);
                gemm_quantized(xq, w.view(i), y.get<float>(), stream);
            });
            const GemmTile tile = T <= 16   ? GemmTile::wgmma_ws_m16_n128
                                  : T <= 32 ? GemmTile::wgmma_ws_m32_n128
                                            : GemmTile::wgmma_ws_m64_n128;
            const double ws = !narrow ? std::nan("") : timer.graph_us(stream, calls, [&](int i) {
                const QuantizedActivationRows xq = rows.view(T, s.k);
                quantize_activation_rows(x.get<float>(), xq, stream);
                gemm_quantized(xq, w.view(i), y.get<float>(), stream, tile);
            });
            if (crossover < 0 && gemm < gemv) crossover = T;
            std::printf("%-12s %6lld | %10.2f %10.2f %7.2f | %10.2f\n", "", (long long)T, gemv, gemm, gemv / gemm, ws);
        }
        std::printf("%-12s GEMM faster from T = %lld (kGemmMinTokens = %lld)\n", s.name, (long long)crossover,
                    (long long)kGemmMinTokens);
    }
}

void bench_delta_rule(cudaStream_t stream, Timer& timer, double copy_gbs) {
    std::printf("\n== 3. gated delta rule, Bonsai-27B heads (16/48, 128×128); GB/s of the bytes the op moves, %% of %.0f copy\n",
                copy_gbs);
    std::printf("%6s | %12s %8s %6s | %12s %8s %6s %8s | %7s\n", "T", "recurrent us", "GB/s", "%", "chunked us",
                "GB/s", "%", "TFLOP/s", "speedup");
    for (int64_t T : {int64_t(512), int64_t(4096)}) {
        const DeltaRuleDims d{T, 16, 48, 128, 128, KeyHeadMap::tiled};
        DeviceBuffer q = upload(random_floats(size_t(T * 16 * 128), 1, -0.1f, 0.1f));
        DeviceBuffer k = upload(random_floats(size_t(T * 16 * 128), 2, -0.1f, 0.1f));
        DeviceBuffer v = upload(random_floats(size_t(T * 48 * 128), 3, -1.0f, 1.0f));
        DeviceBuffer g = upload(random_floats(size_t(T * 48), 4, -1.0f, -0.001f));
        DeviceBuffer beta = upload(random_floats(size_t(T * 48), 5, 0.0f, 1.0f));
        DeviceBuffer state(size_t(48 * 128 * 128) * sizeof(float)), out(size_t(T * 48 * 128) * sizeof(float));
        cuda_check(cudaMemset(state.get(), 0, state.bytes()), "zero state");
        DeviceBuffer workspace(delta_rule_chunked_workspace_bytes(d));
        const double bytes = 4.0 * double(2 * T * 16 * 128 + 2 * T * 48 * 128 + 2 * T * 48 + 2 * 48 * 128 * 128);
        // Chunked work per head and chunk of 64: A and M (64²·128 each), K S, Q S, the state update
        // (64·128² each), Tb R and M V' (64²·128/2 each) multiply-adds, ×2 FLOP.
        const double flops = 2.0 * 48 * double((T + 63) / 64) * (2.0 * 64 * 64 * 128 + 3.0 * 64 * 128 * 128 + 64.0 * 64 * 128);
        const double rec = timer.graph_us(stream, 3, [&](int) {
            gated_delta_rule_recurrent(q.get<float>(), k.get<float>(), v.get<float>(), g.get<float>(), beta.get<float>(),
                                       d, state.get<float>(), out.get<float>(), stream);
        });
        const double chk = timer.graph_us(stream, 3, [&](int) {
            gated_delta_rule_chunked(q.get<float>(), k.get<float>(), v.get<float>(), g.get<float>(), beta.get<float>(),
                                     d, state.get<float>(), out.get<float>(), workspace.get(), stream);
        });
        auto gbs = [&](double us) { return bytes / us / 1e3; };
        std::printf("%6lld | %12.1f %8.1f %6.2f | %12.1f %8.1f %6.2f %8.2f | %7.1f\n", (long long)T, rec, gbs(rec),
                    100 * gbs(rec) / copy_gbs, chk, gbs(chk), 100 * gbs(chk) / copy_gbs, flops / chk / 1e6, rec / chk);
    }
}

void bench_attention(cudaStream_t stream, Timer& timer) {
    std::printf("\n== 4. attention prefill, Qwen3.5-27B (24/4 heads, d 256); TFLOP/s = 4·d·H·Σ visible; fp32 flash "
                "(f32 cache) against tensor cores (f16 cache, %% of %.0f bf16 peak)\n",
                kBf16PeakTflops);
    std::printf("%6s %7s | %12s %8s | %12s %8s %6s | %7s\n", "T", "n_past", "fp32 us", "TFLOP/s", "mma us", "TFLOP/s",
                "%", "speedup");
    struct Run {
        int64_t T, past;
    };
    for (const Run r : {Run{512, 0}, Run{4096, 0}, Run{512, 8192}, Run{512, 32768}, Run{4096, 28672}}) {
        const AttentionDims d{r.T, r.past, 24, 4, 256};
        const int64_t n_kv = r.past + r.T;
        const std::vector<float> k_host = random_floats(size_t(n_kv * 4 * 256), 2, -1.0f, 1.0f);
        const std::vector<float> v_host = random_floats(size_t(n_kv * 4 * 256), 3, -1.0f, 1.0f);
        std::vector<uint16_t> k_half(k_host.size()), v_half(v_host.size());
        for (size_t i = 0; i < k_host.size(); ++i) k_half[i] = float_to_half(k_host[i]), v_half[i] = float_to_half(v_host[i]);
        DeviceBuffer q = upload(random_floats(size_t(r.T * 24 * 256), 1, -1.0f, 1.0f));
        DeviceBuffer k = upload(k_host), v = upload(v_host), kh = upload(k_half), vh = upload(v_half);
        DeviceBuffer gate = upload(random_floats(size_t(r.T * 24 * 256), 4, -2.0f, 2.0f));
        DeviceBuffer out(size_t(r.T * 24 * 256) * sizeof(float));
        const double visible = double(r.T) * double(r.past) + double(r.T) * double(r.T + 1) / 2;
        const double flops = 4.0 * 256 * 24 * visible;
        const double f32_us = timer.graph_us(stream, 2, [&](int) {
            attention_prefill(q.get<float>(), k.get<float>(), v.get<float>(), gate.get<float>(), d, out.get<float>(), stream);
        });
        const double mma_us = timer.graph_us(stream, 2, [&](int) {
            attention_prefill_mma(q.get<float>(), kh.get<uint16_t>(), vh.get<uint16_t>(), gate.get<float>(), d,
                                  out.get<float>(), stream);
        });
        std::printf("%6lld %7lld | %12.1f %8.2f | %12.1f %8.2f %6.1f | %7.1f\n", (long long)r.T, (long long)r.past, f32_us,
                    flops / f32_us / 1e6, mma_us, flops / mma_us / 1e6, 100 * flops / mma_us / 1e6 / kBf16PeakTflops,
                    f32_us / mma_us);
    }
}

}  // namespace

int main(int argc, char** argv) {
    // Sections by name (gemm, pipelines, crossover, delta, attention); none named: all of them.
    static constexpr const char* kSections[] = {"gemm", "pipelines", "half", "crossover", "delta", "attention"};
    for (int i = 1; i < argc; ++i) {
        const bool known = std::any_of(std::begin(kSections), std::end(kSections),
                                       [&](const char* s) { return std::strcmp(argv[i], s) == 0; });
        if (!known) {
            std::fprintf(stderr, "bench_prefill_cuda: no section '%s'; name any of gemm, pipelines, half, crossover, "
                                 "delta, attention (none: all of them)\n", argv[i]);
            return 2;
        }
    }
    auto wanted = [&](const char* name) {
        if (argc < 2) return true;
        for (int i = 1; i < argc; ++i)
            if (std::strcmp(argv[i], name) == 0) return true;
        return false;
    };
    if (device_count() == 0) {
        std::puts("bench_prefill_cuda: no CUDA device");
        return 0;
    }
    try {
        cudaDeviceProp prop{};
        cuda_check(cudaGetDeviceProperties(&prop, 0), "properties");
        cudaStream_t stream{};
        cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
        Timer timer;
        const double copy_gbs = copy_bandwidth_gbs(stream);
        std::printf("device: %s, %d SMs, L2 %.0f MiB; D2D copy %.0f GB/s (read + write)\n", device_summary().c_str(),
                    prop.multiProcessorCount, prop.l2CacheSize / 1048576.0, copy_gbs);
        if (wanted("gemm")) bench_gemm(stream, timer);
        if (wanted("pipelines")) bench_ws_pipelines(stream, timer);
        if (wanted("half")) {
            bench_half(stream, timer);
            bench_half_splits(stream, timer);
        }
        if (wanted("crossover")) bench_crossover(stream, timer, size_t(prop.l2CacheSize));
        if (wanted("delta")) bench_delta_rule(stream, timer, copy_gbs);
        if (wanted("attention")) bench_attention(stream, timer);
        cudaStreamDestroy(stream);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_prefill_cuda: %s\n", e.what());
        return 1;
    }
    return 0;
}
#endif
