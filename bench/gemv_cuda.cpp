// Micro-benchmark of the CUDA decode GEMV (ops/matmul/matmul_cuda.h) on the Bonsai-27B decode shapes, read
// against the card's measured device-to-device copy bandwidth.
//
//   bench_gemv_cuda [--tsv FILE] [--type q1_0|q2_0|q4_0|q8_0] [--shape NAME] [--planned-only]
//                   [--l2-resident] [--b1] [--b1-staged] [--chain-only] [--small-gemm]
//   FILE gets every launch shape tried, one row each; --type measures one weight type only, --shape one
//   shape (e.g. ffn_down); --planned-only skips the sweep of launch shapes; --l2-resident reuses one copy
//   of the weights, so a matrix that fits in L2 is read from it (the time a GEMV would take if something
//   had already brought its weights there); --b1 also times the binary tensor-core GEMV of
//   ops/matmul/gemv_b1_cuda.h on the Q1_0 shapes, one line per launch shape; --b1-staged also (with --b1)
//   sweeps the ring-fed b1 GEMV of ops/matmul/gemv_b1_staged_cuda.h on them (every config to the TSV, the
//   best per shape printed), then times a Bonsai-27B DeltaNet layer's GEMVs as a chain in layer order
//   (classic with its epilogues, and classic, b1 and b1 staged as plain GEMVs, with and without the bit
//   planes rebuilt between); --chain-only (with --b1-staged) skips the per-shape part. --small-gemm times,
//   instead of the GEMVs, each kernel of the batched decode step's gemm_q1_0_small (split, wide64, wide128,
//   wide256) on the Q1_0 shapes at 2, 4 and 8 tokens (x quantised once, outside the timing), GB/s counting
//   the weights' GGUF bytes only.
//
// Bytes counted per GEMV: the weights in their ORIGINAL GGUF size (Q1_0 1.125 bits per weight, ...)
// plus x (K f32) and y (N f32). Time: a CUDA graph of many back-to-back GEMVs, each reading a
// different copy of the weights (the copies together are ≥ 3× the L2, so no launch finds its weights
// in cache), replayed several times and timed with events; the median replay over launches. The
// copy bandwidth is a 1 GiB cudaMemcpy device to device, counting bytes read plus bytes written.
//
// Measured (H200, copy 4234 GB/s; best launch shape of the sweep, µs / % of copy):
//   Q1_0  attn_qkv 5.27 / 33%  ffn_gate/up 7.23 / 41%  ffn_down 8.57 / 35%  lm_head 49.9 / 85%
//   Q2_0  ffn_gate/up 11.3 / 50%  lm_head 95.0 / 84%      Q4_0  ffn_gate/up 13.6 / 87%  lm_head 166 / 102%
//   Q8_0  ffn_gate/up 22.7 / 99%  lm_head 304 / 105%      quantise x: 1.5 µs (one launch)
// Small Q1_0 GEMVs (1–3 µs of bytes) are bounded by launch ramp and the first loads' latency, not by
// bandwidth: the next steps are PDL / one fused per-layer kernel, not a faster inner loop.
// 2026-11-29, with programmatic launch (back-to-back launches overlap) and 16 code loads in flight per
// thread (Q1_0, planned / best µs, % of copy): attn_qkv 5.71 / 5.03 (35%), ffn_gate/up 7.88 / 7.82
// (38%), ffn_down 9.21 / 9.13 (33%), lm_head 56.5 (75%). 8 or 4 loads in flight (then a build flag, now
// GemvLaunchConfig::loads_in_flight, in the sweep) moved each shape by −15%…+10%, no consistent winner. ncu on the decode step: 137
// registers per thread, 12 warps per SM, 8.4 cycles between issues per warp, ~0.6 instructions per
// weight (dp4a). More warps alone (fewer loads in flight) did not help: every tile is load → wait →
// compute with all warps in the same phase. Measured since and no faster: cp.async stages for the codes,
// L2 prefetch of a block's later tiles, cp.async for the copy of x into shared memory. At IPC ≈ 1.4 per SM,
// 0.6 instructions per weight predict the FFN shapes' 8–9 µs, so next: fewer instructions per weight
// (binary tensor cores: mma.m16n8k128.b1.and.popc with x's eight bit planes as the eight columns).
// 2026-11-29, session 13: built and measured, not kept. The b1 mma is native on sm_90 (479 T weights/s in
// a register loop, 6.6× the s8 mma), and a b1 GEMV (16-row tiles, k-split warps, every decode epilogue) was
// 1.07–1.4× this kernel on the shapes above — but no faster in the model (Bonsai-27B 255 vs 263 tok/s,
// 4B +3% at best over k-split sweeps) for twice the 1-bit weight memory. Nor was an L2 prefetch of the next
// GEMV's weights issued by the one before (−1…−2%). What the figures here cannot show: a kernel alone
// streams 12 MiB in no less than ~5.9 µs (deltabit bench's "floors" line), and in the replayed step these
// GEMVs overlap their neighbours (docs/bench.md, "A kernel timeline of the decode step").
// 2026-12-01, session 16 (Q1_0, planned shape, % of copy, DRAM chain / --l2-resident chain): attn_qkv
// 31.3 / 37.1, attn_gate 29.9 / 34.9, ffn_gate/up 38.0 / 45.7, ffn_down 33.5 / 42.4, k6144 28.6 / 33.8,
// lm_head 76.5 / 77.5 (does not fit). Weights already in L2 make these kernels only 15–21% faster: from L2 a
// GEMV costs ~1.3 µs + bytes / 2.6 TB/s, so the kernel, not DRAM, sets the pace. ncu (ffn_gate/up): 12 warps
// per SM (158 registers), 2.4 active and 0.7 eligible per scheduler, issue slots 32% busy, ALU the busiest
// pipe — the dp4a dot spends ~0.34 ALU instructions per weight on a half-rate pipe. An L2 prefetcher running
// beside the chain (commit 2132db5, removed) gained 0–3 points here and lost 6% (27B) / 10% (4B) in the model.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#ifdef DELTABIT_HAVE_CUDA
#include <cuda_runtime.h>

