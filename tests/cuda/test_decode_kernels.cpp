// Op parity for the decode kernels (ops/attention, delta_rule and elementwise *_cuda.h) against the naive CPU references they fuse, with
// NaN-poisoned, guard-banded outputs (cuda/op_parity_cuda.h):
//   attention_cached   vs cpu::attention on f32 and on f16-rounded caches, T = 1 and T > 1, hostile head
//                      dims and GQA groups, positions at split edges, large scores, Bonsai-27B geometry
//   attention prologue vs cpu::rms_norm + cpu::rope_neox, the cache rows stored at the device position
//   kv_store           exact f32 → RNE half (core/half.h)
//   kivi4              kv_store + kivi_compress byte for byte against KvStore (models/kv_cache.h), and
//                      attention_cached over the mixed cache vs cpu::attention over KvStore::read()
//   gdn decode         vs cpu conv1d → l2_norm → gdn_gates → delta rule → gated_rms_norm, state and conv
//                      window included; with out_quantized, out and state bit for bit the call without it
//                      and the int8 groups the CPU twin of the quantiser on that out, bit for bit
//                      (cuda/quantized_output_check.h); value_dim not a multiple of 128 or a view of the
//                      wrong width throws
//   argmax             exactly argmax_lowest_id over finite values, ties and signed zeros included; any NaN
//                      or ±inf reported as the lowest such index (core/non_finite_choice.h)
// Skips cleanly without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/non_finite_choice.h"
#include "models/kv_cache.h"
#include "ops/activations.h"
#include "ops/attention.h"
#include "ops/conv1d.h"
#include "ops/delta_rule.h"
#include "ops/gated_rms_norm.h"
#include "ops/gdn_gates.h"
#include "ops/l2_norm.h"
#include "ops/op_parity.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "sampling/sampler.h"

#ifdef DELTABIT_HAVE_CUDA
#include "cuda/op_parity_cuda.h"
#include "cuda/quantized_output_check.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/attention/attention_cuda.h"
#include "ops/delta_rule/delta_rule_cuda.h"
#endif

namespace deltabit::test {
namespace {

#ifdef DELTABIT_HAVE_CUDA

std::vector<uint16_t> to_half(const std::vector<float>& x) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = float_to_half(x[i]);
    return h;
}
std::vector<float> from_half(const std::vector<uint16_t>& h) {
    std::vector<float> x(h.size());
    for (size_t i = 0; i < h.size(); ++i) x[i] = half_to_float(h[i]);
    return x;
}

// ---- attention_cached ----

struct AttnCase {
    int64_t n_tokens, n_past, n_head, n_kv_head, head_dim, capacity;
    bool gate, half;
    float q_scale;  // > 1: large scores, the running max moves
    cuda::AttentionDecodeVariant variant = cuda::AttentionDecodeVariant::keys_across_lanes;
    // Query heads of different sizes: head h scaled by 4^(h mod 5 − 2), head 1 all zeros (the tensor-core
    // kernel scales each head's q by its own power of two).
    bool spread_heads = false;
};

// Error bound per output element, from the kernels' arithmetic (attention_split_register.cuh and
// attention_split_staged_cuda.cu), as test_op_parity_attention.cpp derives it for the older kernel:
//   score: q·scale rounded (u), then dims_across_lanes: P = ceil(d/32) fmaf terms per lane and 5
//     butterfly levels, |δs| ≤ (P + 6)·u·A; keys_across_lanes: one sequential fmaf chain over the d dims,
//     |δs| ≤ (d + 2)·u·A; A = max_p Σ_j |q_j k_pj| / sqrt(d); a score error moves a softmax output by at
//     most 2·|δs|·vmax;
//   per warp, each step of two keys costs one rescale (exp2f 4u, its argument's rounding u·R·log2e) and
//     two weights (the same each) and two fmaf: ≤ (10 + 2R)·u per key relative to vmax, n_w keys per warp
//     (a split's keys / 4 warps);
//   the merge of 4 warps (4 exp2f + 4 fmaf: 20u), of S splits (S exp2f + S fmaf + one divide: 6S + 1 u),
//   the gate (8u·|o|).
// staged_tiles over f32 rows: a score is P = 16 partial fmaf chains of d/16 dims added in order,
//   |δs| ≤ (d/P + P + 2)·u·A. Over f16 rows (tensor cores): q enters as hi + lo·2^−11. NVIDIA does not
//   document the tensor cores' fp32 accumulation; measured (Fasi et al. 2021, "Numerical behavior of
//   NVIDIA tensor cores"), an mma.m16n8k16 step adds its 16 products and C as one block aligned to the
//   largest and truncated: up to 17 terms × 2u of the largest, ≤ 34u per 16 dims of |q·k| mass, so
//   ≤ (17/32)·d·u·A per score over its d/16 steps (two MMAs per step, hi and lo, each within its own
//   magnitude); then q·scale (u), the hi/lo split (within 2^−22, with the 2^−e scaling exact), the
//   hi/lo combine (u), the 3 adds of the partials (3u) and slack for the lo products' separate
//   truncation (4u): |δs| ≤ ((17/32)·d + 10)·u·A. Either way one block's whole split is one
//   accumulator chain, so n_w = the split's keys, each key a weight (exp2f; on f16 rows also split
//   into hi + lo, within 2^−22·w + 2^−36) and an add (≤ 2u), each tile one rescale — within the
//   (10 + 2R)·u per key; no warp merge, and the denominators summed by a butterfly (5u, inside the 20u
//   above).
// R = the span of scores (2·max|s|). The CPU reference reads the same (f16-rounded when half) K and V.
std::vector<double> attention_tolerance(const AttnCase& c, int64_t splits, const std::vector<float>& q,
                                        const std::vector<float>& k, const std::vector<float>& v,
                                        const std::vector<double>& want) {
    const int64_t d = c.head_dim, group = c.n_head / c.n_kv_head;
    const double inv_sqrt_d = 1.0 / std::sqrt(double(d));
    const int64_t total = c.n_past + c.n_tokens;
    const int64_t per_split = std::max<int64_t>(64, (total + splits - 1) / splits);
    const bool staged = c.variant == cuda::AttentionDecodeVariant::staged_tiles;
    const double n_w = staged ? double(per_split) : std::ceil(double(per_split) / 4.0);
    std::vector<double> tol(want.size());
    for (int64_t t = 0; t < c.n_tokens; ++t) {
        const int64_t visible = c.n_past + t + 1;
        for (int64_t h = 0; h < c.n_head; ++h) {
            const int64_t kvh = h / group;
            double a_max = 0, s_max = 0, v_max = 0;
            for (int64_t p = 0; p < visible; ++p) {
                double a = 0, s = 0;
                for (int64_t j = 0; j < d; ++j) {
                    const double qj = q[size_t((t * c.n_head + h) * d + j)];
                    const double kj = k[size_t((p * c.n_kv_head + kvh) * d + j)];
                    a += std::fabs(qj * kj);
                    s += qj * kj;
                    v_max = std::max(v_max, double(std::fabs(v[size_t((p * c.n_kv_head + kvh) * d + j)])));
                }
                a_max = std::max(a_max, a * inv_sqrt_d);
                s_max = std::max(s_max, std::fabs(s * inv_sqrt_d));
            }
            const double P = std::ceil(double(d) / 32.0);
            const bool keys = c.variant == cuda::AttentionDecodeVariant::keys_across_lanes;
            const double staged_score = c.half ? 17.0 * double(d) / 32.0 + 10.0 : double(d) / 16.0 + 18.0;
            const double score_err = (staged ? staged_score : keys ? double(d) + 2.0 : P + 6.0) * kU * a_max;
            const double span = 2.0 * s_max * 1.4426950408889634;
            // (+5u: keys_across_lanes sums each warp's per-lane denominators with a butterfly at the end.)
            const double bound =
                (2.0 * score_err + (n_w * (10.0 + 2.0 * span) + 26.0 + 6.0 * double(splits)) * kU) * v_max;
            for (int64_t j = 0; j < d; ++j) {
                const size_t i = size_t((t * c.n_head + h) * d + j);
                tol[i] = bound + 8.0 * kU * std::fabs(want[i]);
            }
        }
    }
    return tol;
}

void check_attention_cached(AttnCase c, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t n_kv = c.n_past + c.n_tokens, row = c.n_kv_head * c.head_dim;
    std::vector<float> q = uniform(static_cast<size_t>(c.n_tokens * c.n_head * c.head_dim), rng, -1.0f, 1.0f);
    for (float& x : q) x *= c.q_scale;
    if (c.spread_heads) {
        for (size_t i = 0; i < q.size(); ++i) {
            const int64_t h = int64_t(i) / c.head_dim % c.n_head;
            q[i] = h == 1 ? 0.0f : std::ldexp(q[i], int(2 * (h % 5 - 2)));
        }
    }
    std::vector<float> k = uniform(static_cast<size_t>(n_kv * row), rng, -1.0f, 1.0f);
    std::vector<float> v = uniform(k.size(), rng, -1.0f, 1.0f);
    const std::vector<float> gate = uniform(q.size(), rng, -4.0f, 4.0f);
    if (c.half) {  // the reference sees what the cache holds
        k = from_half(to_half(k));
        v = from_half(to_half(v));
    }
    const cpu::AttentionDims ref_dims{c.n_tokens, c.n_past, c.n_head, c.n_kv_head, c.head_dim};
    std::vector<float> want(q.size());
    cpu::attention(q.data(), k.data(), v.data(), c.gate ? gate.data() : nullptr, ref_dims, want.data());

    // The cache holds `capacity` rows; rows past n_kv are NaN and must never be read.
    const size_t elem = c.half ? 2 : 4;
    std::vector<uint8_t> k_bytes(static_cast<size_t>(c.capacity * row) * elem, 0xFF), v_bytes(k_bytes.size(), 0xFF);
    if (c.half) {
        const std::vector<uint16_t> kh = to_half(k), vh = to_half(v);
        std::memcpy(k_bytes.data(), kh.data(), kh.size() * 2);
        std::memcpy(v_bytes.data(), vh.data(), vh.size() * 2);
    } else {
        std::memcpy(k_bytes.data(), k.data(), k.size() * 4);
        std::memcpy(v_bytes.data(), v.data(), v.size() * 4);
    }
    const cuda::CachedAttentionDims dims{c.n_tokens, c.n_head, c.n_kv_head, c.head_dim, c.capacity, c.head_dim,
                                         c.variant};
    GuardedDeviceArray<float> dq(q), dgate(gate), dout(q.size());
    GuardedDeviceArray<uint8_t> dk(k_bytes), dv(v_bytes);
    GuardedDeviceArray<int32_t> dpast(std::vector<int32_t>{int32_t(c.n_past)});
    GuardedDeviceArray<float> scratch(cuda::attention_decode_scratch_floats(dims));
    cuda::attention_cached(dq.get(), dk.get(), dv.get(), c.half ? cuda::KvElement::f16 : cuda::KvElement::f32,
                           c.gate ? dgate.get() : nullptr, dpast.get(), dims, scratch.get(), dout.get(), nullptr);
    const int64_t splits =
        cuda::attention_decode_splits_run(dims, c.half ? cuda::KvElement::f16 : cuda::KvElement::f32);
    // The tolerance follows the kernel that ran (staged_tiles falls back to keys_across_lanes).
    c.variant = cuda::attention_decode_variant_run(dims, c.half ? cuda::KvElement::f16 : cuda::KvElement::f32);
    const char* kernel = c.variant == cuda::AttentionDecodeVariant::staged_tiles        ? "staged "
                         : c.variant == cuda::AttentionDecodeVariant::keys_across_lanes ? "keys "
                                                                                       : "dims ";
    const std::string what = std::string("attention_cached ") + kernel + (c.half ? "f16" : "f32") + " T=" +
                             std::to_string(c.n_tokens) + " past=" + std::to_string(c.n_past) + " cap=" +
                             std::to_string(c.capacity) + " H=" + std::to_string(c.n_head) + "/" +
                             std::to_string(c.n_kv_head) + " d=" + std::to_string(c.head_dim) +
                             (c.gate ? " gate" : "") + (c.q_scale > 1 ? " large" : "") + (c.spread_heads ? " spread" : "") + " S=" + std::to_string(splits);
    const std::vector<double> want_d = to_double(want);
    const std::vector<double> tol = attention_tolerance(c, splits, q, k, v, want_d);
    expect_within(dout.download(what), want_d, [&](size_t i) { return tol[i]; }, what);
}

TEST(DecodeKernels, AttentionCachedHostileShapes) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 1;
    for (const bool half : {false, true}) {
        const std::vector<AttnCase> cases = {
            // T = 1 (decode) at depths around the 64-key split minimum and warp/pair edges
            {1, 0, 1, 1, 1, 1, false, half, 1},      {1, 0, 2, 1, 32, 4096, true, half, 1},
            {1, 63, 2, 1, 63, 64, true, half, 1},    {1, 64, 4, 2, 64, 65, false, half, 1},
            {1, 127, 6, 1, 65, 4096, true, half, 8}, {1, 1000, 8, 1, 127, 1001, true, half, 1},
            {1, 1000, 3, 3, 129, 8192, false, half, 8}, {1, 4095, 8, 2, 256, 4096, true, half, 1},
            {1, 8191, 5, 1, 33, 8192, false, half, 1},
            // a shallow cache in a deep grid (most splits empty), 8 query heads per kv head, large scores
            {1, 69, 16, 2, 128, 32768, true, half, 8},
            // groups the kernels pad (3 → 4, 5 → 6, 7 → 8) and a group of one; early tokens of a prompt
            // that see no key of a split their block works on (T = 40 over 7 splits, T = 9 over 2)
            {40, 100, 6, 2, 128, 1024, true, half, 1},  {9, 60, 5, 1, 64, 256, false, half, 1},
            {3, 500, 7, 1, 256, 1024, true, half, 8},   {1, 300, 1, 1, 128, 4096, false, half, 1},
            // query heads from 1/16 to 4 times the others and one of zeros
            {2, 700, 8, 2, 256, 2048, true, half, 1, cuda::AttentionDecodeVariant::keys_across_lanes, true},
            // T > 1 (the prompt path over a half cache), continuing a history
            {63, 0, 4, 2, 65, 63, true, half, 1},    {7, 121, 6, 1, 128, 512, true, half, 8},
            {65, 1000, 2, 1, 256, 2000, false, half, 1},
        };
        for (AttnCase c : cases)
            for (const auto variant : {cuda::AttentionDecodeVariant::dims_across_lanes,
                                       cuda::AttentionDecodeVariant::keys_across_lanes,
                                       cuda::AttentionDecodeVariant::staged_tiles}) {
                c.variant = variant;
                check_attention_cached(c, seed++);
            }
    }
}

