// Perf mode for the decode path (STYLE habit 9), with DELTABIT_OPS_PERF=1 (skips otherwise):
//   - attention at batch 1 on Bonsai-27B's geometry (24 q heads, 4 kv heads of 256, gate on) at depths
//     4K and 32K: split-K attention_cached (f32 and f16 cache, split + combine launches) against the
//     older one-block-per-head cuda::attention; µs and GB/s of K+V read against the copy bandwidth; and
//     the staged kernel over Bonsai-4B's heads at 32K.
//     Several caches are cycled so the KV comes from HBM, not L2 (50 MB), as in a real 16-layer step.
//   - the gated DeltaNet decode step (2 launches) against the op chain it replaces (7 launches + 3
//     copies), Bonsai-27B heads.
//   - the batched step's DeltaNet middle, Bonsai-27B heads, B = 8 and 64 rows: the rows forms (2 launches
//     for all rows, each row's state through a device table) against B single calls' 2·B launches.
//   - a whole decode step of the qwen3_5_binary fixture as Q1_0 (tiny: launch-bound), graph replay vs
//     eager launches, µs per token including the argmax round trip.
//
//   DELTABIT_OPS_PERF=1 ./test_cuda --gtest_filter='DecodePerf*'
//
// Measured (H200, copy 4249 GB/s, 2026-11-29, stop 11; µs, % of copy bandwidth on the K+V bytes):
//   attention depth 4K:  staged f16 15.3 (26%), f32 19.5 (41%); keys f16 37.2, f32 45.4; dims f16 37.8,
//                        f32 31.3; before (one block per query head) f32 484
//   attention depth 32K: staged f16 59.5 (53%), f32 85.5 (74%); keys f16 98.3 (32%), f32 139.1 (45%);
//                        dims f16 217.7, f32 180.5; before f32 3572. A grid planned for 131072 keys costs
//                        < 1 µs more.
//   gdn decode step: fused 8.4 (18% on the state's read + write) vs op chain 38.7
// 2026-12-02, stop 18, decode splits capped at one wave of the staged kernel's resident blocks (S=66):
//   attention depth 32K: staged f16 55.3 (57%), f32 81.6 (77%); depth 4K unchanged (S=64 either way)
//   Bonsai-4B heads (32/8 x 128) at 32K: staged f16 67.7 (47%, S=33), f32 76.0 (83%, S=49); uncapped
//   (S=128) 75.1 and 85.4. DELTABIT_ATTENTION_ONE_WAVE=0 gives the uncapped figures in the same build.
// Older (stop 9): qwen3_5_binary as Q1_0 (tiny, launch-bound): graph replay 149.5 µs/token, eager 374.4
// µs/token, each including the argmax's 4-byte round trip. Whole-model figures: bench/history.tsv.
#include "models/fixture.h"

#if DELTABIT_HAVE_CUDA

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda_buffer.h"
#include "backend/cuda_probe.h"
#include "cuda/decode_test_models.h"
#include "models/model_cuda.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/attention/attention_cuda.h"
#include "ops/delta_rule/delta_rule_cuda.h"