#include "backend/cuda_buffer.h"
#include "backend/cuda_probe.h"
#include "core/half.h"
#include "ops/matmul/gemm_cuda.h"
#include "ops/matmul/gemv_b1_cuda.h"
#include "ops/matmul/gemv_b1_staged_cuda.h"
#include "ops/matmul/matmul_cuda.h"
#endif

#ifndef DELTABIT_HAVE_CUDA
int main() {
    std::puts("bench_gemv_cuda: built without CUDA");
    return 0;
}
#else

namespace {

using namespace deltabit;
using namespace deltabit::cuda;

struct Shape {
    const char* name;
    int64_t n, k;
};
constexpr Shape kShapes[] = {
    {"attn_qkv", 10240, 5120}, {"attn_gate", 6144, 5120}, {"ffn_gate/up", 17408, 5120}, {"attn_q", 12288, 5120},
    {"ffn_down", 5120, 17408}, {"k6144", 5120, 6144},     {"lm_head", 248320, 5120},  {"ssm_in", 16480, 5120},
};

uint64_t next_random(uint64_t& s) {  // xorshift64*: fast enough for gigabytes of random blocks
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
    for (size_t b = 0; b < bytes.size(); b += info.block_bytes) {  // finite, realistic scales
        const uint16_t d = float_to_half(0.01f + float(next_random(seed) % 1000) * 1e-5f);
        std::memcpy(&bytes[b], &d, sizeof d);
    }
    return bytes;
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
    // Median milliseconds of `trials` runs of `body` on `stream`, after one warm-up run.
    template <typename F>
    double median_ms(cudaStream_t stream, int trials, F&& body) {
        body();
        cuda_check(cudaStreamSynchronize(stream), "warm-up");
        std::vector<double> ms;
        for (int i = 0; i < trials; ++i) {
            cuda_check(cudaEventRecord(start_, stream), "record");
            body();
            cuda_check(cudaEventRecord(stop_, stream), "record");
            cuda_check(cudaEventSynchronize(stop_), "sync");
            float t = 0;
            cuda_check(cudaEventElapsedTime(&t, start_, stop_), "elapsed");
            ms.push_back(t);
        }
        std::sort(ms.begin(), ms.end());
        return ms[ms.size() / 2];
    }

private:
    cudaEvent_t start_{}, stop_{};
};

double copy_bandwidth_gbs(cudaStream_t stream, Timer& timer) {
    const size_t bytes = size_t(1) << 30;
    DeviceBuffer a(bytes), b(bytes);
    cuda_check(cudaMemset(a.get(), 1, bytes), "memset");
    const int reps = 10;
    const double ms = timer.median_ms(stream, 5, [&] {
        for (int i = 0; i < reps; ++i) {
            cuda_check(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, stream), "copy");
        }
    });
    return 2.0 * double(bytes) * reps / (ms * 1e-3) / 1e9;
}

// Runs `launches` calls of `body(i)` captured in one graph; returns µs per call (median replay).
template <typename F>
double graph_us(cudaStream_t stream, Timer& timer, int launches, F&& body) {
    cudaGraph_t graph{};
    cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "begin capture");
    for (int i = 0; i < launches; ++i) body(i);
    cuda_check(cudaStreamEndCapture(stream, &graph), "end capture");
    cudaGraphExec_t exec{};
    cuda_check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    const double ms = timer.median_ms(stream, 7, [&] { cuda_check(cudaGraphLaunch(exec, stream), "replay"); });
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return ms * 1e3 / launches;
}

struct Result {
    GemvLaunchConfig config;
    double us = 0;
};

std::string config_text(const GemvLaunchConfig& c) {
    return "lanes" + std::to_string(c.lanes_per_row) + "/rows" + std::to_string(c.rows_per_thread) + "/warps" +
           std::to_string(c.warps_per_block) + "/loads" + std::to_string(c.loads_in_flight);
}

std::string b1_text(const GemvB1Config& c) {
    return "warps" + std::to_string(c.warps_per_block) + "/batch" + std::to_string(c.batch) + "/splits" +
           std::to_string(c.splits);
}

