// BPE, added tokens, byte fallback and decoding on tiny hand-made tokenizer.json files, with the
// expected ids worked out by hand from the merge lists.
#include "core/error.h"
#include "text/bpe.h"
#include "text/tokenizer.h"
#include "text/tokenizer_hf_json.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace deltabit::text {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

Ids bpe(const BpeModel& model, std::string_view piece) {
    Ids ids;
    model.encode(piece, ids);
    return ids;
}

BpeModelSpec chars_spec(std::vector<std::string> keys, std::vector<std::pair<std::string, std::string>> merges) {
    BpeModelSpec spec;
    spec.units = BpeUnits::Chars;
    spec.keys = std::move(keys);
    spec.merges = std::move(merges);
    return spec;
}

TEST(Bpe, LowestRankMergesFirst) {
    // ids: a0 b1 c2 ab3 bc4 abc5
    const std::vector<std::string> keys = {"a", "b", "c", "ab", "bc", "abc"};
    // "b c" outranks "a b": a|b|c → a|bc → (a bc) → abc.
    EXPECT_EQ(bpe(BpeModel(chars_spec(keys, {{"b", "c"}, {"a", "b"}, {"a", "bc"}})), "abc"), (Ids{5}));
    // Without a merge for (a, bc) the word stops at a|bc even though ab+c would spell abc.
    EXPECT_EQ(bpe(BpeModel(chars_spec(keys, {{"b", "c"}, {"a", "b"}, {"ab", "c"}})), "abc"), (Ids{0, 4}));
    // "a b" first: ab|c → abc through (ab, c).
    EXPECT_EQ(bpe(BpeModel(chars_spec(keys, {{"a", "b"}, {"b", "c"}, {"ab", "c"}})), "abc"), (Ids{5}));
}

TEST(Bpe, LeftmostPairWinsAmongEqualRanks) {
    // ids: a0 aa1. "aaa" → aa|a, not a|aa.
    EXPECT_EQ(bpe(BpeModel(chars_spec({"a", "aa"}, {{"a", "a"}})), "aaa"), (Ids{1, 0}));
    // "aaaa" → aa|aa; with (aa, aa) → aaaa as well.
    EXPECT_EQ(bpe(BpeModel(chars_spec({"a", "aa", "aaaa"}, {{"a", "a"}, {"aa", "aa"}})), "aaaa"), (Ids{2}));
    EXPECT_EQ(bpe(BpeModel(chars_spec({"a", "aa", "aaaa"}, {{"a", "a"}, {"aa", "aa"}})), "aaaaa"), (Ids{2, 0}));
}

TEST(Bpe, IgnoreMergesTakesWholeVocabularyEntries) {
    // ids: a0 b1 ab2 ... "ab" is in the vocabulary but has no merge.
    BpeModelSpec spec = chars_spec({"a", "b", "ab"}, {});
    EXPECT_EQ(bpe(BpeModel(spec), "ab"), (Ids{0, 1}));
    spec.ignore_merges = true;
    EXPECT_EQ(bpe(BpeModel(spec), "ab"), (Ids{2}));
}

TEST(Bpe, ByteFallbackAndUnknown) {
    // ids: a0 <0xE2>1 <0x82>2 <0xAC>3 <unk>4. "€" = E2 82 AC is not in the vocabulary.
    BpeModelSpec spec = chars_spec({"a", "<0xE2>", "<0x82>", "<0xAC>", "<unk>"}, {});
    spec.unk_id = 4;
    EXPECT_EQ(bpe(BpeModel(spec), "a\xE2\x82\xAC"), (Ids{0, 4}));  // no fallback: unk
    spec.byte_fallback = true;
    EXPECT_EQ(bpe(BpeModel(spec), "a\xE2\x82\xAC"), (Ids{0, 1, 2, 3}));
    // "é" (C3 A9) has no byte tokens: unk; two in a row fuse only with fuse_unk.
    EXPECT_EQ(bpe(BpeModel(spec), "\xC3\xA9\xC3\xA9" "a"), (Ids{4, 4, 0}));
    spec.fuse_unk = true;
    EXPECT_EQ(bpe(BpeModel(spec), "\xC3\xA9\xC3\xA9" "a"), (Ids{4, 0}));
}

TEST(Bpe, MergeNamingAMissingTokenIsRefused) {
    EXPECT_THROW(BpeModel(chars_spec({"a", "b"}, {{"a", "b"}})), Error);
}

TEST(Bpe, CacheAnswersRepeatedPieces) {
    const BpeModel model(chars_spec({"a", "b", "ab"}, {{"a", "b"}}));
    EXPECT_EQ(bpe(model, "abab"), (Ids{2, 2}));
    EXPECT_EQ(model.cache_hits(), 0u);
    EXPECT_EQ(bpe(model, "abab"), (Ids{2, 2}));
    EXPECT_EQ(model.cache_hits(), 1u);
}

