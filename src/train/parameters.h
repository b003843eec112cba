// The trainable parameters of a model, by Hugging Face name and shape, in one flat fp32 array (the
// master weights), and the layout the optimizer, the checkpoints and the export walk. Names, shapes and
// conventions are transformers' (../shared/reference/qwen35-transformers.md §4): 1+w norms stored as w
// (zero-initialised), A_log, dt_bias, conv1d.weight [C][1][K], grouped value heads. The GGUF export
// converts them to the engine's conventions.
#pragma once

#include "models/model_config.h"

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace deltabit::train {

enum class ParameterRole : uint8_t {
    matrix,       // a projection [out][in]: weight decay, and binarised by 1-bit QAT when in % 128 == 0
    embedding,    // token embeddings [V][D]: weight decay, kept in full precision by QAT
    norm,         // RMS norm weights (1+w or plain): no decay
    vector,       // conv kernels, A_log, dt_bias: no decay
};

struct ParameterInfo {
    std::string name;              // "model.layers.0.linear_attn.in_proj_qkv.weight"
    std::vector<int64_t> shape;    // PyTorch order, last dimension contiguous
    int64_t offset = 0;            // into the flat array
    int64_t size = 0;              // product of shape
    ParameterRole role = ParameterRole::matrix;
    // A 2-D projection inside a block (attention q/k/v/o, DeltaNet in_proj_qkv/in_proj_z/out_proj, the
    // FFN's three): the tensors optimizer.kind = "muon" orthogonalises (train/muon.h). Not the
    // embeddings, not the LM head, and not DeltaNet's in_proj_a/in_proj_b, whose few rows (one per value
    // head) each make one scalar gate (decay, write strength): forcing that update to be orthogonal
    // would give every head's gate a unit-norm step whatever its gradient says.
    bool hidden_matrix = false;
};

class ParameterLayout {
public:
    explicit ParameterLayout(const ModelConfig& config);

    const std::vector<ParameterInfo>& all() const { return params_; }
    int64_t total() const { return total_; }
    const ParameterInfo& get(const std::string& name) const;  // fails naming the parameter when absent
    const ParameterInfo* find(const std::string& name) const;
    const ModelConfig& config() const { return config_; }

private:
    void add(std::string name, std::vector<int64_t> shape, ParameterRole role, bool hidden_matrix = false);

    ModelConfig config_;
    std::vector<ParameterInfo> params_;
    int64_t total_ = 0;
};

// A fresh model: projections and embeddings N(0, init_std²), the residual output projections (o_proj,
// out_proj, down_proj) scaled by 1/√(2·layers) as GPT-2 does, 1+w norms 0, plain norms 1, conv kernels
// U(±1/√K) (torch's Conv1d default), A_log = log U(1, 16), dt_bias 1. Deterministic in seed.
std::vector<float> initial_parameters(const ParameterLayout& layout, double init_std, uint64_t seed);

}  // namespace deltabit::train
