// Models that must not generate, for the tests that both engines refuse them with one line: a NaN weight
// (refused at load), and finite weights whose logits stop being finite a few tokens into generation
// (runtime/engine_checks.h's fail_non_finite_logit): the loader's check passes, and the first steps decode
// normally — on the GPU long enough for greedy decoding to run ahead from a captured graph.
//
// How: the qwen3_5_binary fixture as an f32 GGUF with every DeltaNet layer's ssm_a made positive. GGUF
// stores −exp(A_log) there, so the per-token log-decay g = ssm_a · softplus(a + dt_bias) is ≤ 0 and the
// recurrent state shrinks; with ssm_a = +kGrowth the state grows by e^g ≥ 1 per token instead, overflows
// float, and the NaN it makes reaches every logit.
#pragma once

#include "cli_command.h"
#include "formats/gguf.h"
#include "runtime/byte_tokenizer_model.h"

#include <filesystem>
#include <fstream>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace deltabit::test {

// Large enough that the state overflows within the first few dozen tokens, small enough that it does
// not on the prompt.
inline constexpr float kGrowth = 4.0f;

// The GGUF, written into `dir`.
inline std::filesystem::path non_finite_logits_model(const std::filesystem::path& dir) {
    const std::filesystem::path file = dir / "growing_state.f32.gguf";
    const CommandResult convert =
        run_deltabit("convert " + kBinaryFixture.string() + " -o " + file.string() + " --type f32 --quiet");
    if (convert.exit_code != 0) throw std::runtime_error("convert failed: " + convert.output);
    std::vector<std::pair<uint64_t, uint64_t>> patches;  // (offset, elements) of each ssm_a
    {
        const gguf::File gguf = gguf::File::open(file.string());
        for (const gguf::TensorInfo& t : gguf.tensors())
            if (t.name.ends_with(".ssm_a")) {
                if (t.dtype != DType::F32) throw std::runtime_error(t.name + " is not f32");
                patches.emplace_back(t.offset, t.n_elements());
            }
    }
    if (patches.empty()) throw std::runtime_error("the fixture has no ssm_a tensor");
    std::fstream patch(file, std::ios::in | std::ios::out | std::ios::binary);
    for (const auto& [offset, n] : patches) {
        const std::vector<float> values(n, kGrowth);
        patch.seekp(std::streamoff(offset));
        patch.write(reinterpret_cast<const char*>(values.data()), std::streamsize(n * sizeof(float)));
    }
    if (!patch.good()) throw std::runtime_error("could not patch " + file.string());
    return file;
}

// The fixture converted to `type` (f32 or q1_0) with one weight of blk.1.ffn_down.weight made NaN (f32:
// element 3; q1_0: the first block's fp16 scale, so element 0 onward), written into `dir`. The loader
// refuses it, naming the tensor and the element, whatever the backend.
inline std::filesystem::path nan_weight_model(const std::filesystem::path& dir, const std::string& type) {
    const std::filesystem::path file = dir / ("nan." + type + ".gguf");
    const CommandResult convert =
        run_deltabit("convert " + kBinaryFixture.string() + " -o " + file.string() + " --type " + type + " --quiet");
    if (convert.exit_code != 0) throw std::runtime_error("convert failed: " + convert.output);
    uint64_t offset = 0;
    {
        const gguf::File gguf = gguf::File::open(file.string());
        offset = gguf.require_tensor("blk.1.ffn_down.weight").offset;
    }
    std::fstream patch(file, std::ios::in | std::ios::out | std::ios::binary);
    patch.seekp(std::streamoff(offset + (type == "f32" ? 12 : 0)));
    const unsigned char nan_f32[4] = {0x00, 0x00, 0xC0, 0x7F}, nan_f16[2] = {0x00, 0x7E};
    if (type == "f32") patch.write(reinterpret_cast<const char*>(nan_f32), 4);
    else patch.write(reinterpret_cast<const char*>(nan_f16), 2);
    if (!patch.good()) throw std::runtime_error("could not patch " + file.string());
    return file;
}

// The one line both engines stop with: "engine: the model's logit for token T at position P is V: …".
inline const char* const kNonFiniteLogitPattern =
    R"(engine: the model's logit for token (\d+) at position (\d+) is (-?nan|-?inf): its weights or activations )"
    R"(are not finite \(deltabit info MODEL lists the tensors\); generation stopped)";

}  // namespace deltabit::test