TEST(DecodeKernels, AttentionCachedBonsai27B) {
    DELTABIT_REQUIRE_GPU();
    // 24 query heads on 4 kv heads of 256, the gate on, a 32K cache filled to 3000.
    for (const auto variant : {cuda::AttentionDecodeVariant::dims_across_lanes,
                               cuda::AttentionDecodeVariant::keys_across_lanes,
                               cuda::AttentionDecodeVariant::staged_tiles}) {
        check_attention_cached({1, 2999, 24, 4, 256, 32768, true, false, 1, variant}, 200);
        check_attention_cached({1, 2999, 24, 4, 256, 32768, true, true, 1, variant}, 201);
    }
    // Deep enough that the one-wave cap on the staged kernel's splits (attention_decode_splits_run) makes each
    // split several ring turns with a ragged last tile; Bonsai-4B's 8 kv heads of 128 beside it.
    for (const bool half : {false, true})
        for (const auto variant :
             {cuda::AttentionDecodeVariant::keys_across_lanes, cuda::AttentionDecodeVariant::staged_tiles}) {
            check_attention_cached({1, 20000, 24, 4, 256, 32768, true, half, 1, variant}, 202);
            check_attention_cached({1, 16383, 32, 8, 128, 16384, false, half, 1, variant}, 203);
        }
}

TEST(DecodeKernels, AttentionDecodeSplitsFillOneWave) {
    DELTABIT_REQUIRE_GPU();
    using cuda::KvElement;
    for (const KvElement e : {KvElement::f16, KvElement::f32}) {
        for (const auto& [n_head, n_kv_head, head_dim] :
             std::vector<std::tuple<int64_t, int64_t, int64_t>>{{24, 4, 256}, {32, 8, 128}}) {
            const cuda::CachedAttentionDims decode{1, n_head, n_kv_head, head_dim, 131072, head_dim};
            // The wave is the staged kernel's own.
            const int64_t resident = cuda::staged_attention_resident_blocks(e, head_dim, n_head / n_kv_head);
            const int64_t splits = cuda::attention_decode_splits_run(decode, e);
            const std::string what = std::string(e == KvElement::f16 ? "f16 " : "f32 ") + std::to_string(n_head) +
                                     "/" + std::to_string(n_kv_head) + "x" + std::to_string(head_dim);
            ASSERT_GT(resident, 0) << what;
            EXPECT_LE(splits * n_kv_head, resident) << what << ": a decode launch of more than one wave";
            EXPECT_EQ(splits, std::min(cuda::attention_decode_splits(decode), resident / n_kv_head)) << what;
            // The prompt path's tokens fill the grid, and the register kernels keep their splits.
            cuda::CachedAttentionDims prompt = decode;
            prompt.n_tokens = 2;
            EXPECT_EQ(cuda::attention_decode_splits_run(prompt, e), cuda::attention_decode_splits(prompt)) << what;
            cuda::CachedAttentionDims keys = decode;
            keys.variant = cuda::AttentionDecodeVariant::keys_across_lanes;
            EXPECT_EQ(cuda::attention_decode_splits_run(keys, e), cuda::attention_decode_splits(keys)) << what;
        }
    }
}

