// 1-bit quantisation-aware training. The latent weights stay fp32 (the optimizer's); the forward uses
//   w_eff = w + λ · stopgrad(ŵ − w),   ŵ = Q1_0(w): per group of 128 along a row, d = mean|w| summed
//   in order in fp32 and rounded to fp16, each weight ±d by w ≥ 0 (core/quant.h's Q1_0 quantiser, the
//   one the converter writes files with),
// so the gradient reaches w unchanged (straight-through), and binarisation fades in with
// λ = min(2·step/total, 1): fully binary for the second half of the run.
//
// Binarised: every matrix and the embeddings whose rows are whole groups of 128 — exactly the tensors
// `deltabit convert --type q1_0` stores as Q1_0 (convert/convert_plan.cpp), so an exported model holds
// the QAT forward's weights bit for bit.
#pragma once

#include "train/parameters.h"

#include <cstdint>
#include <span>

namespace deltabit::train {

inline constexpr int64_t kQatGroup = 128;

bool is_binarised(const ParameterInfo& p);

// λ of optimizer step `step` (0-based) of `total`.
double binarisation_weight(int64_t step, int64_t total);

// out = the QAT forward's weights for latent `params` at λ (out may not alias params). λ = 1 gives ŵ
// exactly (not w + (ŵ − w) rounded), λ = 0 gives w exactly.
void qat_effective_weights(const ParameterLayout& layout, std::span<const float> params, double lambda,
                           std::span<float> out);

}  // namespace deltabit::train
