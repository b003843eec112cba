// Host code only: a .cpp so that fmt's compile-time checks work, compiled to nothing without CUDA.
#include "models/weights_cuda.h"

#if DELTABIT_HAVE_CUDA

#include <algorithm>

#include "core/error.h"
#include "ops/matmul/weight_repack.h"

namespace deltabit {

const float* CudaUploads::vector(const float* host, int64_t n) {
    cuda::DeviceBuffer& b = vectors.emplace_back(size_t(n) * sizeof(float));
    b.upload(host, size_t(n) * sizeof(float));
    return static_cast<const float*>(b.get<float>());
}

CudaMatrix CudaUploads::matrix(const WeightView& w, const std::string& name) {
    CudaMatrix m;
    m.rows = w.rows;
    m.cols = w.cols;
    max_cols = std::max(max_cols, w.cols);
    if (gemv_layout_supports(w.dtype)) {
        m.quantized = true;
        m.gemv = cuda::upload_gemv_weights(w, name.c_str());
        return m;
    }
    if (w.dtype != DType::F32 && w.dtype != DType::F16 && w.dtype != DType::BF16)
        fail("cuda model: {}: no CUDA matmul for dtype {}", name, dtype_name(w.dtype));
    const size_t bytes = size_t(w.rows) * w.row_bytes();
    m.plain = cuda::DeviceBuffer(bytes);
    m.plain.upload(w.data, bytes);
    m.plain_view = {m.plain.get(), w.dtype, w.rows, w.cols};
    return m;
}

CudaLayer upload_layer(const LayerWeights& src, const ModelConfig& c, int64_t index, CudaUploads& uploads) {
    return map_layer<CudaMatrix>(
        src, c, index, [&](const WeightView& w, const std::string& name) { return uploads.matrix(w, name); },
        [&](const float* host, int64_t n) { return uploads.vector(host, n); });
}

cuda::ExpertMatrixView expert_view(const CudaMatrix& m) {
    cuda::ExpertMatrixView v;
    v.quantized = m.quantized;
    if (m.quantized)
        v.q = m.gemv.view();
    else
        v.plain = m.plain_view;
    return v;
}

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
