// Muon on the device (train/muon.h is the math and the CPU reference): the momentum and the update in
// pointwise kernels (train/cuda/optimizer_kernels.cu), the Frobenius norm by the gradient-norm reduction,
// and the Newton–Schulz products on cuBLAS through train/cuda/gemm.h in fp32 (CUBLAS_COMPUTE_32F), not
// the training path's bf16: bf16's 2⁻⁸ rounding of X·Xᵀ would be amplified by the iteration's slope
// (up to 3.4 per step at small singular values), and fp32 keeps the device within ~1e-5 of the double
// reference, which is what lets tests/train/test_cuda_muon.cpp check it. The cost is ~6·r²·c + 2·r³
// fp32 FLOPs per step per matrix (r ≤ c its sides), small beside the model's own products.
//
// Plain C++: no CUDA types in the interface.
#pragma once

#include "backend/cuda_buffer.h"
#include "train/train_config.h"

#include <cstdint>

namespace deltabit::train::cuda {

// Device scratch for one matrix at a time, grown to the largest matrix seen.
class MuonWorkspace {
public:
    float* x(int64_t n) { return grow(x_, n * 4); }
    float* next(int64_t n) { return grow(next_, n * 4); }
    float* gram(int64_t n) { return grow(gram_, n * 4); }
    float* gram_sq(int64_t n) { return grow(gram_sq_, n * 4); }
    double* sum_sq() { return reinterpret_cast<double*>(grow(sum_sq_, sizeof(double))); }

private:
    static float* grow(deltabit::cuda::DeviceBuffer& b, int64_t bytes) {
        if (int64_t(b.bytes()) < bytes) b = deltabit::cuda::DeviceBuffer(size_t(bytes));
        return b.get<float>();
    }
    deltabit::cuda::DeviceBuffer x_, next_, gram_, gram_sq_, sum_sq_;
};

// One Muon step on one device matrix w[rows][cols] with its gradient g (not changed; scaled by
// grad_scale, the clip factor, as it is read) and its momentum buffer, at the scheduled Muon rate
// muon_lr; train/muon.h muon_update_matrix's arithmetic.
void muon_update(float* w, const float* g, float* momentum, int64_t rows, int64_t cols, float grad_scale,
                 const OptimizerSection& o, double muon_lr, MuonWorkspace& workspace);

}  // namespace deltabit::train::cuda
