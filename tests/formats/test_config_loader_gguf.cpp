// ModelConfig ↔ GGUF metadata. A hand-written qwen35 header (keys and values copied from the
// 27B-class example in reference/llamacpp-formats-and-qwen35.md §2.1) checks the reader against the
// reference; then each architecture goes ModelConfig → GGUF → ModelConfig and must come back equal.
#include "core/error.h"
#include "formats/gguf.h"
#include "models/config_gguf.h"
#include "models/config_loader.h"
#include "models/config_summary.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace deltabit {
namespace {

using nlohmann::json;
using L = LayerKind;

template <typename Body>
void expect_error(Body body, const std::vector<std::string>& fragments) {
    try {
        body();
        ADD_FAILURE() << "no error; expected one containing '" << fragments.front() << "'";
    } catch (const Error& e) {
        const std::string message = e.what();
        for (const std::string& f : fragments) EXPECT_NE(message.find(f), std::string::npos) << message << "\n  lacks: " << f;
    }
}

const std::vector<uint8_t> kOneFloat(4, 0);

// The published 27B qwen35 GGUF's hyperparameters (reference §2.1), vocabulary as an explicit key.
gguf::Writer qwen35_27b_writer(bool with_vocab_size = true) {
    gguf::Writer w;
    w.set_string("general.architecture", "qwen35");
    if (with_vocab_size) w.set_u32("qwen35.vocab_size", 248320);
    w.set_u32("qwen35.context_length", 262144);
    w.set_u32("qwen35.embedding_length", 5120);
    w.set_u32("qwen35.feed_forward_length", 17408);
    w.set_u32("qwen35.block_count", 65);
    w.set_u32("qwen35.nextn_predict_layers", 1);
    w.set_u32("qwen35.attention.head_count", 24);
    w.set_u32("qwen35.attention.head_count_kv", 4);
    w.set_u32("qwen35.attention.key_length", 256);
    w.set_u32("qwen35.attention.value_length", 256);
    w.set_f32("qwen35.attention.layer_norm_rms_epsilon", 1e-6f);
    w.set_u32("qwen35.rope.dimension_count", 64);
    w.set_f32("qwen35.rope.freq_base", 1e7f);
    w.set_i32_array("qwen35.rope.dimension_sections", {11, 11, 10, 0});
    w.set_u32("qwen35.ssm.conv_kernel", 4);
    w.set_u32("qwen35.ssm.state_size", 128);
    w.set_u32("qwen35.ssm.group_count", 16);
    w.set_u32("qwen35.ssm.time_step_rank", 48);
    w.set_u32("qwen35.ssm.inner_size", 6144);
    w.set_u32("qwen35.full_attention_interval", 4);
    w.set_u32("tokenizer.ggml.bos_token_id", 248044);
    w.set_u32("tokenizer.ggml.eos_token_id", 248046);
    w.set_u32("tokenizer.ggml.eot_token_id", 248044);
    return w;
}

ModelConfig read_back(const gguf::Writer& w) {
    const std::vector<uint8_t> bytes = w.to_bytes();
    const gguf::File file = gguf::File::parse(bytes, "t.gguf");
    return model_config_from_gguf(file);
}

TEST(ConfigGguf, ReadsQwen35_27bHeader) {
    gguf::Writer w = qwen35_27b_writer();
    w.add_tensor("output.weight", DType::F32, {1}, kOneFloat);
    const ModelConfig c = read_back(w);
    EXPECT_EQ(c.arch, Arch::qwen35);
    EXPECT_EQ(c.arch_name, "qwen35");
    EXPECT_EQ(c.n_layer(), 64);  // block_count 65 includes the MTP layer
    EXPECT_EQ(c.n_nextn_layers, 1);
    EXPECT_EQ(c.n_vocab, 248320);
    EXPECT_EQ(c.n_embd, 5120);
    EXPECT_EQ(c.n_ff, 17408);
    EXPECT_EQ(c.context_length, 262144);
    EXPECT_EQ(c.n_head, 24);
    EXPECT_EQ(c.n_head_kv, 4);
    EXPECT_EQ(c.head_dim, 256);
    EXPECT_EQ(c.rope_dim, 64);
    EXPECT_EQ(c.rope_theta, 1e7f);
    EXPECT_EQ(c.rope_sections, (std::vector<int32_t>{11, 11, 10, 0}));
    EXPECT_EQ(c.ssm_conv_kernel, 4);
    EXPECT_EQ(c.ssm_key_dim, 128);
    EXPECT_EQ(c.ssm_n_key_heads, 16);
    EXPECT_EQ(c.ssm_n_value_heads, 48);
    EXPECT_EQ(c.ssm_value_dim, 128);  // inner_size 6144 / 48
    EXPECT_EQ(c.value_head_order, ValueHeadOrder::tiled);
    EXPECT_EQ(c.key_head_of_value_head(17), 1);  // tiled: 17 % 16
    EXPECT_TRUE(c.attn_output_gate);
    EXPECT_FALSE(c.tied_embeddings);
    int n_full = 0;
    for (int i = 0; i < 64; ++i) {
        EXPECT_EQ(c.layers[size_t(i)], i % 4 == 3 ? L::full_attention : L::linear_attention) << i;
        n_full += c.layers[size_t(i)] == L::full_attention;
    }
    EXPECT_EQ(n_full, 16);  // "48 GDN and 16 full-attention layers"
    EXPECT_EQ(c.bos_id, 248044);
    EXPECT_EQ(c.eos_ids, (std::vector<int64_t>{248046, 248044}));
    for (bool moe : c.layer_is_moe) EXPECT_FALSE(moe);
}

TEST(ConfigGguf, RecurrentLayersOverrideTheInterval) {
    gguf::Writer w = qwen35_27b_writer();
    w.set_u32("qwen35.block_count", 5);
    w.set_u32("qwen35.nextn_predict_layers", 1);
    std::vector<gguf::Value> recurrent;
    for (bool r : {false, true, true, false, false}) recurrent.push_back(gguf::Value::boolean(r));
    w.set_array("qwen35.attention.recurrent_layers", gguf::ValueType::BOOL, recurrent);
    const ModelConfig c = read_back(w);
    EXPECT_TRUE(c.tied_embeddings);  // no output.weight
    EXPECT_EQ(c.layers, (std::vector<L>{L::full_attention, L::linear_attention, L::linear_attention, L::full_attention}));
}

TEST(ConfigGguf, VocabularyFromEmbeddingOrTokens) {
    gguf::Writer w = qwen35_27b_writer(/*with_vocab_size=*/false);
    w.set_u32("qwen35.embedding_length", 8);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_u32("tokenizer.ggml.eot_token_id", 2);  // the same id twice is listed once
    expect_error([&] { read_back(w); }, {"t.gguf", "cannot tell the vocabulary size"});

    w.set_string_array("tokenizer.ggml.tokens", std::vector<std::string>(300, "x"));
    const ModelConfig by_tokens = read_back(w);
    EXPECT_EQ(by_tokens.n_vocab, 300);
    EXPECT_EQ(by_tokens.eos_ids, (std::vector<int64_t>{2}));

    // token_embd is {n_embd, n_vocab} in ggml order; its rows win over the token list (which
    // converters may pad or not).
    gguf::Writer with_tensor = w;
    std::vector<uint8_t> embd(8 * 320 * 4, 0);
    with_tensor.add_tensor("token_embd.weight", DType::F32, {8, 320}, embd);
    EXPECT_EQ(read_back(with_tensor).n_vocab, 320);

    // An explicit vocab_size that disagrees with the tensor is refused.
    with_tensor.set_u32("qwen35.vocab_size", 300);
    expect_error([&] { read_back(with_tensor); }, {"t.gguf", "token_embd.weight", "300"});
}

// Each architecture: ModelConfig → GGUF → ModelConfig is the identity (every field, per-layer arrays
// included), with tied-ness carried by the presence of output.weight as in llama.cpp files.
void expect_round_trip(const ModelConfig& original, const char* what) {
    SCOPED_TRACE(what);
    gguf::Writer w;
    write_model_config_gguf(original, w);
    if (!original.tied_embeddings) w.add_tensor("output.weight", DType::F32, {1}, kOneFloat);
    const ModelConfig back = read_back(w);
    EXPECT_EQ(model_config_to_json(back).dump(1), model_config_to_json(original).dump(1));
    EXPECT_EQ(back.layers, original.layers);
    EXPECT_EQ(back.layer_is_moe, original.layer_is_moe);
    EXPECT_EQ(back.tied_embeddings, original.tied_embeddings);
    EXPECT_EQ(back.rope_theta, original.rope_theta);
    EXPECT_EQ(back.rms_eps, original.rms_eps);
}

json tiny_hybrid(const char* model_type) {
    return json::parse(std::string(R"({"model_type": ")") + model_type + R"(", "vocab_size": 96, "hidden_size": 64,
        "intermediate_size": 80, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
        "linear_value_head_dim": 12, "rope_theta": 1e6, "rms_norm_eps": 1e-5, "eos_token_id": [94, 95],
        "bos_token_id": 93, "max_position_embeddings": 4096})");
}

TEST(ConfigGguf, RoundTripEveryArchitecture) {
    {
        ModelConfig c = model_config_from_hf_json(tiny_hybrid("qwen3_5_text"));
        c.value_head_order = ValueHeadOrder::tiled;  // what the converter does before writing
        expect_round_trip(c, "qwen35 tiny");
        c.tied_embeddings = true;
        expect_round_trip(c, "qwen35 tiny tied");
    }
    {
        ModelConfig c;
        c.arch = Arch::qwen35;
        c.arch_name = "qwen35";
        c.n_vocab = 248320;
        c.n_embd = 5120;
        c.n_ff = 17408;
        c.context_length = 262144;
        c.rms_eps = 1e-6f;
        c.n_head = 24;
        c.n_head_kv = 4;
        c.head_dim = 256;
        c.rope_dim = 64;
        c.rope_theta = 1e7f;
        c.rope_sections = {11, 11, 10, 0};
        c.attn_output_gate = true;
        c.ssm_n_key_heads = 16;
        c.ssm_n_value_heads = 48;
        c.ssm_key_dim = 128;
        c.ssm_value_dim = 128;
        c.ssm_conv_kernel = 4;
        c.value_head_order = ValueHeadOrder::tiled;
        for (int i = 0; i < 64; ++i) c.layers.push_back(i % 4 == 3 ? L::full_attention : L::linear_attention);
        c.layer_is_moe.assign(64, false);
        c.n_nextn_layers = 1;
        c.bos_id = 248044;
        c.eos_ids = {248046, 248044};
        expect_round_trip(c, "qwen35 27b");

        // And the keys are the ones llama.cpp's own 27B file has.
        gguf::Writer w;
        write_model_config_gguf(c, w);
        const std::vector<uint8_t> bytes = w.to_bytes();
        const gguf::File f = gguf::File::parse(bytes, "w.gguf");
        EXPECT_EQ(f.require_u64("qwen35.block_count"), 65u);
        EXPECT_EQ(f.require_u64("qwen35.ssm.inner_size"), 6144u);
        EXPECT_EQ(f.require_u64("qwen35.rope.dimension_count"), 64u);
        EXPECT_EQ(f.require_u64("qwen35.full_attention_interval"), 4u);
        EXPECT_EQ(f.require_i64_array("qwen35.rope.dimension_sections"), (std::vector<int64_t>{11, 11, 10, 0}));
        EXPECT_FALSE(f.has("qwen35.attention.recurrent_layers"));  // the interval says it all
        EXPECT_EQ(f.require_u32("tokenizer.ggml.eot_token_id"), 248044u);

        // Without sections (a hand-made config) the converter's default is written.
        c.rope_sections.clear();
        gguf::Writer d;
        write_model_config_gguf(c, d);
        const std::vector<uint8_t> d_bytes = d.to_bytes();
        EXPECT_EQ(gguf::File::parse(d_bytes, "d.gguf").require_i64_array("qwen35.rope.dimension_sections"),
                  (std::vector<int64_t>{11, 11, 10, 0}));
    }
    {
        json j = tiny_hybrid("qwen3_5_moe_text");
        j.update(json::parse(R"({"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
                                 "shared_expert_intermediate_size": 40})"));
        ModelConfig c = model_config_from_hf_json(j);
        c.value_head_order = ValueHeadOrder::tiled;
        expect_round_trip(c, "qwen35moe");
    }
    {
        json j = tiny_hybrid("qwen3_next");
        j.update(json::parse(R"({"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
                                 "shared_expert_intermediate_size": 40, "norm_topk_prob": false})"));
        expect_round_trip(model_config_from_hf_json(j), "qwen3next moe");
        j["num_experts"] = 0;
        expect_round_trip(model_config_from_hf_json(j), "qwen3next dense");
    }
    {
        // A layer pattern no interval describes needs attention.recurrent_layers.
        json j = tiny_hybrid("qwen3_next");
        j["num_experts"] = 0;
        j["layer_types"] = {"full_attention", "linear_attention", "full_attention", "linear_attention"};
        const ModelConfig c = model_config_from_hf_json(j);
        expect_round_trip(c, "qwen3next custom layers");
        gguf::Writer w;
        write_model_config_gguf(c, w);
        const std::vector<uint8_t> bytes = w.to_bytes();
        EXPECT_TRUE(gguf::File::parse(bytes, "w.gguf").has("qwen3next.attention.recurrent_layers"));
        // Every other layer full: interval 2 says it without the array.
        j["layer_types"] = {"linear_attention", "full_attention", "linear_attention", "full_attention"};
        const ModelConfig every_other = model_config_from_hf_json(j);
        expect_round_trip(every_other, "qwen3next interval 2");
        gguf::Writer w2;
        write_model_config_gguf(every_other, w2);
        const std::vector<uint8_t> bytes2 = w2.to_bytes();
        const gguf::File f2 = gguf::File::parse(bytes2, "w2.gguf");
        EXPECT_FALSE(f2.has("qwen3next.attention.recurrent_layers"));
        EXPECT_EQ(f2.require_u64("qwen3next.full_attention_interval"), 2u);
    }
    {
        const ModelConfig c = model_config_from_hf_json(json::parse(R"({"model_type": "qwen3",
            "vocab_size": 151936, "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "rope_theta": 1000000,
            "tie_word_embeddings": true, "bos_token_id": 151643, "eos_token_id": 151645,
            "max_position_embeddings": 40960})"));
        expect_round_trip(c, "qwen3");
    }
}

TEST(ConfigGguf, WriterRefusesWhatGgufCannotSay) {
    ModelConfig grouped = model_config_from_hf_json(tiny_hybrid("qwen3_5_text"));  // HF order: grouped
    gguf::Writer w;
    expect_error([&] { write_model_config_gguf(grouped, w); },
                 {"value heads are in grouped order but qwen35 GGUFs store them tiled"});

    json j = tiny_hybrid("qwen3_next");
    j.update(json::parse(R"({"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
                             "shared_expert_intermediate_size": 40, "mlp_only_layers": [0]})"));
    expect_error([&] { write_model_config_gguf(model_config_from_hf_json(j), w); },
                 {"qwen3next GGUFs cannot express this pattern of MoE and dense layers"});

    json dense = tiny_hybrid("qwen3_next");
    dense["num_experts"] = 0;
    ModelConfig many = model_config_from_hf_json(dense);
    many.eos_ids = {1, 2, 3, 4};
    expect_error([&] { write_model_config_gguf(many, w); }, {"4 stop tokens, but a GGUF names at most 3"});

    ModelConfig bad = model_config_from_hf_json(dense);
    bad.n_head_kv = 3;
    expect_error([&] { write_model_config_gguf(bad, w); },
                 {"qwen3next.attention.head_count (4) is not a multiple of qwen3next.attention.head_count_kv (3)"});
}

TEST(ConfigGguf, ReaderErrorsNameFileAndKey) {
    gguf::Writer llama;
    llama.set_string("general.architecture", "llama");
    expect_error([&] { read_back(llama); },
                 {"gguf: t.gguf: general.architecture 'llama' is not supported (supported: qwen35, qwen35moe, "
                  "qwen3next, qwen3, diffusion_gemma)"});

    gguf::Writer missing = qwen35_27b_writer();
    gguf::Writer rebuilt;  // the 27B header without embedding_length
    {
        const std::vector<uint8_t> bytes = missing.to_bytes();
        const gguf::File f = gguf::File::parse(bytes, "x");
        for (const gguf::KeyValue& kv : f.metadata())
            if (kv.key != "qwen35.embedding_length" && kv.key != "general.alignment") rebuilt.set(kv.key, kv.value);
    }
    expect_error([&] { read_back(rebuilt); }, {"t.gguf", "qwen35.embedding_length"});

    gguf::Writer no_sections;
    {
        const std::vector<uint8_t> bytes = missing.to_bytes();
        const gguf::File f = gguf::File::parse(bytes, "x");
        for (const gguf::KeyValue& kv : f.metadata())
            if (kv.key != "qwen35.rope.dimension_sections" && kv.key != "general.alignment")
                no_sections.set(kv.key, kv.value);
    }
    expect_error([&] { read_back(no_sections); }, {"t.gguf", "qwen35.rope.dimension_sections"});

    gguf::Writer mtp = qwen35_27b_writer();
    mtp.set_u32("qwen35.nextn_predict_layers", 65);
    expect_error([&] { read_back(mtp); }, {"qwen35.block_count (65) minus qwen35.nextn_predict_layers (65) leaves no layers"});

    gguf::Writer inner = qwen35_27b_writer();
    inner.set_u32("qwen35.ssm.inner_size", 6001);
    expect_error([&] { read_back(inner); }, {"qwen35.ssm.inner_size (6001) is not a positive multiple of qwen35.ssm.time_step_rank (48)"});

    gguf::Writer heads = qwen35_27b_writer();
    heads.set_u32("qwen35.ssm.group_count", 20);
    expect_error([&] { read_back(heads); }, {"gguf: t.gguf: qwen35.ssm.time_step_rank (48) is not a multiple of qwen35.ssm.group_count (20)"});

    gguf::Writer recurrent = qwen35_27b_writer();
    recurrent.set_array("qwen35.attention.recurrent_layers", gguf::ValueType::BOOL, {gguf::Value::boolean(true)});
    expect_error([&] { read_back(recurrent); }, {"qwen35.attention.recurrent_layers: expected an array of 65 bools"});

    gguf::Writer kv = qwen35_27b_writer();
    kv.set_u32("qwen35.attention.value_length", 128);
    expect_error([&] { read_back(kv); }, {"qwen35.attention.value_length (128) differs"});

    // Per-layer head_count_kv (0 on recurrent layers, as hybrid converters may write it) is accepted
    // when its non-zero entries agree.
    gguf::Writer per_layer = qwen35_27b_writer();
    std::vector<int32_t> kv_heads(65, 0);
    for (size_t i = 3; i < 65; i += 4) kv_heads[i] = 4;
    per_layer.set_i32_array("qwen35.attention.head_count_kv", kv_heads);
    EXPECT_EQ(read_back(per_layer).n_head_kv, 4);
    kv_heads[7] = 2;
    per_layer.set_i32_array("qwen35.attention.head_count_kv", kv_heads);
    expect_error([&] { read_back(per_layer); }, {"qwen35.attention.head_count_kv: per-layer values differ (4 and 2)"});

    gguf::Writer eos = qwen35_27b_writer();
    eos.set_u32("tokenizer.ggml.eos_token_id", 248320);
    expect_error([&] { read_back(eos); }, {"tokenizer.ggml.eos_token_id: 248320 is outside the vocabulary (size 248320)"});

    gguf::Writer moe;
    moe.set_string("general.architecture", "qwen35moe");
    expect_error([&] { read_back(moe); }, {"qwen35moe.block_count"});
}

}  // namespace
}  // namespace deltabit
