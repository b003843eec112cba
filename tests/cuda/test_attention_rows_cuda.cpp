// The rows forms of the decode step's attention (ops/attention/attention_cuda.h: attention_decode_prologue_rows,
// attention_cached_rows; ops/attention/kv_cuda.h: kivi_compress_rows) — what CudaModel::forward_batch runs for
// B sequences at once — against B single calls, one per row, on twin caches: q, the attention output, every
// byte of every cache buffer (the stored key and value rows, kivi4's exact rows, codes and f16 parameters) and
// the guard bands, byte for byte (memcmp). Rows differ in position (0, tile and split edges, kivi4's block
// edges, a few thousand), capacity (so in split count: 1 to the one-wave cap) and cache format (f32, f16,
// kivi4, and all three in one batch); B = 1, 3 and 64; Bonsai-27B heads (24/4 of 256, output gate, partial
// rope) and Bonsai-8B heads (32/8 of 128); the default variant (staged_tiles where it applies) and
// keys_across_lanes. The single calls are what the decode step runs, themselves checked against the CPU
// reference in test_decode_kernels.cpp; so that an equality of two unwritten buffers cannot pass, every
// output must be finite (outputs start as NaN) and every row's cache must have changed in the step.
// Skips cleanly without a GPU.
#include <gtest/gtest.h>

#ifdef DELTABIT_HAVE_CUDA

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "cuda/op_parity_cuda.h"
#include "models/kv_cache.h"
#include "models/sequence_state_cuda.h"
#include "ops/attention/attention_cuda.h"
#include "ops/attention/kv_cuda.h"

namespace deltabit::test {
namespace {

struct Geometry {
    const char* name;
    int64_t n_head, n_kv_head, head_dim, rope_dim;
    bool gated;
};
constexpr Geometry kBonsai27B{"Bonsai-27B", 24, 4, 256, 64, true};
constexpr Geometry kBonsai8B{"Bonsai-8B", 32, 8, 128, 128, false};
constexpr Geometry kSmall{"small", 8, 2, 128, 64, true};  // quick enough for tools/cuda_emulation

struct RowSpec {
    cuda::KvElement element;
    int64_t position;  // the new token's; positions 0 .. position − 1 are already in the cache
    int64_t capacity;
};

// The ring of exact kivi4 rows as CudaSequenceState sizes it (kivi_layout in sequence_state_cuda.cpp).
cuda::KiviLayout kivi_layout() {
    return {kKiviSinks, kKiviResidual, kKiviGroup, kKiviGroup, kKiviResidual + kKiviGroup + kCudaMaxCallTokens};
}

// One side of one row's cache, poisoned and guarded (GuardedDeviceArray): f32/f16 in `data`; kivi4's exact
// rows in `data` and its codes and parameters.
struct Side {
    std::vector<GuardedDeviceArray<uint8_t>> buffers;  // data [, codes, min, scale]
    cuda::KvCacheView view;

