// The CUDA backend through the Backend interface: device memory round trips, ops enqueued on its
// stream see data copied before them, and its supports table is the one the parity tests cover
// (every (op, dtype) it claims has a parity test below in tests/cuda, and nothing else is claimed).
// Skips cleanly without CUDA or a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "ops/op_parity.h"
#include "ops/op_support.h"

#ifdef DELTABIT_HAVE_CUDA
#include "backend/cuda_backend.h"
#include "cuda/op_parity_cuda.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/attention/attention_cuda.h"
#endif

namespace deltabit::test {
namespace {

#ifdef DELTABIT_HAVE_CUDA

TEST(BackendCuda, RoundTripsAndRunsAnOpOnItsStream) {
    DELTABIT_REQUIRE_GPU();
    auto backend = make_backend("cuda");
    ASSERT_EQ(backend->name(), "cuda");
    EXPECT_FALSE(backend->host_accessible());
    std::printf("%s\n", backend->description().c_str());
    auto& cuda_backend = dynamic_cast<CudaBackend&>(*backend);

    const std::vector<float> gate = {-1.0f, 0.0f, 2.0f, 30.0f}, up = {2.0f, 5.0f, -1.0f, 0.5f};
    const size_t bytes = gate.size() * sizeof(float);
    void* dg = backend->allocate(bytes);
    void* du = backend->allocate(bytes);
    void* dout = backend->allocate(bytes);
    void* dcopy = backend->allocate(bytes);
    backend->copy_to_device(dg, gate.data(), bytes);
    backend->copy_to_device(du, up.data(), bytes);
    cuda::swiglu(static_cast<float*>(dg), static_cast<float*>(du), 4, static_cast<float*>(dout),
                 cuda_backend.stream());
    backend->copy_on_device(dcopy, dout, bytes);
    std::vector<float> got(4, -7.0f);
    backend->copy_to_host(got.data(), dcopy, bytes);
    // silu(g)·u by hand: silu(−1) = −1/(1+e) = −0.268941…, silu(0) = 0, silu(2) = 2/(1+e^−2) = 1.761594…,
    // silu(30) = 30 to fp32.
    EXPECT_NEAR(got[0], -0.2689414 * 2.0, 1e-6);
    EXPECT_EQ(got[1], 0.0f);
    EXPECT_NEAR(got[2], -1.7615942, 1e-6);
    EXPECT_NEAR(got[3], 15.0, 1e-6);
    for (void* p : {dg, du, dout, dcopy}) backend->free(p);
}

// (op, dtype) pairs the tests in tests/cuda check against the CPU reference. When a kernel gains a
// dtype, its parity test and this list change with supports() in op_support_cuda.cu.
std::set<std::pair<Op, DType>> parity_covered() {
    std::set<std::pair<Op, DType>> covered;
    for (DType t : kWeightDTypes) covered.insert({Op::embedding, t});  // test_op_parity_lookup.cpp
    for (DType t : {DType::Q1_0, DType::Q2_0, DType::Q2_0_G64, DType::Q4_0, DType::Q8_0})
        covered.insert({Op::matmul, t});  // test_gemv_cuda.cpp
    for (Op op : {Op::rms_norm, Op::l2_norm, Op::gated_rms_norm, Op::swiglu, Op::gdn_gates, Op::rope, Op::conv1d,
                  Op::attention, Op::delta_rule, Op::moe_router})
        covered.insert({op, DType::F32});
    return covered;
}

TEST(BackendCuda, SupportsTableIsExactlyWhatParityCovers) {
    const auto covered = parity_covered();
    for (Op op : kAllOps) {
        for (DType t : kWeightDTypes) {
            EXPECT_EQ(cuda::supports(op, t), covered.count({op, t}) == 1) << op_name(op) << " " << dtype_name(t);
        }
    }
    std::printf("%s", supports_table("cuda", [](Op op, DType t) { return cuda::supports(op, t); }).c_str());
}

#else
TEST(BackendCuda, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace deltabit::test
