#include "train/cuda/muon_update.h"

#include "train/cuda/gemm.h"
#include "train/cuda/kernels.h"
#include "train/muon.h"

#include <cuda_runtime.h>

#include <utility>

namespace deltabit::train::cuda {

void muon_update(float* w, const float* g, float* momentum, int64_t rows, int64_t cols, float grad_scale,
                 const OptimizerSection& o, double muon_lr, MuonWorkspace& workspace) {
    const int64_t n = rows * cols;
    if (n == 0) return;
    // X[r][c] with r ≤ c: the update itself, or its transpose for a tall matrix.
    const bool transposed = rows > cols;
    const int64_t r = transposed ? cols : rows, c = transposed ? rows : cols;
    float* x = workspace.x(n);
    float* next = workspace.next(n);
    float* gram = workspace.gram(r * r);
    float* gram_sq = workspace.gram_sq(r * r);
    double* sum_sq = workspace.sum_sq();

    muon_momentum(g, momentum, rows, cols, grad_scale, float(o.muon_momentum), o.muon_nesterov, transposed, x);
    deltabit::cuda::cuda_check(cudaMemset(sum_sq, 0, sizeof(double)), "cudaMemset");
    sum_of_squares(x, n, sum_sq);
    scale_by_inverse_norm(x, n, sum_sq, kNewtonSchulzEps);

    const ScopedGemmMath fp32(GemmMath::fp32);
    for (int64_t step = 0; step < o.muon_ns_steps; ++step) {
        // gram = X·Xᵀ (linear_forward's x·Wᵀ with W = X); gram_sq = gram·gramᵀ = gram² (gram symmetric).
        linear_forward(x, x, r, c, r, gram);
        linear_forward(gram, gram, r, r, r, gram_sq);
        // gram_sq ← b·gram + c·gram², next = a·X; then next += (b·gram + c·gram²)·X
        // (linear_backward_input's dx += dy·W with dy the r × r polynomial and W = X).
        newton_schulz_pointwise(gram, gram_sq, r * r, x, next, n, float(kNewtonSchulzA), float(kNewtonSchulzB),
                                float(kNewtonSchulzC));
        linear_backward_input(gram_sq, x, r, c, r, next);
        std::swap(x, next);
    }
    muon_apply(w, x, rows, cols, transposed, muon_lr, muon_update_scale(rows, cols), o.muon_weight_decay);
}

}  // namespace deltabit::train::cuda
