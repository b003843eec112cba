// The byte tokenizer: ids are byte values, specials follow at 256.
#include "text/byte_tokenizer.h"
#include "text/utf8_stream.h"

#include <gtest/gtest.h>

namespace deltabit::text {
namespace {

using Ids = std::vector<int32_t>;

TEST(ByteTokenizer, IdsAreByteValues) {
    const Tokenizer tok = make_byte_tokenizer();
    EXPECT_EQ(tok.encode("Hi\n"), (Ids{72, 105, 10}));
    EXPECT_EQ(tok.encode("\xC3\xA9"), (Ids{0xC3, 0xA9}));  // é: two bytes, two ids
    EXPECT_EQ(tok.encode(std::string("\0\xFF", 2)), (Ids{0, 255}));  // any byte, even invalid UTF-8
    EXPECT_EQ(tok.vocab_size(), 259u);
}

TEST(ByteTokenizer, SpecialsAndBos) {
    const Tokenizer tok = make_byte_tokenizer({"<|user|>"});
    EXPECT_EQ(tok.encode("a<|eos|>b"), (Ids{97, kByteEosId, 98}));
    EXPECT_EQ(tok.encode("a<|eos|>", {.parse_special = false}).size(), 8u);
    EXPECT_EQ(tok.encode("<|user|>x", {.add_special = true}), (Ids{kByteBosId, 259, 120}));
    EXPECT_EQ(tok.bos_id(), kByteBosId);
    EXPECT_EQ(tok.eos_id(), kByteEosId);
    EXPECT_EQ(tok.pad_id(), kBytePadId);
    EXPECT_TRUE(tok.is_special(kByteEosId));
    EXPECT_FALSE(tok.is_special(97));
}

TEST(ByteTokenizer, DecodeStreamsWholeCharacters) {
    const Tokenizer tok = make_byte_tokenizer();
    const std::string text = "a \xF0\x9F\x98\x80!";  // emoji = 4 tokens
    Utf8StreamDecoder stream;
    std::vector<std::string> pieces;
    for (int32_t id : tok.encode(text)) pieces.push_back(stream.push(tok.token_bytes(id)));
    EXPECT_EQ(pieces, (std::vector<std::string>{"a", " ", "", "", "", "\xF0\x9F\x98\x80", "!"}));
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
    EXPECT_EQ(tok.token_string(10), "<0x0A>");
}

}  // namespace
}  // namespace deltabit::text