std::string staged_text(const GemvB1StagedConfig& c) {
    return "warps" + std::to_string(c.warps_per_block) + "/splits" + std::to_string(c.splits) + "/stages" +
           std::to_string(c.stages) + "/groups" + std::to_string(c.stage_groups) + "/bps" +
           std::to_string(c.blocks_per_sm) + (c.balanced_grid ? "/balanced" : "");
}

// The b1 staged sweep: 4 or 8 warps, 1 to 8 K splits, rings of 2, 4 or 8 stages of 1, 2 or 4 unit groups, one
// or two blocks an SM. A shape keeps only the configs whose blocks leave room for as many of the next
// kernel's beside them (resident_per_sm ≥ 2 · blocks_per_sm): the point of the ring is to stream across the
// kernel boundary.
std::vector<GemvB1StagedConfig> staged_sweep() {
    std::vector<GemvB1StagedConfig> sweep;
    for (int warps : {4, 8})
        for (int splits : {1, 2, 4, 8})
            for (int stages : {2, 4, 8})
                for (int groups : {1, 2, 4})
                    for (int bps : {1, 2}) {
                        if (splits > warps) continue;
                        GemvB1StagedConfig c;
                        c.warps_per_block = warps;
                        c.splits = splits;
                        c.stages = stages;
                        c.stage_groups = groups;
                        c.blocks_per_sm = bps;
                        sweep.push_back(c);
                    }
    return sweep;
}

bool leaves_room_for_the_next(int64_t n, int64_t k, const GemvB1StagedConfig& c) {
    try {
        return gemv_b1_staged_shape(n, k, c).resident_per_sm >= 2 * c.blocks_per_sm;
    } catch (const std::exception&) {
        return false;  // more shared memory than a block may have
    }
}

// The launch configs of a chain's matrices, by the bench's shape names (defaults where a shape was not swept).
struct ChainConfigs {
    std::map<std::string, GemvB1Config> b1;
    std::map<std::string, GemvB1StagedConfig> staged;
    GemvB1Config b1_for(const std::string& shape) const {
        const auto it = b1.find(shape);
        return it != b1.end() ? it->second : GemvB1Config{8, 2, 4};
    }
    GemvB1StagedConfig staged_for(const std::string& shape) const {
        const auto it = staged.find(shape);
        return it != staged.end() ? it->second : GemvB1StagedConfig{};
    }
};