// ---- kivi4: kv_store + kivi_compress against KvStore, attention over the mixed cache ----

// A kivi4 side on the device (ops/attention/kv_cuda.h), every byte poisoned (NaN parameters and rows) so that a
// read of anything not written shows. The ring is small so that the test's lengths wrap it often.
struct DeviceKiviSide {
    GuardedDeviceArray<float> exact;
    GuardedDeviceArray<uint8_t> codes;
    GuardedDeviceArray<uint16_t> min, scale;
    cuda::KvCacheView view;

    DeviceKiviSide(KvSide side, int64_t capacity, int64_t row, int64_t max_call)
        : exact(size_t((kKiviSinks + ring_rows(max_call)) * row)), codes(size_t((capacity - kKiviSinks) * row / 2)),
          min(params(side, capacity, row)), scale(params(side, capacity, row)) {
        view.element = cuda::KvElement::kivi4;
        view.data = exact.get();
        view.codes = codes.get();
        view.min = min.get();
        view.scale = scale.get();
        view.keys = side == KvSide::keys;
        view.kivi = {kKiviSinks, kKiviResidual, kKiviGroup, kKiviGroup, ring_rows(max_call)};
    }
    static int64_t ring_rows(int64_t max_call) { return kKiviResidual + kKiviGroup - 1 + max_call; }
    static size_t params(KvSide side, int64_t capacity, int64_t row) {
        const int64_t middle = capacity - kKiviSinks;
        return size_t(side == KvSide::keys ? middle / kKiviGroup * row : middle * (row / kKiviGroup));
    }
};

template <typename T>
std::vector<std::byte> bytes_of(const std::vector<T>& v, size_t count) {
    std::vector<std::byte> out(count * sizeof(T));
    if (count != 0) std::memcpy(out.data(), v.data(), out.size());
    return out;
}

// The device side's chunks at n positions, as KvStore::save names and lays them out.
std::vector<StateChunk> device_kivi_chunks(const DeviceKiviSide& d, KvSide side, int64_t n, int64_t row,
                                           const std::string& what) {
    const KiviSplit s = kivi_split(n);
    const std::vector<float> exact = d.exact.download(what);
    const std::vector<uint8_t> codes = d.codes.download(what);
    const std::vector<uint16_t> min = d.min.download(what), scale = d.scale.download(what);
    std::vector<float> sinks(exact.begin(), exact.begin() + s.sinks * row), residual;
    for (int64_t p = s.sinks + s.quantised; p < n; ++p) {
        const int64_t r = cuda::kv_data_row(d.view, p);
        residual.insert(residual.end(), exact.begin() + r * row, exact.begin() + (r + 1) * row);
    }
    const size_t n_params = size_t(side == KvSide::keys ? s.quantised / kKiviGroup * row : s.quantised * (row / kKiviGroup));
    return {{"x.sink", bytes_of(sinks, sinks.size())},
            {"x.codes", bytes_of(codes, size_t(s.quantised * row / 2))},
            {"x.min", bytes_of(min, n_params)},
            {"x.scale", bytes_of(scale, n_params)},
            {"x.residual", bytes_of(residual, residual.size())}};
}

// Rows fed in calls of the given sizes to a KvStore (append, compress) and to the device (kv_store,
// kivi_compress): the stored bytes must be identical after every call — the same f16 parameters and
// codes, the same exact rows.
TEST(DecodeKernels, KiviCompressMatchesKvStoreByteForByte) {
    DELTABIT_REQUIRE_GPU();
    const int64_t H_kv = 2, d = 64, row = H_kv * d, max_call = 100;
    const std::vector<int64_t> calls = {1, 5, 3, 160, 1, 1, 31, 32, 33, 100, 7, 1, 99, 64, 100, 100, 1, 2, 90};
    int64_t capacity = 0;
    for (int64_t n : calls) capacity += n;
    std::mt19937 rng(77);
    for (const KvSide side : {KvSide::keys, KvSide::values}) {
        KvStore cpu(KvFormat::kivi4, side, H_kv, d);
        DeviceKiviSide gpu(side, capacity, row, max_call);
        int64_t n = 0;
        for (int64_t T : calls) {
            // Channels of different ranges and an outlier channel, as real keys have.
            std::vector<float> rows = uniform(size_t(T * row), rng, -1.0f, 1.0f);
            for (int64_t t = 0; t < T; ++t) {
                rows[size_t(t * row + 3)] *= 40.0f;
                rows[size_t(t * row + 70)] = 0.25f;  // a constant channel: scale 0, codes 0
            }
            cpu.append(rows.data(), T);
            cpu.compress();
            GuardedDeviceArray<float> drows(rows);
            GuardedDeviceArray<int32_t> dpast(std::vector<int32_t>{int32_t(n)});
            cuda::kv_store(drows.get(), T, row, dpast.get(), gpu.view, nullptr);
            cuda::kivi_compress(gpu.view, row, dpast.get(), T, nullptr);
            n += T;
            const std::string what = std::string(side == KvSide::keys ? "keys" : "values") + " after " + std::to_string(n);
            std::vector<StateChunk> want;
            cpu.save("x", want);
            const std::vector<StateChunk> got = device_kivi_chunks(gpu, side, n, row, what);
            ASSERT_EQ(got.size(), want.size());
            for (size_t i = 0; i < got.size(); ++i) {
                EXPECT_EQ(got[i].name, want[i].name);
                EXPECT_TRUE(got[i].bytes == want[i].bytes) << what << ": chunk " << want[i].name << " differs";
            }
        }
        EXPECT_GT(kivi_split(n).quantised, 0);
    }
}

