// Export of a trained model. The trainer's parameters carry transformers' names and conventions, so
// export writes a Hugging Face folder (config.json + model.safetensors, F32, + tokenizer.json) and hands it to the
// engine's converter (convert/convert.h), which applies the GGUF conventions (1+w norms stored added,
// ssm_a = −exp(A_log), tiled value heads, conv layout), quantises, and proves the file — one
// conversion path for downloaded and trained models alike.
//
// For a QAT run the weights exported are the QAT forward's (Trainer::forward_weights at λ = 1): each
// binarised group is already ±d with d an fp16 value, so the converter's Q1_0 quantiser gives back
// the same d and signs and the file's dequantised weights equal them bit for bit.
#pragma once

#include "core/dtype.h"
#include "convert/convert.h"
#include "train/parameters.h"

#include <filesystem>
#include <span>

namespace deltabit::train {

// config.json (model_type qwen3_5_text or qwen3), model.safetensors and, for a bytelm model, a
// tokenizer.json of its byte ids, into dir (created).
void write_hf_folder(const ParameterLayout& layout, std::span<const float> weights, const std::filesystem::path& dir);

// write_hf_folder into OUT.hf/, then convert it to the GGUF `out` with `type`; OUT.hf is removed after.
ConvertReport export_gguf(const ParameterLayout& layout, std::span<const float> weights,
                          const std::filesystem::path& out, DType type, const std::string& name);

}  // namespace deltabit::train
