// The rows forms of the gated DeltaNet decode step (ops/delta_rule/delta_rule_cuda.h gdn_decode_prepare_rows,
// gdn_decode_recurrent_rows: B sequences in one launch of each kernel, each row's conv window and state
// through a device table) against B single calls (gdn_decode_prepare, gdn_decode_recurrent), which
// test_decode_kernels.cpp checks against the CPU references. Byte for byte: every output (q, k, v, β, g and
// the normed out), every written conv window and state, and the old window and state of a row that writes
// elsewhere left untouched — over B = 1, 3 and 64, the Bonsai-27B DeltaNet and small ragged shapes (the
// recurrent kernel's cluster splits as GdnDecodeStep's comment gives them), rows that read and write one
// buffer and rows that read one and write another, mixed in one table. The references must be finite, so
// an output neither form wrote (NaN poison) cannot pass. Then: more rows than one launch's grid holds
// (65 537) all stepped, and a table that is missing refused. Skips cleanly without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/op_parity.h"

#ifdef DELTABIT_HAVE_CUDA
#include "backend/cuda_buffer.h"
#include "cuda/op_parity_cuda.h"
#include "ops/delta_rule/delta_rule_cuda.h"
#endif

namespace deltabit::test {
namespace {

#ifdef DELTABIT_HAVE_CUDA

using Floats = GuardedDeviceArray<float>;

// got's bytes are want's; want all finite, so that two unwritten (NaN-poisoned) arrays cannot agree.
::testing::AssertionResult same_bytes(const std::vector<float>& got, const std::vector<float>& want) {
    if (got.size() != want.size())
        return ::testing::AssertionFailure() << got.size() << " values, want " << want.size();
    for (size_t i = 0; i < want.size(); ++i)
        if (!std::isfinite(want[i])) return ::testing::AssertionFailure() << "reference [" << i << "] is " << want[i];
    if (std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0) return ::testing::AssertionSuccess();
    for (size_t i = 0; i < want.size(); ++i)
        if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
            return ::testing::AssertionFailure() << "[" << i << "] is " << got[i] << ", want " << want[i];
    return ::testing::AssertionFailure() << "bytes differ";
}

std::vector<float> slice(const std::vector<float>& all, int64_t row, int64_t width) {
    return {all.begin() + row * width, all.begin() + (row + 1) * width};
}

// The sizes of one row's arrays.
struct RowSizes {
    int64_t channels, window, qk, value, heads, state;
    explicit RowSizes(const cuda::GdnDecodeDims& d)
        : channels(2 * d.n_key_heads * d.key_dim + d.n_value_heads * d.value_dim),
          window((d.conv_kernel - 1) * channels),
          qk(d.n_key_heads * d.key_dim),
          value(d.n_value_heads * d.value_dim),
          heads(d.n_value_heads),
          state(d.n_value_heads * d.key_dim * d.value_dim) {}
};

// One row's conv window and state on the device, from `window` and `state`, read from `in` and written
// to `out`: `in` itself (in place) or a second, poisoned buffer (the model's ping-pong).
struct RowBuffers {
    std::unique_ptr<Floats> conv_in, conv_other, state_in, state_other;
    RowBuffers(const std::vector<float>& window, const std::vector<float>& state, bool conv_in_place,
               bool state_in_place)
        : conv_in(std::make_unique<Floats>(window)), state_in(std::make_unique<Floats>(state)) {
        if (!conv_in_place) conv_other = std::make_unique<Floats>(window.size());
        if (!state_in_place) state_other = std::make_unique<Floats>(state.size());
    }
    float* conv_out() const { return conv_other ? conv_other->get() : conv_in->get(); }
    float* state_out() const { return state_other ? state_other->get() : state_in->get(); }
    cuda::GdnDecodeRow row() const { return {conv_in->get(), conv_out(), state_in->get(), state_out()}; }
    std::vector<float> written_conv(const std::string& what) const {
        return (conv_other ? *conv_other : *conv_in).download(what);
    }
    std::vector<float> written_state(const std::string& what) const {
        return (state_other ? *state_other : *state_in).download(what);
    }
};

// A device copy of a host row table.
cuda::DeviceBuffer upload_table(const std::vector<cuda::GdnDecodeRow>& rows) {
    cuda::DeviceBuffer table(rows.size() * sizeof(cuda::GdnDecodeRow));
    if (!rows.empty()) table.upload(rows.data(), table.bytes());
    return table;
}

// B rows through the rows forms and through B single calls, each from its own copy of the same inputs
// and states. Row i's (conv, state) buffers are written (in place, in place), (elsewhere, elsewhere),
// (in place, elsewhere), (elsewhere, in place) for (i + kind_offset) mod 4.
void check_rows_match_single_calls(const cuda::GdnDecodeDims& d, int64_t B, int kind_offset, uint32_t seed) {
    const RowSizes n(d);
    const float l2_eps = 1e-6f, norm_eps = 1e-6f;
    std::mt19937 rng(seed);
    // Shared weights, then each row's activations and states.
    const std::vector<float> conv_w = uniform(size_t(n.channels * d.conv_kernel), rng, -1.0f, 1.0f);
    const std::vector<float> ssm_a = uniform(size_t(n.heads), rng, -8.0f, -0.1f);
    const std::vector<float> dt_bias = uniform(size_t(n.heads), rng, -1.0f, 1.0f);
    const std::vector<float> norm_w = uniform(size_t(d.value_dim), rng, 0.5f, 1.5f);
    const std::vector<float> mixed = uniform(size_t(B * n.channels), rng, -2.0f, 2.0f);
    const std::vector<float> b = uniform(size_t(B * n.heads), rng, -4.0f, 4.0f);
    const std::vector<float> a = uniform(size_t(B * n.heads), rng, -4.0f, 4.0f);
    const std::vector<float> z = uniform(size_t(B * n.value), rng, -4.0f, 4.0f);
    std::vector<std::vector<float>> windows, states;
    for (int64_t i = 0; i < B; ++i) {
        windows.push_back(uniform(size_t(n.window), rng, -2.0f, 2.0f));
        states.push_back(uniform(size_t(n.state), rng, -0.5f, 0.5f));
    }
    const auto kind = [&](int64_t i) { return int((i + kind_offset) % 4); };
    const auto conv_in_place = [&](int64_t i) { return kind(i) == 0 || kind(i) == 2; };
    const auto state_in_place = [&](int64_t i) { return kind(i) == 0 || kind(i) == 3; };
    const Floats dconv_w(conv_w), dssm_a(ssm_a), ddt(dt_bias), dnorm(norm_w), dmixed(mixed), db(b), da(a), dz(z);

    // The rows forms, on one set of buffers per row.
    std::vector<RowBuffers> batched;
    std::vector<cuda::GdnDecodeRow> table_rows;
    for (int64_t i = 0; i < B; ++i) {
        batched.emplace_back(windows[size_t(i)], states[size_t(i)], conv_in_place(i), state_in_place(i));
        table_rows.push_back(batched.back().row());
    }
    const cuda::DeviceBuffer table = upload_table(table_rows);
    const Floats q(size_t(B * n.qk)), k(size_t(B * n.qk)), v(size_t(B * n.value)), beta(size_t(B * n.heads)),
        g(size_t(B * n.heads)), out(size_t(B * n.value));
    const auto* rows = table.get<cuda::GdnDecodeRow>();
    cuda::gdn_decode_prepare_rows(dmixed.get(), db.get(), da.get(), dconv_w.get(), rows, B, dssm_a.get(), ddt.get(), d,
                                  l2_eps, q.get(), k.get(), v.get(), beta.get(), g.get(), nullptr);
    cuda::gdn_decode_recurrent_rows(q.get(), k.get(), v.get(), beta.get(), g.get(), dz.get(), dnorm.get(), norm_eps, d,
                                    rows, B, out.get(), nullptr);
    const std::string shape = "H=" + std::to_string(d.n_key_heads) + "/" + std::to_string(d.n_value_heads) +
                              " dk=" + std::to_string(d.key_dim) + " dv=" + std::to_string(d.value_dim) +
                              " K=" + std::to_string(d.conv_kernel) +
                              (d.key_head_map == cpu::KeyHeadMap::tiled ? " tiled" : " grouped") + ", " +
                              std::to_string(B) + " rows";
    const std::vector<float> got_q = q.download(shape + " q"), got_k = k.download(shape + " k"),
                             got_v = v.download(shape + " v"), got_beta = beta.download(shape + " beta"),
                             got_g = g.download(shape + " g"), got_out = out.download(shape + " out");

    // Each row alone, on its own copies of the same inputs and states.
    for (int64_t i = 0; i < B; ++i) {
        const std::string what = shape + ", row " + std::to_string(i) +
                                 (conv_in_place(i) ? ", conv in place" : ", conv elsewhere") +
                                 (state_in_place(i) ? ", state in place" : ", state elsewhere");
        const RowBuffers alone(windows[size_t(i)], states[size_t(i)], conv_in_place(i), state_in_place(i));
        const Floats rq(size_t(n.qk)), rk(size_t(n.qk)), rv(size_t(n.value)), rbeta(size_t(n.heads)),
            rg(size_t(n.heads)), rout(size_t(n.value));
        cuda::gdn_decode_prepare(dmixed.get() + i * n.channels, db.get() + i * n.heads, da.get() + i * n.heads,
                                 dconv_w.get(), alone.conv_in->get(), alone.conv_out(), dssm_a.get(), ddt.get(), d,
                                 l2_eps, rq.get(), rk.get(), rv.get(), rbeta.get(), rg.get(), nullptr);
        cuda::gdn_decode_recurrent(rq.get(), rk.get(), rv.get(), rbeta.get(), rg.get(), dz.get() + i * n.value,
                                   dnorm.get(), norm_eps, d, alone.state_in->get(), alone.state_out(), rout.get(),
                                   nullptr);
        EXPECT_TRUE(same_bytes(slice(got_q, i, n.qk), rq.download(what + " q"))) << what << ": q";
        EXPECT_TRUE(same_bytes(slice(got_k, i, n.qk), rk.download(what + " k"))) << what << ": k";
        EXPECT_TRUE(same_bytes(slice(got_v, i, n.value), rv.download(what + " v"))) << what << ": v";
        EXPECT_TRUE(same_bytes(slice(got_beta, i, n.heads), rbeta.download(what + " beta"))) << what << ": beta";
        EXPECT_TRUE(same_bytes(slice(got_g, i, n.heads), rg.download(what + " g"))) << what << ": g";
        EXPECT_TRUE(same_bytes(slice(got_out, i, n.value), rout.download(what + " out"))) << what << ": out";
        const RowBuffers& row = batched[size_t(i)];
        // K = 1 has no window: both are empty, and same_bytes compares nothing.
        EXPECT_TRUE(same_bytes(row.written_conv(what + " conv"), alone.written_conv(what + " conv (alone)")))
            << what << ": written conv window";
        EXPECT_TRUE(same_bytes(row.written_state(what + " state"), alone.written_state(what + " state (alone)")))
            << what << ": written state";
        if (!conv_in_place(i)) {
            EXPECT_EQ(row.conv_in->download(what + " old conv"), windows[size_t(i)]) << what;
        }
        if (!state_in_place(i)) {
            EXPECT_EQ(row.state_in->download(what + " old state"), states[size_t(i)]) << what;
        }
        if (::testing::Test::HasFailure()) return;  // one row's report is enough
    }
}

// The shapes, with the recurrent kernel's split of a head's value columns over its cluster (as
// GdnDecodeStep's comment in test_decode_kernels.cpp gives it) and its lanes per column (key_dim / 32).
const std::vector<cuda::GdnDecodeDims> kShapes = {
    {16, 48, 128, 128, 4, cpu::KeyHeadMap::tiled},   // Bonsai-27B's DeltaNet, C 4: 32 ×4
    {1, 1, 1, 1, 1, cpu::KeyHeadMap::tiled},         // C 1: 1 column; K 1: no window
    {2, 6, 63, 65, 4, cpu::KeyHeadMap::tiled},       // C 4: 24 24 17 0
    {1, 2, 256, 129, 4, cpu::KeyHeadMap::grouped},   // C 8: 24 ×5, 9 0 0; 8 lanes
    {3, 3, 32, 1000, 2, cpu::KeyHeadMap::tiled},     // C 8: 128 ×7, 104
    {2, 2, 256, 1024, 3, cpu::KeyHeadMap::grouped},  // C 8: 128 ×8, two passes of 64 columns a block
};

TEST(GdnDecodeRows, OneRowIsTheSingleCallBitForBit) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 500;
    for (const cuda::GdnDecodeDims& d : kShapes)
        for (const int kind : {0, 1, 2, 3}) {  // the row in place, elsewhere, and mixed
            check_rows_match_single_calls(d, 1, kind, seed++);
            if (HasFailure()) return;
        }
}

TEST(GdnDecodeRows, ThreeRowsAreThreeSingleCallsBitForBit) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 600;
    for (const cuda::GdnDecodeDims& d : kShapes) {
        check_rows_match_single_calls(d, 3, 1, seed++);
        if (HasFailure()) return;
    }
}

