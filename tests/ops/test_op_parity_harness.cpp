// The CPU half of the op-parity harness: the checks the CUDA parity tests rely on must themselves be
// able to fail (ulp distance, tolerance comparisons, NaN never passing), the launch-geometry helper
// must stay inside device limits at its edges (STYLE habit 17), and the CPU supports table says what
// the references cover. Runs everywhere; no GPU needed.
#include <gtest/gtest.h>
#include <gtest/gtest-spi.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "ops/cuda/cuda_launch.h"
#include "ops/op_parity.h"
#include "ops/op_support.h"

namespace deltabit::test {
namespace {

TEST(OpParityHarness, UlpDistanceCountsRepresentableFloats) {
    EXPECT_EQ(ulp_distance(1.0f, 1.0f), 0);
    EXPECT_EQ(ulp_distance(0.0f, -0.0f), 0);
    EXPECT_EQ(ulp_distance(1.0f, std::nextafter(1.0f, 2.0f)), 1);
    EXPECT_EQ(ulp_distance(-1.0f, std::nextafter(-1.0f, -2.0f)), 1);
    // Across zero: the smallest denormals on either side are two steps apart (−d, ±0, +d).
    const float d = std::numeric_limits<float>::denorm_min();
    EXPECT_EQ(ulp_distance(-d, d), 2);
    // 1 and 2 are 2^23 floats apart (one binade).
    EXPECT_EQ(ulp_distance(1.0f, 2.0f), int64_t(1) << 23);
    EXPECT_EQ(ulp_distance(NAN, NAN), 0);
    EXPECT_EQ(ulp_distance(NAN, 1.0f), INT64_MAX);
}

TEST(OpParityHarness, ComparisonsFailOnWrongOrUnwrittenElements) {
    const std::vector<double> want = {1.0, -2.0, 3.0};
    EXPECT_NONFATAL_FAILURE(expect_relative({1.0f, -2.0f, 3.001f}, want, 1e-4, 0.0, "off by 3e-4"), "element 2");
    EXPECT_NONFATAL_FAILURE(expect_relative({1.0f, NAN, 3.0f}, want, 1e-4, 0.0, "unwritten (NaN poison)"),
                            "element 1");
    EXPECT_FATAL_FAILURE(expect_ulps({1.0f, std::nextafter(1.0f, 2.0f)}, {1.0f, 1.0f}, 0, "one ulp"), "element 1");
    // And they pass on equal data, reporting a zero ratio.
    EXPECT_EQ(expect_relative({1.0f, -2.0f, 3.0f}, want, 1e-6, 0.0, "equal"), 0.0);
}

TEST(OpParityHarness, GridBlocksStayInsideDeviceLimitsAtTheEdges) {
    using cuda::grid_blocks;
    using cuda::kMaxGridBlocks;
    EXPECT_EQ(grid_blocks(0), 0u);  // nothing to launch
    EXPECT_EQ(grid_blocks(-5), 0u);
    EXPECT_EQ(grid_blocks(1), 1u);
    EXPECT_EQ(grid_blocks(kMaxGridBlocks), unsigned(kMaxGridBlocks));
    EXPECT_EQ(grid_blocks(kMaxGridBlocks + 1), unsigned(kMaxGridBlocks));  // capped: blocks stride instead
    EXPECT_EQ(grid_blocks(int64_t(1) << 40), unsigned(kMaxGridBlocks));  // 1T items: no wrap past 2^32
    EXPECT_EQ(grid_blocks(257, 256), 2u);                                  // rounds up
    EXPECT_EQ(grid_blocks(256, 256), 1u);
    EXPECT_EQ(grid_blocks((int64_t(1) << 31) * 256 + 1, 256), unsigned(kMaxGridBlocks));
    // 65535 is within every dimension's limit on every CUDA device (y and z allow 65535, x 2^31 − 1).
    EXPECT_LE(kMaxGridBlocks, 65535);
}

TEST(OpParityHarness, CpuSupportsEveryOpAndWeightType) {
    for (Op op : kAllOps) {
        EXPECT_TRUE(cpu::supports(op, DType::F32)) << op_name(op);
        EXPECT_FALSE(cpu::supports(op, DType::I32)) << op_name(op);
        for (DType t : kWeightDTypes) {
            EXPECT_EQ(cpu::supports(op, t), op_reads_weights(op) || t == DType::F32)
                << op_name(op) << " " << dtype_name(t);
        }
    }
    std::printf("%s", supports_table("cpu", [](Op op, DType t) { return cpu::supports(op, t); }).c_str());
}

TEST(OpParityHarness, OpNamesAreDistinct) {
    for (size_t i = 0; i < kAllOps.size(); ++i) {
        for (size_t j = i + 1; j < kAllOps.size(); ++j) EXPECT_NE(op_name(kAllOps[i]), op_name(kAllOps[j]));
    }
}

}  // namespace
}  // namespace deltabit::test
