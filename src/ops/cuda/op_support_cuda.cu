// What the CUDA ops cover (ops/op_support.h); kept next to the kernels so it changes with them.
#include "ops/op_support.h"

namespace deltabit::cuda {

bool supports(Op op, DType type) {
    switch (op) {
        case Op::embedding:  // get_rows decodes every weight format in place (embedding_cuda.cu)
            return type != DType::I32;
        // The GEMV over the repacked quantised formats (matmul_cuda.h), parity-tested per dtype. Plain-float
        // weights run matmul_plain (dense_cuda.h), checked only through the float fixtures' model parity, so
        // not listed here until a parity test of their own covers them (tests/cuda/test_backend_cuda.cpp).
        case Op::matmul:
            return type == DType::Q1_0 || type == DType::Q2_0 || type == DType::Q2_0_G64 || type == DType::Q4_0 ||
                   type == DType::Q8_0;
        default:  // every other op has an f32 kernel (ops/<family>/<family>_cuda.h)
            return type == DType::F32;
    }
}

}  // namespace deltabit::cuda