    Side(cuda::KvElement e, bool keys, int64_t capacity, int64_t row) {
        view.element = e;
        view.keys = keys;
        if (e != cuda::KvElement::kivi4) {
            buffers.emplace_back(size_t(capacity * row) * cuda::kv_element_bytes(e));
            view.data = buffers[0].get();
            return;
        }
        const cuda::KiviLayout k = kivi_layout();
        const int64_t middle = capacity - k.sinks + k.block;  // whole blocks past the capacity
        const int64_t params = keys ? middle / k.block * row : middle * (row / k.value_group);
        buffers.emplace_back(size_t((k.sinks + k.ring_rows) * row) * sizeof(float));
        buffers.emplace_back(size_t(middle * row / 2));
        buffers.emplace_back(size_t(params) * 2);
        buffers.emplace_back(size_t(params) * 2);
        view.data = buffers[0].get();
        view.codes = buffers[1].get();
        view.min = reinterpret_cast<uint16_t*>(buffers[2].get());
        view.scale = reinterpret_cast<uint16_t*>(buffers[3].get());
        view.kivi = k;
    }
    // Every buffer's bytes (the guard bands checked).
    std::vector<std::vector<uint8_t>> bytes(const std::string& what) const {
        std::vector<std::vector<uint8_t>> out;
        for (const GuardedDeviceArray<uint8_t>& b : buffers) out.push_back(b.download(what));
        return out;
    }
    void copy_from(const Side& other) {
        for (size_t i = 0; i < buffers.size(); ++i)
            cuda::cuda_check(cudaMemcpy(buffers[i].get(), other.buffers[i].get(), buffers[i].size(), cudaMemcpyDeviceToDevice),
                             "copy a cache");
    }
};

struct RowCaches {
    Side k, v;
    RowCaches(const RowSpec& r, int64_t row) : k(r.element, true, r.capacity, row), v(r.element, false, r.capacity, row) {}
};

// Positions 0 .. position − 1 of a row's caches from `pool` (cycled from `offset`): f32 and f16 rows stored
// as they are (f16 rounded), kivi4 through kv_store and kivi_compress in calls of 64 — a settled store, as
// a sequence's prompt leaves it.
void fill(RowCaches& c, const RowSpec& r, int64_t row, const std::vector<float>& pool, size_t offset) {
    const int64_t n = r.position * row;
    if (n == 0) return;
    std::vector<float> values(static_cast<size_t>(n));
    for (Side* side : {&c.k, &c.v}) {
        for (int64_t i = 0; i < n; ++i) values[size_t(i)] = pool[(offset + size_t(i)) % pool.size()];
        offset += 7919;
        if (r.element == cuda::KvElement::f32) {
            cuda::cuda_check(cudaMemcpy(side->view.data, values.data(), size_t(n) * 4, cudaMemcpyHostToDevice), "fill f32");
        } else if (r.element == cuda::KvElement::f16) {
            std::vector<uint16_t> half(values.size());
            for (size_t i = 0; i < half.size(); ++i) half[i] = float_to_half(values[i]);
            cuda::cuda_check(cudaMemcpy(side->view.data, half.data(), size_t(n) * 2, cudaMemcpyHostToDevice), "fill f16");
        } else {
            constexpr int64_t kCall = 64;
            for (int64_t first = 0; first < r.position; first += kCall) {
                const int64_t T = std::min(kCall, r.position - first);
                const std::vector<float> rows(values.begin() + first * row, values.begin() + (first + T) * row);
                GuardedDeviceArray<float> drows(rows);
                GuardedDeviceArray<int32_t> dpast(std::vector<int32_t>{int32_t(first)});
                cuda::kv_store(drows.get(), T, row, dpast.get(), side->view, nullptr);
                cuda::kivi_compress(side->view, row, dpast.get(), T, nullptr);
                cuda::cuda_check(cudaDeviceSynchronize(), "fill kivi4");
            }
        }
    }
}

// FNV-1a of every buffer of a row's caches: whether a step changed them.
uint64_t fingerprint(const RowCaches& c, const std::string& what) {
    uint64_t h = 1469598103934665603ull;
    for (const Side* side : {&c.k, &c.v})
        for (const std::vector<uint8_t>& b : side->bytes(what))
            for (const uint8_t x : b) h = (h ^ x) * 1099511628211ull;
    return h;
}

bool all_finite(const std::vector<float>& x) {
    return std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
}

// B single calls (prologue, attention_cached, kivi_compress per row, as the decode step launches them) on
// one set of caches, the rows forms on their twins, from the same inputs: everything byte for byte.
void check_rows(const Geometry& g, const std::vector<RowSpec>& specs, cuda::AttentionDecodeVariant variant,
                uint32_t seed) {
    const int64_t B = int64_t(specs.size()), H = g.n_head, H_kv = g.n_kv_head, d = g.head_dim;
    const int64_t per_head = g.gated ? 2 * d : d, row = H_kv * d;
    std::string what = std::string(g.name) + " B=" + std::to_string(B) +
                       (variant == cuda::AttentionDecodeVariant::keys_across_lanes ? " keys" : " default") + " rows:";
    for (const RowSpec& r : specs)
        what += " " + std::string(cuda::kv_element_name(r.element)) + "@" + std::to_string(r.position) + "/" +
                std::to_string(r.capacity);
    SCOPED_TRACE(what);
    std::mt19937 rng(seed);
    std::vector<float> pool = uniform(size_t(1) << 20, rng, -1.0f, 1.0f);

    std::vector<RowCaches> single, rows;
    single.reserve(size_t(B));
    rows.reserve(size_t(B));
    for (int64_t i = 0; i < B; ++i) {
        const RowSpec& r = specs[size_t(i)];
        ASSERT_LT(r.position, r.capacity);
        single.emplace_back(r, row);
        rows.emplace_back(r, row);
        fill(single.back(), r, row, pool, size_t(i) * 104729);
        rows.back().k.copy_from(single.back().k);
        rows.back().v.copy_from(single.back().v);
    }
    std::vector<uint64_t> before;
    for (const RowCaches& c : single) before.push_back(fingerprint(c, what));

    const std::vector<float> q_full = uniform(size_t(B * H * per_head), rng, -3.0f, 3.0f);
    const std::vector<float> k_raw = uniform(size_t(B * row), rng, -3.0f, 3.0f);
    const std::vector<float> v_raw = uniform(size_t(B * row), rng, -3.0f, 3.0f);
    const std::vector<float> q_norm = uniform(size_t(d), rng, 0.5f, 1.5f), k_norm = uniform(size_t(d), rng, 0.5f, 1.5f);
    GuardedDeviceArray<float> dq_full(q_full), dk_raw(k_raw), dv_raw(v_raw), dqn(q_norm), dkn(k_norm);
    std::vector<int32_t> positions;
    for (const RowSpec& r : specs) positions.push_back(int32_t(r.position));
    GuardedDeviceArray<int32_t> dpositions(positions);
    const cuda::AttentionPrologueDims prologue{H, H_kv, d, per_head, g.rope_dim, 1e7f, 1e-6f};
    const float* gate = g.gated ? dq_full.get() + d : nullptr;

    // The single calls, one row after another as the decode step (attention_block) makes them.
    GuardedDeviceArray<float> q_single(size_t(B * H * d)), out_single(size_t(B * H * d));
    {
        cuda::CachedAttentionDims largest{1, H, H_kv, d, std::numeric_limits<int32_t>::max(), per_head, variant};
        GuardedDeviceArray<float> scratch(cuda::attention_decode_scratch_floats(largest));
        for (int64_t i = 0; i < B; ++i) {
            RowCaches& c = single[size_t(i)];
            const int32_t* position = dpositions.get() + i;
            float* q = q_single.get() + i * H * d;
            cuda::attention_decode_prologue(dq_full.get() + i * H * per_head, dk_raw.get() + i * row,
                                            dv_raw.get() + i * row, dqn.get(), dkn.get(), position, prologue,
                                            c.k.view, c.v.view, q, nullptr);
            const cuda::CachedAttentionDims dims{1, H, H_kv, d, specs[size_t(i)].capacity, per_head, variant};
            cuda::attention_cached(q, c.k.view, c.v.view, gate != nullptr ? gate + i * H * per_head : nullptr, position,
                                   dims, scratch.get(), out_single.get() + i * H * d, nullptr);
            if (c.k.view.element == cuda::KvElement::kivi4) {
                cuda::kivi_compress(c.k.view, row, position, 1, nullptr);
                cuda::kivi_compress(c.v.view, row, position, 1, nullptr);
            }
        }
    }

    // The rows forms: the table as forward_batch builds it, one launch each.
    GuardedDeviceArray<float> q_rows(size_t(B * H * d)), out_rows(size_t(B * H * d));
    {
        std::vector<cuda::AttentionRow> table;
        cuda::AttentionRowsPlan plan;
        for (int64_t i = 0; i < B; ++i) {
            const cuda::CachedAttentionDims dims{1, H, H_kv, d, specs[size_t(i)].capacity, per_head, variant};
            table.push_back(cuda::attention_row(rows[size_t(i)].k.view, rows[size_t(i)].v.view, specs[size_t(i)].position, dims));
            plan.add(table.back());
        }
        EXPECT_EQ(plan.n_rows, B);
        cuda::DeviceBuffer dtable(table.size() * sizeof(cuda::AttentionRow));
        dtable.upload(table.data(), dtable.bytes());
        const cuda::AttentionRow* drows = dtable.get<cuda::AttentionRow>();
        const cuda::CachedAttentionDims dims{1, H, H_kv, d, 1, per_head, variant};
        GuardedDeviceArray<float> scratch(cuda::attention_decode_rows_scratch_floats(dims, plan));
        cuda::attention_decode_prologue_rows(dq_full.get(), dk_raw.get(), dv_raw.get(), dqn.get(), dkn.get(), drows, B,
                                             prologue, q_rows.get(), nullptr);
        cuda::attention_cached_rows(q_rows.get(), drows, plan, gate, dims, scratch.get(), out_rows.get(), nullptr);
        if (plan.formats[size_t(cuda::KvElement::kivi4)]) {
            cuda::kivi_compress_rows(drows, B, kivi_layout(), row, true, nullptr);
            cuda::kivi_compress_rows(drows, B, kivi_layout(), row, false, nullptr);
        }
        cuda::cuda_check(cudaDeviceSynchronize(), "rows launches");
    }

    const std::vector<float> qs = q_single.download(what), qr = q_rows.download(what);
    const std::vector<float> os = out_single.download(what), orows = out_rows.download(what);
    ASSERT_TRUE(all_finite(qs) && all_finite(os)) << "a single call left an output unwritten";
    for (int64_t i = 0; i < B; ++i) {
        const size_t at = size_t(i * H * d), n = size_t(H * d) * sizeof(float);
        EXPECT_EQ(std::memcmp(qs.data() + at, qr.data() + at, n), 0) << "row " << i << ": q differs";
        EXPECT_EQ(std::memcmp(os.data() + at, orows.data() + at, n), 0) << "row " << i << ": attention output differs";
        std::vector<std::vector<uint8_t>> got = rows[size_t(i)].k.bytes(what), want = single[size_t(i)].k.bytes(what);
        for (auto& b : rows[size_t(i)].v.bytes(what)) got.push_back(std::move(b));
        for (auto& b : single[size_t(i)].v.bytes(what)) want.push_back(std::move(b));
        ASSERT_EQ(got.size(), want.size());
        EXPECT_NE(fingerprint(single[size_t(i)], what), before[size_t(i)]) << "row " << i << ": the single calls stored nothing";
        for (size_t b = 0; b < got.size(); ++b)
            EXPECT_TRUE(got[b] == want[b]) << "row " << i << ": cache buffer " << b << " (k then v: data"
                                           << (specs[size_t(i)].element == cuda::KvElement::kivi4 ? ", codes, min, scale" : "")
                                           << ") differs";
    }
}

// Positions: 0, the staged kernels' tile edges (16 f32 keys, 32 f16), the 64-key split minimum, kivi4's
// first quantised block (a step from 167 quantises positions 8 .. 39) and later block edges, a few thousand.
const std::vector<int64_t> kPositions = {0,   1,   15,  16,  31,  32,   63,   64,   65,   127,  128,  167,
                                         199, 200, 255, 256, 511, 1023, 1024, 2047, 2999, 4071, 4096, 5000};

// Row i of a batch of B: a position of kPositions and a capacity from tight (position + 1) to 8192, so that
// the split counts differ within the batch; formats as `formats` cycles.
std::vector<RowSpec> batch(int64_t B, const std::vector<cuda::KvElement>& formats, int64_t first = 0) {
    std::vector<RowSpec> specs;
    for (int64_t i = 0; i < B; ++i) {
        const int64_t position = kPositions[size_t(first + i) % kPositions.size()] + (i / int64_t(kPositions.size())) * 3;
        const int64_t capacities[] = {position + 1, position + 64, std::max<int64_t>(4096, position + 1),
                                      std::max<int64_t>(8192, position + 1)};
        specs.push_back({formats[size_t(i) % formats.size()], position, capacities[size_t(i) % 4]});
    }
    return specs;
}

constexpr auto kDefault = cuda::AttentionDecodeVariant::staged_tiles;  // keys_across_lanes where staged does not apply
const std::vector<cuda::KvElement> kF32 = {cuda::KvElement::f32}, kF16 = {cuda::KvElement::f16},
                                   kKivi = {cuda::KvElement::kivi4},
                                   kMixed = {cuda::KvElement::f16, cuda::KvElement::kivi4, cuda::KvElement::f32};

TEST(AttentionRows, OneRowIsTheSingleCall) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 1;
    for (const Geometry& g : {kBonsai27B, kBonsai8B})
        for (const auto& formats : {kF32, kF16, kKivi})
            for (const int64_t first : {0, 11, 20}) check_rows(g, batch(1, formats, first), kDefault, seed++);
}

TEST(AttentionRows, ThreeRowsAreThreeSingleCalls) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 100;
    for (const Geometry& g : {kBonsai27B, kBonsai8B})
        for (const auto& formats : {kF32, kF16, kKivi, kMixed})
            for (const auto variant : {kDefault, cuda::AttentionDecodeVariant::keys_across_lanes})
                for (const int64_t first : {0, 9, 18}) check_rows(g, batch(3, formats, first), variant, seed++);
}

