// run.activations (train/activation_plan.h): which way each setting goes at the edge of the memory
// rule, what the run's header says, and the one-line refusal of "keep" that does not fit.
#include "train/activation_plan.h"

#include "core/error.h"

#include <gtest/gtest.h>

#include <string>

namespace deltabit::train {
namespace {

constexpr int64_t kGiB = int64_t(1) << 30;

// 10 GiB kept + 2 GiB other: fits 90% of free exactly at 12 / 0.9 = 13.33… GiB free.
ActivationMemory memory(int64_t free_bytes) {
    return {.kept_bytes = 10 * kGiB, .other_bytes = 2 * kGiB, .free_bytes = free_bytes, .layers = 12};
}
const int64_t kEdge = int64_t(double(12 * kGiB) / kKeepActivationsShare) + 1;  // the first byte count that fits

std::string error_of(std::string_view setting, const ActivationMemory& m) {
    try {
        choose_activations(setting, m, "run.toml");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(ActivationPlan, AutoKeepsWhenTheStepsBuffersFitTheShareOfFreeMemory) {
    const ActivationChoice fits = choose_activations("auto", memory(kEdge), "run.toml");
    EXPECT_TRUE(fits.keep);
    EXPECT_EQ(fits.summary,
              "activations kept for the backward: 10.00 GiB for 12 layers (run.activations = auto; with the step's "
              "other buffers 12.0 GiB of the 13.3 GiB free)");
    const ActivationChoice tight = choose_activations("auto", memory(kEdge - 2), "run.toml");
    EXPECT_FALSE(tight.keep);
    EXPECT_EQ(tight.summary,
              "activations recomputed in the backward (run.activations = auto: keeping them takes 10.00 GiB, with the "
              "step's other buffers 12.0 GiB, more than 90% of the 13.3 GiB free)");
}

TEST(ActivationPlan, RecomputeNeverKeepsAndKeepAlwaysDoesOrRefuses) {
    const ActivationChoice recompute = choose_activations("recompute", memory(100 * kGiB), "run.toml");
    EXPECT_FALSE(recompute.keep);
    EXPECT_EQ(recompute.summary,
              "activations recomputed in the backward (run.activations = recompute; keeping them would take 10.00 GiB)");
    EXPECT_TRUE(choose_activations("keep", memory(kEdge), "run.toml").keep);
    const std::string error = error_of("keep", memory(8 * kGiB));
    EXPECT_EQ(error,
              "train: run.toml: run.activations = keep: every layer's activations take 10.0 GiB and the step's other "
              "buffers 2.0 GiB, more than 90% of the 8.0 GiB free on the GPU; set run.activations = \"auto\" or "
              "\"recompute\"");
    EXPECT_EQ(error.find('\n'), std::string::npos);
    // A small model's figures in MiB, not "0.00 GiB".
    const ActivationChoice small = choose_activations(
        "recompute", {.kept_bytes = 3 << 20, .other_bytes = 1 << 20, .free_bytes = 80 * kGiB, .layers = 2}, "run.toml");
    EXPECT_NE(small.summary.find("keeping them would take 3.0 MiB"), std::string::npos) << small.summary;
}

}  // namespace
}  // namespace deltabit::train
