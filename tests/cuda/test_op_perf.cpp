// Perf mode of the op-parity harness (STYLE habit 9): with DELTABIT_OPS_PERF=1, times every CUDA op on
// Bonsai-27B's real shapes (decode T = 1 and a 4096-token prefill) and prints µs and achieved GB/s
// against the card's measured device-to-device copy bandwidth. Without the variable it skips, so the
// normal test run stays fast.
//
//   DELTABIT_OPS_PERF=1 ./test_cuda --gtest_filter='OpPerf*'
//
// Bytes counted: each input read once and each output written once (K/V once for attention, the
// recurrent state read and written once for the delta rule) — the floor any kernel must move.
// Time: a batch of back-to-back launches between two events, median over batches; decode-sized ops
// therefore include launch gaps (a CUDA graph removes those later) and find their data in L2.
//
// Measured (H200, copy 4258 GB/s; 2026-11-29; µs, then % of copy bandwidth where it means anything):
//   decode T=1: every element-wise/norm op 4.2–8.5 µs (launch- and latency-bound, 0.1–1%),
//     delta_rule 5.5 µs (27%), moe_router 22.5 µs (one warp's serial top-k passes),
//     attention depth 4K 373 µs / 32K 3689 µs (2%: n_head blocks only — split-K decode is the fix)
//   prefill T=4096: rms_norm 5120 75.5 (52%), per-head rms_norm 56.5 (84%), rope 19.5 (61%),
//     swiglu 315 (64%), l2_norm 20.9 (75%), gated_rms_norm 98.3 (72%), gdn_gates 5.1 (15%),
//     conv1d 380 (21%: each input read K times), embedding q1_0 94 (22%), moe_router 41.6 (5%),
//     delta_rule 3360 (2%: sequential over tokens — needs the chunked form),
//     attention T=1024 from empty 2577 (1%: not flash)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#ifdef DELTABIT_HAVE_CUDA
#include <cuda_runtime.h>

#include "backend/cuda_buffer.h"
#include "backend/cuda_probe.h"
#include "core/dtype.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/attention/attention_cuda.h"
#include "ops/delta_rule/delta_rule_cuda.h"
#include "ops/matmul/weight_repack.h"
#include "ops/moe/moe_experts_cuda.h"
#endif

