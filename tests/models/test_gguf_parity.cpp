// The GGUF path against transformers: each fixture is written as a GGUF laid out the way llama.cpp's
// converter lays it out (reference llamacpp-formats-and-qwen35.md §2.3: DeltaNet value heads
// reordered to the tiled order for qwen35/qwen35moe, qwen3next's β/α fused into ssm_ba, vectors F32),
// with every matrix in Q1_0 for the binary fixtures (which must then be exact) and BF16 for the float
// ones; the GGUF is loaded through Model::load and must reproduce transformers' logits.
//
// qwen3_next_moe is left out: its dense layer between MoE layers (mlp_only_layers) has no GGUF key.
#include "fixture.h"

#include "core/quant.h"
#include "formats/gguf.h"
#include "models/config_gguf.h"
#include "models/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <span>

namespace deltabit {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
    return s.size() >= suffix.size() && std::string_view(s).substr(s.size() - suffix.size()) == suffix;
}

// The tiled position h' of value head h_old = g·r + i (key head g, i-th of its r value heads) is
// i·H_k + g (reference §2.3 item 3): new head h' holds old head (h' % H_k)·r + h' / H_k.
int64_t old_head_of_tiled(int64_t h_new, const ModelConfig& c) {
    const int64_t r = c.ssm_n_value_heads / c.ssm_n_key_heads;
    return (h_new % c.ssm_n_key_heads) * r + h_new / c.ssm_n_key_heads;
}

// Rows [first + h·size, first + (h+1)·size) for every value head h, permuted to the tiled order.
void tile_rows(std::vector<float>& m, int64_t cols, int64_t first, int64_t head_rows, const ModelConfig& c) {
    const std::vector<float> old = m;
    for (int64_t h = 0; h < c.ssm_n_value_heads; ++h)
        std::copy_n(old.begin() + (first + old_head_of_tiled(h, c) * head_rows) * cols, head_rows * cols,
                    m.begin() + (first + h * head_rows) * cols);
}

struct GgufTensor {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> values;  // row-major, rows of shape[0]
};

// The engine's tensors of `hf` as llama.cpp's converter would write them.
std::vector<GgufTensor> convert_like_llama_cpp(const Model& hf, const ModelConfig& c) {
    std::vector<GgufTensor> out;
    const bool tiled = c.value_head_order == ValueHeadOrder::tiled;
    const int64_t dv = c.ssm_value_dim, key_dim = c.ssm_n_key_heads * c.ssm_key_dim;
    for (const auto& [name, t] : hf.weights().tensors()) {
        GgufTensor g{name, t.shape, std::vector<float>(size_t(t.n_elements()))};
        plain_to_f32(t.dtype, t.data, t.n_elements(), g.values.data(), name);
        const int64_t cols = t.shape[0];
        if (tiled) {
            if (ends_with(name, "attn_qkv.weight")) tile_rows(g.values, cols, 2 * key_dim, dv, c);
            if (ends_with(name, "attn_gate.weight")) tile_rows(g.values, cols, 0, dv, c);
            if (ends_with(name, "ssm_beta.weight") || ends_with(name, "ssm_alpha.weight")) tile_rows(g.values, cols, 0, 1, c);
            if (ends_with(name, "ssm_a") || ends_with(name, "ssm_dt.bias")) tile_rows(g.values, 1, 0, 1, c);
            if (ends_with(name, "ssm_conv1d.weight")) tile_rows(g.values, cols, 2 * key_dim, dv, c);
            if (ends_with(name, "ssm_out.weight")) {  // columns: transpose, tile rows, transpose back
                const int64_t rows = t.shape[1];
                std::vector<float> tr(g.values.size());
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t k = 0; k < cols; ++k) tr[size_t(k * rows + r)] = g.values[size_t(r * cols + k)];
                tile_rows(tr, rows, 0, dv, c);
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t k = 0; k < cols; ++k) g.values[size_t(r * cols + k)] = tr[size_t(k * rows + r)];
            }
        }
        if (ends_with(name, "ffn_gate_inp_shexp.weight")) g.shape = {cols};  // llama.cpp stores the [1, D] gate as {D}
        out.push_back(std::move(g));
    }
    if (c.arch == Arch::qwen3next) {
        // Fuse ssm_beta + ssm_alpha into ssm_ba, per key head [b_g (r) | a_g (r)], as qwen3next GGUFs carry them.
        const int64_t r = c.ssm_n_value_heads / c.ssm_n_key_heads;
        for (int64_t l = 0; l < c.n_layer(); ++l) {
            const std::string blk = "blk." + std::to_string(l) + ".";
            auto find = [&](const std::string& n) {
                return std::find_if(out.begin(), out.end(), [&](const GgufTensor& g) { return g.name == n; });
            };
            auto beta = find(blk + "ssm_beta.weight");
            if (beta == out.end()) continue;
            auto alpha = find(blk + "ssm_alpha.weight");
            const int64_t cols = beta->shape[0];
            GgufTensor ba{blk + "ssm_ba.weight", {cols, 2 * c.ssm_n_value_heads}, {}};
            for (int64_t g = 0; g < c.ssm_n_key_heads; ++g)
                for (const auto* part : {&beta->values, &alpha->values})
                    ba.values.insert(ba.values.end(), part->begin() + g * r * cols, part->begin() + (g + 1) * r * cols);
            out.erase(find(blk + "ssm_alpha.weight"));
            out.erase(find(blk + "ssm_beta.weight"));
            out.push_back(std::move(ba));
        }
    }
    return out;
}

