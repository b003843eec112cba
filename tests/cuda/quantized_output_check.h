// Checks for kernels that also write their float output's int8 activations (ops/matmul/matmul_cuda.h's
// QuantizedActivationsView) so the next matmul needs no quantize_activations launch: the bytes must be
// the quantiser's definition (quantize_on_host, gemv_test_data.h) applied to the kernel's own float
// output, bit for bit, and a kernel that counts group arrivals must leave every counter at zero.
// CUDA builds only (include it inside `#ifdef DELTABIT_HAVE_CUDA`).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/gemv_test_data.h"
#include "cuda/op_parity_cuda.h"
#include "ops/matmul/matmul_cuda.h"

namespace deltabit::test {

// A scratch for `cols` outputs with two groups more than they need, so the q bytes and {scale, sum}
// entries past the view's groups are a guard band. q and meta start as poison (0xFF: scale NaN, sum −1,
// q −1); the arrival counters stay as cuda::ActivationScratch leaves them (zero), since a kernel is
// entitled to find them so.
class GuardedQuantizedOutput {
public:
    explicit GuardedQuantizedOutput(int64_t cols)
        : cols_(cols), scratch_(cols + 2 * cuda::kActivationGroup), groups_(cuda::activation_groups(cols)),
          all_groups_(cuda::activation_groups(cols + 2 * cuda::kActivationGroup)) {
        poison();
    }

    cuda::QuantizedActivationsView view() const { return scratch_.view(cols_); }
    // The same bytes as the output of gemv_quantized_add_norm (ops/matmul/matmul_cuda.h).
    cuda::QuantizedActivationsView deferred_view(float norm_eps) const {
        return scratch_.deferred_norm_view(cols_, norm_eps);
    }

    // q and meta back to poison, counters untouched: a second call must then write every group again.
    void poison() const {
        const cuda::QuantizedActivationsView v = view();
        cuda::cuda_check(cudaMemset(v.q, kPoisonByte, size_t(all_groups_ * cuda::kActivationGroup)), "poison q");
        cuda::cuda_check(cudaMemset(v.meta, kPoisonByte, size_t(all_groups_) * sizeof(cuda::ActivationGroupMeta)),
                         "poison meta");
    }

    // The view's q and meta equal quantize_on_host(y) bit for bit, q zero from cols to the group end, and
    // nothing past the view's groups was written. y is the kernel's own float output, downloaded.
    ::testing::AssertionResult matches_host_quantizer(const std::vector<float>& y) const {
        if (int64_t(y.size()) != cols_)
            return ::testing::AssertionFailure() << y.size() << " outputs for a view of " << cols_;
        cuda::cuda_check(cudaDeviceSynchronize(), "quantised output");
        const cuda::QuantizedActivationsView v = view();
        std::vector<int8_t> q(size_t(all_groups_ * cuda::kActivationGroup));
        std::vector<cuda::ActivationGroupMeta> meta(static_cast<size_t>(all_groups_));
        cuda::cuda_check(cudaMemcpy(q.data(), v.q, q.size(), cudaMemcpyDeviceToHost), "download q");
        cuda::cuda_check(cudaMemcpy(meta.data(), v.meta, meta.size() * sizeof meta[0], cudaMemcpyDeviceToHost),
                         "download meta");
        const HostQuantized want = quantize_on_host(y);
        for (int64_t i = 0; i < groups_ * cuda::kActivationGroup; ++i) {
            if (q[size_t(i)] != want.q[size_t(i)]) {
                return ::testing::AssertionFailure()
                       << "q[" << i << "] is " << int(q[size_t(i)]) << ", want " << int(want.q[size_t(i)])
                       << (i >= cols_ ? " (padding up to the group end)" : "")
                       << "; y = " << y[size_t(std::min(i, cols_ - 1))];
            }
        }
        for (size_t i = size_t(groups_ * cuda::kActivationGroup); i < q.size(); ++i) {
            if (uint8_t(q[i]) != kPoisonByte)
                return ::testing::AssertionFailure() << "q[" << i << "], past the view's groups, was written";
        }
        for (int64_t g = 0; g < groups_; ++g) {
            const cuda::ActivationGroupMeta& m = meta[size_t(g)];
            if (std::bit_cast<uint32_t>(m.scale) != std::bit_cast<uint32_t>(want.scale[size_t(g)]) ||
                m.sum != want.sum[size_t(g)]) {
                return ::testing::AssertionFailure() << "group " << g << " has scale " << m.scale << " sum " << m.sum
                                                     << ", want scale " << want.scale[size_t(g)] << " sum "
                                                     << want.sum[size_t(g)];
            }
        }
        for (int64_t g = groups_; g < all_groups_; ++g) {
            uint8_t bytes[sizeof(cuda::ActivationGroupMeta)];
            std::memcpy(bytes, &meta[size_t(g)], sizeof bytes);
            for (uint8_t b : bytes) {
                if (b != kPoisonByte)
                    return ::testing::AssertionFailure()
                           << "meta of group " << g << ", past the view's groups, was written";
            }
        }
        return ::testing::AssertionSuccess();
    }

    // Every arrival counter of the scratch (the view's groups and the guard groups) is zero, read back
    // through the view's own pointer.
    ::testing::AssertionResult arrivals_all_zero() const {
        cuda::cuda_check(cudaDeviceSynchronize(), "arrival counters");
        const cuda::QuantizedActivationsView v = view();
        if (v.arrivals == nullptr) return ::testing::AssertionFailure() << "the scratch's view has no arrival counters";
        std::vector<int32_t> arrivals(static_cast<size_t>(all_groups_));
        cuda::cuda_check(
            cudaMemcpy(arrivals.data(), v.arrivals, arrivals.size() * sizeof(int32_t), cudaMemcpyDeviceToHost),
            "download arrivals");
        for (size_t g = 0; g < arrivals.size(); ++g) {
            if (arrivals[g] != 0)
                return ::testing::AssertionFailure() << "arrival counter of group " << g << " is " << arrivals[g]
                                                     << " after the call";
        }
        return ::testing::AssertionSuccess();
    }

private:
    int64_t cols_;
    cuda::ActivationScratch scratch_;
    int64_t groups_, all_groups_;
};

}  // namespace deltabit::test
