// Loading reports its progress (models/weights.h LoadProgress, runtime/engine.h LoadFraction): once per
// tensor of the file, bytes handled never decreasing, ending at exactly all of them. The totals are
// computed here from the files themselves: the safetensors header's data offsets, and the converter's
// per-tensor report for a GGUF.
#include "engine_test_support.h"
#include "convert/convert.h"
#include "models/model.h"
#include "runtime/engine.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace deltabit {
namespace {

using test::fixture_path;

struct Reported {
    std::vector<std::pair<uint64_t, uint64_t>> calls;  // (done, total)
    LoadProgress callback() {
        return [this](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
    }
};

// Tensor count and data bytes of a single-file safetensors model, read from its header (8-byte length,
// then JSON with "data_offsets": [begin, end) per tensor).
std::pair<size_t, uint64_t> safetensors_tensors_and_bytes(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    unsigned char length_bytes[8];
    in.read(reinterpret_cast<char*>(length_bytes), 8);
    uint64_t length = 0;
    for (int i = 0; i < 8; ++i) length |= uint64_t(length_bytes[i]) << (8 * i);
    std::string header(size_t(length), '\0');
    in.read(header.data(), std::streamsize(length));
    size_t tensors = 0;
    uint64_t bytes = 0;
    const nlohmann::json entries = nlohmann::json::parse(header);
    for (auto it = entries.begin(); it != entries.end(); ++it) {
        if (it.key() == "__metadata__") continue;
        ++tensors;
        const nlohmann::json& offsets = it.value().at("data_offsets");
        bytes += offsets[1].get<uint64_t>() - offsets[0].get<uint64_t>();
    }
    return {tensors, bytes};
}

void expect_whole_and_monotone(const Reported& r, size_t tensors, uint64_t total) {
    ASSERT_EQ(r.calls.size(), tensors);
    uint64_t before = 0;
    for (const auto& [done, reported_total] : r.calls) {
        EXPECT_EQ(reported_total, total);
        EXPECT_GE(done, before);
        before = done;
    }
    EXPECT_EQ(r.calls.back().first, total);
}

// Dense hybrid, qwen3, and a Qwen3-Next MoE whose HF file has fused tensors that the loader splits
// (in_proj_qkvz, in_proj_ba) and experts that it stacks: every file tensor is counted once, whatever
// becomes of it.
TEST(LoadProgress, HuggingFaceFolderReportsEveryTensorByBytes) {
    for (const char* fixture : {"qwen3_5_binary", "qwen3_binary", "qwen3_next_moe_binary", "qwen3_5_moe_binary"}) {
        SCOPED_TRACE(fixture);
        const auto [tensors, bytes] = safetensors_tensors_and_bytes(fixture_path(fixture) / "model.safetensors");
        Reported r;
        Model::load(fixture_path(fixture), r.callback());
        expect_whole_and_monotone(r, tensors, bytes);
    }
}

TEST(LoadProgress, GgufReportsEveryTensorByBytesAndOpenEngineEndsAtOne) {
    const std::filesystem::path gguf = std::filesystem::path(::testing::TempDir()) /
                                       ("deltabit_load_progress_" + std::to_string(::getpid()) + ".gguf");
    ConvertOptions options;
    options.type = DType::Q1_0;
    options.check_logits = false;
    const ConvertReport report = convert_hf_folder(fixture_path("qwen3_5_binary"), gguf, options);
    uint64_t bytes = 0;
    for (const TensorReport& t : report.tensors) bytes += t.bytes;
    ASSERT_GT(report.tensors.size(), 10u);

    Reported r;
    Model::load(gguf, r.callback());
    expect_whole_and_monotone(r, report.tensors.size(), bytes);

    // On the CPU the host load is the whole load: the fraction of those bytes, ending at exactly 1.
    std::vector<double> fractions;
    const std::unique_ptr<Engine> engine = open_engine(gguf, "cpu", [&](double f) { fractions.push_back(f); });
    ASSERT_EQ(fractions.size(), report.tensors.size());
    for (size_t i = 0; i < fractions.size(); ++i) {
        EXPECT_EQ(fractions[i], double(r.calls[i].first) / double(bytes)) << i;
        if (i > 0) {
            EXPECT_GE(fractions[i], fractions[i - 1]) << i;
        }
    }
    EXPECT_EQ(fractions.back(), 1.0);
    std::filesystem::remove(gguf);
}

// No callback: the load is the same, and nothing is called (the default everywhere else).
TEST(LoadProgress, OptionalEverywhere) {
    const Model model = Model::load(fixture_path("qwen3_5_binary"));
    EXPECT_GT(model.weights().tensors().size(), 0u);
    EXPECT_NE(open_engine(fixture_path("qwen3_5_binary"), "cpu"), nullptr);
}

}  // namespace
}  // namespace deltabit
