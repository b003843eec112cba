// Pre-tokeniser splits worked out by hand from each family's pattern (Oniguruma semantics).
#include "core/error.h"
#include "text/pretokenize.h"

#include <gtest/gtest.h>

namespace deltabit::text {
namespace {

std::vector<std::string> split(std::string_view pattern, std::string_view text,
                               SplitBehavior behavior = SplitBehavior::Isolated, bool is_regex = true) {
    const Pretokenizer pre({{std::string(pattern), is_regex, behavior}});
    std::vector<std::string_view> pieces;
    pre.split(text, pieces);
    return {pieces.begin(), pieces.end()};
}

using V = std::vector<std::string>;

TEST(Pretokenize, QwenTakesOneDigitPerPiece) {
    EXPECT_EQ(split(patterns::kQwen2, "abc 123 def"), (V{"abc", " ", "1", "2", "3", " def"}));
    EXPECT_EQ(split(patterns::kQwen35, "x2024"), (V{"x", "2", "0", "2", "4"}));
}

TEST(Pretokenize, Llama3TakesUpToThreeDigits) {
    EXPECT_EQ(split(patterns::kLlama3, "abc 1234567"), (V{"abc", " ", "123", "456", "7"}));
}

TEST(Pretokenize, Gpt2KeepsLeadingSpaceOnNumbers) {
    EXPECT_EQ(split(patterns::kGpt2, "abc 1234567"), (V{"abc", " 1234567"}));
}

TEST(Pretokenize, WhitespaceRunLeavesOneSpaceForTheNextWord) {
    // \s+(?!\S) stops one short of the word so that the word keeps its leading space.
    EXPECT_EQ(split(patterns::kQwen2, "a   b"), (V{"a", "  ", " b"}));
    EXPECT_EQ(split(patterns::kQwen2, "a   "), (V{"a", "   "}));
    EXPECT_EQ(split(patterns::kQwen2, "a \n\n b"), (V{"a", " \n\n", " b"}));
}

TEST(Pretokenize, ContractionsAreCaseInsensitive) {
    EXPECT_EQ(split(patterns::kQwen2, "I'LL we've"), (V{"I", "'LL", " we", "'ve"}));
}

TEST(Pretokenize, Qwen35KeepsCombiningMarksInWords) {
    // "é" decomposed: e + U+0301. Qwen2's \p{L}+ stops at the mark; Qwen3.5's [\p{L}\p{M}]+ does not.
    EXPECT_EQ(split(patterns::kQwen2, "caf" "e\xCC\x81s"), (V{"cafe", "\xCC\x81s"}));
    EXPECT_EQ(split(patterns::kQwen35, "caf" "e\xCC\x81s"), (V{"cafe\xCC\x81s"}));
}

TEST(Pretokenize, NextLineIsWhiteSpaceAsInOniguruma) {
    // U+0085 is Unicode White_Space. As space, "\u0085\u0085b" splits as "\u0085" + "\u0085b"
    // (\s+(?!\S) backs off one); as punctuation it would be one "\u0085\u0085" piece.
    EXPECT_EQ(split(patterns::kQwen2, "a\xC2\x85\xC2\x85" "b"), (V{"a", "\xC2\x85", "\xC2\x85" "b"}));
    // U+180E is not White_Space (since Unicode 6.3) although PCRE2's \h lists it.
    EXPECT_EQ(split(patterns::kQwen2, "a\xE1\xA0\x8E\xE1\xA0\x8E" "b"), (V{"a", "\xE1\xA0\x8E\xE1\xA0\x8E", "b"}));
}

TEST(Pretokenize, Behaviors) {
    EXPECT_EQ(split("-", "the-final--countdown", SplitBehavior::Isolated, false),
              (V{"the", "-", "final", "-", "-", "countdown"}));
    EXPECT_EQ(split("-", "the-final--countdown", SplitBehavior::Removed, false), (V{"the", "final", "countdown"}));
    EXPECT_EQ(split("-", "the-final--countdown", SplitBehavior::MergedWithPrevious, false),
              (V{"the-", "final-", "-", "countdown"}));
    EXPECT_EQ(split("-", "the-final--countdown", SplitBehavior::MergedWithNext, false),
              (V{"the", "-final", "-", "-countdown"}));
}

TEST(Pretokenize, TranslationRefusesAmbiguousEscapes) {
    EXPECT_THROW(translate_oniguruma_pattern(R"(\h+)"), Error);
    EXPECT_THROW(translate_oniguruma_pattern(R"([\S])"), Error);
    EXPECT_NO_THROW(translate_oniguruma_pattern(patterns::kLlama3));
}

TEST(Pretokenize, NoRulesGiveOnePiece) {
    const Pretokenizer pre({});
    std::vector<std::string_view> pieces;
    pre.split("whole text", pieces);
    EXPECT_EQ(pieces, (std::vector<std::string_view>{"whole text"}));
}

}  // namespace
}  // namespace deltabit::text
