// The model forward pass on the GPU: the same loop as Model::forward (models/model.h) and the same
// blocks (models/blocks.h), with every op replaced by its CUDA twin (ops/ops_cuda.h). CUDA builds only
// (DELTABIT_HAVE_CUDA).
//
// Weights. CudaModel uploads exactly what the CPU model bound (Model::parts()), once: quantised
// matrices (Q1_0, Q2_0, Q4_0, Q8_0) in the GEMV layout of ops/weight_repack.h, repacked and checked
// at upload; plain-float matrices (F32, F16, BF16) and the embedding table as they are; norm weights
// and the other vectors as F32. The host Model may be dropped afterwards.
//
// Numerics. Quantised matrices go through the decode GEMV, which quantises its input activations to
// int8 per group of 128 (ops/matmul_cuda.h), so logits differ from the f32 CPU path by more than
// rounding; plain-float matrices use a naive fp32 kernel (ops/dense_cuda.h) and differ by rounding only.
// Prompts (T > 1) run the GEMV once per token — the same per-token activation quantisation as decode,
// so a prompt and token-by-token steps see the same matmul numerics — and the recurrent delta rule
// over all T tokens (no chunked kernel on the GPU yet).
//
// MoE layers copy the router's choices to the host (one synchronisation per MoE layer) and run the
// chosen experts' GEMVs from there: correct first, fused later.
#pragma once

#if DELTABIT_HAVE_CUDA

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cuda_buffer.h"
#include "models/model.h"
#include "ops/matmul_cuda.h"

namespace deltabit {

// A matrix on the device in whichever form its dtype runs in.
struct CudaMatrix {
    bool quantized = false;
    cuda::GemvWeights gemv;     // quantized
    cuda::DeviceBuffer plain;   // !quantized: the GGUF rows as stored
    WeightView plain_view;      // !quantized: points into `plain`
    int64_t rows = 0, cols = 0;
};

// Per-layer device state: the KV cache ([capacity][n_head_kv][head_dim], filled up to the sequence's
// position) of full-attention layers; the conv window and recurrent state of DeltaNet layers, in the
// layouts of models/sequence_state.h.
struct CudaLayerState {
    cuda::DeviceBuffer k, v;
    cuda::DeviceBuffer conv, recurrent;
};

class CudaSequenceState {
public:
    // Room for `max_positions` tokens in every KV cache; zero conv and recurrent states.
    CudaSequenceState(const ModelConfig& config, int64_t max_positions);

    int64_t position() const { return position_; }
    int64_t max_positions() const { return max_positions_; }
    void advance(int64_t n_tokens) { position_ += n_tokens; }
    CudaLayerState& layer(int64_t i) { return layers_[size_t(i)]; }
    int64_t n_layer() const { return int64_t(layers_.size()); }

private:
    int64_t position_ = 0;
    int64_t max_positions_ = 0;
    std::vector<CudaLayerState> layers_;
};

class CudaModel {
public:
    // Uploads `model`'s bound weights to device 0; Error when a matrix's dtype has no CUDA matmul.
    explicit CudaModel(const Model& model);
    ~CudaModel();
    CudaModel(const CudaModel&) = delete;
    CudaModel& operator=(const CudaModel&) = delete;

    const ModelConfig& config() const { return config_; }
    CudaSequenceState new_sequence(int64_t max_positions) const { return CudaSequenceState(config_, max_positions); }

    // As Model::forward: logits [ids.size()][n_vocab] (copied to the host) for the tokens after
    // state.position(); advances the state. Error for a token id outside the vocabulary or a sequence
    // that would outgrow its KV capacity (the state is then unchanged).
    std::vector<float> forward(CudaSequenceState& state, std::span<const int32_t> ids);

    cudaStream_t stream() const { return stream_; }

private:
    struct Layer;

    // Device memory for one forward call's intermediates, released when the call returns (after the
    // stream has drained). Simple, not fast: an arena sized once comes with the CUDA-graph work.
    float* temp(int64_t n_floats);
    int32_t* temp_ids(int64_t n);

    void matmul(const float* x, const CudaMatrix& w, int64_t first_row, int64_t n_rows, int64_t n_tokens, float* y);
    void matmul(const float* x, const CudaMatrix& w, int64_t n_tokens, float* y) {
        matmul(x, w, 0, w.rows, n_tokens, y);
    }
    void attention_block(const Layer& L, const float* x, int64_t T, int64_t n_past, CudaLayerState& state, float* out);
    void deltanet_block(const Layer& L, const float* x, int64_t T, CudaLayerState& state, float* out);
    void swiglu_ffn(const CudaMatrix& gate, const CudaMatrix& up, const CudaMatrix& down, const float* x, int64_t T,
                    float* out);
    void moe_ffn(const Layer& L, const float* x, int64_t T, float* out);

    ModelConfig config_;
    cudaStream_t stream_ = nullptr;
    std::vector<cuda::DeviceBuffer> vectors_;  // norm weights, conv, ssm_a, dt_bias
    cuda::DeviceBuffer token_embd_;
    WeightView token_embd_view_;               // data on the device
    const float* output_norm_ = nullptr;
    CudaMatrix output_;
    std::vector<Layer> layers_;
    std::unique_ptr<cuda::ActivationScratch> activations_;
    std::vector<cuda::DeviceBuffer> temp_;
};

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
