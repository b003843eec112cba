// `deltabit convert` on DiffusionGemma (issue 37): the transformers fixture folder
// (tests/fixtures/diffusion_gemma) written as GGUF and read back. Unquantised files must be the same
// model as the folder — the config field by field, and the decoder's logits bit for bit after the same
// encode and denoise calls (both run the same naive CPU ops on the same values). Quantised files must
// load and run, with every quantised tensor proven by the converter's two checks. A file missing a key
// or a tensor is refused with a message naming it.
#include "fixture.h"

#include "convert/convert.h"
#include "core/error.h"
#include "core/quant.h"
#include "formats/gguf.h"
#include "models/config_gguf.h"
#include "models/diffusion_gemma.h"
#include "models/model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

namespace deltabit {
namespace {

namespace fs = std::filesystem;

fs::path fixture_dir() { return test::fixtures_dir() / "diffusion_gemma"; }

fs::path temp_path(const std::string& name) {
    return fs::temp_directory_path() / fmt::format("deltabit_test_convert_dg_{}_{}", getpid(), name);
}

#define SKIP_WITHOUT_FIXTURE()                                                                      \
    if (!fs::exists(fixture_dir() / "model.safetensors"))                                           \
    GTEST_SKIP() << "no DiffusionGemma fixture in " << fixture_dir().string()

ConvertReport convert_to(DType type, const fs::path& out) {
    ConvertOptions options;
    options.type = type;
    return convert_hf_folder(fixture_dir(), out, options);
}

// Field by field, so a failure names the field.
void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
    EXPECT_EQ(a.arch, b.arch);
    EXPECT_EQ(a.arch_name, b.arch_name);
    EXPECT_EQ(a.n_vocab, b.n_vocab);
    EXPECT_EQ(a.n_embd, b.n_embd);
    EXPECT_EQ(a.n_ff, b.n_ff);
    EXPECT_EQ(a.context_length, b.context_length);
    EXPECT_EQ(a.rms_eps, b.rms_eps);
    EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
    EXPECT_EQ(a.n_head, b.n_head);
    EXPECT_EQ(a.n_head_kv, b.n_head_kv);
    EXPECT_EQ(a.head_dim, b.head_dim);
    EXPECT_EQ(a.rope_dim, b.rope_dim);
    EXPECT_EQ(a.rope_theta, b.rope_theta);
    EXPECT_EQ(a.rope_sections, b.rope_sections);
    EXPECT_EQ(a.attn_output_gate, b.attn_output_gate);
    EXPECT_EQ(a.ssm_n_key_heads, b.ssm_n_key_heads);
    EXPECT_EQ(a.ssm_n_value_heads, b.ssm_n_value_heads);
    EXPECT_EQ(a.ssm_key_dim, b.ssm_key_dim);
    EXPECT_EQ(a.ssm_value_dim, b.ssm_value_dim);
    EXPECT_EQ(a.ssm_conv_kernel, b.ssm_conv_kernel);
    EXPECT_EQ(a.value_head_order, b.value_head_order);
    EXPECT_EQ(a.n_expert, b.n_expert);
    EXPECT_EQ(a.n_expert_used, b.n_expert_used);
    EXPECT_EQ(a.expert_ff, b.expert_ff);
    EXPECT_EQ(a.shared_expert_ff, b.shared_expert_ff);
    EXPECT_EQ(a.norm_topk_prob, b.norm_topk_prob);
    EXPECT_EQ(a.layers, b.layers);
    EXPECT_EQ(a.n_nextn_layers, b.n_nextn_layers);
    EXPECT_EQ(a.layer_is_moe, b.layer_is_moe);
    ASSERT_EQ(a.layer_attention.size(), b.layer_attention.size());
    for (size_t i = 0; i < a.layer_attention.size(); ++i) {
        SCOPED_TRACE(fmt::format("layer {}", i));
        const LayerAttention &x = a.layer_attention[i], &y = b.layer_attention[i];
        EXPECT_EQ(x.n_head_kv, y.n_head_kv);
        EXPECT_EQ(x.head_dim, y.head_dim);
        EXPECT_EQ(x.rope_pairs, y.rope_pairs);
        EXPECT_EQ(x.rope_theta, y.rope_theta);
        EXPECT_EQ(x.window, y.window);
        EXPECT_EQ(x.value_is_key, y.value_is_key);
    }
    EXPECT_EQ(a.canvas_length, b.canvas_length);
    EXPECT_EQ(a.final_logit_softcap, b.final_logit_softcap);
    EXPECT_EQ(a.pad_id, b.pad_id);
    EXPECT_EQ(a.image_token_id, b.image_token_id);
    EXPECT_EQ(a.bos_id, b.bos_id);
    EXPECT_EQ(a.eos_ids, b.eos_ids);
}

// The generation loop's calls on one model: encode a prompt, denoise a canvas without and then with
// self-conditioning, encode the committed block, denoise the next canvas. All logits, concatenated.
std::vector<float> run_diffusion_calls(const Model& model, std::span<const float> self_conditioning = {}) {
    const DiffusionGemma dg(model);
    const int64_t V = dg.config().n_vocab, L = dg.config().canvas_length;
    std::vector<int32_t> prompt, canvas;
    for (int64_t i = 0; i < 11; ++i) prompt.push_back(int32_t((3 + 37 * i) % V));  // 11 > window: sliding drops rows
    for (int64_t i = 0; i < L; ++i) canvas.push_back(int32_t((5 + 101 * i) % V));
    DiffusionCache cache = dg.new_cache();
    dg.encode(cache, prompt);
    std::vector<float> all = dg.denoise(cache, canvas);
    const std::vector<float> sc = self_conditioning.empty() ? all : std::vector<float>(self_conditioning.begin(),
                                                                                        self_conditioning.end());
    const std::vector<float> second = dg.denoise(cache, canvas, std::span<const float>(sc.data(), size_t(L * V)));
    dg.encode(cache, canvas);
    const std::vector<float> third = dg.denoise(cache, canvas);
    all.insert(all.end(), second.begin(), second.end());
    all.insert(all.end(), third.begin(), third.end());
    return all;
}

class ConvertDiffusionGemma : public ::testing::TestWithParam<DType> {};

TEST_P(ConvertDiffusionGemma, UnquantisedGgufIsTheFolderModelBitForBit) {
    SKIP_WITHOUT_FIXTURE();
    const fs::path out = temp_path(std::string(dtype_name(GetParam())) + ".gguf");
    const ConvertReport report = convert_to(GetParam(), out);
    // The fixture's weights are BF16, so both F32 and BF16 hold them exactly.
    EXPECT_TRUE(report.lossless);
    ASSERT_TRUE(report.logits.ran);
    EXPECT_EQ(report.logits.max_abs_diff, 0.0);
    EXPECT_EQ(report.arch, "diffusion_gemma");

    const Model folder = Model::load(fixture_dir());
    const Model gguf = Model::load(out);
    expect_same_config(folder.config(), gguf.config());
    // And the reader alone gives the same config as the loaded model.
    expect_same_config(folder.config(), model_config_from_gguf(gguf::File::open(out.string())));

    const std::vector<float> want = run_diffusion_calls(folder);
    const std::vector<float> got = run_diffusion_calls(gguf);
    ASSERT_EQ(want.size(), got.size());
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
        << "the GGUF's logits differ from the folder's";
    double max_abs = 0.0;
    for (float x : want) max_abs = std::max(max_abs, double(std::abs(x)));
    EXPECT_GT(max_abs, 1.0);  // the comparison is of real logits, not of zeros
    fs::remove(out);
}

INSTANTIATE_TEST_SUITE_P(Types, ConvertDiffusionGemma, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

class ConvertDiffusionGemmaQuantised : public ::testing::TestWithParam<DType> {};

TEST_P(ConvertDiffusionGemmaQuantised, LoadsRunsAndEveryQuantisedTensorIsProven) {
    SKIP_WITHOUT_FIXTURE();
    const fs::path out = temp_path(std::string(dtype_name(GetParam())) + ".gguf");
    const ConvertReport report = convert_to(GetParam(), out);
    EXPECT_FALSE(report.lossless);
    int64_t quantised = 0;
    for (const TensorReport& t : report.tensors) {
        SCOPED_TRACE(t.name);
        const bool vector_or_kept = t.shape.size() == 1 || t.name.find("_norm") != std::string::npos ||
                                    t.name.find("ffn_gate_inp") != std::string::npos;
        if (vector_or_kept) {
            // Norms, routers, router and expert scales, layer scalars: F32 and exact.
            EXPECT_EQ(t.type, DType::F32);
            EXPECT_TRUE(t.lossless);
            continue;
        }
        EXPECT_TRUE(dtype_info(t.type).quantized) << dtype_name(t.type);
        ++quantised;
        // Proof 2 ran over every block (proof 1 throws on failure, so reaching here means it held).
        const int64_t blocks = (t.shape[0] / dtype_info(t.type).block_elems) * (int64_t(t.bytes) / int64_t(dtype_bytes(t.type, uint64_t(t.shape[0]))));
        EXPECT_EQ(t.scales_checked, blocks);
    }
    // token_embd and the self-conditioning MLP (4); per layer q, k, output, the dense MLP and the three
    // expert stacks (9 × 5 layers); v on the 3 sliding layers. Every row (64, 96, 128, 32) is whole blocks of 32.
    EXPECT_EQ(quantised, 4 + 9 * 5 + 3);
    EXPECT_EQ(report.fallbacks, 0);

    const Model gguf = Model::load(out);
    const Model folder = Model::load(fixture_dir());
    expect_same_config(folder.config(), gguf.config());
    const std::vector<float> logits = run_diffusion_calls(gguf);
    ASSERT_EQ(logits.size(), size_t(3 * gguf.config().canvas_length * gguf.config().n_vocab));
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
    fs::remove(out);
}

// The quantised model computes what its dequantised weights compute: an F32 file whose matrices hold
// the quantised file's values decoded (written through the converter's tamper hook) gives the same
// logits. Separates "the quantised kernels are right" from "the random fixture is sensitive to its
// weights" (its router margins are as small as 2e-4, so rounding flips experts).
TEST_P(ConvertDiffusionGemmaQuantised, ComputesWhatItsDecodedWeightsCompute) {
    SKIP_WITHOUT_FIXTURE();
    const DType type = GetParam();
    const fs::path quantised = temp_path(std::string(dtype_name(type)) + "_q.gguf");
    const fs::path decoded = temp_path(std::string(dtype_name(type)) + "_decoded.gguf");
    const ConvertReport report = convert_to(type, quantised);
    std::map<std::string, DType> stored;
    for (const TensorReport& t : report.tensors)
        if (dtype_info(t.type).quantized) stored[t.name] = t.type;
    ASSERT_FALSE(stored.empty());

    ConvertOptions options;
    options.type = DType::F32;
    options.check_logits = false;  // the folder holds other values on purpose
    options.tamper = [&](const std::string& name, std::vector<float>& v) {
        const auto it = stored.find(name);
        if (it == stored.end()) return;
        const TensorReport& t = *std::find_if(report.tensors.begin(), report.tensors.end(),
                                              [&](const TensorReport& r) { return r.name == name; });
        const int64_t cols = t.shape[0];
        std::vector<uint8_t> row(dtype_bytes(it->second, uint64_t(cols)));
        for (size_t r = 0; r < v.size() / size_t(cols); ++r) {
            quantize_row(it->second, v.data() + r * size_t(cols), row.data(), cols);
            dequantize_row(it->second, row.data(), v.data() + r * size_t(cols), cols);
        }
    };
    convert_hf_folder(fixture_dir(), decoded, options);

    const std::vector<float> want = run_diffusion_calls(Model::load(decoded));
    const std::vector<float> got = run_diffusion_calls(Model::load(quantised));
    ASSERT_EQ(want.size(), got.size());
    double max_diff = 0.0, max_abs = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
        max_diff = std::max(max_diff, std::abs(double(want[i]) - double(got[i])));
        max_abs = std::max(max_abs, double(std::abs(want[i])));
    }
    std::printf("%s: quantised vs decoded F32 max |dlogit| %.3g (max |logit| %.3g)\n", dtype_name(type).data(),
                max_diff, max_abs);
    EXPECT_EQ(max_diff, 0.0);
    fs::remove(quantised);
    fs::remove(decoded);
}

INSTANTIATE_TEST_SUITE_P(Types, ConvertDiffusionGemmaQuantised, ::testing::Values(DType::Q8_0, DType::Q4_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The converter's whole-model check runs the diffusion calls: a wrong convention on one small tensor
// (here: expert 0's output scale doubled, which every per-tensor proof accepts because the file holds
// exactly the tampered values) fails the conversion and leaves OUT unwritten.
TEST(ConvertDiffusionGemmaChecks, WholeModelCheckCatchesAWrongExpertScale) {
    SKIP_WITHOUT_FIXTURE();
    const fs::path out = temp_path("tampered.gguf");
    fs::remove(out);
    ConvertOptions options;
    options.type = DType::F32;
    options.tamper = [](const std::string& name, std::vector<float>& v) {
        // One expert only: doubling every expert's scale would cancel in post_ffw_norm_2's RMSNorm.
        if (name.find("ffn_down_exps.scale") != std::string::npos) v[0] *= 2.0f;
    };
    try {
        convert_hf_folder(fixture_dir(), out, options);
        ADD_FAILURE() << "a doubled expert scale passed the whole-model check";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("whole-model check failed"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(out));
}

// A copy of `from` without one key or one tensor.
void write_without(const gguf::File& from, const fs::path& out, const std::string& key, const std::string& tensor) {
    gguf::Writer w;
    for (const gguf::KeyValue& kv : from.metadata())
        if (kv.key != key && kv.key != "general.alignment") w.set(kv.key, kv.value);
    for (const gguf::TensorInfo& t : from.tensors())
        if (t.name != tensor) w.add_tensor(t.name, t.dtype, t.shape, t.span());
    w.write(out.string());
}

TEST(ConvertDiffusionGemmaBadInput, MissingKeyOrTensorIsNamed) {
    SKIP_WITHOUT_FIXTURE();
    const fs::path good = temp_path("good.gguf"), bad = temp_path("bad.gguf");
    convert_to(DType::F32, good);
    const gguf::File file = gguf::File::open(good.string());
    for (const std::string key :
         {"diffusion_gemma.attention.sliding_window_pattern", "diffusion_gemma.attention.head_count_kv",
          "diffusion_gemma.attention.key_length_swa", "diffusion_gemma.rope.dimension_count",
          "diffusion_gemma.rope.freq_base_swa", "diffusion_gemma.attention.sliding_window",
          "diffusion_gemma.final_logit_softcapping", "diffusion_gemma.canvas_length",
          "diffusion_gemma.image_token_id", "diffusion_gemma.expert_count", "tokenizer.ggml.padding_token_id"}) {
        SCOPED_TRACE(key);
        write_without(file, bad, key, "");
        try {
            (void)Model::load(bad);
            ADD_FAILURE() << "loaded without " << key;
        } catch (const Error& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find(key), std::string::npos) << what;
            EXPECT_EQ(what.find('\n'), std::string::npos) << what;
        }
    }
    for (const std::string tensor : {"sc_pre_norm.weight", "sc_down.weight", "blk.4.ffn_gate_inp.scale",
                                     "blk.2.ffn_down_exps.scale", "blk.3.enc_layer_output_scale.weight",
                                     "blk.0.attn_v.weight", "blk.1.ffn_up_exps.weight"}) {
        SCOPED_TRACE(tensor);
        write_without(file, bad, "", tensor);
        try {
            (void)Model::load(bad);
            ADD_FAILURE() << "loaded without " << tensor;
        } catch (const Error& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find(tensor), std::string::npos) << what;
            EXPECT_EQ(what.find('\n'), std::string::npos) << what;
        }
    }
    fs::remove(good);
    fs::remove(bad);
}

}  // namespace
}  // namespace deltabit
