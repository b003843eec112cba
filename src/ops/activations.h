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
// transformers' "gelu_pytorch_tanh": 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). For x → −∞ the tanh is
// −1 and the result −0, the correct limit.
inline double gelu_tanh(double x) {
    const double sqrt_2_over_pi = 0.79788456080286535588;
    return 0.5 * x * (1.0 + std::tanh(sqrt_2_over_pi * (x + 0.044715 * x * x * x)));
}

}  // namespace deltabit::cpu
