// Scalar activations shared by the naive CPU references. Evaluated in double so the references are
// at least as accurate as the fp32 math of transformers and llama.cpp they are compared with.
#pragma once

#include <cmath>

namespace deltabit::cpu {

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// x · sigmoid(x). For x → −∞, exp(−x) overflows to inf and the quotient is −0, the correct limit.
inline double silu(double x) { return x / (1.0 + std::exp(-x)); }

// torch.nn.functional.softplus with beta 1 and threshold 20: x itself above 20 (where log1p(e^x)
// equals x to fp32 precision), log(1 + e^x) otherwise.
inline double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

}  // namespace deltabit::cpu
