// GGUF tensors → the engine's tensors (weights.h). GGUF names and conventions are already the
// engine's; what is left is splitting the fused tensors some files carry and making every vector F32.
#include "formats/gguf.h"
#include "models/fused_layouts.h"
#include "models/weights.h"

#include "core/error.h"
#include "core/quant.h"

namespace deltabit {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

void add_split(ModelWeights& out, const gguf::TensorInfo& t, std::string_view from, std::string_view to_first,
               std::string_view to_second, const RowSplit& s, int64_t experts, const std::string& origin) {
    const int64_t rows = int64_t(t.n_rows());
    const int64_t want = int64_t(s.first.size() + s.second.size());
    if (rows != want) fail("{}: has {} rows but the model config implies {}", origin, rows, want);
    const std::string stem = t.name.substr(0, t.name.size() - from.size());
    const uint64_t row_bytes = dtype_bytes(t.dtype, uint64_t(t.row_length()));
    for (int part = 0; part < 2; ++part) {
        const std::vector<int64_t>& list = part == 0 ? s.first : s.second;
        std::vector<int64_t> shape = {t.row_length(), int64_t(list.size()) / experts};
        if (experts > 1 || t.shape.size() == 3) shape.push_back(experts);
        out.add({stem + std::string(part == 0 ? to_first : to_second), t.dtype, shape,
                 gather_rows(out, t.data, row_bytes, list), row_bytes * list.size(), origin});
    }
}

}  // namespace

ModelWeights ModelWeights::from_gguf(std::shared_ptr<const gguf::File> file, ModelConfig config,
                                     const LoadProgress& progress) {
    ModelWeights weights(std::move(config), file->path());
    const ModelConfig& c = weights.config();
    uint64_t total = 0, done = 0;
    for (const gguf::TensorInfo& t : file->tensors()) total += t.bytes;
    for (const gguf::TensorInfo& t : file->tensors()) {
        const std::string origin = file->path() + ": tensor " + t.name;
        // A NaN or infinite weight makes every logit downstream NaN: refuse the file, naming the tensor
        // and element, instead of generating noise with exit code 0.
        if (const int64_t bad = first_non_finite(t.dtype, t.data, int64_t(t.n_elements())); bad >= 0)
            fail("{}: element {} is not finite (NaN or infinite{}); the file is damaged or was written from a "
                 "diverged checkpoint",
                 origin, bad, dtype_info(t.dtype).quantized ? ", its block's scale" : "");
        std::vector<int64_t> shape = t.shape;
        if (ends_with(t.name, ".ssm_ba.weight")) {
            add_split(weights, t, "ssm_ba.weight", "ssm_beta.weight", "ssm_alpha.weight",
                      ba_rows(c.ssm_n_key_heads, c.ssm_n_value_heads), 1, origin);
        } else if (ends_with(t.name, ".ssm_in.weight")) {
            add_split(weights, t, "ssm_in.weight", "attn_qkv.weight", "attn_gate.weight",
                      qkvz_rows(c.ssm_n_key_heads, c.ssm_key_dim, c.ssm_n_value_heads, c.ssm_value_dim), 1, origin);
        } else if (ends_with(t.name, ".ffn_gate_up_exps.weight")) {
            add_split(weights, t, "ffn_gate_up_exps.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight",
                      gate_up_rows(c.n_expert, c.expert_ff), c.n_expert, origin);
        } else if ((shape.size() == 1 || ends_with(t.name, ".ssm_conv1d.weight")) && t.dtype != DType::F32) {
            // Vectors are read as F32 by the blocks; llama.cpp keeps them F32, other writers may not.
            const int64_t n = int64_t(t.n_elements());
            auto* values = static_cast<float*>(weights.own(uint64_t(n) * 4));
            plain_to_f32(t.dtype, t.data, n, values, origin);
            weights.add({t.name, DType::F32, shape, values, uint64_t(n) * 4, origin});
        } else {
            weights.add({t.name, t.dtype, shape, t.data, t.bytes, origin});
        }
        done += t.bytes;
        if (progress) progress(done, total);
    }
    weights.keep_alive(file);
    return weights;
}

}  // namespace deltabit