// One Bonsai-27B DeltaNet layer's GEMVs (K = 5120 hidden, 6144 DeltaNet values, 17408 FFN) in layer order,
// each layer its own weights (layers together > 3× the L2); µs a layer, as graphs of programmatic launches:
//   - classic with its epilogues: output projection add-norm → SwiGLU with its quantised output → ffn_down
//     add-norm → the next layer's in-projection as a group of four (qkv, z, β, α): the planned calls of a step;
//   - as plain GEMVs (no epilogues, y = W·x only), five launches: in-projection (16480 rows), output
//     projection, gate, up, down — classic, b1 and b1 staged; for b1 and b1 staged also with the bit planes
//     rebuilt before each new input (four planes launches a layer), which the model would fold into the kernel
//     that quantises the activations.
void time_layer_chains(cudaStream_t stream, Timer& timer, double copy_gbs, size_t l2_bytes, const ChainConfigs& best) {
    const int64_t hidden = 5120, value = 6144, ffn = 17408, in_rows = 10240 + 6144 + 48 + 48;
    struct Layer {
        GemvWeights in_proj, out_proj, gate, up, down;
    };
    auto weights = [](int64_t rows, int64_t cols, uint64_t seed) {
        const std::vector<uint8_t> host = random_weights(DType::Q1_0, rows, cols, seed);
        return upload_gemv_weights(WeightView{host.data(), DType::Q1_0, rows, cols}, "chain");
    };
    const double layer_bytes = double(dtype_bytes(DType::Q1_0, uint64_t(in_rows * hidden))) +
                               double(dtype_bytes(DType::Q1_0, uint64_t(hidden * value))) +
                               3.0 * double(dtype_bytes(DType::Q1_0, uint64_t(ffn * hidden)));
    const int n_layers = int(std::max<double>(2.0, std::ceil(3.0 * double(l2_bytes) / layer_bytes)));
    std::vector<Layer> layers;
    for (int l = 0; l < n_layers; ++l) {
        const uint64_t seed = uint64_t(l) * 977 + 1;
        layers.push_back(Layer{weights(in_rows, hidden, seed), weights(hidden, value, seed + 1),
                               weights(ffn, hidden, seed + 2), weights(ffn, hidden, seed + 3),
                               weights(hidden, ffn, seed + 4)});
    }
    auto random_x = [](int64_t n, uint64_t seed) {
        std::vector<float> x(static_cast<size_t>(n));
        for (float& v : x) v = float(int64_t(next_random(seed) % 2001) - 1000) * 1e-3f;
        DeviceBuffer d(x.size() * sizeof(float));
        d.upload(x.data(), d.bytes());
        return d;
    };
    const DeviceBuffer x_h = random_x(hidden, 11), x_v = random_x(value, 12), x_f = random_x(ffn, 13);
    const ActivationScratch s_h(hidden), s_v(value), s_f(ffn);
    const QuantizedActivationsView q_h = s_h.view(hidden), q_v = s_v.view(value), q_f = s_f.view(ffn);
    quantize_activations(x_h.get<float>(), q_h, stream);
    quantize_activations(x_v.get<float>(), q_v, stream);
    quantize_activations(x_f.get<float>(), q_f, stream);
    const ActivationBitPlanes p_h(hidden), p_v(value), p_f(ffn);
    build_activation_bit_planes(q_h, p_h, stream);
    build_activation_bit_planes(q_v, p_v, stream);
    build_activation_bit_planes(q_f, p_f, stream);
    DeviceBuffer y_in(size_t(in_rows) * sizeof(float)), y_out(size_t(hidden) * sizeof(float)),
        y_gate(size_t(ffn) * sizeof(float)), y_up(size_t(ffn) * sizeof(float)), y_down(size_t(hidden) * sizeof(float));

    // The epilogue chain's state (as the decode step's): residual, norm weights, the deferred-norm views.
    std::vector<float> ones(static_cast<size_t>(hidden), 1.0f);
    DeviceBuffer residual(size_t(hidden) * sizeof(float)), norm_w(ones.size() * sizeof(float)),
        ffn_y(size_t(ffn) * sizeof(float));
    norm_w.upload(ones.data(), norm_w.bytes());
    cuda_check(cudaMemset(residual.get(), 0, residual.bytes()), "residual");
    const ActivationScratch after_attn(hidden), ffn_q(ffn), after_ffn(hidden);
    const QuantizedActivationsView a = after_attn.deferred_norm_view(hidden, 1e-6f), q = ffn_q.view(ffn),
                                   f = after_ffn.deferred_norm_view(hidden, 1e-6f);
    const int64_t group_rows[4] = {10240, 6144, 48, 48};
    auto group_outputs = [&](const Layer& l) {
        std::vector<GemvOutput> out;
        int64_t first = 0;
        for (int64_t rows : group_rows) {
            out.push_back({l.in_proj.view().slice_rows(first, rows), y_in.get<float>() + first});
            first += rows;
        }
        return out;
    };
    float* r = residual.get<float>();
    const int steps = 4 * n_layers;
    auto report = [&](const char* what, double us) {
        std::printf("chain %-58s %7.2f us a layer %5.1f%% of copy\n", what, us,
                    100.0 * layer_bytes / us / 1e3 / copy_gbs);
    };
    std::printf("\nBonsai-27B DeltaNet layer chain: %d layers of %.1f MB of Q1_0 weights, %d layers a graph\n", n_layers,
                layer_bytes / 1e6, steps);
    report("classic, planned calls with their epilogues", graph_us(stream, timer, steps, [&](int i) {
               const Layer& l = layers[size_t(i % n_layers)];
               gemv_quantized_add_norm(q_v, l.out_proj.view(), r, norm_w.get<float>(), a, stream);
               gemv_quantized_swiglu(a, l.gate.view(), l.up.view(), ffn_y.get<float>(), stream, &q);
               gemv_quantized_add_norm(q, l.down.view(), r, norm_w.get<float>(), f, stream);
               gemv_quantized_group(f, group_outputs(l), stream);
           }));
    report("classic, plain GEMVs (planned launch shapes)", graph_us(stream, timer, steps, [&](int i) {
               const Layer& l = layers[size_t(i % n_layers)];
               gemv_quantized(q_h, l.in_proj.view(), y_in.get<float>(), stream);
               gemv_quantized(q_v, l.out_proj.view(), y_out.get<float>(), stream);
               gemv_quantized(q_h, l.gate.view(), y_gate.get<float>(), stream);
               gemv_quantized(q_h, l.up.view(), y_up.get<float>(), stream);
               gemv_quantized(q_f, l.down.view(), y_down.get<float>(), stream);
           }));
    for (const bool rebuild : {false, true}) {
        auto planes = [&](const QuantizedActivationsView& xq, const ActivationBitPlanes& p) {
            if (rebuild) build_activation_bit_planes(xq, p, stream);
        };
        const std::string tail = rebuild ? ", planes rebuilt" : ", planes prebuilt";
        report(("b1, best per shape" + tail).c_str(), graph_us(stream, timer, steps, [&](int i) {
                   const Layer& l = layers[size_t(i % n_layers)];
                   planes(q_h, p_h);
                   gemv_q1_0_b1(q_h, p_h, l.in_proj.view(), y_in.get<float>(), stream, best.b1_for("ssm_in"));
                   planes(q_v, p_v);
                   gemv_q1_0_b1(q_v, p_v, l.out_proj.view(), y_out.get<float>(), stream, best.b1_for("k6144"));
                   planes(q_h, p_h);
                   gemv_q1_0_b1(q_h, p_h, l.gate.view(), y_gate.get<float>(), stream, best.b1_for("ffn_gate/up"));
                   gemv_q1_0_b1(q_h, p_h, l.up.view(), y_up.get<float>(), stream, best.b1_for("ffn_gate/up"));
                   planes(q_f, p_f);
                   gemv_q1_0_b1(q_f, p_f, l.down.view(), y_down.get<float>(), stream, best.b1_for("ffn_down"));
               }));
        // The per-shape best configs, then a few uniform ones (the same config for every matrix).
        std::vector<std::pair<std::string, std::map<std::string, GemvB1StagedConfig>>> variants;
        variants.push_back({"best per shape", best.staged});
        for (const GemvB1StagedConfig& c :
             {GemvB1StagedConfig{8, 4, 4, 2, 1, 0}, GemvB1StagedConfig{8, 8, 4, 1, 1, 0},
              GemvB1StagedConfig{8, 2, 4, 2, 1, 0}, GemvB1StagedConfig{4, 4, 4, 2, 2, 0},
              GemvB1StagedConfig{4, 2, 8, 1, 2, 0}, GemvB1StagedConfig{8, 4, 2, 4, 1, 0},
              GemvB1StagedConfig{8, 4, 4, 2, 1, 0, true}, GemvB1StagedConfig{8, 8, 4, 1, 1, 0, true}}) {
            std::map<std::string, GemvB1StagedConfig> uniform;
            for (const char* shape : {"ssm_in", "k6144", "ffn_gate/up", "ffn_down"}) uniform[shape] = c;
            variants.push_back({staged_text(c), uniform});
        }
        for (const auto& [name, configs] : variants) {
            const ChainConfigs use{{}, configs};
            try {
                report(("b1 staged, " + name + tail).c_str(), graph_us(stream, timer, steps, [&](int i) {
                           const Layer& l = layers[size_t(i % n_layers)];
                           planes(q_h, p_h);
                           gemv_q1_0_b1_staged(q_h, p_h, l.in_proj.view(), y_in.get<float>(), stream,
                                               use.staged_for("ssm_in"));
                           planes(q_v, p_v);
                           gemv_q1_0_b1_staged(q_v, p_v, l.out_proj.view(), y_out.get<float>(), stream,
                                               use.staged_for("k6144"));
                           planes(q_h, p_h);
                           gemv_q1_0_b1_staged(q_h, p_h, l.gate.view(), y_gate.get<float>(), stream,
                                               use.staged_for("ffn_gate/up"));
                           gemv_q1_0_b1_staged(q_h, p_h, l.up.view(), y_up.get<float>(), stream,
                                               use.staged_for("ffn_gate/up"));
                           planes(q_f, p_f);
                           gemv_q1_0_b1_staged(q_f, p_f, l.down.view(), y_down.get<float>(), stream,
                                               use.staged_for("ffn_down"));
                       }));
            } catch (const std::exception& e) {
                // A capture that failed part-way leaves the stream capturing: end it before going on.
                cudaGraph_t broken{};
                cudaStreamEndCapture(stream, &broken);
                if (broken != nullptr) cudaGraphDestroy(broken);
                std::printf("chain b1 staged, %s%s: %s\n", name.c_str(), tail.c_str(), e.what());
            }
        }
    }
}

