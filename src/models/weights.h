// A model's tensors by GGUF name, whatever file they came from.
//
// The engine sees one naming and one set of storage conventions, llama.cpp's GGUF ones
// (../shared/reference/llamacpp-formats-and-qwen35.md §2.2–2.3):
//   - names token_embd.weight, blk.N.attn_qkv.weight, ..., output.weight (absent when tied);
//   - shapes in ggml order: shape[0] is the contiguous (input) dimension;
//   - zero-centred 1+w RMSNorm weights stored with the 1 added (all hybrid norms except ssm_norm);
//   - ssm_a = −exp(A_log); ssm_conv1d squeezed to {K, C};
//   - every 1-D tensor and ssm_conv1d as F32 (converted at load when the file has F16/BF16);
//   - canonical split tensors: DeltaNet β/α as ssm_beta + ssm_alpha, experts as ffn_gate_exps +
//     ffn_up_exps (qwen3next's fused ssm_ba / legacy ssm_in and fused ffn_gate_up_exps are split
//     into those at load by copying rows, which works for every dtype).
// DeltaNet value heads stay in the file's order; config().value_head_order says which (Hugging Face
// and qwen3next: grouped; qwen35/qwen35moe GGUFs: tiled).
//
// Matrices are read in place from the file mapping (mmap) where the file's bytes already are in the
// engine's form; only converted tensors are copied. The object owns (shares) the mapping.
#pragma once

#include "core/tensor.h"
#include "models/model_config.h"

#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace deltabit {

namespace gguf {
class File;
}
namespace safetensors {
class Set;
}

// Progress of a model load: bytes of the file's tensors handled so far (bound in place, or converted or
// copied), out of all of them; called on the loading thread after each tensor, done never decreasing,
// ending at done == total. A matrix bound in place costs nothing until it is read, so a fast load can
// go from 0 to total at once: the long part of a GPU load is the upload that reads every byte.
using LoadProgress = std::function<void(uint64_t done_bytes, uint64_t total_bytes)>;

struct WeightTensor {
    std::string name;            // GGUF name
    DType dtype = DType::F32;
    std::vector<int64_t> shape;  // ggml order
    const void* data = nullptr;
    uint64_t bytes = 0;
    std::string origin;          // where it came from, for messages ("model.safetensors: model.layers.0...")

    int64_t n_elements() const;
};

class ModelWeights {
public:
    // An HF folder's safetensors, renamed and converted to the conventions above; `config` is the
    // folder's config (load_hf_config), whose value_head_order must be grouped.
    static ModelWeights from_hf(std::shared_ptr<const safetensors::Set> files, ModelConfig config,
                                const LoadProgress& progress = {});
    // A GGUF file's tensors (already named and converted), with qwen3next's fused tensors split.
    static ModelWeights from_gguf(std::shared_ptr<const gguf::File> file, ModelConfig config,
                                  const LoadProgress& progress = {});

    const ModelConfig& config() const { return config_; }
    const std::string& source() const { return source_; }

    const WeightTensor* find(std::string_view name) const;
    const WeightTensor& require(std::string_view name) const;  // Error "SOURCE: missing tensor NAME"
    const std::map<std::string, WeightTensor, std::less<>>& tensors() const { return tensors_; }

    // The matrix W[rows][cols] (ggml shape {cols, rows}); Error naming the tensor when its shape
    // differs. matrix3 is an expert stack {cols, rows, n} viewed as rows·n rows.
    WeightView matrix(std::string_view name, int64_t rows, int64_t cols) const;
    WeightView matrix3(std::string_view name, int64_t n, int64_t rows, int64_t cols) const;
    // An F32 tensor of exactly `n` elements (any shape), e.g. a norm weight or ssm_conv1d.
    const float* floats(std::string_view name, int64_t n) const;

    // Adds a tensor (the loaders, and tests that build models by hand). `data` must outlive this
    // object unless it points into storage made by own().
    void add(WeightTensor tensor);
    // Storage owned by this object for `bytes` bytes, 16-byte aligned, zeroed.
    void* own(uint64_t bytes);
    // Keep `anything` alive as long as these weights (the file mapping the tensors point into).
    void keep_alive(std::shared_ptr<const void> anything) { keep_alive_.push_back(std::move(anything)); }

    ModelWeights(ModelConfig config, std::string source) : config_(std::move(config)), source_(std::move(source)) {}
    // Move-only: tensors point into storage this object owns.
    ModelWeights(ModelWeights&&) = default;
    ModelWeights& operator=(ModelWeights&&) = default;
    ModelWeights(const ModelWeights&) = delete;
    ModelWeights& operator=(const ModelWeights&) = delete;

private:
    ModelConfig config_;
    std::string source_;
    std::map<std::string, WeightTensor, std::less<>> tensors_;
    std::deque<std::vector<uint64_t>> owned_;  // uint64_t elements: aligned storage for any dtype
    std::vector<std::shared_ptr<const void>> keep_alive_;
};

// Copies of selected rows of a stored matrix (any dtype: rows are whole blocks), in the order given.
// `row_bytes` is the byte length of one row. Returns the new tensor's storage, owned by `into`.
const void* gather_rows(ModelWeights& into, const void* data, uint64_t row_bytes, const std::vector<int64_t>& rows);

// Converts n values of a plain float type (F32, F16, BF16) at `data` into `out` (unaligned input is
// fine). Error for other types, naming `what`.
void plain_to_f32(DType dtype, const void* data, int64_t n, float* out, std::string_view what);

}  // namespace deltabit