// attention_cached over a kivi4 cache settled at n_past plus T rows just appended: against cpu::attention
// over exactly what KvStore::read() gives (sinks, dequantised middle, exact residual and new rows), with
// the f32 bound of attention_tolerance (the dequantisation m + s·code is the CPU's, bit for bit).
void check_attention_kivi(AttnCase c, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t row = c.n_kv_head * c.head_dim, max_call = std::max<int64_t>(c.n_tokens, 64);
    const int64_t capacity = c.n_past + c.n_tokens;
    KvStore k_cpu(KvFormat::kivi4, KvSide::keys, c.n_kv_head, c.head_dim);
    KvStore v_cpu(KvFormat::kivi4, KvSide::values, c.n_kv_head, c.head_dim);
    DeviceKiviSide k_gpu(KvSide::keys, capacity + kKiviGroup, row, max_call),
        v_gpu(KvSide::values, capacity + kKiviGroup, row, max_call);
    auto feed = [&](int64_t first, int64_t T, bool settle) {
        const std::vector<float> k = uniform(size_t(T * row), rng, -1.0f, 1.0f), v = uniform(size_t(T * row), rng, -1.0f, 1.0f);
        k_cpu.append(k.data(), T);
        v_cpu.append(v.data(), T);
        GuardedDeviceArray<float> dk(k), dv(v);
        GuardedDeviceArray<int32_t> dpast(std::vector<int32_t>{int32_t(first)});
        cuda::kv_store(dk.get(), T, row, dpast.get(), k_gpu.view, nullptr);
        cuda::kv_store(dv.get(), T, row, dpast.get(), v_gpu.view, nullptr);
        if (!settle) return;
        k_cpu.compress();
        v_cpu.compress();
        cuda::kivi_compress(k_gpu.view, row, dpast.get(), T, nullptr);
        cuda::kivi_compress(v_gpu.view, row, dpast.get(), T, nullptr);
        cuda::cuda_check(cudaDeviceSynchronize(), "kivi feed");
    };
    for (int64_t n = 0; n < c.n_past;) {
        const int64_t T = std::min<int64_t>(max_call, c.n_past - n);
        feed(n, T, true);
        n += T;
    }
    feed(c.n_past, c.n_tokens, false);
    const std::vector<float> k = k_cpu.read(), v = v_cpu.read();
    std::vector<float> q = uniform(size_t(c.n_tokens * c.n_head * c.head_dim), rng, -1.0f, 1.0f);
    for (float& x : q) x *= c.q_scale;
    const std::vector<float> gate = uniform(q.size(), rng, -4.0f, 4.0f);
    const cpu::AttentionDims ref_dims{c.n_tokens, c.n_past, c.n_head, c.n_kv_head, c.head_dim};
    std::vector<float> want(q.size());
    cpu::attention(q.data(), k.data(), v.data(), c.gate ? gate.data() : nullptr, ref_dims, want.data());

    c.capacity = capacity;
    const cuda::CachedAttentionDims dims{c.n_tokens, c.n_head, c.n_kv_head, c.head_dim, c.capacity, c.head_dim, c.variant};
    GuardedDeviceArray<float> dq(q), dgate(gate), dout(q.size());
    GuardedDeviceArray<int32_t> dpast(std::vector<int32_t>{int32_t(c.n_past)});
    GuardedDeviceArray<float> scratch(cuda::attention_decode_scratch_floats(dims));
    cuda::attention_cached(dq.get(), k_gpu.view, v_gpu.view, c.gate ? dgate.get() : nullptr, dpast.get(), dims,
                           scratch.get(), dout.get(), nullptr);
    const bool keys = c.variant == cuda::AttentionDecodeVariant::keys_across_lanes;
    const std::string what = std::string("attention_cached kivi4 ") + (keys ? "keys" : "dims") + " T=" +
                             std::to_string(c.n_tokens) + " past=" + std::to_string(c.n_past) + " H=" +
                             std::to_string(c.n_head) + "/" + std::to_string(c.n_kv_head) + " d=" + std::to_string(c.head_dim);
    const std::vector<double> want_d = to_double(want);
    const std::vector<double> tol =
        attention_tolerance(c, cuda::attention_decode_splits_run(dims, cuda::KvElement::kivi4), q, k, v, want_d);
    expect_within(dout.download(what), want_d, [&](size_t i) { return tol[i]; }, what);
    EXPECT_GT(kivi_split(c.n_past).quantised, 0) << what << ": nothing quantised, the case tests nothing";
}

TEST(DecodeKernels, AttentionCachedKivi4) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 500;
    // Depths past the first quantised block (168), ring wraps, decode and prompt calls, head dims 32..256.
    const std::vector<AttnCase> cases = {
        {1, 168, 2, 1, 32, 0, false, false, 1},   {1, 200, 4, 2, 64, 0, true, false, 1},
        {1, 1000, 6, 1, 128, 0, true, false, 8},  {1, 3000, 24, 4, 256, 0, true, false, 1},
        {37, 500, 4, 2, 64, 0, true, false, 1},   {100, 777, 8, 2, 128, 0, false, false, 8},
    };
    for (AttnCase c : cases)
        for (const auto variant : {cuda::AttentionDecodeVariant::dims_across_lanes,
                                   cuda::AttentionDecodeVariant::keys_across_lanes}) {
            c.variant = variant;
            check_attention_kivi(c, seed++);
        }
}

// ---- prologue and kv_store ----

void check_prologue(int64_t H, int64_t H_kv, int64_t d, int64_t rope_dim, bool gated, bool half, int32_t position,
                    uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t per_head = gated ? 2 * d : d, capacity = position + 3;
    const std::vector<float> q_full = uniform(static_cast<size_t>(H * per_head), rng, -3.0f, 3.0f);
    const std::vector<float> k_raw = uniform(static_cast<size_t>(H_kv * d), rng, -3.0f, 3.0f);
    const std::vector<float> v_raw = uniform(static_cast<size_t>(H_kv * d), rng, -3.0f, 3.0f);
    const std::vector<float> q_norm = uniform(static_cast<size_t>(d), rng, 0.5f, 1.5f), k_norm = uniform(static_cast<size_t>(d), rng, 0.5f, 1.5f);
    const float eps = 1e-6f, theta = 1e7f;

    // Reference: split, rms_norm, rope; the new rows of the cache.
    std::vector<float> q(static_cast<size_t>(H * d)), k(static_cast<size_t>(H_kv * d));
    for (int64_t h = 0; h < H; ++h) std::copy_n(q_full.begin() + h * per_head, d, q.begin() + h * d);
    cpu::rms_norm(q.data(), q_norm.data(), H, d, eps, cpu::NormWeight::plain, q.data());
    cpu::rms_norm(k_raw.data(), k_norm.data(), H_kv, d, eps, cpu::NormWeight::plain, k.data());
    cpu::rope_neox(q.data(), &position, 1, H, d, rope_dim, theta);
    cpu::rope_neox(k.data(), &position, 1, H_kv, d, rope_dim, theta);

    const size_t elem = half ? 2 : 4, row_bytes = size_t(H_kv * d) * elem;
    GuardedDeviceArray<float> dq_full(q_full), dk_raw(k_raw), dv_raw(v_raw), dqn(q_norm), dkn(k_norm);
    GuardedDeviceArray<float> dq(static_cast<size_t>(H * d));
    GuardedDeviceArray<uint8_t> dk_cache(static_cast<size_t>(capacity) * row_bytes), dv_cache(static_cast<size_t>(capacity) * row_bytes);
    GuardedDeviceArray<int32_t> dpos(std::vector<int32_t>{position});
    const cuda::AttentionPrologueDims dims{H, H_kv, d, per_head, rope_dim, theta, eps};
    cuda::attention_decode_prologue(dq_full.get(), dk_raw.get(), dv_raw.get(), dqn.get(), dkn.get(), dpos.get(), dims,
                                    half ? cuda::KvElement::f16 : cuda::KvElement::f32, dk_cache.get(), dv_cache.get(),
                                    dq.get(), nullptr);
    const std::string what = std::string("attention prologue ") + (half ? "f16" : "f32") + " H=" + std::to_string(H) +
                             "/" + std::to_string(H_kv) + " d=" + std::to_string(d) + " rope=" +
                             std::to_string(rope_dim) + " pos=" + std::to_string(position);
    // rms_norm in fp32 (a sum of d squares over 256 threads and a butterfly: ≤ (ceil(d/256) + 8)·u
    // relative; 1/sqrt ≤ 2u; two products) and the rotation in double of those floats: ≤ 16u relative
    // to the larger of the pair, the angle itself formed exactly as the reference forms it.
    auto pair_tol = [&](const std::vector<float>& want, int64_t rows) {
        std::vector<double> tol(want.size());
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = 0; i < d; ++i) {
                const int64_t half_dim = rope_dim / 2;
                const int64_t j = i < half_dim ? i : i < rope_dim ? i - half_dim : i;
                const double m = i < rope_dim ? std::max(std::fabs(want[size_t(r * d + j)]),
                                                         std::fabs(want[size_t(r * d + j + half_dim)]))
                                              : std::fabs(want[size_t(r * d + i)]);
                tol[size_t(r * d + i)] = 16.0 * kU * 2.0 * m;
            }
        return tol;
    };
    const std::vector<double> q_tol = pair_tol(q, H), k_tol = pair_tol(k, H_kv);
    expect_within(dq.download(what + " q"), to_double(q), [&](size_t i) { return q_tol[i]; }, what + " q");
    // The cache: only row `position` was written (the rest is still poison 0xFF), in the KV element type.
    const std::vector<uint8_t> k_bytes = dk_cache.download(what + " k"), v_bytes = dv_cache.download(what + " v");
    for (size_t b = 0; b < k_bytes.size(); ++b) {
        const bool in_row = b / row_bytes == size_t(position);
        if (!in_row) ASSERT_TRUE(k_bytes[b] == 0xFF && v_bytes[b] == 0xFF) << what << ": byte " << b << " written";
    }
    std::vector<float> k_got(static_cast<size_t>(H_kv * d)), v_got(k_got.size());
    const uint8_t* krow = k_bytes.data() + size_t(position) * row_bytes;
    const uint8_t* vrow = v_bytes.data() + size_t(position) * row_bytes;
    for (size_t i = 0; i < k_got.size(); ++i) {
        if (half) {
            uint16_t kh, vh;
            std::memcpy(&kh, krow + 2 * i, 2);
            std::memcpy(&vh, vrow + 2 * i, 2);
            k_got[i] = half_to_float(kh);
            v_got[i] = half_to_float(vh);
            // v is stored as given: exactly the RNE half of it.
            ASSERT_EQ(vh, float_to_half(v_raw[i])) << what << ": v element " << i;
        } else {
            std::memcpy(&k_got[i], krow + 4 * i, 4);
            std::memcpy(&v_got[i], vrow + 4 * i, 4);
            ASSERT_EQ(v_got[i], v_raw[i]) << what << ": v element " << i;
        }
    }
    // A half cache adds its own rounding (≤ 2^-11 relative) to k.
    expect_within(k_got, to_double(k),
                  [&](size_t i) { return k_tol[i] + (half ? std::ldexp(std::fabs(double(k[i])), -11) : 0.0); },
                  what + " k");

    // With the step's rope table (cuda::rope_decode_table, written before a synchronisation as the prologue's
    // contract asks): the same bits in q and in both caches, every other cache byte untouched.
    if (rope_dim == 0) return;
    GuardedDeviceArray<double> table(size_t(cuda::rope_decode_table_doubles(rope_dim)));
    cuda::rope_decode_table(dpos.get(), rope_dim, theta, table.get(), nullptr);
    cuda::cuda_check(cudaStreamSynchronize(nullptr), "rope table");
    GuardedDeviceArray<float> dq_t(static_cast<size_t>(H * d));
    GuardedDeviceArray<uint8_t> dk_t(static_cast<size_t>(capacity) * row_bytes), dv_t(static_cast<size_t>(capacity) * row_bytes);
    cuda::attention_decode_prologue(dq_full.get(), dk_raw.get(), dv_raw.get(), dqn.get(), dkn.get(), dpos.get(), dims,
                                    half ? cuda::KvElement::f16 : cuda::KvElement::f32, dk_t.get(), dv_t.get(),
                                    dq_t.get(), nullptr, table.get());
    const std::vector<float> q_table = dq_t.download(what + " q (table)"), q_own = dq.download(what + " q");
    EXPECT_EQ(std::memcmp(q_table.data(), q_own.data(), q_own.size() * sizeof(float)), 0) << what << ": q with the table";
    EXPECT_EQ(dk_t.download(what + " k (table)"), k_bytes) << what << ": k cache with the table";
    EXPECT_EQ(dv_t.download(what + " v (table)"), v_bytes) << what << ": v cache with the table";
    // The table itself: cos and sin of the angle the CPU reference forms (its fp32 angle, then double).
    const std::vector<double> got = table.download(what + " table");
    for (int64_t j = 0; j < rope_dim / 2; ++j) {
        const float inv_freq = 1.0f / float(std::pow(double(theta), double(float(2 * j) / float(rope_dim))));
        const double angle = double(float(position) * inv_freq);
        EXPECT_NEAR(got[size_t(2 * j)], std::cos(angle), 4e-16) << what << ": cos of pair " << j;
        EXPECT_NEAR(got[size_t(2 * j + 1)], std::sin(angle), 4e-16) << what << ": sin of pair " << j;
    }
}

