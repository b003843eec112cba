// config.json → ModelConfig. The samples are written here as strings: the tiny configs of
// reference/qwen35-transformers.md §4 and a Qwen3.5-27B-like one (hidden 5120, 64 layers, 24/4 heads
// of 256, Hk 16, Hv 48, dk = dv = 128, vocab 248320, interval 4, rope_theta 1e7). Expected values are
// worked out by hand from the rules in the reference, not read back from the loader.
#include "core/error.h"
#include "models/config_loader.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace deltabit {
namespace {

using nlohmann::json;
using L = LayerKind;
constexpr L lin = L::linear_attention;
constexpr L full = L::full_attention;

// Qwen3_5TextConfig(vocab_size=96, hidden_size=64, intermediate_size=80, num_hidden_layers=4, ...)
json tiny_qwen35_text() {
    return json::parse(R"({
        "model_type": "qwen3_5_text", "vocab_size": 96, "hidden_size": 64, "intermediate_size": 80,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
        "linear_value_head_dim": 12, "linear_conv_kernel_dim": 4, "rope_theta": 1e6,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": false, "eos_token_id": 95})");
}

// The layout of a published Qwen3.5-27B config.json: a VLM wrapper with the LM in text_config.
json qwen35_27b_like() {
    return json::parse(R"({
        "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
        "tie_word_embeddings": false, "eos_token_id": 248044, "image_token_id": 248056,
        "text_config": {
            "model_type": "qwen3_5_text", "attention_bias": false, "attn_output_gate": true,
            "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu", "hidden_size": 5120,
            "intermediate_size": 17408, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
            "linear_num_key_heads": 16, "linear_num_value_heads": 48, "linear_value_head_dim": 128,
            "max_position_embeddings": 262144, "mamba_ssm_dtype": "float32", "mtp_num_hidden_layers": 1,
            "num_attention_heads": 24, "num_hidden_layers": 64, "num_key_value_heads": 4,
            "rms_norm_eps": 1e-06, "vocab_size": 248320, "dtype": "bfloat16",
            "rope_parameters": {"mrope_interleaved": true, "mrope_section": [11, 11, 10],
                                "rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25}
        },
        "vision_config": {"depth": 27, "hidden_size": 1152}})");
}

json tiny_qwen3_next_moe() {
    return json::parse(R"({
        "model_type": "qwen3_next", "vocab_size": 96, "hidden_size": 64, "intermediate_size": 80,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
        "linear_value_head_dim": 12, "rope_theta": 1e6,
        "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
        "shared_expert_intermediate_size": 40, "norm_topk_prob": false, "mlp_only_layers": [1],
        "bos_token_id": 1, "eos_token_id": [2, 3]})");
}

json tiny_qwen35_moe_text() {
    return json::parse(R"({
        "model_type": "qwen3_5_moe_text", "vocab_size": 96, "hidden_size": 64,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
        "linear_value_head_dim": 12, "rope_parameters": {"rope_theta": 1e6},
        "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
        "shared_expert_intermediate_size": 40})");
}

// Qwen3-4B's shape: head_dim 128 is not hidden/heads (2560/32 = 80).
json qwen3_4b_like() {
    return json::parse(R"({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
        "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "hidden_act": "silu",
        "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_scaling": null,
        "rope_theta": 1000000, "tie_word_embeddings": true, "use_sliding_window": false,
        "sliding_window": null, "bos_token_id": 151643, "eos_token_id": 151645})");
}

