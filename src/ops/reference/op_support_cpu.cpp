#include "ops/op_support.h"

namespace deltabit {

std::string_view op_name(Op op) {
    switch (op) {
        case Op::embedding: return "embedding";
        case Op::matmul: return "matmul";
        case Op::rms_norm: return "rms_norm";
        case Op::rope: return "rope";
        case Op::attention: return "attention";
        case Op::swiglu: return "swiglu";
        case Op::conv1d: return "conv1d";
        case Op::l2_norm: return "l2_norm";
        case Op::gdn_gates: return "gdn_gates";
        case Op::delta_rule: return "delta_rule";
        case Op::gated_rms_norm: return "gated_rms_norm";
        case Op::moe_router: return "moe_router";
    }
    return "?";
}

namespace cpu {

// The naive references read every weight dtype through core/quant.h (dequantize_row, dot_row) and
// compute activations in f32.
bool supports(Op op, DType type) {
    if (type == DType::I32) return false;
    return op_reads_weights(op) || type == DType::F32;
}

}  // namespace cpu
}  // namespace deltabit
