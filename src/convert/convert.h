// `deltabit convert`: a Hugging Face folder → a GGUF file as llama.cpp names and lays it out, proven
// before it is handed over.
//
//   1. plan (convert_plan.h): GGUF names, shapes, conventions and per-tensor types;
//   0. refuse an OUT that is a device, FIFO, socket or folder, or whose folder is missing, before any
//      work (AtomicFile, core/file_io.h);
//   2. write a temporary file beside OUT: metadata (write_model_config_gguf + general.name / file_type /
//      quantization_version + tokenizer.ggml.* when the folder has tokenizer.json), then every
//      tensor, quantised one at a time by the reference quantisers;
//   3. re-open the temporary file with gguf::File and prove every tensor (convert_check.h): the round trip
//      within the format's bound, and every block scale against its formula;
//   4. whole model: the CPU forward pass of the HF folder and of the temporary file on a few positions of a
//      fixed prompt; the logits must agree within a tolerance set by type (see LogitsCheck). Block
//      diffusion (diffusion_gemma) has no such pass: the prompt is encoded and one canvas denoised
//      twice, without and with self-conditioning, and those logits are compared. The metadata read
//      back must also describe the planned model (for diffusion_gemma, every config field);
//   5. rename it over OUT only when all of that passed; on any failure it is removed and OUT is left
//      as it was. Messages name OUT, never the temporary file.
#pragma once

#include "core/dtype.h"
#include "convert/convert_plan.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace deltabit {

struct TensorReport {
    std::string name;
    std::vector<int64_t> shape;   // ggml order
    std::string source_dtype;     // of the HF tensor ("BF16", or "F32" after a convention)
    DType type = DType::F32;      // as stored
    std::string type_reason;      // why not the requested type; "" when it is
    bool fallback = false;
    bool lossless = true;
    double max_abs = 0.0;         // max |stored − source|
    double rms_rel = 0.0;         // RMS error / RMS value
    int64_t scales_checked = 0;   // block scales proven by check 2
    uint64_t bytes = 0;
};

struct LogitsCheck {
    bool ran = false;
    std::vector<int32_t> tokens;  // the prompt both models ran
    double max_abs_diff = 0.0;    // max |Δlogit| over every position and vocabulary entry
    double max_abs_logit = 0.0;   // of the HF model's logits
    int64_t top1_agree = 0;       // positions whose argmax agrees
    double tolerance = 0.0;       // absolute; 0 = reported, not enforced (lossy quantised types)
    bool passed = true;
};

struct ConvertReport {
    std::filesystem::path output;
    std::string arch;
    DType requested = DType::F32;
    uint32_t file_type = 0;
    std::vector<TensorReport> tensors;
    bool lossless = true;          // every tensor lossless
    double max_abs = 0.0;          // worst tensor
    double rms_rel = 0.0;          // over all values of all tensors
    int64_t fallbacks = 0;
    uint64_t bytes = 0;            // file size
    int64_t dropped_nextn_layers = 0;
    bool tokenizer_written = false;
    LogitsCheck logits;
};

struct ConvertOptions {
    DType type = DType::F16;
    std::string name;               // general.name; default: the folder's name
    bool check_logits = true;       // step 4 (a CPU forward of both models: slow for big models)
    int64_t logit_positions = 8;    // prompt length of step 4
    // Called after each tensor is written (index, count) and after it is proven, for progress output.
    std::function<void(const TensorReport& tensor, size_t index, size_t count, bool proven)> on_tensor;
    TensorTamper tamper;            // tests only: see convert_plan.h
};

// Error (naming the file, tensor or check) on anything that is not right; OUT is then untouched.
ConvertReport convert_hf_folder(const std::filesystem::path& hf_dir, const std::filesystem::path& out,
                                const ConvertOptions& options);

// The tolerance of step 4 for a conversion of type `requested`, given the largest |logit| of the HF
// model; 0 when the check is only reported. See convert.cpp for where the factors come from.
double logits_tolerance(DType requested, bool lossless, double max_abs_logit);

nlohmann::json convert_report_to_json(const ConvertReport& report);
// One line per tensor and a summary, for the terminal.
std::string describe_convert_report(const ConvertReport& report);

}  // namespace deltabit
