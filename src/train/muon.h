// Muon (optimizer.kind = "muon"): momentum whose update is orthogonalised before it is applied, for the
// hidden matrices of the blocks (ParameterInfo::hidden_matrix); every other tensor keeps AdamW. This is
// the CPU reference: naive loops, the Newton–Schulz iteration in double, the momentum buffer in fp32
// with explicitly ordered fp32 arithmetic that train/cuda/optimizer_kernels.cu repeats bit for bit.
//
// Per matrix W[rows][cols] (row-major, rows = outputs) with gradient G (already clipped by global norm):
//   M ← μ·M + G                                  (the momentum buffer, fp32; AdamState::m's slots)
//   U = G + μ·M  (Nesterov)  or  U = M           (optimizer.muon_nesterov)
//   O = NS_k(U)                                  (k = optimizer.muon_ns_steps Newton–Schulz steps)
//   W ← W − η·(s·O + λ·W)                        (η the scheduled Muon rate, λ optimizer.muon_weight_decay)
//
// Newton–Schulz, on the wide orientation (Uᵀ when rows > cols, so that X·Xᵀ is the small square):
//   X₀ = U / (‖U‖_F + 1e-7);   X ← a·X + (b·A + c·A²)·X  with A = X·Xᵀ
// Each step maps every singular value σ of X to p(σ) = aσ + bσ³ + cσ⁵ and keeps the singular vectors,
// so X tends to the orthogonal factor of U (U = PΣQᵀ → PQᵀ) without an SVD.
//
// Scale rule s = 0.2·√max(rows, cols): an orthogonal factor of full rank has min(rows, cols) singular
// values of 1, so its RMS entry is 1/√max(rows, cols); s brings the update's RMS to 0.2, about the RMS
// of an AdamW update (Liu et al. 2025, "Muon is Scalable for LLM Training", measured AdamW's at
// 0.2–0.4 and matched it this way). The point of this rule over the original max(1, rows/cols)^½: the
// matrices then move at the pace AdamW moves them, so one learning rate and one weight decay serve both
// optimizers (optimizer.muon_lr and muon_weight_decay default to lr and weight_decay), and switching
// optimizer.kind needs no new rate search.
#pragma once

#include "train/optimizer.h"

#include <cstdint>
#include <span>
#include <vector>

namespace deltabit::train {

// The quintic's coefficients, chosen by Muon's author (K. Jordan, 2024) for a slope at 0 as
// steep as possible (a = 3.4445: a singular value of 3e-3·‖U‖_F reaches the band in five steps) at the
// price of not converging to exactly 1: singular values end in a band around 1, [0.68, 1.21]
// (test_muon.cpp derives and measures it). Training cares about the update's directions, not the
// exact singular values.
inline constexpr double kNewtonSchulzA = 3.4445, kNewtonSchulzB = -4.7750, kNewtonSchulzC = 2.0315;
// X₀'s denominator: a zero update stays zero instead of dividing by zero.
inline constexpr double kNewtonSchulzEps = 1e-7;

// k Newton–Schulz steps on U[rows][cols] (row-major, double): the approximate orthogonal factor, same
// shape and layout as U.
std::vector<double> newton_schulz(std::span<const double> u, int64_t rows, int64_t cols, int64_t steps);

// s = 0.2·√max(rows, cols) (the scale rule above).
double muon_update_scale(int64_t rows, int64_t cols);

// The Muon rate at the schedule point where AdamW's rate is `lr` (train/optimizer.h learning_rate):
// the schedule multiplies optimizer.muon_lr as it multiplies optimizer.lr.
double muon_learning_rate(const OptimizerSection& o, double lr);

// One Muon step on one matrix (w, g, momentum: rows·cols values each; g is not changed), at Muon rate
// `muon_lr` (already scheduled).
void muon_update_matrix(std::span<float> w, std::span<const float> g, std::span<float> momentum, int64_t rows,
                        int64_t cols, const OptimizerSection& o, double muon_lr);

// The whole optimizer step for kind = "muon": clips by global norm as adamw_step does, then Muon on the
// hidden matrices at muon_learning_rate(o, lr) and AdamW (train/optimizer.h) on everything else at lr.
// The Muon momentum lives in state.m's slots of those matrices (state.v stays 0 there), so checkpoints
// and the device's state carry it unchanged. Returns the gradient norm before clipping.
double muon_step(const ParameterLayout& layout, const OptimizerSection& o, double lr, std::span<float> params,
                 std::span<float> grads, AdamState& state);

}  // namespace deltabit::train
