// UTF-8 repair, the streaming detokenizer, NFC, and GPT-2's byte alphabet — expectations worked out
// by hand from Unicode Table 3-7 and the substitution-of-maximal-subparts rule.
#include "text/bpe_byte_alphabet.h"
#include "text/unicode.h"
#include "text/utf8_stream.h"

#include <gtest/gtest.h>

#include <random>

namespace deltabit::text {
namespace {

const std::string kFffd(kReplacementUtf8);

TEST(Utf8Repair, ValidInputIsUnchanged) {
    for (const char* s : {"", "abc", "é", "你好", "😀", "\x7f", "\xF4\x8F\xBF\xBF"}) {  // last: U+10FFFF
        EXPECT_TRUE(utf8_is_valid(s)) << s;
        EXPECT_EQ(utf8_repair(s), s);
    }
}

TEST(Utf8Repair, EachMaximalSubpartBecomesOneReplacement) {
    struct Case { std::string in, out; };
    const Case cases[] = {
        {"\x80", kFffd},                                  // lone continuation
        {"\xFF", kFffd},                                  // never a lead byte
        {"\xC0\x80", kFffd + kFffd},                      // C0 can only start an overlong: not a lead
        {"\xE0\x80\x80", kFffd + kFffd + kFffd},          // E0 needs A0..BF next (overlong otherwise)
        {"\xED\xA0\x80", kFffd + kFffd + kFffd},          // surrogate U+D800: ED needs 80..9F next
        {"\xF4\x90\x80\x80", kFffd + kFffd + kFffd + kFffd},  // past U+10FFFF
        {"\xF0\x9F\x98", kFffd},                          // truncated emoji: one subpart
        {"\xF0\x9F\x98" "A", kFffd + "A"},                // ... followed by ASCII, which survives
        {"\xE2\x82" "\xE2\x82\xAC", kFffd + "\xE2\x82\xAC"},  // truncated, then a complete euro sign
        {"a\xC3", "a" + kFffd},
    };
    for (const auto& c : cases) {
        EXPECT_FALSE(utf8_is_valid(c.in));
        EXPECT_EQ(utf8_repair(c.in), c.out);
    }
}

TEST(Utf8Stream, EmojiSplitAcrossTokensIsHeldThenReleased) {
    // Byte-level BPE: one token is " " + the first three bytes of 😀 (F0 9F 98 80), the next its last.
    Utf8StreamDecoder stream;
    EXPECT_EQ(stream.push(" \xF0\x9F\x98"), " ");
    EXPECT_EQ(stream.pending_bytes(), 3u);
    EXPECT_EQ(stream.push("\x80"), "\xF0\x9F\x98\x80");
    EXPECT_EQ(stream.pending_bytes(), 0u);
    EXPECT_EQ(stream.finish(), "");
}

TEST(Utf8Stream, TruncatedTailIsFlushedAsReplacementNotDropped) {
    Utf8StreamDecoder stream;
    EXPECT_EQ(stream.push("ok \xF0\x9F"), "ok ");
    EXPECT_EQ(stream.finish(), kFffd);
    EXPECT_EQ(stream.pending_bytes(), 0u);
    EXPECT_EQ(stream.push("next"), "next");  // reusable after finish
}

TEST(Utf8Stream, InvalidBytesAreReplacedAtOnce) {
    Utf8StreamDecoder stream;
    EXPECT_EQ(stream.push("\xF0\x9F"), "");
    EXPECT_EQ(stream.push("A"), kFffd + "A");  // the held prefix turned out ill-formed
    EXPECT_EQ(stream.push("\xFF"), kFffd);     // not a lead byte: nothing to wait for
}

TEST(Utf8Stream, AnySplitGivesTheSameTextAsWholeRepair) {
    const std::string whole = std::string("a \xF0\x9F\x98\x80 e\xCC\x81 \xE4\xBD\xA0\xE5\xA5\xBD \xFF\xC0\x80 \xED\xA0\x80") +
                              "\xE2\x82\xAC\xF0\x9F\x98 z \xF4\x8F\xBF\xBF\xF0\x9F";
    std::mt19937 rng(5);
    for (int trial = 0; trial < 500; ++trial) {
        Utf8StreamDecoder stream;
        std::string out;
        size_t pos = 0;
        while (pos < whole.size()) {
            const size_t n = std::min<size_t>(whole.size() - pos, rng() % 5);
            out += stream.push(std::string_view(whole).substr(pos, n));
            pos += n;
        }
        out += stream.finish();
        ASSERT_EQ(out, utf8_repair(whole)) << "trial " << trial;
    }
}

TEST(Unicode, NfcComposes) {
    EXPECT_EQ(unicode_normalize("e\xCC\x81", NormalForm::NFC), "\xC3\xA9");                 // e + U+0301 → é
    EXPECT_EQ(unicode_normalize("\xE1\x84\x80\xE1\x85\xA1", NormalForm::NFC), "\xEA\xB0\x80");  // ᄀ + ᅡ → 가
    EXPECT_EQ(unicode_normalize("\xE2\x84\xA6", NormalForm::NFC), "\xCE\xA9");               // Ω sign → Ω
    EXPECT_EQ(unicode_normalize("\xEF\xAC\x81", NormalForm::NFC), "\xEF\xAC\x81");           // ﬁ: compatibility only
    EXPECT_EQ(unicode_normalize("\xEF\xAC\x81", NormalForm::NFKC), "fi");
    EXPECT_EQ(unicode_normalize("\xC3\xA9", NormalForm::NFD), "e\xCC\x81");
    EXPECT_EQ(unicode_normalize("plain ascii", NormalForm::NFC), "plain ascii");
}

TEST(ByteAlphabet, MatchesGpt2Table) {
    EXPECT_EQ(byte_to_alphabet(' '), 0x120u);   // 'Ġ': the 33rd remapped byte (after 0x00..0x1F)
    EXPECT_EQ(byte_to_alphabet('\n'), 0x10Au);  // 'Ċ'
    EXPECT_EQ(byte_to_alphabet(0x00), 0x100u);
    EXPECT_EQ(byte_to_alphabet('A'), static_cast<char32_t>('A'));
    EXPECT_EQ(byte_to_alphabet(0x7F), 0x121u);  // DEL follows space
    EXPECT_EQ(byte_to_alphabet(0xAD), 0x143u);  // soft hyphen is the 68th and last remapped byte
    EXPECT_EQ(byte_to_alphabet(0xE9), 0xE9u);   // 'é' maps to itself
    for (int b = 0; b < 256; ++b) EXPECT_EQ(alphabet_to_byte(byte_to_alphabet(static_cast<uint8_t>(b))), b);
    EXPECT_EQ(bytes_to_byte_level(" hi\n"), "\xC4\xA0hi\xC4\x8A");
    EXPECT_EQ(byte_level_to_bytes("\xC4\xA0hi\xC4\x8A"), " hi\n");
}

}  // namespace
}  // namespace deltabit::text
