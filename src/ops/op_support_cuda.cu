// What the CUDA ops cover (ops/op_support.h); kept next to the kernels so it changes with them.
#include "ops/op_support.h"

namespace deltabit::cuda {

bool supports(Op op, DType type) {
    switch (op) {
        case Op::embedding:  // get_rows decodes every weight format in place (embedding_cuda.cu)
            return type != DType::I32;
        case Op::matmul:  // decode GEMV over the repacked quantised formats (matmul_cuda.h); no float weights yet
            return type == DType::Q1_0 || type == DType::Q2_0 || type == DType::Q2_0_G64 || type == DType::Q4_0 ||
                   type == DType::Q8_0;
        default:  // every other op has an f32 kernel in ops_cuda.h
            return type == DType::F32;
    }
}

}  // namespace deltabit::cuda