TEST(DecodeKernels, AttentionPrologue) {
    DELTABIT_REQUIRE_GPU();
    check_prologue(1, 1, 1, 0, false, false, 0, 1);
    check_prologue(4, 2, 63, 62, true, false, 5, 2);
    check_prologue(8, 2, 128, 128, false, true, 1000, 3);
    check_prologue(24, 4, 256, 64, true, false, 31999, 4);  // Bonsai-27B: partial rope, gate interleaved
    check_prologue(24, 4, 256, 64, true, true, 4095, 5);
    check_prologue(32, 8, 128, 128, false, true, 131071, 6);  // Bonsai-4B at a deep position
}

TEST(DecodeKernels, RopeDecodeTableRefusesBadShapes) {
    DELTABIT_REQUIRE_GPU();
    GuardedDeviceArray<double> table(512);
    GuardedDeviceArray<int32_t> dpos(std::vector<int32_t>{3});
    for (const int64_t rope_dim : {int64_t(0), int64_t(63), int64_t(258)}) {
        try {
            cuda::rope_decode_table(dpos.get(), rope_dim, 1e4f, table.get(), nullptr);
            ADD_FAILURE() << "rope_dim " << rope_dim << " was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("rope_dim " + std::to_string(rope_dim)), std::string::npos) << e.what();
        }
    }
    const std::vector<double> after = table.download("the refused table");
    std::vector<uint8_t> bytes(after.size() * sizeof(double));
    std::memcpy(bytes.data(), after.data(), bytes.size());
    EXPECT_EQ(bytes, std::vector<uint8_t>(bytes.size(), kPoisonByte)) << "a refused call wrote the table";
}

TEST(DecodeKernels, KvStoreRoundsToNearestEven) {
    DELTABIT_REQUIRE_GPU();
    std::mt19937 rng(7);
    const int64_t T = 5, row = 65, past = 3;
    std::vector<float> rows = uniform(static_cast<size_t>(T * row), rng, -70000.0f, 70000.0f);
    rows[0] = 1.0f + 1.0f / 2048.0f;  // exactly between two halves: ties to even (1.0)
    rows[1] = 65520.0f;               // rounds past the largest half: inf
    rows[2] = 1e-8f;                  // below the smallest subnormal half's half: +0
    GuardedDeviceArray<float> drows(rows);
    GuardedDeviceArray<uint16_t> cache(static_cast<size_t>((past + T) * row));
    GuardedDeviceArray<int32_t> dpast(std::vector<int32_t>{int32_t(past)});
    cuda::kv_store(drows.get(), T, row, dpast.get(), cuda::KvElement::f16, cache.get(), nullptr);
    const std::vector<uint16_t> got = cache.download("kv_store f16");
    for (size_t i = 0; i < got.size(); ++i) {
        const size_t r = i / size_t(row);
        if (r < size_t(past)) ASSERT_EQ(got[i], 0xFFFF) << "element " << i << " before n_past was written";
        else ASSERT_EQ(got[i], float_to_half(rows[i - size_t(past * row)])) << "element " << i;
    }
}

// ---- gated DeltaNet decode ----

// The inputs of one decode step, drawn in this order from rng.
struct GdnStepInputs {
    std::vector<float> mixed, b, a, conv_w, conv_state, ssm_a, dt_bias, z, norm_w, state;
};
GdnStepInputs random_gdn_step_inputs(const cuda::GdnDecodeDims& d, std::mt19937& rng) {
    const int64_t Hk = d.n_key_heads, Hv = d.n_value_heads, dk = d.key_dim, dv = d.value_dim, K = d.conv_kernel;
    const int64_t C = 2 * Hk * dk + Hv * dv;
    GdnStepInputs in;
    in.mixed = uniform(static_cast<size_t>(C), rng, -2.0f, 2.0f);
    in.b = uniform(static_cast<size_t>(Hv), rng, -4.0f, 4.0f);
    in.a = uniform(static_cast<size_t>(Hv), rng, -4.0f, 4.0f);
    in.conv_w = uniform(static_cast<size_t>(C * K), rng, -1.0f, 1.0f);
    in.conv_state = uniform(static_cast<size_t>((K - 1) * C), rng, -2.0f, 2.0f);
    in.ssm_a = uniform(static_cast<size_t>(Hv), rng, -8.0f, -0.1f);
    in.dt_bias = uniform(static_cast<size_t>(Hv), rng, -1.0f, 1.0f);
    in.z = uniform(static_cast<size_t>(Hv * dv), rng, -4.0f, 4.0f);
    in.norm_w = uniform(static_cast<size_t>(dv), rng, 0.5f, 1.5f);
    in.state = uniform(static_cast<size_t>(Hv * dk * dv), rng, -0.5f, 0.5f);
    return in;
}