// A byte-level tokenizer.json in the style of Qwen's: vocabulary spelled in the GPT-2 alphabet.
json byte_level_json() {
    // ids: h0 i1 Ġ2 hi3 Ġhi4 1:5 2:6 12:7 ðŁĺĢ... kept small: only what the cases need.
    json vocab = {{"h", 0}, {"i", 1}, {"\xC4\xA0", 2}, {"hi", 3}, {"\xC4\xA0hi", 4}, {"1", 5}, {"2", 6}, {"12", 7},
                  {"<", 8}, {">", 9}, {"t", 10}};
    return {
        {"normalizer", {{"type", "NFC"}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", R"(\p{N}| ?\p{L}+|\s+|[^\s\p{L}\p{N}]+)"}}}, {"behavior", "Isolated"}, {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"post_processor", nullptr},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"h i", "\xC4\xA0 hi", "1 2"}}}},
        {"added_tokens",
         {{{"id", 11}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}},
          {{"id", 12}, {"content", "<t>"}, {"special", false}, {"normalized", false}}}},
    };
}

TEST(Tokenizer, ByteLevelPipeline) {
    const Tokenizer tok(spec_from_hf_json(byte_level_json(), nullptr, "handmade"));
    // " hi" → Ġhi (merge 0 then 1); "12" → one digit per piece by the regex, so the "1 2" merge
    // never sees both digits.
    EXPECT_EQ(tok.encode("hi hi12"), (Ids{3, 4, 5, 6}));
    EXPECT_EQ(tok.decode(Ids{3, 4, 5, 6}), "hi hi12");
    EXPECT_EQ(tok.token_bytes(2), " ");
    EXPECT_EQ(tok.token_string(4), "\xC4\xA0hi");
}

TEST(Tokenizer, AddedTokensMatchBeforeSplitting) {
    const Tokenizer tok(spec_from_hf_json(byte_level_json(), nullptr, "handmade"));
    EXPECT_EQ(tok.encode("hi<|end|>hi"), (Ids{3, 11, 3}));
    EXPECT_EQ(tok.encode("hi<t>hi"), (Ids{3, 12, 3}));
    // Untrusted text: the special token is spelled out, the ordinary added token still matches.
    const EncodeOptions plain{.parse_special = false};
    EXPECT_EQ(tok.encode("<t><|end|>", plain), (Ids{12, 8, 9}) ) << "'<|end|>' must not become id 11";
    EXPECT_TRUE(tok.is_special(11));
    EXPECT_FALSE(tok.is_special(12));
    EXPECT_EQ(tok.decode(Ids{3, 11, 3}), "hi<|end|>hi");
    EXPECT_EQ(tok.decode(Ids{3, 11, 3}, {.skip_special = true}), "hihi");
}

TEST(Tokenizer, LongestAddedTokenWinsAtOnePosition) {
    json j = byte_level_json();
    j["added_tokens"].push_back({{"id", 13}, {"content", "<t>x"}, {"special", false}, {"normalized", false}});
    const Tokenizer tok(spec_from_hf_json(j, nullptr, "handmade"));
    EXPECT_EQ(tok.encode("<t>x<t>"), (Ids{13, 12}));
}

TEST(Tokenizer, TemplateProcessingAddsBos) {
    json j = byte_level_json();
    j["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single", {{{"SpecialToken", {{"id", "<|end|>"}, {"type_id", 0}}}},
                                       {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                           {"special_tokens", {{"<|end|>", {{"id", "<|end|>"}, {"ids", {11}}, {"tokens", {"<|end|>"}}}}}}};
    const Tokenizer tok(spec_from_hf_json(j, nullptr, "handmade"));
    EXPECT_EQ(tok.encode("hi", {.add_special = true}), (Ids{11, 3}));
    EXPECT_EQ(tok.encode("hi"), (Ids{3}));
    EXPECT_EQ(tok.bos_id(), 11);
}

TEST(Tokenizer, InvalidUtf8IsRepairedNotCrashed) {
    const Tokenizer tok(spec_from_hf_json(byte_level_json(), nullptr, "handmade"));
    // U+FFFD is EF BF BD; none of those bytes is in this vocabulary and there is no unk, so it is
    // dropped (Hugging Face's BPE does the same without an unk token). What matters: defined output,
    // the valid parts intact.
    EXPECT_EQ(tok.encode("hi\xFF" "hi"), (Ids{3, 3}));
}

TEST(Tokenizer, UnsupportedPartsAreRefusedByName) {
    json j = byte_level_json();
    j["normalizer"] = {{"type", "Lowercase"}};
    try {
        spec_from_hf_json(j, nullptr, "handmade.json");
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("handmade.json: normalizer"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace deltabit::text
