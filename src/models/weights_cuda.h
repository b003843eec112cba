// The CUDA model's weights on the device (models/model_cuda.h says in which forms), uploaded from what the
// CPU model bound (Model::parts()). CUDA builds only (DELTABIT_HAVE_CUDA).
#pragma once

#if DELTABIT_HAVE_CUDA

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda_buffer.h"
#include "models/model.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/moe/moe_experts_cuda.h"

namespace deltabit {

// A matrix on the device in whichever form its dtype runs in.
struct CudaMatrix {
    bool quantized = false;
    cuda::GemvWeights gemv;     // quantized
    cuda::DeviceBuffer plain;   // !quantized: the GGUF rows as stored
    WeightView plain_view;      // !quantized: points into `plain`
    int64_t rows = 0, cols = 0;
};

// One layer's weights on the device: the CPU model's description (LayerWeightsOf, models/model.h) with every
// matrix uploaded and every vector a device pointer into CudaUploads::vectors.
using CudaLayer = LayerWeightsOf<CudaMatrix>;
using CudaAttentionWeights = AttentionWeightsOf<CudaMatrix>;
using CudaDeltaNetWeights = DeltaNetWeightsOf<CudaMatrix>;
using CudaFfnWeights = FfnWeightsOf<CudaMatrix>;
using CudaMoeWeights = MoeWeightsOf<CudaMatrix>;

// Where uploads go: the vectors (norm weights, conv, ssm_a, dt_bias) as F32 device buffers the model keeps,
// and the widest matrix input seen (the activation scratch is sized for it).
struct CudaUploads {
    std::vector<cuda::DeviceBuffer> vectors;
    int64_t max_cols = 0;

    const float* vector(const float* host, int64_t n);
    // Quantised matrices (Q1_0, Q2_0, Q4_0, Q8_0) in the GEMV layout, repacked and checked; F32, F16 and BF16
    // as stored. Error naming the tensor for a dtype without a CUDA matmul.
    CudaMatrix matrix(const WeightView& w, const std::string& name);
};

// Layer `index` of the CPU model's bound weights, uploaded (map_layer's order).
CudaLayer upload_layer(const LayerWeights& src, const ModelConfig& c, int64_t index, CudaUploads& uploads);

// A stacked expert matrix (E slices, ops/moe/moe_experts_cuda.h) as the grouped experts take it.
cuda::ExpertMatrixView expert_view(const CudaMatrix& m);

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