void check_gdn_decode(const cuda::GdnDecodeDims& d, uint32_t seed, bool in_place) {
    std::mt19937 rng(seed);
    const int64_t Hk = d.n_key_heads, Hv = d.n_value_heads, dk = d.key_dim, dv = d.value_dim, K = d.conv_kernel;
    const int64_t C = 2 * Hk * dk + Hv * dv;
    const auto& [mixed, b, a, conv_w, conv_state, ssm_a, dt_bias, z, norm_w, state] = random_gdn_step_inputs(d, rng);
    const float l2_eps = 1e-6f, eps = 1e-6f;

    // Reference chain, as the prompt path runs it.
    std::vector<float> conv_out(static_cast<size_t>(C)), ref_conv_state = conv_state, ref_state = state;
    cpu::conv1d_causal_silu(mixed.data(), conv_w.data(), ref_conv_state.data(), 1, C, K, conv_out.data());
    std::vector<float> q(conv_out.begin(), conv_out.begin() + Hk * dk);
    std::vector<float> k(conv_out.begin() + Hk * dk, conv_out.begin() + 2 * Hk * dk);
    const std::vector<float> v(conv_out.begin() + 2 * Hk * dk, conv_out.end());
    cpu::l2_norm(q.data(), Hk, dk, l2_eps, q.data());
    cpu::l2_norm(k.data(), Hk, dk, l2_eps, k.data());
    std::vector<float> beta(static_cast<size_t>(Hv)), g(static_cast<size_t>(Hv)), o(static_cast<size_t>(Hv * dv));
    cpu::gdn_gates(b.data(), a.data(), ssm_a.data(), dt_bias.data(), 1, Hv, beta.data(), g.data());
    const cpu::DeltaRuleDims rd{1, Hk, Hv, dk, dv, d.key_head_map};
    cpu::gated_delta_rule_recurrent(q.data(), k.data(), v.data(), g.data(), beta.data(), rd, ref_state.data(), o.data());

    GuardedDeviceArray<float> dmixed(mixed), db(b), da(a), dconv_w(conv_w), dconv_state(conv_state), dssm_a(ssm_a),
        ddt(dt_bias), dz(z), dnorm(norm_w), dstate(state);
    GuardedDeviceArray<float> dq(static_cast<size_t>(Hk * dk)), dk_(static_cast<size_t>(Hk * dk)), dv_(static_cast<size_t>(Hv * dv)), dbeta(static_cast<size_t>(Hv)),
        dg(static_cast<size_t>(Hv)), dout(static_cast<size_t>(Hv * dv));
    // Out of place, the model's ping-pong: the old window and state must survive untouched.
    GuardedDeviceArray<float> dconv_next(conv_state.size()), dstate_next(state.size());
    float* conv_next = in_place ? dconv_state.get() : dconv_next.get();
    float* state_out = in_place ? dstate.get() : dstate_next.get();
    cuda::gdn_decode_prepare(dmixed.get(), db.get(), da.get(), dconv_w.get(), dconv_state.get(), conv_next, dssm_a.get(),
                             ddt.get(), d, l2_eps, dq.get(), dk_.get(), dv_.get(), dbeta.get(), dg.get(), nullptr);
    cuda::gdn_decode_recurrent(dq.get(), dk_.get(), dv_.get(), dbeta.get(), dg.get(), dz.get(), dnorm.get(), eps, d,
                               dstate.get(), state_out, dout.get(), nullptr);
    const std::string what = "gdn decode H=" + std::to_string(Hk) + "/" + std::to_string(Hv) + " dk=" +
                             std::to_string(dk) + " dv=" + std::to_string(dv) + " K=" + std::to_string(K) +
                             (d.key_head_map == cpu::KeyHeadMap::tiled ? " tiled" : " grouped") +
                             (in_place ? " in place" : " ping-pong");
    if (!in_place) {
        EXPECT_EQ(dconv_state.download(what + " old conv state"), conv_state) << what;
        EXPECT_EQ(dstate.download(what + " old state"), state) << what;
    }
    // The conv window moves exactly (copies, no arithmetic).
    EXPECT_EQ((in_place ? dconv_state : dconv_next).download(what + " conv state"), ref_conv_state) << what;
    // Conv outputs: K fmaf and SiLU (expf 2 ulp, a divide): ≤ (K + 8)·u relative to Σ|w·x| + |y|.
    // q and k then go through an fp32 l2 norm (≤ (ceil(dk/256) + 12)·u relative); gates 8u.
    std::vector<double> conv_scale(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
        double s = std::fabs(double(conv_w[size_t(c * K + K - 1)]) * mixed[size_t(c)]);
        for (int64_t j = 0; j + 1 < K; ++j) s += std::fabs(double(conv_w[size_t(c * K + j)]) * conv_state[size_t(j * C + c)]);
        conv_scale[size_t(c)] = s;
    }
    const std::vector<float> got_q = dq.download(what + " q"), got_k = dk_.download(what + " k"),
                             got_v = dv_.download(what + " v"), got_beta = dbeta.download(what + " beta"),
                             got_g = dg.download(what + " g");
    expect_within(got_v, to_double(v),
                  [&](size_t i) { return double(K + 8) * kU * (conv_scale[size_t(2 * Hk * dk) + i] + std::fabs(v[i])); },
                  what + " v");
    // q, k: each conv output's absolute error e_c ≤ (K + 8)·u·(scale_c + |y_c|) moves the unit vector
    // y/‖y‖ by at most max_c e_c·(1 + sqrt(dk))/‖y‖ per element; the fp32 norm itself adds
    // (ceil(dk/256) + 12)·u relative.
    auto qk_tol = [&](size_t base) {
        std::vector<double> tol(static_cast<size_t>(Hk * dk));
        for (int64_t h = 0; h < Hk; ++h) {
            double norm = 0, worst = 0;
            for (int64_t j = 0; j < dk; ++j) {
                const size_t c = base + size_t(h * dk + j);
                norm += double(conv_out[c]) * conv_out[c];
                worst = std::max(worst, double(K + 8) * kU * (conv_scale[c] + std::fabs(double(conv_out[c]))));
            }
            norm = std::sqrt(norm);
            for (int64_t j = 0; j < dk; ++j) {
                const size_t i = size_t(h * dk + j);
                const double unit = std::fabs(double(conv_out[base + i])) / norm;
                tol[i] = worst * (1.0 + std::sqrt(double(dk))) / norm + double(dk / 256 + 13) * kU * unit;
            }
        }
        return tol;
    };
    const std::vector<double> q_tol = qk_tol(0), k_tol = qk_tol(static_cast<size_t>(Hk * dk));
    expect_within(got_q, to_double(q), [&](size_t i) { return q_tol[i]; }, what + " q");
    expect_within(got_k, to_double(k), [&](size_t i) { return k_tol[i]; }, what + " k");
    expect_relative(got_beta, to_double(beta), 8 * kU, 0, what + " beta");
    expect_relative(got_g, to_double(g), 16 * kU, 0, what + " g");
    // State: the recurrence of one token from inputs that already differ by the bounds above; no tight
    // closed form (as test_op_parity_delta_rule.cpp's kDeltaRuleTolU), so measured: in u × the largest |S|
    // of the head, the worst of the first six shapes on an H200 was 4.6u; the bound is 32u. A wrong key
    // head or gate moves it by O(1e-2) of that scale.
    const std::vector<float> got_state = (in_place ? dstate : dstate_next).download(what + " state");
    std::vector<double> head_max(static_cast<size_t>(Hv), 0.0);
    for (size_t i = 0; i < ref_state.size(); ++i)
        head_max[i / size_t(dk * dv)] = std::max(head_max[i / size_t(dk * dv)], double(std::fabs(ref_state[i])));
    expect_within(got_state, to_double(ref_state), [&](size_t i) { return 32 * kU * head_max[i / size_t(dk * dv)]; },
                  what + " state");
    // The output from the kernel's own q, k, v, β, g (each checked above): a fixed multiple of the head's
    // largest |y| cannot bound it, because o_j = q_scale·Σ_i q_i S'_ij cancels when q·k is small and the
    // decay has wiped the old state (S'_:j ≈ k δ_j): each column then loses Σ_i|q_i S'_ij| / |o_j| (69 in
    // head 1 of the dk 32, dv 1000 shape at seed 314, 10⁴ at other seeds) in relative accuracy, with a
    // rounding of its own that the norm's common scale does not cancel. So each y_j is bounded by the
    // magnitudes its fp32 chain rounds: m_j = q_scale·Σ_i |q_i|·(|e^g S_ij| + |k_i|·β(|v_j| + Σ_i |e^g S_ij k_i|))
    // for o_j, carried through the norm (B_j = |w_j silu(z_j)|·m_j / rms) plus the norm's shared scale
    // (|y_j|·R, R = Σ_j |o_j| m_j / (d_v·rms²)). 16u per unit: a lane's partial sums of ≤ 8 fmaf, the
    // lane and 4-way combines, the update's fmaf and the decay product, the norm's products and SiLU;
    // an fp32 emulation of the kernel over these shapes × 80 seeds each needed at most 4.3u.
    std::vector<float> own_state = state, own_o(o.size()), own_want(o.size());
    cpu::gated_delta_rule_recurrent(got_q.data(), got_k.data(), got_v.data(), got_g.data(), got_beta.data(), rd,
                                    own_state.data(), own_o.data());
    cpu::gated_rms_norm(own_o.data(), z.data(), norm_w.data(), Hv, dv, eps, own_want.data());
    std::vector<double> out_tol(own_want.size());
    const double q_scale = 1.0 / std::sqrt(double(dk));
    for (int64_t h = 0; h < Hv; ++h) {
        const int64_t kh = cpu::key_head_of(h, rd);
        const float* qh = got_q.data() + kh * dk;
        const float* kk = got_k.data() + kh * dk;
        const double decay = std::exp(double(got_g[size_t(h)])), b_h = got_beta[size_t(h)];
        std::vector<double> m(static_cast<size_t>(dv));
        double sum_sq = 0.0, cross = 0.0;
        for (int64_t j = 0; j < dv; ++j) {
            const auto s_ij = [&](int64_t i) { return decay * std::fabs(double(state[size_t((h * dk + i) * dv + j)])); };
            double read = 0.0, dot = 0.0;
            for (int64_t i = 0; i < dk; ++i) read += s_ij(i) * std::fabs(double(kk[i]));
            const double delta = b_h * (std::fabs(double(got_v[size_t(h * dv + j)])) + read);
            for (int64_t i = 0; i < dk; ++i) dot += std::fabs(double(qh[i])) * (s_ij(i) + std::fabs(double(kk[i])) * delta);
            const double oj = own_o[size_t(h * dv + j)];
            m[size_t(j)] = q_scale * dot;
            sum_sq += oj * oj;
            cross += std::fabs(oj) * m[size_t(j)];
        }
        const double rms_sq = sum_sq / double(dv) + double(eps), R = cross / (double(dv) * rms_sq);
        for (int64_t j = 0; j < dv; ++j) {
            const size_t i = size_t(h * dv + j);
            const double gate = std::fabs(double(norm_w[size_t(j)]) * cpu::silu(double(z[i])));
            out_tol[i] = 16 * kU * (gate * m[size_t(j)] / std::sqrt(rms_sq) + std::fabs(double(own_want[i])) * R);
        }
    }
    expect_within(dout.download(what + " out"), to_double(own_want), [&](size_t i) { return out_tol[i]; }, what + " out");
}