template <typename Body>
void expect_error(Body body, const std::vector<std::string>& fragments) {
    try {
        body();
        ADD_FAILURE() << "no error; expected one containing '" << fragments.front() << "'";
    } catch (const Error& e) {
        const std::string message = e.what();
        for (const std::string& f : fragments) EXPECT_NE(message.find(f), std::string::npos) << message << "\n  lacks: " << f;
        EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
}

void expect_config_error(const json& config, const std::vector<std::string>& fragments) {
    expect_error([&] { model_config_from_hf_json(config); }, fragments);
}

TEST(ConfigLoader, TinyQwen35Text) {
    const ModelConfig c = model_config_from_hf_json(tiny_qwen35_text());
    EXPECT_EQ(c.arch, Arch::qwen35);
    EXPECT_EQ(c.arch_name, "qwen35");
    EXPECT_EQ(c.n_vocab, 96);
    EXPECT_EQ(c.n_embd, 64);
    EXPECT_EQ(c.n_ff, 80);
    EXPECT_EQ(c.n_head, 4);
    EXPECT_EQ(c.n_head_kv, 2);
    EXPECT_EQ(c.head_dim, 32);
    EXPECT_EQ(c.rope_dim, 8);  // int(32 · 0.25)
    EXPECT_EQ(c.rope_theta, 1e6f);
    EXPECT_TRUE(c.attn_output_gate);
    EXPECT_EQ(c.ssm_n_key_heads, 2);
    EXPECT_EQ(c.ssm_n_value_heads, 4);
    EXPECT_EQ(c.ssm_key_dim, 8);
    EXPECT_EQ(c.ssm_value_dim, 12);
    EXPECT_EQ(c.ssm_conv_kernel, 4);
    EXPECT_EQ(c.ssm_conv_channels(), 2 * 2 * 8 + 4 * 12);  // 80 = in_proj_qkv rows in reference §4
    EXPECT_EQ(c.value_head_order, ValueHeadOrder::grouped);
    EXPECT_EQ(c.key_head_of_value_head(1), 0);  // grouped: h / (Hv/Hk) = 1/2
    EXPECT_EQ(c.key_head_of_value_head(2), 1);
    EXPECT_EQ(c.layers, (std::vector<L>{lin, lin, lin, full}));
    EXPECT_EQ(c.layer_is_moe, (std::vector<bool>{false, false, false, false}));
    EXPECT_EQ(c.n_expert, 0);
    EXPECT_EQ(c.rope_sections, (std::vector<int32_t>{11, 11, 10, 0}));
    EXPECT_FALSE(c.tied_embeddings);
    EXPECT_EQ(c.bos_id, -1);
    EXPECT_EQ(c.eos_ids, (std::vector<int64_t>{95}));
    EXPECT_EQ(c.context_length, 32768);  // transformers' default max_position_embeddings
    EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
    EXPECT_EQ(c.n_nextn_layers, 0);
}

TEST(ConfigLoader, Qwen35_27bWrapper) {
    const ModelConfig c = model_config_from_hf_json(qwen35_27b_like());
    EXPECT_EQ(c.arch, Arch::qwen35);
    EXPECT_EQ(c.n_vocab, 248320);
    EXPECT_EQ(c.n_embd, 5120);
    EXPECT_EQ(c.n_ff, 17408);
    EXPECT_EQ(c.n_layer(), 64);
    EXPECT_EQ(c.n_nextn_layers, 1);
    EXPECT_EQ(c.n_head, 24);
    EXPECT_EQ(c.n_head_kv, 4);
    EXPECT_EQ(c.head_dim, 256);
    EXPECT_EQ(c.rope_dim, 64);
    EXPECT_EQ(c.rope_theta, 1e7f);
    EXPECT_EQ(c.ssm_n_key_heads, 16);
    EXPECT_EQ(c.ssm_n_value_heads, 48);
    EXPECT_EQ(c.ssm_key_dim, 128);
    EXPECT_EQ(c.ssm_value_dim, 128);
    EXPECT_EQ(c.ssm_conv_channels(), 10240);  // attn_qkv {5120, 10240} in the llama.cpp reference
    EXPECT_EQ(c.context_length, 262144);
    EXPECT_EQ(c.rope_sections, (std::vector<int32_t>{11, 11, 10, 0}));
    // Layers 3, 7, ..., 63 are full attention: 16 of them, 48 linear.
    int n_full = 0;
    for (int i = 0; i < 64; ++i) {
        const bool expect_full = i % 4 == 3;
        EXPECT_EQ(c.layers[size_t(i)], expect_full ? full : lin) << "layer " << i;
        n_full += expect_full;
    }
    EXPECT_EQ(n_full, 16);
    EXPECT_FALSE(c.tied_embeddings);
    EXPECT_EQ(c.eos_ids, (std::vector<int64_t>{248044}));  // from the wrapper: text_config has none
}

TEST(ConfigLoader, Qwen3NextMoeWithDenseLayer) {
    const ModelConfig c = model_config_from_hf_json(tiny_qwen3_next_moe());
    EXPECT_EQ(c.arch, Arch::qwen3next);
    EXPECT_EQ(c.n_expert, 4);
    EXPECT_EQ(c.n_expert_used, 2);
    EXPECT_EQ(c.expert_ff, 24);
    EXPECT_EQ(c.shared_expert_ff, 40);
    EXPECT_FALSE(c.norm_topk_prob);
    // mlp_only_layers [1] keeps layer 1 dense, so the dense width is needed.
    EXPECT_EQ(c.layer_is_moe, (std::vector<bool>{true, false, true, true}));
    EXPECT_EQ(c.n_ff, 80);
    EXPECT_EQ(c.rope_sections, std::vector<int32_t>{});  // qwen3next has no M-RoPE
    EXPECT_EQ(c.bos_id, 1);
    EXPECT_EQ(c.eos_ids, (std::vector<int64_t>{2, 3}));

    json sparse_step = tiny_qwen3_next_moe();
    sparse_step.erase("mlp_only_layers");
    sparse_step["decoder_sparse_step"] = 2;  // MoE where (i+1) % 2 == 0
    EXPECT_EQ(model_config_from_hf_json(sparse_step).layer_is_moe, (std::vector<bool>{false, true, false, true}));

    json all_moe = tiny_qwen3_next_moe();
    all_moe.erase("mlp_only_layers");
    const ModelConfig m = model_config_from_hf_json(all_moe);
    EXPECT_EQ(m.layer_is_moe, (std::vector<bool>{true, true, true, true}));
    EXPECT_EQ(m.n_ff, 0);  // intermediate_size is unused when every layer is sparse

    json dense = tiny_qwen3_next_moe();
    dense["num_experts"] = 0;
    const ModelConfig d = model_config_from_hf_json(dense);
    EXPECT_EQ(d.layer_is_moe, (std::vector<bool>{false, false, false, false}));
    EXPECT_EQ(d.n_expert, 0);
    EXPECT_EQ(d.n_ff, 80);
}

TEST(ConfigLoader, Qwen35MoeIsSparseEverywhere) {
    const ModelConfig c = model_config_from_hf_json(tiny_qwen35_moe_text());
    EXPECT_EQ(c.arch, Arch::qwen35moe);
    EXPECT_EQ(c.layer_is_moe, (std::vector<bool>{true, true, true, true}));
    EXPECT_EQ(c.n_ff, 0);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_EQ(c.rope_theta, 1e6f);

    json wrapped = {{"model_type", "qwen3_5_moe"}, {"text_config", tiny_qwen35_moe_text()}, {"tie_word_embeddings", true}};
    wrapped["text_config"].erase("model_type");  // optional inside the wrapper
    const ModelConfig w = model_config_from_hf_json(wrapped);
    EXPECT_EQ(w.arch, Arch::qwen35moe);
    EXPECT_TRUE(w.tied_embeddings);
}

TEST(ConfigLoader, Qwen3Dense) {
    const ModelConfig c = model_config_from_hf_json(qwen3_4b_like());
    EXPECT_EQ(c.arch, Arch::qwen3);
    EXPECT_EQ(c.arch_name, "qwen3");
    EXPECT_EQ(c.n_layer(), 36);
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_EQ(c.rope_dim, 128);  // full rotary
    EXPECT_EQ(c.rope_theta, 1e6f);
    EXPECT_FALSE(c.attn_output_gate);
    EXPECT_TRUE(c.tied_embeddings);
    EXPECT_EQ(c.bos_id, 151643);
    EXPECT_EQ(c.eos_ids, (std::vector<int64_t>{151645}));
    EXPECT_EQ(c.ssm_n_key_heads, 0);
    EXPECT_TRUE(c.rope_sections.empty());
    for (L kind : c.layers) EXPECT_EQ(kind, full);
}

TEST(ConfigLoader, LayerTypesAndLegacyNames) {
    json j = tiny_qwen35_text();
    j["layer_types"] = {"mamba", "attention", "linear_attention", "full_attention"};
    j["full_attention_interval"] = 4;  // ignored when layer_types is given
    EXPECT_EQ(model_config_from_hf_json(j).layers, (std::vector<L>{lin, full, lin, full}));

    json k = tiny_qwen35_text();
    k["full_attention_interval"] = 2;
    EXPECT_EQ(model_config_from_hf_json(k).layers, (std::vector<L>{lin, full, lin, full}));
}

TEST(ConfigLoader, RopePriority) {
    json inside = tiny_qwen35_text();  // rope_parameters.rope_theta beats the top-level one
    inside["rope_parameters"] = {{"rope_theta", 5e6}, {"partial_rotary_factor", 0.5}};
    const ModelConfig a = model_config_from_hf_json(inside);
    EXPECT_EQ(a.rope_theta, 5e6f);
    EXPECT_EQ(a.rope_dim, 16);

    json top = tiny_qwen35_text();  // rope_parameters without a theta: the top level's
    top["rope_parameters"] = {{"rope_type", "default"}};
    EXPECT_EQ(model_config_from_hf_json(top).rope_theta, 1e6f);

    json none = tiny_qwen35_text();  // nothing given: transformers' 10000
    none.erase("rope_theta");
    EXPECT_EQ(model_config_from_hf_json(none).rope_theta, 10000.0f);

    json alias = tiny_qwen35_text();  // rope_scaling is the older name
    alias["rope_scaling"] = {{"rope_theta", 2e6}};
    EXPECT_EQ(model_config_from_hf_json(alias).rope_theta, 2e6f);
}

TEST(ConfigLoader, ReadsFileAndFolder) {
    const auto dir = std::filesystem::temp_directory_path() / ("deltabit-cfg-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    {
        std::ofstream out(dir / "config.json");
        out << qwen3_4b_like().dump(2);
    }
    EXPECT_EQ(load_hf_config(dir).n_layer(), 36);
    EXPECT_EQ(load_hf_config(dir / "config.json").n_embd, 2560);
    {
        std::ofstream out(dir / "config.json");
        out << R"({"model_type": "qwen3",)";
    }
    expect_error([&] { load_hf_config(dir); }, {"config.json", "malformed JSON at byte"});
    std::filesystem::remove_all(dir);
    expect_error([&] { load_hf_config(dir); }, {dir.string(), "cannot open"});
}

TEST(ConfigLoader, ValidationErrorsNameTheField) {
    expect_config_error(json{{"model_type", "llama"}},
                        {"config.json: model_type 'llama' is not supported (supported: qwen3_next, qwen3_5_text, "
                         "qwen3_5, qwen3_5_moe_text, qwen3_5_moe, qwen3, diffusion_gemma, diffusion_gemma_text)"});
    expect_config_error(json{{"hidden_size", 4}}, {"config.json: missing required field model_type"});
    expect_config_error(json::array(), {"expected a JSON object"});

    json j = tiny_qwen35_text();
    j.erase("hidden_size");
    expect_config_error(j, {"config.json: missing required field hidden_size"});

    json w = qwen35_27b_like();
    w["text_config"].erase("linear_num_value_heads");
    expect_config_error(w, {"config.json: missing required field text_config.linear_num_value_heads"});
    json no_text = qwen35_27b_like();
    no_text.erase("text_config");
    expect_config_error(no_text, {"missing required field text_config"});
    json mismatch = qwen35_27b_like();
    mismatch["text_config"]["model_type"] = "qwen3_5_moe_text";
    expect_config_error(mismatch, {"text_config.model_type", "does not match"});

    json hv = tiny_qwen35_text();
    hv["linear_num_key_heads"] = 4;
    hv["linear_num_value_heads"] = 6;
    expect_config_error(hv, {"config.json: linear_num_value_heads (6) is not a multiple of linear_num_key_heads (4)"});

    json hq = tiny_qwen35_text();
    hq["num_attention_heads"] = 6;
    hq["num_key_value_heads"] = 4;
    expect_config_error(hq, {"config.json: num_attention_heads (6) is not a multiple of num_key_value_heads (4)"});

    json hq_wrapped = qwen35_27b_like();
    hq_wrapped["text_config"]["num_key_value_heads"] = 5;
    expect_config_error(hq_wrapped, {"text_config.num_attention_heads (24) is not a multiple of "
                                     "text_config.num_key_value_heads (5)"});

    json type = tiny_qwen35_text();
    type["hidden_size"] = "64";
    expect_config_error(type, {"config.json: hidden_size: expected an integer, found string"});

    json zero = tiny_qwen35_text();
    zero["vocab_size"] = 0;
    expect_config_error(zero, {"config.json: vocab_size: must be positive (found 0)"});

    json lt = tiny_qwen35_text();
    lt["layer_types"] = {"linear_attention", "full_attention"};
    expect_config_error(lt, {"layer_types: has 2 entries but num_hidden_layers is 4"});
    lt["layer_types"] = {"linear_attention", "full_attention", "sliding_attention", "full_attention"};
    expect_config_error(lt, {"layer_types[2]: unknown layer type 'sliding_attention'"});

    json interval = tiny_qwen35_text();
    interval["full_attention_interval"] = 0;
    expect_config_error(interval, {"full_attention_interval: must be positive"});

    json yarn = qwen3_4b_like();
    yarn["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
    expect_config_error(yarn, {"rope_scaling.rope_type: 'yarn' is not supported"});

    json odd = tiny_qwen35_text();
    odd["head_dim"] = 36;  // 36 · 0.25 = 9 rotary dims: not pairs
    expect_config_error(odd, {"rotary dimension 9 must be even"});

    json factor = tiny_qwen35_text();
    factor["partial_rotary_factor"] = 1.5;
    expect_config_error(factor, {"partial_rotary_factor: must be in (0, 1]"});

    json eos = tiny_qwen35_text();
    eos["eos_token_id"] = {5, 96};
    expect_config_error(eos, {"eos_token_id: 96 is outside the vocabulary (size 96)"});

    json mlp_only = tiny_qwen3_next_moe();
    mlp_only["mlp_only_layers"] = {4};
    expect_config_error(mlp_only, {"mlp_only_layers[0]: 4 is not a layer index below 4"});

    json topk = tiny_qwen3_next_moe();
    topk["num_experts_per_tok"] = 5;
    expect_config_error(topk, {"num_experts_per_tok (5) exceeds num_experts (4)"});

    json no_experts = tiny_qwen35_moe_text();
    no_experts.erase("num_experts");
    expect_config_error(no_experts, {"missing required field num_experts"});

    json ffn = tiny_qwen35_text();
    ffn.erase("intermediate_size");
    expect_config_error(ffn, {"missing required field intermediate_size"});

    json act = qwen3_4b_like();
    act["hidden_act"] = "gelu";
    expect_config_error(act, {"hidden_act: 'gelu' is not supported"});
    json bias = qwen3_4b_like();
    bias["attention_bias"] = true;
    expect_config_error(bias, {"attention_bias: attention biases are not supported"});
    json sliding = qwen3_4b_like();
    sliding["use_sliding_window"] = true;
    expect_config_error(sliding, {"use_sliding_window"});
}

}  // namespace
}  // namespace deltabit