class GgufParity : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufParity, GgufLogitsMatchTransformers) {
    const test::Fixture f = test::load_fixture(GetParam());
    const bool binary = f.meta.at("variant") == "binary";
    const Model hf = Model::load(f.dir);
    ModelConfig config = hf.config();
    if (config.arch == Arch::qwen35 || config.arch == Arch::qwen35moe) config.value_head_order = ValueHeadOrder::tiled;

    gguf::Writer writer;
    write_model_config_gguf(config, writer);
    int64_t q1_tensors = 0;
    for (GgufTensor& g : convert_like_llama_cpp(hf, config)) {
        const int64_t cols = g.shape[0], rows = int64_t(g.values.size()) / cols;
        // llama-quantize leaves vectors and ssm_conv1d in F32 (reference §1.2).
        const bool vector = g.shape.size() == 1 || ends_with(g.name, "ssm_conv1d.weight");
        const DType dtype = vector ? DType::F32 : binary && cols % 128 == 0 ? DType::Q1_0 : DType::BF16;
        const uint64_t row_bytes = dtype_bytes(dtype, uint64_t(cols));
        std::vector<uint8_t> bytes(row_bytes * uint64_t(rows));
        std::vector<float> back(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; ++r) {
            const float* row = g.values.data() + r * cols;
            quantize_row(dtype, row, bytes.data() + r * row_bytes, cols);
            dequantize_row(dtype, bytes.data() + r * row_bytes, back.data(), cols);
            // The fixtures are built so that this conversion loses nothing (tests/fixtures/README.md).
            for (int64_t i = 0; i < cols; ++i)
                ASSERT_EQ(back[size_t(i)], row[i]) << g.name << " row " << r << " col " << i << " as " << dtype_name(dtype);
        }
        q1_tensors += dtype == DType::Q1_0;
        writer.add_tensor_owned(g.name, dtype, g.shape, std::move(bytes));
    }
    if (binary) EXPECT_GT(q1_tensors, 0);
    const std::filesystem::path path = std::filesystem::temp_directory_path() / ("deltabit_test_" + f.name + ".gguf");
    writer.write(path.string());
    const Model model = Model::load(path);
    std::filesystem::remove(path);  // the mapping stays valid after unlink
    EXPECT_EQ(model.config().value_head_order, config.value_head_order);

    // Same bound as test_fixture_parity (DESIGN.md §6 rung 2).
    const double tolerance = 1e-4 * f.max_abs_logit;
    double worst = 0.0;
    for (const test::FixtureCase& c : f.cases) {
        const std::vector<float>& want = c.logits.at("prompt");
        SequenceState state = model.new_sequence();
        std::vector<float> got;
        if (c.split > 0) {  // prefill then continue, so the GGUF path also carries state across calls
            got = model.forward(state, std::span<const int32_t>(c.tokens).first(size_t(c.split)));
            const std::vector<float> rest = model.forward(state, std::span<const int32_t>(c.tokens).subspan(size_t(c.split)));
            got.insert(got.end(), rest.begin(), rest.end());
        } else {
            got = model.forward(state, c.tokens);
        }
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    }
    std::printf("[ gguf   ] %-24s %s  max|dlogit| %.3g (%.2g relative)\n", f.name.c_str(),
                binary ? "Q1_0" : "BF16", worst, worst / f.max_abs_logit);
    EXPECT_LE(worst, tolerance);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufParity,
                         ::testing::Values("qwen3_5_float", "qwen3_5_binary", "qwen3_5_moe_float", "qwen3_5_moe_binary",
                                           "qwen3_next_float", "qwen3_next_binary", "qwen3_float", "qwen3_binary"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace deltabit