// The recurrent step splits a head's value columns over a cluster of C blocks (gdn_decode_cuda.cu: C the
// smallest power of two with 32·C >= value_dim, at most 8; ceil(value_dim / C) columns per block rounded up
// to 8). The comments give the split each shape makes, so the shapes cover one block, full clusters, a
// short last block, blocks with no column at all, and blocks that take several passes.
TEST(DecodeKernels, GdnDecodeStep) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 300;
    for (const bool in_place : {true, false}) {
        check_gdn_decode({1, 1, 1, 1, 1, cpu::KeyHeadMap::tiled}, seed++, in_place);         // C 1: 1 column
        check_gdn_decode({2, 6, 63, 65, 4, cpu::KeyHeadMap::tiled}, seed++, in_place);       // C 4: 24 24 17 0
        check_gdn_decode({2, 4, 65, 33, 3, cpu::KeyHeadMap::grouped}, seed++, in_place);     // C 2: 24 9
        check_gdn_decode({1, 2, 256, 129, 4, cpu::KeyHeadMap::grouped}, seed++, in_place);   // C 8: 24 ×5, 9 0 0
        check_gdn_decode({3, 3, 32, 1000, 2, cpu::KeyHeadMap::tiled}, seed++, in_place);     // C 8: 128 ×7, 104
        check_gdn_decode({16, 48, 128, 128, 4, cpu::KeyHeadMap::tiled}, seed++, in_place);   // Bonsai-27B, C 4: 32 ×4
        check_gdn_decode({2, 4, 128, 96, 4, cpu::KeyHeadMap::grouped}, seed++, in_place);    // C 4: 24 ×4
        check_gdn_decode({1, 2, 64, 160, 3, cpu::KeyHeadMap::tiled}, seed++, in_place);      // C 8: 24 ×6, 16 0
        check_gdn_decode({1, 1, 200, 257, 2, cpu::KeyHeadMap::tiled}, seed++, in_place);     // C 8: 40 ×6, 17 0
        // C 8: 128 ×8 at key_dim 256, 512 threads of 8 lanes: two passes of 64 columns per block.
        check_gdn_decode({2, 2, 256, 1024, 4, cpu::KeyHeadMap::grouped}, seed++, in_place);
    }
}

// ---- gated DeltaNet decode with a quantised output ----

// out and state bit for bit; the reference must be all finite, so that an unwritten (NaN-poisoned) output
// cannot match an unwritten reference.
::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want) {
    if (got.size() != want.size())
        return ::testing::AssertionFailure() << got.size() << " values, want " << want.size();
    for (size_t i = 0; i < want.size(); ++i) {
        if (!std::isfinite(want[i])) return ::testing::AssertionFailure() << "reference [" << i << "] is " << want[i];
        if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i]))
            return ::testing::AssertionFailure() << "[" << i << "] is " << got[i] << ", want " << want[i];
    }
    return ::testing::AssertionSuccess();
}

// One prepared step through gdn_decode_recurrent twice, from the same inputs and state (out of place):
// without out_quantized, then with it in its own guarded scratch. The second call's out and state must be
// the first's bit for bit, and its int8 groups the quantiser's definition applied to that out, bit for
// bit. The kernel quantises a group in the block of the head's cluster that holds the group's first
// column, gathering its 128 outputs from the blocks that hold them, so the shapes vary how a group lies
// over the blocks (the split as GdnDecodeStep's comment says): over four blocks of 32 (value_dim 128,
// 256), over three or four blocks of 48, starting mid-block (384), over blocks of 80 (640), inside one block of
// 128 (1024, with two passes per block at key_dim 256), and the key dim (the four template widths); a
// group never spans two heads.
void check_gdn_decode_quantized_output(const cuda::GdnDecodeDims& d, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t Hk = d.n_key_heads, Hv = d.n_value_heads, dk = d.key_dim, dv = d.value_dim;
    const auto& [mixed, b, a, conv_w, conv_state, ssm_a, dt_bias, z, norm_w, state] = random_gdn_step_inputs(d, rng);
    const float l2_eps = 1e-6f, eps = 1e-6f;
    GuardedDeviceArray<float> dmixed(mixed), db(b), da(a), dconv_w(conv_w), dconv_state(conv_state), dssm_a(ssm_a),
        ddt(dt_bias), dz(z), dnorm(norm_w), dstate(state);
    GuardedDeviceArray<float> dq(static_cast<size_t>(Hk * dk)), dk_(static_cast<size_t>(Hk * dk)),
        dv_(static_cast<size_t>(Hv * dv)), dbeta(static_cast<size_t>(Hv)), dg(static_cast<size_t>(Hv));
    GuardedDeviceArray<float> plain_out(static_cast<size_t>(Hv * dv)), plain_state(state.size());
    GuardedDeviceArray<float> out(static_cast<size_t>(Hv * dv)), state_next(state.size());
    cuda::gdn_decode_prepare(dmixed.get(), db.get(), da.get(), dconv_w.get(), dconv_state.get(), dconv_state.get(),
                             dssm_a.get(), ddt.get(), d, l2_eps, dq.get(), dk_.get(), dv_.get(), dbeta.get(), dg.get(),
                             nullptr);
    cuda::gdn_decode_recurrent(dq.get(), dk_.get(), dv_.get(), dbeta.get(), dg.get(), dz.get(), dnorm.get(), eps, d,
                               dstate.get(), plain_state.get(), plain_out.get(), nullptr);
    GuardedQuantizedOutput out_q(Hv * dv);
    const cuda::QuantizedActivationsView view = out_q.view();
    cuda::gdn_decode_recurrent(dq.get(), dk_.get(), dv_.get(), dbeta.get(), dg.get(), dz.get(), dnorm.get(), eps, d,
                               dstate.get(), state_next.get(), out.get(), nullptr, &view);
    const std::string what = "gdn decode with out_quantized H=" + std::to_string(Hk) + "/" + std::to_string(Hv) +
                             " dk=" + std::to_string(dk) + " dv=" + std::to_string(dv) +
                             (d.key_head_map == cpu::KeyHeadMap::tiled ? " tiled" : " grouped");
    const std::vector<float> want_out = plain_out.download(what + " out (without out_quantized)");
    const std::vector<float> got_out = out.download(what + " out");
    const std::vector<float> want_state = plain_state.download(what + " state (without out_quantized)");
    const std::vector<float> got_state = state_next.download(what + " state");
    ASSERT_FALSE(::testing::Test::HasFailure()) << what;  // guard bytes
    ASSERT_TRUE(same_bits(got_out, want_out)) << what << ": out";
    ASSERT_TRUE(same_bits(got_state, want_state)) << what << ": state";
    ASSERT_TRUE(out_q.matches_host_quantizer(got_out)) << what;
}

