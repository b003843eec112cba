// Export (train/export.h) of a QAT model to a Q1_0 GGUF: the file's dequantised binarised weights equal
// the QAT forward's weights bit for bit, and the engine's logits from the file match the trainer's
// forward.
#include "train/export.h"
#include "train/qat.h"
#include "train/reference_model.h"

#include "core/quant.h"
#include "formats/gguf.h"
#include "models/model.h"
#if DELTABIT_HAVE_TEXT
#include "text/byte_tokenizer.h"
#include "text/tokenizer_load.h"
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

namespace deltabit::train {
namespace {

ModelConfig exported_config(int64_t value_heads) {
    ModelConfig c;
    c.arch = Arch::qwen35;
    c.arch_name = "qwen35";
    c.n_vocab = 259;
    c.n_embd = 128;
    c.n_ff = 256;
    c.context_length = 64;
    c.n_head = 2;
    c.n_head_kv = 1;
    c.head_dim = 64;
    c.rope_dim = 16;
    c.rope_theta = 1.0e6f;
    c.attn_output_gate = true;
    c.ssm_n_key_heads = 1;
    c.ssm_n_value_heads = value_heads;  // > 1: the GGUF reorders value heads (tiled)
    c.ssm_key_dim = 32;
    c.ssm_value_dim = 128;
    c.ssm_conv_kernel = 4;
    c.layers = {LayerKind::linear_attention, LayerKind::full_attention};
    c.layer_is_moe = {false, false};
    c.bos_id = 257;
    c.eos_ids = {258};
    return c;
}

// Rung 2's bound, as tests/train/test_reference_model.cpp: within 1e-4 of the largest |logit|.
constexpr double kLogitTolerance = 1e-4;

TEST(Export, QatModelToQ1_0IsExact) {
    const ParameterLayout layout(exported_config(2));
    std::vector<float> latent = initial_parameters(layout, 0.08, 11);
    // Norms away from their initial 0 / 1 so that the 1+w convention is exercised.
    for (const ParameterInfo& p : layout.all())
        if (p.role == ParameterRole::norm)
            for (int64_t i = 0; i < p.size; ++i) latent[size_t(p.offset + i)] += 0.01f * float((i * 7) % 13 - 6);
    std::vector<float> weights(latent.size());
    qat_effective_weights(layout, latent, 1.0, weights);

    const std::filesystem::path out = std::filesystem::temp_directory_path() / "deltabit_test_export_q1_0.gguf";
    std::filesystem::remove(out);
    const ConvertReport report = export_gguf(layout, weights, out, DType::Q1_0, "export test");
    ASSERT_TRUE(std::filesystem::exists(out));
    EXPECT_FALSE(std::filesystem::exists(out.string() + ".hf"));
    int64_t binary_tensors = 0;
    for (const TensorReport& t : report.tensors) {
        // Every tensor the converter stored round-trips exactly: the Q1_0 ones because each group was
        // already ±d with d in fp16; the rest are F32 (norms, conv, vectors) with conventions applied.
        EXPECT_EQ(t.max_abs, 0.0) << t.name << " " << dtype_name(t.type);
        EXPECT_FALSE(t.fallback) << t.name;
        if (t.type == DType::Q1_0) ++binary_tensors;
    }
    // token_embd, per layer the projections (5 DeltaNet / 4 attention) and 3 FFN, and output.
    EXPECT_EQ(binary_tensors, 1 + (5 + 3) + (4 + 3) + 1);

    // Directly from the file: token_embd (no convention applies) dequantises to the QAT embedding.
    const gguf::File file = gguf::File::open(out);
    const gguf::TensorInfo& embd = file.require_tensor("token_embd.weight");
    ASSERT_EQ(embd.dtype, DType::Q1_0);
    const ParameterInfo& e = layout.get("model.embed_tokens.weight");
    std::vector<float> row(128);
    const uint64_t row_bytes = dtype_bytes(DType::Q1_0, 128);
    for (int64_t r = 0; r < 259; ++r) {
        dequantize_row(DType::Q1_0, embd.data + uint64_t(r) * row_bytes, row.data(), 128);
        for (int64_t i = 0; i < 128; ++i) ASSERT_EQ(row[size_t(i)], weights[size_t(e.offset + r * 128 + i)]) << r << "," << i;
    }

    // The engine's forward on the file against the trainer's on the same weights.
    const Model engine = Model::load(out);
    const std::vector<int32_t> tokens{257, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33, 10, 258, 0, 255};
    SequenceState state = engine.new_sequence();
    const std::vector<float> engine_logits = engine.forward(state, tokens);
    const std::vector<double> trainer = ref::sequence_logits(layout, std::vector<double>(weights.begin(), weights.end()), tokens);
    ASSERT_EQ(engine_logits.size(), trainer.size());
    double worst = 0.0, max_logit = 0.0;
    for (size_t i = 0; i < trainer.size(); ++i) {
        worst = std::max(worst, std::fabs(trainer[i] - engine_logits[i]));
        max_logit = std::max(max_logit, std::fabs(trainer[i]));
    }
    std::printf("[ export ] Q1_0 GGUF: max|engine − trainer| %.3g (max|logit| %.3g)\n", worst, max_logit);
    EXPECT_LE(worst, kLogitTolerance * max_logit);
    EXPECT_GT(max_logit, 0.1);  // the comparison is not between two near-zero outputs
}

#if DELTABIT_HAVE_TEXT
// A bytelm model's GGUF carries its tokenizer, so `deltabit run -p TEXT` and `chat` take text: every byte
// is its own id (invalid UTF-8 included) and the specials are text/byte_tokenizer.h's.
TEST(Export, BytelmGgufCarriesItsByteTokenizer) {
    const ParameterLayout layout(exported_config(1));
    const std::vector<float> weights = initial_parameters(layout, 0.02, 5);
    const std::filesystem::path out = std::filesystem::temp_directory_path() / "deltabit_test_export_bytelm.gguf";
    std::filesystem::remove(out);
    export_gguf(layout, weights, out, DType::F32, "bytelm tokenizer test");
    const text::Tokenizer tokenizer = text::load_tokenizer(out.string());
    // Valid UTF-8: the GGUF's byte-level tokenizer repairs invalid input to U+FFFD (as Hugging Face's),
    // where text/byte_tokenizer.h would keep each byte.
    const std::string bytes = "Hi, caf\xc3\xa9 \x01\n";
    const std::vector<int32_t> ids = tokenizer.encode(bytes, {.add_special = false, .parse_special = false});
    ASSERT_EQ(ids.size(), bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) EXPECT_EQ(ids[i], int32_t(uint8_t(bytes[i]))) << i;
    for (int b = 0; b < 256; ++b) EXPECT_EQ(tokenizer.token_bytes(b), std::string(1, char(b))) << b;
    EXPECT_EQ(tokenizer.encode("<|bos|>x<|eos|>", {.add_special = false, .parse_special = true}),
              (std::vector<int32_t>{text::kByteBosId, 'x', text::kByteEosId}));
}
#endif

}  // namespace
}  // namespace deltabit::train
