// Which op runs on which backend for which element type — the table `deltabit ops`-style reports
// print and that a backend's supports() answers from. Each backend that implements ops defines its own
// `supports(Op, DType)` next to its kernels (cpu:: in op_support_cpu.cpp, cuda:: in
// op_support_cuda.cu), so the answer changes in the same commit as the code it describes.
//
// DType is the weight type for the ops that read weights (matmul, embedding); for every other op it
// is the activation type, and only F32 exists there today.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "core/dtype.h"

namespace deltabit {

enum class Op : uint8_t {
    embedding,
    matmul,
    rms_norm,
    rope,
    attention,
    swiglu,
    conv1d,
    l2_norm,
    gdn_gates,
    delta_rule,
    gated_rms_norm,
    moe_router,
};

inline constexpr std::array kAllOps = {Op::embedding, Op::matmul,    Op::rms_norm,   Op::rope,
                                       Op::attention, Op::swiglu,    Op::conv1d,     Op::l2_norm,
                                       Op::gdn_gates, Op::delta_rule, Op::gated_rms_norm, Op::moe_router};

// Every weight dtype, in the order the supports table prints them.
inline constexpr std::array kWeightDTypes = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                                             DType::Q4_0, DType::Q1_0, DType::Q2_0, DType::Q2_0_G64};

std::string_view op_name(Op op);

// Ops whose DType argument names a weight format (every weight dtype is meaningful for them).
inline bool op_reads_weights(Op op) { return op == Op::embedding || op == Op::matmul; }

namespace cpu {
bool supports(Op op, DType type);
}

namespace cuda {
// Defined only in CUDA builds (op_support_cuda.cu); callers check DELTABIT_HAVE_CUDA.
bool supports(Op op, DType type);
}

}  // namespace deltabit