TEST(AttentionRows, SixtyFourRowsAreSixtyFourSingleCalls) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 200;
    for (const Geometry& g : {kBonsai27B, kBonsai8B}) {
        for (const auto& formats : {kF32, kF16, kKivi, kMixed}) check_rows(g, batch(64, formats), kDefault, seed++);
        check_rows(g, batch(64, kMixed, 5), cuda::AttentionDecodeVariant::keys_across_lanes, seed++);
    }
}

// Small heads and shallow rows, every format in one batch: the case tools/cuda_emulation runs by default
// (tests/tools/cuda_emulation_attention_rows.sh).
TEST(AttentionRows, SmallHeadsMixedFormats) {
    DELTABIT_REQUIRE_GPU();
    // Split counts 1 to 16 (capacities 40 to 1000): the f32 row at 129 has 3 splits with keys of its 16, the
    // kivi4 rows quantise a block in the step (from 167 and 199).
    const std::vector<RowSpec> specs = {{cuda::KvElement::f16, 70, 71},    {cuda::KvElement::kivi4, 167, 400},
                                        {cuda::KvElement::f32, 0, 40},     {cuda::KvElement::f16, 33, 300},
                                        {cuda::KvElement::f32, 129, 1000}, {cuda::KvElement::kivi4, 199, 200}};
    check_rows(kSmall, specs, kDefault, 7);
    check_rows(kSmall, specs, cuda::AttentionDecodeVariant::keys_across_lanes, 8);
}