// Copies of one matrix's weights, together ≥ 3× the L2 (one unless l2_resident), so that launch i reading
// copy i % copies never finds its weights in cache.
struct WeightCopies {
    DeviceBuffer codes, scales;
    size_t code_bytes = 0, scale_bytes = 0;
    int copies = 1;
    WeightCopies(const GemvWeights& w, size_t l2_bytes, bool l2_resident)
        : code_bytes(w.codes.bytes()), scale_bytes(w.scales.bytes()) {
        copies = l2_resident ? 1 : int(std::max<size_t>(2, 3 * l2_bytes / (code_bytes + scale_bytes) + 1));
        codes = DeviceBuffer(code_bytes * copies);
        scales = DeviceBuffer(scale_bytes * copies);
        for (int c = 0; c < copies; ++c) {
            cuda_check(cudaMemcpy(codes.get<uint8_t>() + c * code_bytes, w.codes.get(), code_bytes, cudaMemcpyDeviceToDevice), "copy");
            cuda_check(cudaMemcpy(scales.get<uint8_t>() + c * scale_bytes, w.scales.get(), scale_bytes, cudaMemcpyDeviceToDevice), "copy");
        }
    }
    GemvWeightView view(const GemvWeights& w, int i) const {
        GemvWeightView v = w.view();
        v.codes = codes.get<uint8_t>() + (i % copies) * code_bytes;
        v.scales = reinterpret_cast<const uint16_t*>(scales.get<uint8_t>() + (i % copies) * scale_bytes);
        return v;
    }
};