namespace deltabit {
namespace {

#ifdef DELTABIT_HAVE_CUDA

using cuda::cuda_check;
using cuda::DeviceBuffer;

bool perf_requested() {
    const char* v = std::getenv("DELTABIT_OPS_PERF");
    return v != nullptr && std::strcmp(v, "0") != 0;
}

// Device buffer of n floats uniform in [lo, hi) (a cheap LCG: timing needs non-trivial data, not
// statistics; zeros can run faster than real data).
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

DeviceBuffer random_bytes(size_t n, uint32_t seed) {
    std::vector<uint8_t> host(n);
    uint32_t s = seed * 2654435761u + 1u;
    for (uint8_t& b : host) {
        s = s * 1664525u + 1013904223u;
        b = uint8_t(s >> 24);
    }
    DeviceBuffer d(n);
    d.upload(host.data(), n);
    return d;
}

// Median µs per launch over 7 batches of `reps` launches, after a warm-up batch.
double time_us(const std::function<void()>& launch, int reps) {
    cudaEvent_t start, stop;
    cuda_check(cudaEventCreate(&start), "event");
    cuda_check(cudaEventCreate(&stop), "event");
    for (int i = 0; i < reps; ++i) launch();
    std::vector<double> batches;
    for (int b = 0; b < 7; ++b) {
        cuda_check(cudaEventRecord(start), "record");
        for (int i = 0; i < reps; ++i) launch();
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
    const double us = time_us([&] { cuda_check(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice), "copy"); }, 5);
    return 2.0 * double(bytes) / (us * 1e3);  // read + write
}

struct Row {
    std::string op, shape;
    double us, bytes;
};

void print_rows(const std::vector<Row>& rows, double copy_gbs) {
    std::printf("\n[perf] %s; device-to-device copy %.0f GB/s\n", cuda::device_summary().c_str(), copy_gbs);
    std::printf("[perf] %-16s %-40s %10s %10s %7s\n", "op", "shape", "us", "GB/s", "%copy");
    for (const Row& r : rows) {
        const double gbs = r.bytes / (r.us * 1e3);
        std::printf("[perf] %-16s %-40s %10.2f %10.1f %6.1f%%\n", r.op.c_str(), r.shape.c_str(), r.us, gbs,
                    100.0 * gbs / copy_gbs);
    }
}

TEST(OpPerf, RealShapes) {
    if (!perf_requested()) GTEST_SKIP() << "set DELTABIT_OPS_PERF=1 to time the CUDA ops";
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
    const double copy_gbs = copy_bandwidth_gbs();
    std::vector<Row> rows;
    auto add = [&](const char* op, const std::string& shape, double bytes, int reps, const std::function<void()>& f) {
        f();
        cuda_check(cudaDeviceSynchronize(), op);
        rows.push_back({op, shape, time_us(f, reps), bytes});
    };
    constexpr int64_t kHidden = 5120, kFfn = 17408, kHeads = 24, kKvHeads = 4, kHeadDim = 256, kRopeDim = 64;
    constexpr int64_t kHk = 16, kHv = 48, kDk = 128, kDv = 128, kConvChannels = 2 * kHk * kDk + kHv * kDv;
    constexpr int64_t kVocab = 248320, kExperts = 512, kTopK = 10;
    constexpr int64_t kPrefill = 4096;
    const float f = sizeof(float);

    for (int64_t t : {int64_t(1), kPrefill}) {
        const int reps = t == 1 ? 200 : 10;
        const std::string T = "T=" + std::to_string(t);
        {
            DeviceBuffer x = random_floats(size_t(t * kHidden), -2, 2, 1), w = random_floats(kHidden, 0.5f, 1.5f, 2);
            DeviceBuffer y(size_t(t * kHidden) * sizeof(float));
            add("rms_norm", T + " dim=5120", f * (2.0 * t * kHidden + kHidden), reps, [&] {
                cuda::rms_norm(x.get<float>(), w.get<float>(), t, kHidden, 1e-6f, cuda::NormWeight::plain,
                               y.get<float>(), nullptr);
            });
        }
        {
            const int64_t n = t * kHeads * kHeadDim;
            DeviceBuffer x = random_floats(size_t(n), -2, 2, 3), w = random_floats(kHeadDim, 0.5f, 1.5f, 4);
            add("rms_norm/head", T + " 24 heads x 256", f * (2.0 * n), reps, [&] {
                cuda::rms_norm(x.get<float>(), w.get<float>(), t * kHeads, kHeadDim, 1e-6f, cuda::NormWeight::plain,
                               x.get<float>(), nullptr);
            });
            std::vector<int32_t> pos(static_cast<size_t>(t));
            for (int64_t i = 0; i < t; ++i) pos[size_t(i)] = int32_t(i);
            DeviceBuffer dpos(pos.size() * sizeof(int32_t));
            dpos.upload(pos.data(), pos.size() * sizeof(int32_t));
            // Bytes: only the rotated quarter of each head is read and written.
            add("rope", T + " 24 heads x 256, rope 64", f * 2.0 * t * kHeads * kRopeDim, reps, [&] {
                cuda::rope_neox(x.get<float>(), dpos.get<int32_t>(), t, kHeads, kHeadDim, kRopeDim, 1e7f, nullptr);
            });
        }
        {
            const int64_t n = t * kFfn;
            DeviceBuffer g = random_floats(size_t(n), -6, 6, 5), u = random_floats(size_t(n), -2, 2, 6);
            DeviceBuffer o(size_t(n) * sizeof(float));
            add("swiglu", T + " n=17408/token", f * 3.0 * n, reps,
                [&] { cuda::swiglu(g.get<float>(), u.get<float>(), n, o.get<float>(), nullptr); });
        }
        {
            const int64_t n = t * kHk * kDk;
            DeviceBuffer x = random_floats(size_t(n), -2, 2, 7), y(size_t(n) * sizeof(float));
            add("l2_norm", T + " 16 heads x 128", f * 2.0 * n, reps,
                [&] { cuda::l2_norm(x.get<float>(), t * kHk, kDk, 1e-6f, y.get<float>(), nullptr); });
        }
        {
            const int64_t n = t * kHv;
            DeviceBuffer b = random_floats(size_t(n), -4, 4, 8), a = random_floats(size_t(n), -4, 4, 9);
            DeviceBuffer sa = random_floats(kHv, -8, -0.1f, 10), dt = random_floats(kHv, -1, 1, 11);
            DeviceBuffer beta(size_t(n) * sizeof(float)), g(size_t(n) * sizeof(float));
            add("gdn_gates", T + " 48 heads", f * 4.0 * n, reps, [&] {
                cuda::gdn_gates(b.get<float>(), a.get<float>(), sa.get<float>(), dt.get<float>(), t, kHv,
                                beta.get<float>(), g.get<float>(), nullptr);
            });
        }
        {
            const int64_t n = t * kConvChannels;
            DeviceBuffer x = random_floats(size_t(n), -2, 2, 12), w = random_floats(size_t(kConvChannels * 4), -1, 1, 13);
            DeviceBuffer st = random_floats(size_t(3 * kConvChannels), -1, 1, 14), o(size_t(n) * sizeof(float));
            add("conv1d", T + " C=10240 K=4", f * (2.0 * n + 4.0 * kConvChannels + 6.0 * kConvChannels), reps, [&] {
                cuda::conv1d_causal_silu(x.get<float>(), w.get<float>(), st.get<float>(), t, kConvChannels, 4,
                                         o.get<float>(), nullptr);
            });
        }
        {
            const int64_t n = t * kHv * kDv;
            DeviceBuffer x = random_floats(size_t(n), -2, 2, 15), z = random_floats(size_t(n), -4, 4, 16);
            DeviceBuffer w = random_floats(kDv, 0.5f, 1.5f, 17), y(size_t(n) * sizeof(float));
            add("gated_rms_norm", T + " 48 heads x 128", f * 3.0 * n, reps, [&] {
                cuda::gated_rms_norm(x.get<float>(), z.get<float>(), w.get<float>(), t * kHv, kDv, 1e-6f,
                                     y.get<float>(), nullptr);
            });
        }
        {
            const size_t table_bytes = size_t(kVocab) * dtype_bytes(DType::Q1_0, kHidden);
            DeviceBuffer table = random_bytes(table_bytes, 18);
            std::vector<int32_t> ids(static_cast<size_t>(t));
            for (int64_t i = 0; i < t; ++i) ids[size_t(i)] = int32_t((i * 7919) % kVocab);
            DeviceBuffer dids(ids.size() * sizeof(int32_t)), o(size_t(t * kHidden) * sizeof(float));
            dids.upload(ids.data(), ids.size() * sizeof(int32_t));
            const WeightView view{table.get(), DType::Q1_0, kVocab, kHidden};
            add("embedding", T + " q1_0 248320 x 5120",
                double(t) * (double(dtype_bytes(DType::Q1_0, kHidden)) + f * kHidden), reps,
                [&] { cuda::embedding_lookup(view, dids.get<int32_t>(), t, o.get<float>(), nullptr); });
        }
        {
            const int64_t n = t * kExperts;
            DeviceBuffer l = random_floats(size_t(n), -4, 4, 19);
            DeviceBuffer ids(size_t(t * kTopK) * sizeof(int32_t)), w(size_t(t * kTopK) * sizeof(float));
            add("moe_router", T + " 512 experts, top 10", f * (n + 2.0 * t * kTopK), reps, [&] {
                cuda::moe_router(l.get<float>(), t, kExperts, kTopK, true, ids.get<int32_t>(), w.get<float>(), nullptr);
            });
        }
        {
            // The grouped experts at Qwen3-Next's MoE shape (hidden 2048, 512 experts of 512, top 10), Q1_0. Bytes:
            // the chosen experts' gate, up and down once (decode: 10 experts; prefill: all 512), x read, out written.
            constexpr int64_t kMoeDim = 2048, kMoeFf = 512;
            const size_t matrix_bytes = size_t(kExperts * kMoeFf) * dtype_bytes(DType::Q1_0, kMoeDim);
            const size_t code_bytes = size_t(kExperts * kMoeFf) * gemv_code_row_bytes(DType::Q1_0, kMoeDim);
            const size_t scale_bytes = (matrix_bytes - code_bytes + 15) / 16 * 16;
            DeviceBuffer gc = random_bytes(code_bytes, 40), uc = random_bytes(code_bytes, 41), dc = random_bytes(code_bytes, 42);
            std::vector<uint16_t> one(scale_bytes / 2, 0x2000);  // f16 2^-7: finite scales
            DeviceBuffer gs(scale_bytes), us(scale_bytes), ds(scale_bytes);
            for (DeviceBuffer* b : {&gs, &us, &ds}) b->upload(one.data(), scale_bytes);
            std::vector<int32_t> ids(size_t(t * kTopK));
            for (int64_t i = 0; i < t; ++i)
                for (int64_t j = 0; j < kTopK; ++j) ids[size_t(i * kTopK + j)] = int32_t((i * 131 + j * 37) % kExperts);
            DeviceBuffer dids(ids.size() * sizeof(int32_t));
            dids.upload(ids.data(), ids.size() * sizeof(int32_t));
            DeviceBuffer x = random_floats(size_t(t * kMoeDim), -1, 1, 43), p = random_floats(size_t(t * kTopK), 0, 0.2f, 44);
            DeviceBuffer o(size_t(t * kMoeDim) * sizeof(float));
            cuda::MoeExpertsArgs a;
            a.x = x.get<float>();
            a.n_tokens = t;
            a.dim = kMoeDim;
            a.n_expert = kExperts;
            a.expert_ff = kMoeFf;
            a.top_k = kTopK;
            a.ids = dids.get<int32_t>();
            a.weights = p.get<float>();
            auto view = [&](const DeviceBuffer& c, const DeviceBuffer& sc, int64_t rows, int64_t cols) {
                cuda::ExpertMatrixView v;
                v.quantized = true;
                v.q = {c.get<uint8_t>(), sc.get<uint16_t>(), DType::Q1_0, rows, cols};
                return v;
            };
            a.gate = view(gc, gs, kExperts * kMoeFf, kMoeDim);
            a.up = view(uc, us, kExperts * kMoeFf, kMoeDim);
            a.down = view(dc, ds, kExperts * kMoeDim, kMoeFf);
            a.out = o.get<float>();
            DeviceBuffer scratch(cuda::moe_experts_scratch_bytes(a));
            const double touched = double(std::min<int64_t>(kExperts, t * kTopK)) / double(kExperts);
            add("moe_experts", T + " q1_0 512 x (512, 2048), top 10", 3.0 * touched * double(matrix_bytes) + f * 2.0 * t * kMoeDim,
                t == 1 ? reps : 3, [&] { cuda::moe_experts(a, scratch.get(), nullptr); });
        }
        {
            const cuda::DeltaRuleDims d{t, kHk, kHv, kDk, kDv, cuda::KeyHeadMap::tiled};
            DeviceBuffer q = random_floats(size_t(t * kHk * kDk), -0.09f, 0.09f, 20);
            DeviceBuffer k = random_floats(size_t(t * kHk * kDk), -0.09f, 0.09f, 21);
            DeviceBuffer v = random_floats(size_t(t * kHv * kDv), -1, 1, 22);
            DeviceBuffer g = random_floats(size_t(t * kHv), -1, -0.01f, 23), beta = random_floats(size_t(t * kHv), 0, 1, 24);
            DeviceBuffer st = random_floats(size_t(kHv * kDk * kDv), -0.5f, 0.5f, 25);
            DeviceBuffer o(size_t(t * kHv * kDv) * sizeof(float));
            const double bytes = f * (2.0 * kHv * kDk * kDv + 2.0 * t * kHk * kDk + 2.0 * t * kHv * kDv + 2.0 * t * kHv);
            add("delta_rule", T + " 16/48 heads, 128 x 128", bytes, t == 1 ? 200 : 3, [&] {
                cuda::gated_delta_rule_recurrent(q.get<float>(), k.get<float>(), v.get<float>(), g.get<float>(),
                                                 beta.get<float>(), d, st.get<float>(), o.get<float>(), nullptr);
            });
        }
    }
    // Attention: decode at several depths, and a 1024-token prefill from empty.
    for (const auto& [t, past] : std::vector<std::pair<int64_t, int64_t>>{{1, 4095}, {1, 32767}, {1024, 0}}) {
        const int64_t n_kv = t + past;
        const cuda::AttentionDims d{t, past, kHeads, kKvHeads, kHeadDim};
        DeviceBuffer q = random_floats(size_t(t * kHeads * kHeadDim), -1, 1, 30);
        DeviceBuffer k = random_floats(size_t(n_kv * kKvHeads * kHeadDim), -1, 1, 31);
        DeviceBuffer v = random_floats(size_t(n_kv * kKvHeads * kHeadDim), -1, 1, 32);
        DeviceBuffer gate = random_floats(size_t(t * kHeads * kHeadDim), -2, 2, 33);
        DeviceBuffer o(size_t(t * kHeads * kHeadDim) * sizeof(float));
        const double bytes = f * (3.0 * t * kHeads * kHeadDim + 2.0 * n_kv * kKvHeads * kHeadDim);
        add("attention", "T=" + std::to_string(t) + " past=" + std::to_string(past) + " 24/4 x 256", bytes,
            t == 1 ? 20 : 2, [&] {
                cuda::attention(q.get<float>(), k.get<float>(), v.get<float>(), gate.get<float>(), d, o.get<float>(),
                                nullptr);
            });
    }
    print_rows(rows, copy_gbs);
}

#else
TEST(OpPerf, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace deltabit