TEST(AttentionRows, BadCallsAreRefusedWithAMessage) {
    DELTABIT_REQUIRE_GPU();
    cuda::AttentionRowsPlan plan;
    plan.n_rows = 1;
    plan.max_splits = 1;
    plan.formats[size_t(cuda::KvElement::f16)] = true;
    const cuda::CachedAttentionDims dims_lanes{1, 8, 2, 128, 1, 128, cuda::AttentionDecodeVariant::dims_across_lanes};
    EXPECT_THROW(cuda::attention_cached_rows(nullptr, nullptr, plan, nullptr, dims_lanes, nullptr, nullptr, nullptr), Error);
    const cuda::CachedAttentionDims two_tokens{2, 8, 2, 128, 2, 128};
    EXPECT_THROW(cuda::attention_cached_rows(nullptr, nullptr, plan, nullptr, two_tokens, nullptr, nullptr, nullptr), Error);
    plan.max_splits = 129;
    const cuda::CachedAttentionDims dims{1, 8, 2, 128, 1, 128};
    EXPECT_THROW(cuda::attention_cached_rows(nullptr, nullptr, plan, nullptr, dims, nullptr, nullptr, nullptr), Error);
}

}  // namespace
}  // namespace deltabit::test

#endif  // DELTABIT_HAVE_CUDA
