// The backend interface on the CPU, and make_backend's choices: "cpu" always works, "auto" falls back
// to the CPU without a GPU, unknown names and an unavailable "cuda" are refused with a message.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"

namespace deltabit {
namespace {

TEST(BackendCpu, AllocatesAndCopies) {
    auto backend = make_backend("cpu");
    ASSERT_EQ(backend->name(), "cpu");
    EXPECT_TRUE(backend->host_accessible());
    EXPECT_EQ(backend->allocate(0), nullptr);
    backend->free(nullptr);

    const std::vector<float> host = {1.5f, -2.0f, 3.25f, 7.0f};
    const size_t bytes = host.size() * sizeof(float);
    void* a = backend->allocate(bytes);
    void* b = backend->allocate(bytes);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);  // cache-line aligned
    backend->copy_to_device(a, host.data(), bytes);
    backend->copy_on_device(b, a, bytes);
    std::vector<float> back(host.size(), 0.0f);
    backend->copy_to_host(back.data(), b, bytes);
    backend->synchronize();
    EXPECT_EQ(back, host);
    backend->free(a);
    backend->free(b);
}

TEST(BackendCpu, SupportsMatchesTheReferences) {
    auto backend = make_backend("cpu");
    EXPECT_TRUE(backend->supports(Op::matmul, DType::Q1_0));
    EXPECT_TRUE(backend->supports(Op::embedding, DType::BF16));
    EXPECT_TRUE(backend->supports(Op::delta_rule, DType::F32));
    EXPECT_FALSE(backend->supports(Op::rms_norm, DType::Q1_0));  // activations are f32
}

TEST(BackendChoice, UnknownNameIsRefused) {
    try {
        make_backend("tpu");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("unknown backend 'tpu'"), std::string::npos) << e.what();
    }
}

TEST(BackendChoice, AutoAndCudaFollowAvailability) {
    auto chosen = make_backend("auto");
    if (cuda_backend_available()) {
        EXPECT_EQ(chosen->name(), "cuda");
        EXPECT_EQ(make_backend("cuda")->name(), "cuda");
    } else {
        EXPECT_EQ(chosen->name(), "cpu");
        EXPECT_THROW(make_backend("cuda"), Error);
    }
}

// resolve_backend names where make_backend would run, with its errors (the block-diffusion runner uses it
// instead of a Backend object).
TEST(BackendChoice, ResolveNamesWhereMakeBackendRuns) {
    EXPECT_EQ(resolve_backend("cpu"), "cpu");
    EXPECT_EQ(resolve_backend("auto"), make_backend("auto")->name());
    EXPECT_EQ(resolve_backend("auto"), cuda_backend_available() ? "cuda" : "cpu");
    if (cuda_backend_available()) {
        EXPECT_EQ(resolve_backend("cuda"), "cuda");
    } else {
        std::string resolved, made;
        try {
            resolve_backend("cuda");
        } catch (const Error& e) {
            resolved = e.what();
        }
        try {
            make_backend("cuda");
        } catch (const Error& e) {
            made = e.what();
        }
        EXPECT_NE(resolved.find("backend cuda: "), std::string::npos) << resolved;
        EXPECT_EQ(resolved, made);
    }
    try {
        resolve_backend("tpu");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("unknown backend 'tpu'"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace deltabit