TEST(GdnDecodeRows, SixtyFourRowsAreSixtyFourSingleCallsBitForBit) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 700;
    for (const cuda::GdnDecodeDims& d : kShapes) {
        check_rows_match_single_calls(d, 64, 0, seed++);
        if (HasFailure()) return;
    }
}

// The grid's row dimension (y) holds 65 535 rows: 65 537 take two launches of each kernel. Every row has
// the same inputs and state, so each must be the one single call's step bit for bit — a row the second
// launch missed is still NaN poison, one it placed wrong leaves another row poisoned or hits a guard band.
TEST(GdnDecodeRows, MoreRowsThanOneGridHoldsAreAllStepped) {
    DELTABIT_REQUIRE_GPU();
    const cuda::GdnDecodeDims d{1, 2, 8, 16, 3, cpu::KeyHeadMap::tiled};
    const RowSizes n(d);
    constexpr int64_t B = 65537;
    std::mt19937 rng(800);
    const std::vector<float> conv_w = uniform(size_t(n.channels * d.conv_kernel), rng, -1.0f, 1.0f);
    const std::vector<float> ssm_a = uniform(size_t(n.heads), rng, -8.0f, -0.1f);
    const std::vector<float> dt_bias = uniform(size_t(n.heads), rng, -1.0f, 1.0f);
    const std::vector<float> norm_w = uniform(size_t(d.value_dim), rng, 0.5f, 1.5f);
    const std::vector<float> mixed = uniform(size_t(n.channels), rng, -2.0f, 2.0f);
    const std::vector<float> b = uniform(size_t(n.heads), rng, -4.0f, 4.0f);
    const std::vector<float> a = uniform(size_t(n.heads), rng, -4.0f, 4.0f);
    const std::vector<float> z = uniform(size_t(n.value), rng, -4.0f, 4.0f);
    const std::vector<float> window = uniform(size_t(n.window), rng, -2.0f, 2.0f);
    const std::vector<float> state = uniform(size_t(n.state), rng, -0.5f, 0.5f);
    const auto repeated = [](const std::vector<float>& x, int64_t times) {
        std::vector<float> all;
        all.reserve(x.size() * size_t(times));
        for (int64_t i = 0; i < times; ++i) all.insert(all.end(), x.begin(), x.end());
        return all;
    };
    const Floats dconv_w(conv_w), dssm_a(ssm_a), ddt(dt_bias), dnorm(norm_w);
    // Every row's window in place in one array, its state from one array into another.
    const Floats all_mixed(repeated(mixed, B)), all_b(repeated(b, B)), all_a(repeated(a, B)), all_z(repeated(z, B)),
        all_windows(repeated(window, B)), all_states(repeated(state, B)), all_next(size_t(B * n.state));
    std::vector<cuda::GdnDecodeRow> table_rows;
    for (int64_t i = 0; i < B; ++i)
        table_rows.push_back({all_windows.get() + i * n.window, all_windows.get() + i * n.window,
                              all_states.get() + i * n.state, all_next.get() + i * n.state});
    const cuda::DeviceBuffer table = upload_table(table_rows);
    const Floats q(size_t(B * n.qk)), k(size_t(B * n.qk)), v(size_t(B * n.value)), beta(size_t(B * n.heads)),
        g(size_t(B * n.heads)), out(size_t(B * n.value));
    const auto* rows = table.get<cuda::GdnDecodeRow>();
    cuda::gdn_decode_prepare_rows(all_mixed.get(), all_b.get(), all_a.get(), dconv_w.get(), rows, B, dssm_a.get(),
                                  ddt.get(), d, 1e-6f, q.get(), k.get(), v.get(), beta.get(), g.get(), nullptr);
    cuda::gdn_decode_recurrent_rows(q.get(), k.get(), v.get(), beta.get(), g.get(), all_z.get(), dnorm.get(), 1e-6f, d,
                                    rows, B, out.get(), nullptr);

    const RowBuffers alone(window, state, /*conv_in_place=*/true, /*state_in_place=*/false);
    const Floats dmixed(mixed), db(b), da(a), dz(z), rq(size_t(n.qk)), rk(size_t(n.qk)), rv(size_t(n.value)),
        rbeta(size_t(n.heads)), rg(size_t(n.heads)), rout(size_t(n.value));
    cuda::gdn_decode_prepare(dmixed.get(), db.get(), da.get(), dconv_w.get(), alone.conv_in->get(), alone.conv_out(),
                             dssm_a.get(), ddt.get(), d, 1e-6f, rq.get(), rk.get(), rv.get(), rbeta.get(), rg.get(),
                             nullptr);
    cuda::gdn_decode_recurrent(rq.get(), rk.get(), rv.get(), rbeta.get(), rg.get(), dz.get(), dnorm.get(), 1e-6f, d,
                               alone.state_in->get(), alone.state_out(), rout.get(), nullptr);
    const std::vector<float> want_out = rout.download("out (alone)"), want_q = rq.download("q (alone)"),
                             want_state = alone.written_state("state (alone)"),
                             want_window = alone.written_conv("window (alone)");
    const std::vector<float> got_out = out.download("out"), got_q = q.download("q"),
                             got_next = all_next.download("states"), got_windows = all_windows.download("windows");
    ASSERT_FALSE(HasFailure());  // guard bands
    for (int64_t i = 0; i < B; ++i) {
        ASSERT_TRUE(same_bytes(slice(got_out, i, n.value), want_out)) << "row " << i << ": out";
        ASSERT_TRUE(same_bytes(slice(got_q, i, n.qk), want_q)) << "row " << i << ": q";
        ASSERT_TRUE(same_bytes(slice(got_next, i, n.state), want_state)) << "row " << i << ": state";
        ASSERT_TRUE(same_bytes(slice(got_windows, i, n.window), want_window)) << "row " << i << ": window";
    }
}

