// What `deltabit convert` writes: the list of GGUF tensors of a model, each with the type it is stored
// in and a way to produce its values (the Hugging Face weights after llama.cpp's conversion
// conventions, as floats). Only layout and type decisions live here; writing and proving are in
// convert.cpp and convert_check.cpp.
//
// The HF → GGUF names and the per-tensor conventions (1+w norms, ssm_a = −exp(A_log), squeezed
// conv1d, qwen3next's de-interleaved in_proj_qkvz, stacked experts) come from ModelWeights::from_hf,
// the engine's one name table (hf_weights.cpp). What a GGUF file needs on top of that, as llama.cpp's
// converter writes it (../shared/reference/llamacpp-formats-and-qwen35.md §2.2–2.3, conversion/qwen.py):
//   - qwen35/qwen35moe: DeltaNet value heads reordered from grouped to tiled order (value head h' of
//     the file is HF head (h' % H_k)·r + h' / H_k) in the V rows of attn_qkv, the V channels of
//     ssm_conv1d, the rows of attn_gate, ssm_beta, ssm_alpha, ssm_a, ssm_dt.bias and the columns of
//     ssm_out;
//   - qwen3next: β and α fused back into ssm_ba as llama.cpp keeps in_proj_ba (grouped per key head
//     [b_g | a_g]), the order fused_layouts.h's ba_rows reads;
//   - squeezed shapes (convert_hf_to_gguf squeezes every tensor: the shared-expert gate [1, D] is {D}).
//
// Types, after convert_hf_to_gguf.py (prepare_tensors) and llama-quantize (tensor_allows_quantization,
// tensor_type_fallback in src/llama-quant.cpp):
//   - F32 always: 1-D tensors, *_norm.weight, ffn_gate_inp (router), ffn_gate_inp_shexp, ssm_conv1d,
//     names not ending in ".weight" (ssm_a, ssm_dt.bias);
//   - the requested type for every other matrix, token_embd and output included. For f16, bf16 and
//     q8_0 that is exactly what convert_hf_to_gguf writes. For q4_0, q1_0 and q2_0 (llama-quantize
//     types) it is what `llama-quantize --pure` writes; llama-quantize's default mix would store
//     output.weight (and a tied token_embd) as Q6_K and, for Q2_0, token_embd as Q4_K — k-quants
//     deltabit does not read (llama_tensor_get_type_impl in src/llama-quant.cpp);
//   - a row length that is not a multiple of the block falls back, and the plan says so: q8_0 and
//     q4_0 → F16 (convert_hf_to_gguf's fallback when gguf-py cannot quantise a row; llama-quantize's
//     last resort), q2_0 → Q4_0, else F16 (llama-quantize's tensor_type_fallback), q1_0 → Q8_0, else
//     F16 (llama-quantize defines no fallback for Q1_0 and aborts; Q8_0 is its rule for an output
//     row that does not fit the k-quant block).
#pragma once

#include "core/dtype.h"
#include "models/model_config.h"
#include "models/weights.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace deltabit {

// llama.cpp's general.file_type (enum llama_ftype, include/llama.h) for a requested type:
// ALL_F32 = 0, MOSTLY_F16 = 1, MOSTLY_Q4_0 = 2, MOSTLY_Q8_0 = 7, MOSTLY_BF16 = 32, MOSTLY_Q1_0 = 40,
// MOSTLY_Q2_0 = 41 (upstream's group-64 Q2_0; the PrismML fork's group-128 files carry the same id).
uint32_t llama_file_type(DType requested);

// The types `deltabit convert --type` accepts, for messages: "f32, f16, bf16, q8_0, q4_0, q1_0, q2_0".
std::string_view convertible_types();
// Parses a --type value; Error naming the accepted list for anything else.
DType parse_convert_type(std::string_view name);

struct PlannedTensor {
    std::string name;             // GGUF name
    std::vector<int64_t> shape;   // ggml order, as written (squeezed)
    DType type = DType::F32;      // as stored in the file
    std::string type_reason;      // why not the requested type ("" when it is): "norm kept F32", ...
    bool fallback = false;        // the requested type did not fit the row length
    std::string origin;           // the HF tensor(s) it came from, for messages
    DType source_dtype = DType::F32;  // of the engine's tensor it is made from (BF16, or F32 after a convention)
    // The values the file must hold (the source after every convention), row-major over ggml order
    // (shape[0] contiguous). Called once to write and once more to verify, so nothing large is kept.
    std::function<std::vector<float>()> values;

    int64_t n_elements() const;
    int64_t row_length() const { return shape.empty() ? 1 : shape[0]; }
};

// A test-only hook: edits a tensor's values after the conventions and before writing, so a test
// can inject a wrong convention and prove the whole-model check catches it. Null in production.
using TensorTamper = std::function<void(const std::string& name, std::vector<float>& values)>;

struct ConvertPlan {
    ModelConfig config;   // as the GGUF describes it (value heads tiled for qwen35/qwen35moe, no MTP)
    std::vector<PlannedTensor> tensors;  // in the order written
    int64_t dropped_nextn_layers = 0;    // MTP layers of the HF config that the file does not carry
};

// `weights` are ModelWeights::from_hf of the folder (they must outlive the plan: the producers read
// them). Error for a model the GGUF cannot express (e.g. qwen3next with dense layers between MoE ones).
ConvertPlan plan_conversion(const ModelWeights& weights, DType requested, TensorTamper tamper = nullptr);

// Sets t.type, t.type_reason and t.fallback from t.name and t.shape by the rules at the top of this
// file (plan_conversion calls it for every tensor).
void choose_storage_type(PlannedTensor& t, DType requested);

// The permutation of value heads from grouped (HF) to tiled (qwen35 GGUF) order: entry h' is the HF
// head stored at position h'.
std::vector<int64_t> tiled_value_head_order(int64_t n_key_heads, int64_t n_value_heads);

}  // namespace deltabit
