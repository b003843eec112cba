// The profile's arithmetic (train/step_profile.h) on spans whose answers are known: per-step means,
// shares of the wall time, achieved rates against the ceilings, host rows kept out of the device's sum,
// the idle time between spans, and the GEMM shapes ranked by time.
#include "train/step_profile.h"

#include <gtest/gtest.h>

#include <string>

namespace deltabit::train {
namespace {

// The report's row for `name` (from the name to the end of its line), or "" when it has none.
std::string row(const std::string& report, const std::string& name) {
    const size_t at = report.find("\n" + name);
    if (at == std::string::npos) return "";
    return report.substr(at + 1, report.find('\n', at + 1) - at - 1);
}

// Two steps of 100 ms wall, each: a 30 ms GEMM of 15 TFLOP (500 TFLOP/s: 50% of a 1000 ceiling), a
// 10 ms norm moving 24 GB (2400 GB/s: 50% of 4800), 50 ms of host waits, and a device span of 45 ms
// (5 ms idle between the spans).
StepProfile two_steps() {
    StepProfile p;
    for (int s = 0; s < 2; ++s) {
        p.add(ProfileKind::gemm_forward, ProfilePass::forward, 20.0, 10e12, 0.0, "forward 8 × 4 → 2");
        p.add(ProfileKind::gemm_forward, ProfilePass::recompute, 10.0, 5e12, 0.0, "forward 8 × 4 → 6");
        p.add(ProfileKind::norm, ProfilePass::backward, 10.0, 0.0, 24e9);
        p.add(ProfileKind::host_wait, ProfilePass::update, 50.0, 0.0, 0.0);
        p.end_step(100.0, 45.0);
    }
    return p;
}

TEST(StepProfile, TotalsArePerKindAndPass) {
    const StepProfile p = two_steps();
    EXPECT_EQ(p.steps(), 2);
    EXPECT_DOUBLE_EQ(p.kind(ProfileKind::gemm_forward).ms, 60.0);
    EXPECT_EQ(p.kind(ProfileKind::gemm_forward).spans, 4);
    EXPECT_DOUBLE_EQ(p.kind(ProfileKind::gemm_forward).flops, 30e12);
    EXPECT_DOUBLE_EQ(p.pass(ProfilePass::forward).ms, 40.0);
    EXPECT_DOUBLE_EQ(p.pass(ProfilePass::recompute).ms, 20.0);
    // Host time overlaps the device's: neither in the device's sum nor in any pass.
    EXPECT_DOUBLE_EQ(p.device_ms(), 80.0);
    EXPECT_DOUBLE_EQ(p.pass(ProfilePass::update).ms, 0.0);
    EXPECT_DOUBLE_EQ(p.wall_ms(), 200.0);
    EXPECT_DOUBLE_EQ(p.device_span_ms(), 90.0);
}

TEST(StepProfile, ReportReadsEachKindAgainstItsCeiling) {
    const std::string report = two_steps().report("title line", {.tflops = 1000.0, .gbytes_s = 4800.0});
    EXPECT_EQ(report.rfind("title line\nper step, mean of 2 steps; ceilings: 1000 TFLOP/s bf16, 4800 GB/s memory\n", 0),
              0u)
        << report;
    // kind, ms/step, % step, GFLOP, TFLOP/s, % peak, GB, GB/s, % bandwidth, spans per step.
    EXPECT_EQ(row(report, "gemm forward"),
              "gemm forward                 30.00    30.0   15000.0    500.0   50.0        -        -      -        2")
        << report;
    EXPECT_EQ(row(report, "norms"),
              "norms                        10.00    10.0         -        -      -     24.0   2400.0   50.0        1")
        << report;
    EXPECT_NE(row(report, "timed total").find("40.00    40.0"), std::string::npos) << report;
    EXPECT_NE(row(report, "host: waits at syncs").find("50.00    50.0"), std::string::npos) << report;
    // Device kinds by time, then the device's total, then the host's rows.
    EXPECT_LT(report.find("gemm forward"), report.find("norms"));
    EXPECT_LT(report.find("norms"), report.find("timed total"));
    EXPECT_LT(report.find("timed total"), report.find("host: waits"));
    EXPECT_NE(report.find("device span                  45.00 ms from the step's first span to its last; idle "
                          "between spans 5.00 ms (11.1%)"),
              std::string::npos)
        << report;
    EXPECT_NE(report.find("not in any span              60.00 ms (60.0% of the wall"), std::string::npos) << report;
    EXPECT_NE(report.find("by pass: forward 20.00 ms (500.0 TFLOP/s), recompute 10.00 ms (500.0 TFLOP/s), backward "
                          "10.00 ms\n"),
              std::string::npos)
        << report;
    // The GEMM shapes, the slower first.
    const size_t slow = report.find("forward 8 × 4 → 2 "), fast = report.find("forward 8 × 4 → 6 ");
    ASSERT_NE(slow, std::string::npos) << report;
    ASSERT_NE(fast, std::string::npos) << report;
    EXPECT_LT(slow, fast);
}

// A multi-kernel op's kernels: their own table, by time, per step; not added to any kind again.
TEST(StepProfile, KernelsOfMultiKernelOpsHaveTheirOwnTable) {
    StepProfile p = two_steps();
    for (int s = 0; s < 2; ++s) {
        p.add_kernel("delta: forward_walk_kernel", 6.0);
        p.add_kernel("delta: chunk_factors_kernel", 1.0);
        p.add_kernel("delta: chunk_factors_kernel", 1.0);
    }
    ASSERT_NE(p.kernel("delta: chunk_factors_kernel"), nullptr);
    EXPECT_EQ(p.kernel("delta: chunk_factors_kernel")->spans, 4);
    EXPECT_EQ(p.kernel("nothing"), nullptr);
    EXPECT_DOUBLE_EQ(p.device_ms(), 80.0);
    const std::string report = p.report("t", {});
    const size_t table = report.find("\nKernels of the multi-kernel ops");
    ASSERT_NE(table, std::string::npos) << report;
    const size_t walk = report.find("\ndelta: forward_walk_kernel", table),
                 factors = report.find("\ndelta: chunk_factors_kernel", table);
    ASSERT_NE(walk, std::string::npos) << report;
    ASSERT_NE(factors, std::string::npos) << report;
    EXPECT_LT(walk, factors);
    EXPECT_EQ(report.substr(walk + 1, report.find('\n', walk + 1) - walk - 1),
              "delta: forward_walk_kernel                        6.00     6.0        1");
    EXPECT_EQ(report.substr(factors + 1, report.find('\n', factors + 1) - factors - 1),
              "delta: chunk_factors_kernel                       2.00     2.0        2");
}

// run.activations = keep: no recompute spans, which the pass line says, and the FLOPs the spans executed
// against MFU's count (15 TFLOP of spans a step; the recomputing profile above executes 1.5× a 10
// TFLOP count, a kept one 1.0×).
TEST(StepProfile, KeptActivationsShowNoRecomputePassAndExecutedAgainstCounted) {
    const std::string recomputed = two_steps().report("t", {}, 10e12);
    EXPECT_NE(recomputed.find("\nMFU's count                10000.0 GFLOP a step; the spans executed 1.50× that\n"),
              std::string::npos)
        << recomputed;
    StepProfile kept;
    for (int s = 0; s < 2; ++s) {
        kept.add(ProfileKind::gemm_forward, ProfilePass::forward, 20.0, 10e12, 0.0, "forward 8 × 4 → 2");
        kept.add(ProfileKind::norm, ProfilePass::backward, 10.0, 0.0, 24e9);
        kept.end_step(100.0, 45.0);
    }
    const std::string report = kept.report("t", {}, 10e12);
    EXPECT_NE(report.find("\nby pass: forward 20.00 ms (500.0 TFLOP/s), recompute none, backward 10.00 ms\n"),
              std::string::npos)
        << report;
    EXPECT_NE(report.find("the spans executed 1.00× that\n"), std::string::npos) << report;
    // Without a count (and on the CPU, whose spans are not split by pass) neither line.
    EXPECT_EQ(kept.report("t", {}).find("MFU's count"), std::string::npos);
    StepProfile cpu;
    cpu.add(ProfileKind::cpu_reference, ProfilePass::update, 10.0, 1e9, 0.0);
    cpu.end_step(12.0, 0.0);
    EXPECT_EQ(cpu.report("t", {}).find("by pass"), std::string::npos);
}

TEST(StepProfile, UnknownCeilingsPrintNoShares) {
    const std::string report = two_steps().report("t", {});
    EXPECT_NE(report.find("ceilings: unknown bf16, unknown memory"), std::string::npos) << report;
    EXPECT_EQ(row(report, "gemm forward"),
              "gemm forward                 30.00    30.0   15000.0    500.0      -        -        -      -        2")
        << report;
}

}  // namespace
}  // namespace deltabit::train