// --small-gemm: gemm_q1_0_small's kernels on the Q1_0 shapes at 2, 4 and 8 tokens.
void bench_small_gemm(cudaStream_t stream, Timer& timer, double copy_gbs, size_t l2_bytes, bool l2_resident,
                      const char* only_shape) {
    const struct {
        SmallGemmKernel kernel;
        const char* name;
    } kernels[] = {{SmallGemmKernel::split, "split"},
                   {SmallGemmKernel::wide64, "wide64"},
                   {SmallGemmKernel::wide128, "wide128"},
                   {SmallGemmKernel::wide256, "wide256"}};
    std::printf("\ngemm_q1_0_small: GB/s = weights (GGUF bytes) / time; %% = of the %.0f GB/s copy\n", copy_gbs);
    std::printf("%-12s %7s %6s %2s | %-8s %9s %7s %6s\n", "shape", "N", "K", "T", "kernel", "us", "GB/s", "%");
    for (const Shape& s : kShapes) {
        if (only_shape != nullptr && std::strcmp(s.name, only_shape) != 0) continue;
        const std::vector<uint8_t> host = random_weights(DType::Q1_0, s.n, s.k, uint64_t(s.n * 31 + s.k) | 1);
        const GemvWeights w = upload_gemv_weights(WeightView{host.data(), DType::Q1_0, s.n, s.k}, s.name);
        const WeightCopies copies(w, l2_bytes, l2_resident);
        const int64_t max_tokens = kSmallGemmMaxTokens;
        std::vector<float> x_host(size_t(max_tokens * s.k));
        uint64_t seed = 12345;
        for (float& v : x_host) v = float(int64_t(next_random(seed) % 2001) - 1000) * 1e-3f;
        DeviceBuffer x(x_host.size() * sizeof(float)), y(size_t(max_tokens * s.n) * sizeof(float));
        x.upload(x_host.data(), x.bytes());
        const ActivationRowsScratch scratch(max_tokens, s.k);
        const double bytes = double(dtype_bytes(DType::Q1_0, uint64_t(s.n * s.k)));
        const int launches = int(std::clamp(2e-3 / (bytes / 3e12), 20.0, 400.0));
        for (int64_t tokens : {2, 4, 8}) {
            const QuantizedActivationRows xq = scratch.view(tokens, s.k);
            quantize_activation_rows(x.get<float>(), xq, stream);
            for (const auto& k : kernels) {
                const double us = graph_us(stream, timer, launches, [&](int i) {
                    gemm_q1_0_small(xq, copies.view(w, i), y.get<float>(), stream, k.kernel);
                });
                std::printf("%-12s %7lld %6lld %2lld | %-8s %9.2f %7.0f %5.1f%%\n", s.name, (long long)s.n,
                            (long long)s.k, (long long)tokens, k.name, us, bytes / us / 1e3,
                            100 * bytes / us / 1e3 / copy_gbs);
            }
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    const char* tsv_path = nullptr;
    const char* only_type = nullptr;
    const char* only_shape = nullptr;
    bool l2_resident = false, planned_only = false, b1 = false, b1_staged = false, chain_only = false, small_gemm = false;
    for (int i = 1; i < argc; ++i) {
        if (i + 1 < argc && std::strcmp(argv[i], "--tsv") == 0) tsv_path = argv[i + 1];
        if (i + 1 < argc && std::strcmp(argv[i], "--type") == 0) only_type = argv[i + 1];
        if (i + 1 < argc && std::strcmp(argv[i], "--shape") == 0) only_shape = argv[i + 1];
        if (std::strcmp(argv[i], "--b1") == 0) b1 = true;
        if (std::strcmp(argv[i], "--b1-staged") == 0) b1 = b1_staged = true;
        if (std::strcmp(argv[i], "--chain-only") == 0) chain_only = true;
        if (std::strcmp(argv[i], "--small-gemm") == 0) small_gemm = true;
        if (std::strcmp(argv[i], "--l2-resident") == 0) l2_resident = true;
        if (std::strcmp(argv[i], "--planned-only") == 0) planned_only = true;
    }
    if (device_count() == 0) {
        std::puts("bench_gemv_cuda: no CUDA device");
        return 0;
    }
    try {
        cudaDeviceProp prop{};
        cuda_check(cudaGetDeviceProperties(&prop, 0), "properties");
        cudaStream_t stream{};
        cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
        Timer timer;
        const double copy_gbs = copy_bandwidth_gbs(stream, timer);
        std::printf("device: %s, L2 %.0f MiB; measured D2D copy bandwidth %.0f GB/s (read + write)\n",
                    device_summary().c_str(), prop.l2CacheSize / 1048576.0, copy_gbs);
        if (l2_resident) std::puts("--l2-resident: every launch reads the same copy of the weights (L2 hits where it fits)");
        if (small_gemm) {
            bench_small_gemm(stream, timer, copy_gbs, size_t(prop.l2CacheSize), l2_resident, only_shape);
            cudaStreamDestroy(stream);
            return 0;
        }
        FILE* tsv = tsv_path != nullptr ? std::fopen(tsv_path, "w") : nullptr;
        if (tsv != nullptr) std::fprintf(tsv, "dtype\tshape\tN\tK\tconfig\tus\tGBps\tpct_copy\n");

        struct Row {
            std::string dtype, shape, plan, best_config;
            int64_t n, k;
            double bytes, plan_us, best_us, matmul_us, quantize_us;
        };
        std::vector<Row> rows;
        // --b1 / --b1-staged: per shape the best of each b1 kernel beside the classic planned launch.
        struct StagedRow {
            std::string shape;
            double bytes, classic_us, b1_us;
            GemvB1Config b1;
            double staged_us;
            GemvB1StagedConfig staged;
            int tried, skipped;
        };
        std::vector<StagedRow> staged_rows;
        ChainConfigs chain_configs;
        for (DType t : {DType::Q1_0, DType::Q2_0, DType::Q4_0, DType::Q8_0}) {
            if (chain_only) break;
            if (only_type != nullptr && dtype_name(t) != std::string_view(only_type)) continue;
            std::vector<GemvLaunchConfig> sweep;
            for (int lanes : {8, 16, 32}) {
                for (int r : {2, 4}) {
                    for (int warps : {1, 2, 4, 8}) {
                        if (t != DType::Q1_0 && (lanes == 16 || warps == 1 || warps == 8)) continue;
                        for (int loads : {16, 8, 4}) {
                            if (r != 2 && loads != 16) continue;  // fewer loads are compiled for 2 rows only
                            GemvLaunchConfig c{lanes, r, warps, 0};
                            c.loads_in_flight = loads;
                            sweep.push_back(c);
                        }
                    }
                }
            }
            for (const Shape& s : kShapes) {
                if (only_shape != nullptr && std::strcmp(s.name, only_shape) != 0) continue;
                const std::vector<uint8_t> host = random_weights(t, s.n, s.k, uint64_t(s.n * 31 + s.k) | 1);
                const GemvWeights w = upload_gemv_weights(WeightView{host.data(), t, s.n, s.k}, s.name);
                const WeightCopies copies(w, size_t(prop.l2CacheSize), l2_resident);
                auto view = [&](int i) { return copies.view(w, i); };
                std::vector<float> x_host(static_cast<size_t>(s.k));
                uint64_t seed = 12345;
                for (float& v : x_host) v = float(int64_t(next_random(seed) % 2001) - 1000) * 1e-3f;
                DeviceBuffer x(x_host.size() * sizeof(float)), y(size_t(s.n) * sizeof(float));
                x.upload(x_host.data(), x.bytes());
                const ActivationScratch scratch(s.k);
                const QuantizedActivationsView xq = scratch.view(s.k);
                quantize_activations(x.get<float>(), xq, stream);

                const double bytes = double(dtype_bytes(t, uint64_t(s.n * s.k))) + 4.0 * double(s.k + s.n);
                // About 2 ms of work per replay, at least 20 launches (so the copies are all cycled).
                const int launches = int(std::clamp(2e-3 / (bytes / 3e12), 20.0, 400.0));
                auto time_config = [&](const GemvLaunchConfig& c) {
                    return graph_us(stream, timer, launches,
                                    [&](int i) { gemv_quantized(xq, view(i), y.get<float>(), stream, c); });
                };
                Row row{std::string(dtype_name(t)), s.name, "", "", s.n, s.k, bytes, 0, 1e30, 0, 0};
                const GemvLaunchConfig plan = plan_gemv(t, s.n, s.k);
                row.plan = config_text(plan);
                row.plan_us = time_config(plan);
                for (const auto& c : sweep) {
                    if (planned_only) break;
                    const double us = time_config(c);
                    if (us < row.best_us) {
                        row.best_us = us;
                        row.best_config = config_text(c);
                    }
                    if (tsv != nullptr) {
                        std::fprintf(tsv, "%s\t%s\t%lld\t%lld\t%s\t%.3f\t%.1f\t%.1f\n", row.dtype.c_str(), s.name,
                                     (long long)s.n, (long long)s.k, config_text(c).c_str(), us, bytes / us / 1e3,
                                     100.0 * bytes / us / 1e3 / copy_gbs);
                    }
                }
                if (planned_only) {
                    row.best_us = row.plan_us;
                    row.best_config = row.plan;
                }
                if (b1 && t == DType::Q1_0 && gemv_b1_supported()) {
                    const ActivationBitPlanes planes(s.k);
                    build_activation_bit_planes(xq, planes, stream);
                    StagedRow staged_row{s.name, bytes, row.plan_us, 1e30, {}, 1e30, {}, 0, 0};
                    for (const GemvB1Config& c : {GemvB1Config{4, 4, 1}, GemvB1Config{8, 4, 2}, GemvB1Config{8, 4, 4},
                                                  GemvB1Config{8, 4, 8}, GemvB1Config{8, 2, 4}, GemvB1Config{8, 2, 8},
                                                  GemvB1Config{4, 4, 4}, GemvB1Config{4, 2, 2}}) {
                        const double us = graph_us(stream, timer, launches, [&](int i) {
                            gemv_q1_0_b1(xq, planes, view(i), y.get<float>(), stream, c);
                        });
                        if (us < staged_row.b1_us) {
                            staged_row.b1_us = us;
                            staged_row.b1 = c;
                        }
                        if (!b1_staged)
                            std::printf("b1    %-12s warps %d batch %d splits %d: %8.2f us %7.0f GB/s %5.1f%% (classic "
                                        "planned %.2f us)\n",
                                        s.name, c.warps_per_block, c.batch, c.splits, us, bytes / us / 1e3,
                                        100 * bytes / us / 1e3 / copy_gbs, row.plan_us);
                        if (tsv != nullptr)
                            std::fprintf(tsv, "b1\t%s\t%lld\t%lld\t%s\t%.3f\t%.1f\t%.1f\n", s.name, (long long)s.n,
                                         (long long)s.k, b1_text(c).c_str(), us, bytes / us / 1e3,
                                         100.0 * bytes / us / 1e3 / copy_gbs);
                    }
                    chain_configs.b1[s.name] = staged_row.b1;
                    if (b1_staged) {
                        std::vector<std::pair<double, GemvB1StagedConfig>> timed;
                        auto time_staged = [&](const GemvB1StagedConfig& c) {
                            const double us = graph_us(stream, timer, launches, [&](int i) {
                                gemv_q1_0_b1_staged(xq, planes, view(i), y.get<float>(), stream, c);
                            });
                            timed.push_back({us, c});
                            if (us < staged_row.staged_us) {
                                staged_row.staged_us = us;
                                staged_row.staged = c;
                            }
                            if (tsv != nullptr)
                                std::fprintf(tsv, "b1_staged\t%s\t%lld\t%lld\t%s\t%.3f\t%.1f\t%.1f\n", s.name,
                                             (long long)s.n, (long long)s.k, staged_text(c).c_str(), us,
                                             bytes / us / 1e3, 100.0 * bytes / us / 1e3 / copy_gbs);
                        };
                        for (const GemvB1StagedConfig& c : staged_sweep()) {
                            if (!leaves_room_for_the_next(s.n, s.k, c)) {
                                ++staged_row.skipped;
                                continue;
                            }
                            ++staged_row.tried;
                            time_staged(c);
                        }
                        // The three best again on a balanced grid (as few blocks as take the same rounds).
                        std::sort(timed.begin(), timed.end(),
                                  [](const auto& a, const auto& b) { return a.first < b.first; });
                        timed.resize(std::min<size_t>(timed.size(), 3));
                        for (const auto& best : std::vector<std::pair<double, GemvB1StagedConfig>>(timed)) {
                            GemvB1StagedConfig c = best.second;
                            c.balanced_grid = true;
                            time_staged(c);
                        }
                        chain_configs.staged[s.name] = staged_row.staged;
                        staged_rows.push_back(staged_row);
                    }
                }
                row.quantize_us = graph_us(stream, timer, launches, [&](int) { quantize_activations(x.get<float>(), xq, stream); });
                row.matmul_us = graph_us(stream, timer, launches, [&](int i) {
                    matmul(x.get<float>(), view(i), 1, y.get<float>(), scratch, stream);
                });
                rows.push_back(row);
                std::fprintf(stderr, "done %s %s\n", row.dtype.c_str(), s.name);
            }
        }
        if (tsv != nullptr) std::fclose(tsv);

        std::printf("\nGB/s = (weights in original GGUF bytes + x f32 + y f32) / time; %% = of the %.0f GB/s copy\n", copy_gbs);
        std::printf("%-5s %-12s %7s %6s | %-20s %8s %7s %5s | %-20s %8s %7s %5s | %8s %8s\n", "type", "shape", "N", "K",
                    "planned", "us", "GB/s", "%", "best of sweep", "us", "GB/s", "%", "quant us", "q+gemv");
        for (const Row& r : rows) {
            auto gbs = [&](double us) { return r.bytes / us / 1e3; };
            std::printf("%-5s %-12s %7lld %6lld | %-20s %8.2f %7.0f %5.1f | %-20s %8.2f %7.0f %5.1f | %8.2f %8.2f\n",
                        r.dtype.c_str(), r.shape.c_str(), (long long)r.n, (long long)r.k, r.plan.c_str(), r.plan_us,
                        gbs(r.plan_us), 100 * gbs(r.plan_us) / copy_gbs, r.best_config.c_str(), r.best_us,
                        gbs(r.best_us), 100 * gbs(r.best_us) / copy_gbs, r.quantize_us, r.matmul_us);
        }
        if (!staged_rows.empty()) {
            std::printf("\nQ1_0 chains of one GEMV, best of each kernel (b1 staged: only configs leaving room for as many "
                        "of the next kernel's blocks)\n");
            std::printf("%-12s | %8s %5s | %8s %5s %-22s | %8s %5s %-36s | %s\n", "shape", "classic", "%", "b1", "%",
                        "config", "staged", "%", "config", "tried/skipped");
            for (const StagedRow& r : staged_rows) {
                auto pct = [&](double us) { return 100.0 * r.bytes / us / 1e3 / copy_gbs; };
                std::printf("%-12s | %8.2f %5.1f | %8.2f %5.1f %-22s | %8.2f %5.1f %-36s | %d/%d\n", r.shape.c_str(),
                            r.classic_us, pct(r.classic_us), r.b1_us, pct(r.b1_us), b1_text(r.b1).c_str(),
                            r.staged_us, pct(r.staged_us), staged_text(r.staged).c_str(), r.tried, r.skipped);
            }
        }
        if (b1_staged && gemv_b1_supported()) time_layer_chains(stream, timer, copy_gbs, size_t(prop.l2CacheSize), chain_configs);
        cudaStreamDestroy(stream);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_gemv_cuda: %s\n", e.what());
        return 1;
    }
    return 0;
}
#endif
