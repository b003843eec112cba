#include "ops/cuda/tensor_map_cuda.h"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <string>

#include "backend/cuda_buffer.h"

namespace deltabit::cuda {

namespace {

// The driver's encoder, found through the runtime: deltabit links only the runtime library, not libcuda.
PFN_cuTensorMapEncodeTiled_v12000 encoder() {
    static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found{};
        cuda_check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found),
                   "looking up cuTensorMapEncodeTiled");
        if (found != cudaDriverEntryPointSuccess || fn == nullptr)
            fail_message("cuda: the driver has no cuTensorMapEncodeTiled (a CUDA 12 driver or newer is needed)");
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    }();
    return encode;
}

}  // namespace

CUtensorMap tensor_map_2d(const void* base, int element_bytes, uint64_t cols, uint64_t rows,
                          uint64_t row_stride_bytes, uint32_t box_cols, uint32_t box_rows, TensorMapSwizzle swizzle) {
    const auto where = [&] {
        return std::to_string(rows) + " × " + std::to_string(cols) + " elements of " + std::to_string(element_bytes) +
               " bytes, box " + std::to_string(box_rows) + " × " + std::to_string(box_cols);
    };
    if (element_bytes != 1 && element_bytes != 2) fail_message("cuda tensor map: elements of 1 or 2 bytes, " + where());
    if (reinterpret_cast<uintptr_t>(base) % 16 != 0 || row_stride_bytes % 16 != 0)
        fail_message("cuda tensor map: base and row stride must be 16-byte aligned, " + where());
    const uint64_t box_bytes = uint64_t(box_cols) * uint64_t(element_bytes);
    if (box_bytes % 16 != 0 || (swizzle == TensorMapSwizzle::bytes128 && box_bytes != 128) || box_cols > 256 ||
        box_rows > 256 || box_cols == 0 || box_rows == 0)
        fail_message("cuda tensor map: a box row of a multiple of 16 bytes (128 with the 128-byte swizzle) and sides "
                     "of at most 256, " + where());
    CUtensorMap map{};
    const cuuint64_t dims[2] = {cols, rows};
    const cuuint64_t strides[1] = {row_stride_bytes};
    const cuuint32_t box[2] = {box_cols, box_rows};
    const cuuint32_t element_strides[2] = {1, 1};
    const CUresult status =
        encoder()(&map, element_bytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_UINT16, 2,
                  const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  swizzle == TensorMapSwizzle::bytes128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (status != CUDA_SUCCESS)
        fail_message("cuda tensor map: cuTensorMapEncodeTiled failed (CUresult " + std::to_string(int(status)) + "), " +
                     where());
    return map;
}

}  // namespace deltabit::cuda