// Rows without a table are refused before anything is launched; no rows launch nothing, table or not.
TEST(GdnDecodeRows, RowsWithoutATableAreRefused) {
    DELTABIT_REQUIRE_GPU();
    const cuda::GdnDecodeDims d{1, 1, 8, 8, 2, cpu::KeyHeadMap::tiled};
    const RowSizes n(d);
    const int64_t B = 2;
    const auto zeros = [](int64_t count) { return Floats(std::vector<float>(size_t(count), 0.0f)); };
    const Floats conv_w = zeros(n.channels * d.conv_kernel), ssm_a = zeros(n.heads), dt_bias = zeros(n.heads),
                 norm_w = zeros(d.value_dim), mixed = zeros(B * n.channels), b = zeros(B * n.heads),
                 a = zeros(B * n.heads), z = zeros(B * n.value);
    const Floats q(size_t(B * n.qk)), k(size_t(B * n.qk)), v(size_t(B * n.value)), beta(size_t(B * n.heads)),
        g(size_t(B * n.heads)), out(size_t(B * n.value));
    const auto prepare = [&](const cuda::GdnDecodeRow* rows, int64_t n_rows) {
        cuda::gdn_decode_prepare_rows(mixed.get(), b.get(), a.get(), conv_w.get(), rows, n_rows, ssm_a.get(),
                                      dt_bias.get(), d, 1e-6f, q.get(), k.get(), v.get(), beta.get(), g.get(), nullptr);
    };
    const auto recurrent = [&](const cuda::GdnDecodeRow* rows, int64_t n_rows) {
        cuda::gdn_decode_recurrent_rows(q.get(), k.get(), v.get(), beta.get(), g.get(), z.get(), norm_w.get(), 1e-6f, d,
                                        rows, n_rows, out.get(), nullptr);
    };
    EXPECT_THROW(prepare(nullptr, B), Error);
    EXPECT_THROW(recurrent(nullptr, B), Error);
    EXPECT_THROW(prepare(nullptr, -1), Error);
    EXPECT_NO_THROW(prepare(nullptr, 0));
    EXPECT_NO_THROW(recurrent(nullptr, 0));
    // Nothing ran: the outputs are still poison.
    for (const float x : q.download("q")) ASSERT_TRUE(std::isnan(x));
    for (const float x : out.download("out")) ASSERT_TRUE(std::isnan(x));
}

#else
TEST(GdnDecodeRows, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace deltabit::test
