#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/conv1d.h"
#include "ops_test_util.h"

namespace deltabit {
namespace {

double silu(double x) { return x / (1.0 + std::exp(-x)); }

TEST(Conv1d, ImpulseResponseFromZeroState) {
    // One channel, K = 3, taps [1, 2, 3] (3 multiplies the newest input); input is an impulse.
    const float w[3] = {1, 2, 3};
    const float x[4] = {1, 0, 0, 0};
    std::vector<float> state(2, 0.0f);
    std::vector<float> out(4);
    cpu::conv1d_causal_silu(x, w, state.data(), 4, 1, 3, out.data());
    test::expect_close(out, std::vector<double>{silu(3), silu(2), silu(1), 0.0}, 1e-6, 1e-6);
    EXPECT_EQ(state, (std::vector<float>{0, 0}));
}

TEST(Conv1d, UsesStateAndLeavesTheLastInputs) {
    // Two channels, K = 4, state rows (oldest first) [1,10], [2,20], [3,30]; one new input [4,40].
    const float w[8] = {1, 0, 0, 0,    // channel 0 sees only the oldest tap
                        0, 0, 0, 1};   // channel 1 sees only the newest
    std::vector<float> state = {1, 10, 2, 20, 3, 30};
    const float x[2] = {4, 40};
    std::vector<float> out(2);
    cpu::conv1d_causal_silu(x, w, state.data(), 1, 2, 4, out.data());
    test::expect_close(out, std::vector<double>{silu(1), silu(40)}, 1e-6);
    EXPECT_EQ(state, (std::vector<float>{2, 20, 3, 30, 4, 40}));
}

TEST(Conv1d, SplitCallsEqualOneCallAndStateIsTheLastInputs) {
    const int64_t c = 5, k = 4;
    for (const int64_t first : {0, 1, 2, 3, 7}) {
        const int64_t total = 10;
        const auto x = test::random_vector(size_t(total * c), 21, -2, 2);
        const auto w = test::random_vector(size_t(c * k), 22);
        std::vector<float> state_a(size_t((k - 1) * c), 0.0f), out_a(x.size());
        cpu::conv1d_causal_silu(x.data(), w.data(), state_a.data(), total, c, k, out_a.data());

        std::vector<float> state_b(size_t((k - 1) * c), 0.0f), out_b(x.size());
        cpu::conv1d_causal_silu(x.data(), w.data(), state_b.data(), first, c, k, out_b.data());
        cpu::conv1d_causal_silu(x.data() + first * c, w.data(), state_b.data(), total - first, c, k,
                                out_b.data() + first * c);
        EXPECT_EQ(out_a, out_b) << "split at " << first;
        EXPECT_EQ(state_a, state_b) << "split at " << first;
        EXPECT_EQ(state_a, std::vector<float>(x.end() - (k - 1) * c, x.end()));
    }
}

TEST(Conv1d, FewerTokensThanTheWindowShiftTheState) {
    const float w[4] = {0, 0, 0, 0};
    std::vector<float> state = {1, 2, 3};  // one channel, K = 4
    const float x[1] = {9};
    float out[1];
    cpu::conv1d_causal_silu(x, w, state.data(), 1, 1, 4, out);
    EXPECT_EQ(state, (std::vector<float>{2, 3, 9}));
}

}  // namespace
}  // namespace deltabit