TEST(DecodeKernels, GdnDecodeStepQuantizedOutput) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 400;
    for (const cuda::GdnDecodeDims& d : std::vector<cuda::GdnDecodeDims>{
             {1, 1, 1, 128, 1, cpu::KeyHeadMap::tiled},
             {2, 4, 64, 128, 4, cpu::KeyHeadMap::grouped},
             {1, 2, 128, 256, 3, cpu::KeyHeadMap::tiled},
             {2, 2, 256, 384, 2, cpu::KeyHeadMap::grouped},
             {1, 3, 32, 640, 4, cpu::KeyHeadMap::tiled},
             {1, 1, 128, 1024, 4, cpu::KeyHeadMap::tiled},
             {16, 48, 128, 128, 4, cpu::KeyHeadMap::tiled},  // Bonsai-27B
             {2, 4, 128, 384, 4, cpu::KeyHeadMap::grouped},
             {2, 2, 256, 1024, 2, cpu::KeyHeadMap::tiled},
         }) {
        check_gdn_decode_quantized_output(d, seed++);
        if (HasFailure()) return;
    }
}

TEST(DecodeKernels, GdnDecodeQuantizedOutputRefusesOtherShapes) {
    DELTABIT_REQUIRE_GPU();
    // Calls the recurrent step on zeros (finite, so an accepted call runs cleanly) with a view of
    // `view_cols` inputs, or none.
    auto recurrent = [](const cuda::GdnDecodeDims& d, const int64_t* view_cols) {
        const int64_t Hk = d.n_key_heads, Hv = d.n_value_heads, dk = d.key_dim, dv = d.value_dim;
        auto zeros = [](int64_t n) { return GuardedDeviceArray<float>(std::vector<float>(static_cast<size_t>(n), 0.0f)); };
        const GuardedDeviceArray<float> q = zeros(Hk * dk), k = zeros(Hk * dk), v = zeros(Hv * dv), beta = zeros(Hv),
                                        g = zeros(Hv), z = zeros(Hv * dv), norm_w = zeros(dv),
                                        state = zeros(Hv * dk * dv), state_next = zeros(Hv * dk * dv),
                                        out = zeros(Hv * dv);
        // Room for H_v·d_v inputs whatever the view says, so a call that wrongly goes ahead writes nowhere harmful.
        const int64_t cols = view_cols != nullptr ? *view_cols : Hv * dv;
        const cuda::ActivationScratch scratch(std::max(cols, Hv * dv));
        const cuda::QuantizedActivationsView view = scratch.view(cols);
        cuda::gdn_decode_recurrent(q.get(), k.get(), v.get(), beta.get(), g.get(), z.get(), norm_w.get(), 1e-6f, d,
                                   state.get(), state_next.get(), out.get(), nullptr,
                                   view_cols != nullptr ? &view : nullptr);
        cuda::cuda_check(cudaDeviceSynchronize(), "gdn_decode_recurrent");
    };
    const cuda::GdnDecodeDims dv128{1, 2, 32, 128, 4, cpu::KeyHeadMap::tiled};
    const cuda::GdnDecodeDims dv64{1, 2, 32, 64, 4, cpu::KeyHeadMap::tiled};
    const cuda::GdnDecodeDims dv192{1, 1, 32, 192, 4, cpu::KeyHeadMap::tiled};
    const int64_t c64 = 64, c127 = 127, c128 = 128, c192 = 192, c255 = 255, c256 = 256, c384 = 384;
    // Controls: the right view is accepted; value_dim 64 and 192 are fine without a quantised output.
    EXPECT_NO_THROW(recurrent(dv128, &c256));
    EXPECT_NO_THROW(recurrent(dv64, nullptr));
    EXPECT_NO_THROW(recurrent(dv192, nullptr));
    // A group of 128 would straddle two heads (64) or end mid-head (192), even with a view of the right width.
    EXPECT_THROW(recurrent(dv64, &c128), Error) << "value_dim 64";
    EXPECT_THROW(recurrent(dv64, &c64), Error) << "value_dim 64, a view of one head";
    EXPECT_THROW(recurrent(dv192, &c192), Error) << "value_dim 192";
    // Views of another width than H_v·d_v = 256.
    EXPECT_THROW(recurrent(dv128, &c255), Error) << "a view of 255";
    EXPECT_THROW(recurrent(dv128, &c384), Error) << "a view of 384";
    EXPECT_THROW(recurrent(dv128, &c128), Error) << "a view of one head";
    EXPECT_THROW(recurrent(dv128, &c127), Error) << "a view of 127";
}

// ---- argmax ----

// The contract, naively: the lowest non-finite index reported, else argmax_lowest_id.
int32_t expected_argmax(const std::vector<float>& x) {
    for (size_t i = 0; i < x.size(); ++i)
        if (!std::isfinite(x[i])) return non_finite_choice(int64_t(i));
    return argmax_lowest_id(x);
}

void check_argmax(const std::vector<float>& x, const std::string& what) {
    GuardedDeviceArray<float> dx(x);
    GuardedDeviceArray<uint8_t> scratch(cuda::argmax_scratch_bytes(int64_t(x.size())));
    GuardedDeviceArray<int32_t> out(1);
    cuda::argmax(dx.get(), int64_t(x.size()), scratch.get(), out.get(), nullptr);
    const int32_t got = out.download(what)[0];
    EXPECT_EQ(got, expected_argmax(x)) << what;
}

TEST(DecodeKernels, ArgmaxEqualsLowestIdRule) {
    DELTABIT_REQUIRE_GPU();
    std::mt19937 rng(11);
    const float big = std::numeric_limits<float>::max();
    for (const int64_t n : {int64_t(1), int64_t(63), int64_t(2049), int64_t(248320), int64_t(1000003)}) {
        std::vector<float> x = uniform(static_cast<size_t>(n), rng, -30.0f, 30.0f);
        check_argmax(x, "random n=" + std::to_string(n));
        // Ties: the maximum at several ids, in different blocks; the lowest wins.
        std::vector<float> t(static_cast<size_t>(n), 1.0f);
        for (int64_t i = n / 2; i < n; i += std::max<int64_t>(1, n / 7)) t[size_t(i)] = 5.0f;
        check_argmax(t, "ties n=" + std::to_string(n));
        // The finite extremes are ordinary values: all −max gives 0; +max wins; −0 and +0 tie.
        check_argmax(std::vector<float>(static_cast<size_t>(n), -big), "all -max n=" + std::to_string(n));
        std::vector<float> extremes = x;
        extremes[size_t(n - 1)] = big;
        check_argmax(extremes, "+max last n=" + std::to_string(n));
        std::vector<float> zeros(static_cast<size_t>(n), -1.0f);
        zeros[size_t(n - 1)] = 0.0f;
        zeros[size_t(n / 2)] = -0.0f;
        check_argmax(zeros, "signed zeros n=" + std::to_string(n));
    }
}

// A NaN or ±inf anywhere is reported, never decoded: the lowest such index comes back as a negative id,
// wherever it sits against the largest finite value and however the reduction split the work. (Before
// the report, NaN was skipped and +inf won: a broken forward pass decoded to tokens.)
TEST(DecodeKernels, ArgmaxReportsTheLowestNonFiniteIndex) {
    DELTABIT_REQUIRE_GPU();
    std::mt19937 rng(12);
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (const int64_t n : {int64_t(1), int64_t(63), int64_t(2049), int64_t(248320), int64_t(1000003)}) {
        const std::string at = " n=" + std::to_string(n);
        const std::vector<float> x = uniform(static_cast<size_t>(n), rng, -30.0f, 30.0f);
        for (const float bad : {nan, -nan, inf, -inf}) {
            const std::string what = std::to_string(bad) + at;
            for (const int64_t i : {int64_t(0), n / 2, n - 1}) {
                std::vector<float> one = x;
                one[size_t(i)] = bad;
                check_argmax(one, what + " at " + std::to_string(i));
            }
            std::vector<float> all(static_cast<size_t>(n), bad);
            check_argmax(all, "all " + what);
        }
        // Several, of every kind, spread over the blocks: the lowest index is reported.
        std::vector<float> many = x;
        for (int64_t i = n - 1, k = 0; i >= n / 3; i -= std::max<int64_t>(1, n / 11), ++k)
            many[size_t(i)] = k % 3 == 0 ? nan : k % 3 == 1 ? -inf : inf;
        check_argmax(many, "several" + at);
    }
}

#else
TEST(DecodeKernels, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace deltabit::test