namespace deltabit {
namespace {

using cuda::cuda_check;
using cuda::DeviceBuffer;

bool perf_requested() {
    const char* v = std::getenv("DELTABIT_OPS_PERF");
    return v != nullptr && std::strcmp(v, "0") != 0;
}

DeviceBuffer random_floats(size_t n, float lo, float hi, uint32_t seed) {
    std::vector<float> host(n);
    uint32_t s = seed * 2654435761u + 1u;
    for (float& x : host) {
        s = s * 1664525u + 1013904223u;
        x = lo + (hi - lo) * float(s >> 8) * (1.0f / 16777216.0f);
    }
    DeviceBuffer d(n * sizeof(float));
    d.upload(host.data(), n * sizeof(float));
    return d;
}

// Median µs per call over 7 batches of `reps`, after a warm-up batch.
double time_us(const std::function<void(int)>& launch, int reps) {
    cudaEvent_t start, stop;
    cuda_check(cudaEventCreate(&start), "event");
    cuda_check(cudaEventCreate(&stop), "event");
    for (int i = 0; i < reps; ++i) launch(i);
    std::vector<double> batches;
    for (int b = 0; b < 7; ++b) {
        cuda_check(cudaEventRecord(start), "record");
        for (int i = 0; i < reps; ++i) launch(i);
        cuda_check(cudaEventRecord(stop), "record");
        cuda_check(cudaEventSynchronize(stop), "sync");
        float ms = 0;
        cuda_check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
        batches.push_back(1000.0 * ms / reps);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::sort(batches.begin(), batches.end());
    return batches[batches.size() / 2];
}

double copy_bandwidth_gbs() {
    const size_t bytes = size_t(1) << 30;
    DeviceBuffer a(bytes), b(bytes);
    cuda_check(cudaMemset(a.get(), 1, bytes), "memset");
    const double us = time_us(
        [&](int) { cuda_check(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice), "copy"); }, 5);
    return 2.0 * double(bytes) / (us * 1e3);
}

TEST(DecodePerf, AttentionAndDeltaNetKernels) {
    if (!perf_requested()) GTEST_SKIP() << "set DELTABIT_OPS_PERF=1 to time the decode kernels";
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
    const double copy = copy_bandwidth_gbs();
    std::printf("\n[perf] %s; device-to-device copy %.0f GB/s\n", cuda::device_summary().c_str(), copy);
    constexpr int64_t H = 24, H_kv = 4, d = 256;
    auto row = [&](const std::string& what, double us, double bytes) {
        const double gbs = bytes / (us * 1e3);
        std::printf("[perf] %-58s %9.2f us %8.1f GB/s %5.1f%%\n", what.c_str(), us, gbs, 100.0 * gbs / copy);
    };
    DeviceBuffer q = random_floats(H * d, -1, 1, 1), gate = random_floats(H * d, -2, 2, 2), out(H * d * 4);
    for (const int64_t depth : {int64_t(4096), int64_t(32768)}) {
        // Enough separate caches that one pass over them is past L2.
        const int64_t n_caches = depth <= 4096 ? 6 : 1;
        for (const bool half : {false, true}) {
            const size_t elem = half ? 2 : 4;
            const size_t kv_bytes = size_t(depth * H_kv * d) * elem;
            std::vector<DeviceBuffer> k, v;
            for (int64_t c = 0; c < n_caches; ++c) {
                // Random halves or floats: reinterpret random floats' bytes, finite either way (|x| < 1 keeps
                // f16 reinterpretations finite only by luck, so fill f16 caches through kv_store instead).
                DeviceBuffer src = random_floats(static_cast<size_t>(depth * H_kv * d), -1, 1, uint32_t(10 + c));
                k.emplace_back(kv_bytes);
                v.emplace_back(kv_bytes);
                DeviceBuffer zero(sizeof(int32_t));
                cuda_check(cudaMemset(zero.get(), 0, sizeof(int32_t)), "zero");
                const cuda::KvElement e = half ? cuda::KvElement::f16 : cuda::KvElement::f32;
                cuda::kv_store(src.get<float>(), depth, H_kv * d, zero.get<int32_t>(), e, k.back().get(), nullptr);
                cuda::kv_store(src.get<float>(), depth, H_kv * d, zero.get<int32_t>(), e, v.back().get(), nullptr);
            }
            DeviceBuffer past(sizeof(int32_t));
            const int32_t n_past = int32_t(depth - 1);
            past.upload(&n_past, sizeof n_past);
            for (const auto& [capacity, variant] :
                 std::vector<std::pair<int64_t, cuda::AttentionDecodeVariant>>{
                     {depth, cuda::AttentionDecodeVariant::dims_across_lanes},
                     {depth, cuda::AttentionDecodeVariant::keys_across_lanes},
                     {131072, cuda::AttentionDecodeVariant::keys_across_lanes},
                     {depth, cuda::AttentionDecodeVariant::staged_tiles},
                     {131072, cuda::AttentionDecodeVariant::staged_tiles}}) {
                const cuda::CachedAttentionDims dims{1, H, H_kv, d, capacity, 2 * d, variant};
                DeviceBuffer scratch(cuda::attention_decode_scratch_floats(dims) * 4);
                const double us = time_us(
                    [&](int i) {
                        const size_t c = size_t(i % n_caches);
                        cuda::attention_cached(q.get<float>(), k[c].get(), v[c].get(),
                                               half ? cuda::KvElement::f16 : cuda::KvElement::f32, gate.get<float>(),
                                               past.get<int32_t>(), dims, scratch.get<float>(), out.get<float>(), nullptr);
                    },
                    20);
                const char* kernel = variant == cuda::AttentionDecodeVariant::staged_tiles        ? "staged "
                                     : variant == cuda::AttentionDecodeVariant::keys_across_lanes ? "keys "
                                                                                                 : "dims ";
                row(std::string("attention_cached ") + kernel + (half ? "f16" : "f32") + " depth " + std::to_string(depth) +
                        " grid for " + std::to_string(capacity) + " S=" +
                        std::to_string(cuda::attention_decode_splits_run(
                            dims, half ? cuda::KvElement::f16 : cuda::KvElement::f32)),
                    us, 2.0 * double(kv_bytes));
            }
            if (!half) {
                const cuda::AttentionDims old{1, depth - 1, H, H_kv, d};
                const double us = time_us(
                    [&](int i) {
                        const size_t c = size_t(i % n_caches);
                        cuda::attention(q.get<float>(), k[c].get<float>(), v[c].get<float>(), gate.get<float>(), old,
                                        out.get<float>(), nullptr);
                    },
                    depth <= 4096 ? 6 : 2);
                row("attention (one block per head, before) f32 depth " + std::to_string(depth), us, 2.0 * double(kv_bytes));
            }
        }
    }

    // The staged kernel (split + combine) over Bonsai-4B's heads (32 query / 8 kv heads of 128) at 32K.
    {
        constexpr int64_t Hq = 32, Hkv = 8, hd = 128, depth = 32768;
        for (const bool half : {false, true}) {
            const cuda::KvElement e = half ? cuda::KvElement::f16 : cuda::KvElement::f32;
            const size_t kv_bytes = size_t(depth * Hkv * hd) * (half ? 2 : 4);
            DeviceBuffer src = random_floats(size_t(depth * Hkv * hd), -1, 1, 30), k(kv_bytes), v(kv_bytes);
            DeviceBuffer zero(sizeof(int32_t)), past(sizeof(int32_t));
            cuda_check(cudaMemset(zero.get(), 0, sizeof(int32_t)), "zero");
            cuda::kv_store(src.get<float>(), depth, Hkv * hd, zero.get<int32_t>(), e, k.get(), nullptr);
            cuda::kv_store(src.get<float>(), depth, Hkv * hd, zero.get<int32_t>(), e, v.get(), nullptr);
            const int32_t n_past = int32_t(depth - 1);
            past.upload(&n_past, sizeof n_past);
            const cuda::CachedAttentionDims dims{1, Hq, Hkv, hd, depth, hd, cuda::AttentionDecodeVariant::staged_tiles};
            DeviceBuffer scratch(cuda::attention_decode_scratch_floats(dims) * 4);
            const double us = time_us(
                [&](int) {
                    cuda::attention_cached(q.get<float>(), k.get(), v.get(), e, gate.get<float>(), past.get<int32_t>(),
                                           dims, scratch.get<float>(), out.get<float>(), nullptr);
                },
                20);
            row(std::string("attention_cached staged ") + (half ? "f16" : "f32") + " Bonsai-4B heads depth " +
                    std::to_string(depth) + " S=" + std::to_string(cuda::attention_decode_splits_run(dims, e)),
                us, 2.0 * double(kv_bytes));
        }
    }

    // Gated DeltaNet step, Bonsai-27B heads: 16 key heads, 48 value heads of 128, conv kernel 4.
    constexpr int64_t Hk = 16, Hv = 48, dk = 128, dv = 128, K = 4, C = 2 * Hk * dk + Hv * dv;
    DeviceBuffer mixed = random_floats(C, -2, 2, 40), b = random_floats(Hv, -4, 4, 41), a = random_floats(Hv, -4, 4, 42);
    DeviceBuffer conv_w = random_floats(C * K, -1, 1, 43), conv_state = random_floats((K - 1) * C, -1, 1, 44);
    DeviceBuffer ssm_a = random_floats(Hv, -8, -0.1f, 45), dt = random_floats(Hv, -1, 1, 46);
    DeviceBuffer z = random_floats(Hv * dv, -4, 4, 47), norm_w = random_floats(dv, 0.5f, 1.5f, 48);
    std::vector<DeviceBuffer> states;
    for (int i = 0; i < 8; ++i) states.push_back(random_floats(Hv * dk * dv, -0.5f, 0.5f, uint32_t(50 + i)));
    DeviceBuffer qb(Hk * dk * 4), kb(Hk * dk * 4), vb(Hv * dv * 4), beta(Hv * 4), g(Hv * 4), o(Hv * dv * 4);
    DeviceBuffer conv_out(C * 4), qn(Hk * dk * 4), kn(Hk * dk * 4), raw(Hv * dv * 4);
    const cuda::GdnDecodeDims gd{Hk, Hv, dk, dv, K, cuda::KeyHeadMap::tiled};
    const double state_bytes = 2.0 * Hv * dk * dv * 4;
    const double fused = time_us(
        [&](int i) {
            cuda::gdn_decode_prepare(mixed.get<float>(), b.get<float>(), a.get<float>(), conv_w.get<float>(),
                                     conv_state.get<float>(), conv_state.get<float>(), ssm_a.get<float>(),
                                     dt.get<float>(), gd, 1e-6f,
                                     qb.get<float>(), kb.get<float>(), vb.get<float>(), beta.get<float>(), g.get<float>(),
                                     nullptr);
            cuda::gdn_decode_recurrent(qb.get<float>(), kb.get<float>(), vb.get<float>(), beta.get<float>(), g.get<float>(),
                                       z.get<float>(), norm_w.get<float>(), 1e-6f, gd, states[size_t(i % 8)].get<float>(),
                                       states[size_t(i % 8)].get<float>(), o.get<float>(), nullptr);
        },
        200);
    row("gdn decode step, fused (2 launches), 16/48 x 128", fused, state_bytes);
    const cuda::DeltaRuleDims rd{1, Hk, Hv, dk, dv, cuda::KeyHeadMap::tiled};
    const double chain = time_us(
        [&](int i) {
            cuda::conv1d_causal_silu(mixed.get<float>(), conv_w.get<float>(), conv_state.get<float>(), 1, C, K,
                                     conv_out.get<float>(), nullptr);
            cuda_check(cudaMemcpyAsync(qb.get(), conv_out.get(), Hk * dk * 4, cudaMemcpyDeviceToDevice), "split");
            cuda_check(cudaMemcpyAsync(kb.get(), conv_out.get<float>() + Hk * dk, Hk * dk * 4, cudaMemcpyDeviceToDevice),
                       "split");
            cuda_check(cudaMemcpyAsync(vb.get(), conv_out.get<float>() + 2 * Hk * dk, Hv * dv * 4,
                                       cudaMemcpyDeviceToDevice), "split");
            cuda::l2_norm(qb.get<float>(), Hk, dk, 1e-6f, qn.get<float>(), nullptr);
            cuda::l2_norm(kb.get<float>(), Hk, dk, 1e-6f, kn.get<float>(), nullptr);
            cuda::gdn_gates(b.get<float>(), a.get<float>(), ssm_a.get<float>(), dt.get<float>(), 1, Hv, beta.get<float>(),
                            g.get<float>(), nullptr);
            cuda::gated_delta_rule_recurrent(qn.get<float>(), kn.get<float>(), vb.get<float>(), g.get<float>(),
                                             beta.get<float>(), rd, states[size_t(i % 8)].get<float>(), raw.get<float>(),
                                             nullptr);
            cuda::gated_rms_norm(raw.get<float>(), z.get<float>(), norm_w.get<float>(), Hv, dv, 1e-6f, o.get<float>(),
                                 nullptr);
        },
        200);
    row("gdn decode step, op chain (7 launches + 3 copies)", chain, state_bytes);
}

// The batched step's DeltaNet middle (models/batch_step_cuda.cpp deltanet_rows): B rows of Bonsai-27B's
// heads, each with its own state, read from one copy and written to the other as the model does; the
// rows forms against the per-row loop they replaced. GB/s on the B states' read + write.
TEST(DecodePerf, DeltaNetRows) {
    if (!perf_requested()) GTEST_SKIP() << "set DELTABIT_OPS_PERF=1 to time the decode kernels";
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
    const double copy = copy_bandwidth_gbs();
    constexpr int64_t Hk = 16, Hv = 48, dk = 128, dv = 128, K = 4, C = 2 * Hk * dk + Hv * dv;
    constexpr int64_t kMaxRows = 64, W = (K - 1) * C, S = Hv * dk * dv;
    const cuda::GdnDecodeDims gd{Hk, Hv, dk, dv, K, cuda::KeyHeadMap::tiled};
    DeviceBuffer conv_w = random_floats(C * K, -1, 1, 60), ssm_a = random_floats(Hv, -8, -0.1f, 61),
                 dt = random_floats(Hv, -1, 1, 62), norm_w = random_floats(dv, 0.5f, 1.5f, 63);
    DeviceBuffer mixed = random_floats(kMaxRows * C, -2, 2, 64), b = random_floats(kMaxRows * Hv, -4, 4, 65),
                 a = random_floats(kMaxRows * Hv, -4, 4, 66), z = random_floats(kMaxRows * Hv * dv, -4, 4, 67);
    DeviceBuffer q(kMaxRows * Hk * dk * 4), k(kMaxRows * Hk * dk * 4), v(kMaxRows * Hv * dv * 4),
        beta(kMaxRows * Hv * 4), g(kMaxRows * Hv * 4), out(kMaxRows * Hv * dv * 4);
    // Two copies of each row's window and state; step i reads copy i % 2 and writes the other.
    std::vector<DeviceBuffer> windows, states;
    for (int64_t r = 0; r < 2 * kMaxRows; ++r) {
        windows.push_back(random_floats(W, -1, 1, uint32_t(100 + r)));
        states.push_back(random_floats(S, -0.5f, 0.5f, uint32_t(300 + r)));
    }
    std::vector<cuda::GdnDecodeRow> host_tables[2];
    for (int p = 0; p < 2; ++p)
        for (int64_t r = 0; r < kMaxRows; ++r) {
            const size_t read = size_t(2 * r + p), written = size_t(2 * r + (p ^ 1));
            host_tables[p].push_back({windows[read].get<float>(), windows[written].get<float>(),
                                      states[read].get<float>(), states[written].get<float>()});
        }
    DeviceBuffer tables[2] = {DeviceBuffer(kMaxRows * sizeof(cuda::GdnDecodeRow)),
                              DeviceBuffer(kMaxRows * sizeof(cuda::GdnDecodeRow))};
    for (int p = 0; p < 2; ++p) tables[p].upload(host_tables[p].data(), tables[p].bytes());
    for (const int64_t B : {int64_t(8), kMaxRows}) {
        const double bytes = 2.0 * double(B * S) * 4;
        const auto report = [&](const char* what, double us) {
            const double gbs = bytes / (us * 1e3);
            std::printf("[perf] gdn decode %2lld rows of 16/48 x 128, %-30s %9.2f us %8.1f GB/s %5.1f%%\n",
                        (long long)B, what, us, gbs, 100.0 * gbs / copy);
        };
        const double rows = time_us(
            [&](int i) {
                const auto* table = tables[i % 2].get<cuda::GdnDecodeRow>();
                cuda::gdn_decode_prepare_rows(mixed.get<float>(), b.get<float>(), a.get<float>(), conv_w.get<float>(),
                                              table, B, ssm_a.get<float>(), dt.get<float>(), gd, 1e-6f, q.get<float>(),
                                              k.get<float>(), v.get<float>(), beta.get<float>(), g.get<float>(),
                                              nullptr);
                cuda::gdn_decode_recurrent_rows(q.get<float>(), k.get<float>(), v.get<float>(), beta.get<float>(),
                                                g.get<float>(), z.get<float>(), norm_w.get<float>(), 1e-6f, gd, table,
                                                B, out.get<float>(), nullptr);
            },
            20);
        report("rows forms (2 launches)", rows);
        const double single = time_us(
            [&](int i) {
                for (int64_t r = 0; r < B; ++r) {
                    const cuda::GdnDecodeRow& t = host_tables[i % 2][size_t(r)];
                    cuda::gdn_decode_prepare(mixed.get<float>() + r * C, b.get<float>() + r * Hv,
                                             a.get<float>() + r * Hv, conv_w.get<float>(), t.conv_in, t.conv_out,
                                             ssm_a.get<float>(), dt.get<float>(), gd, 1e-6f,
                                             q.get<float>() + r * Hk * dk, k.get<float>() + r * Hk * dk,
                                             v.get<float>() + r * Hv * dv,
                                             beta.get<float>() + r * Hv, g.get<float>() + r * Hv, nullptr);
                    cuda::gdn_decode_recurrent(q.get<float>() + r * Hk * dk, k.get<float>() + r * Hk * dk,
                                               v.get<float>() + r * Hv * dv, beta.get<float>() + r * Hv,
                                               g.get<float>() + r * Hv, z.get<float>() + r * Hv * dv,
                                               norm_w.get<float>(), 1e-6f, gd, t.state_in, t.state_out,
                                               out.get<float>() + r * Hv * dv, nullptr);
                }
            },
            20);
        report("single calls (2 launches a row)", single);
    }
}

TEST(DecodePerf, FixtureTokenStep) {
    if (!perf_requested()) GTEST_SKIP() << "set DELTABIT_OPS_PERF=1 to time the decode step";
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
    const Model cpu = test::load_fixture_model("qwen3_5_binary", true);
    for (const bool graphs : {true, false}) {
        CudaModel gpu(cpu);
        gpu.set_decode_graphs(graphs);
        CudaSequenceState s = gpu.new_sequence(1200);
        const int32_t prompt[] = {1, 2, 3, 4, 5};
        const float* p = gpu.forward_last(s, prompt);
        auto steps = [&](int n) {
            for (int i = 0; i < n; ++i) {
                const int32_t id = gpu.argmax(p);
                p = gpu.forward_last(s, std::span(&id, 1));
            }
        };
        steps(10);
        const auto t0 = std::chrono::steady_clock::now();
        steps(1000);
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 1000;
        const CudaDecodeStats st = gpu.decode_stats();
        std::printf("[perf] decode step qwen3_5_binary (Q1_0, %lld layers), %s: %.1f us/token incl. argmax readback "
                    "(%lld replays, %lld eager)\n",
                    (long long)cpu.config().n_layer(), graphs ? "graph replay" : "eager launches", us,
                    (long long)st.graph_replays, (long long)st.eager_steps);
    }
}

}  // namespace
}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
