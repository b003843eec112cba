// A GGUF built byte by byte from the format description (not with gguf::Writer): the reader must
// read it, and the writer must produce exactly these bytes from the same content.
#include "formats/gguf.h"
#include "test_gguf_helpers.h"

#include <gtest/gtest.h>

#include <bit>

namespace deltabit::gguf {
namespace {

using testing::Bytes;

// Offsets below are counted by hand from the layout in gguf.h.
std::vector<uint8_t> handmade_file() {
    Bytes b;
    b.header(/*n_tensors=*/2, /*n_kv=*/3);                       // 24 bytes
    b.kv_string("general.architecture", "tiny");                // 8+20 + 4 + 8+4 = 44 → 68
    b.kv_u32("tiny.block_count", 3);                            // 8+16 + 4 + 4 = 32 → 100
    b.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(2).str("a").str("bc");  // 29 + 4+4+8 + 9+10 = 64 → 164
    b.tensor("w", {2, 1}, /*f32*/ 0, /*offset=*/0);             // 9 + 4 + 16 + 4 + 8 = 41 → 205
    b.tensor("q", {32}, /*q8_0*/ 8, /*offset=*/32);             // 9 + 4 + 8 + 4 + 8 = 33 → 238
    EXPECT_EQ(b.size(), 238u);
    b.pad_to(32);                                               // data section at 256
    b.f32(1.0f).f32(-2.0f).pad_to(32);                          // w: 8 bytes at 256, padded to 288
    b.u8(0x00).u8(0x3C);                                        // q: fp16 1.0 = 0x3C00, little-endian
    for (int i = 0; i < 32; ++i) b.u8(static_cast<uint8_t>(i - 16));
    b.pad_to(32);                                               // 288 + 34 → 352
    EXPECT_EQ(b.size(), 352u);
    return b.bytes;
}

TEST(GgufHandmade, ReaderReadsIt) {
    const std::vector<uint8_t> bytes = handmade_file();
    const File f = File::parse(bytes, "handmade.gguf");
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), 32u);
    EXPECT_EQ(f.data_offset(), 256u);
    EXPECT_EQ(f.file_size(), 352u);
    ASSERT_EQ(f.metadata().size(), 3u);
    EXPECT_EQ(f.metadata()[0].key, "general.architecture");
    EXPECT_EQ(f.require_string("general.architecture"), "tiny");
    EXPECT_EQ(f.require("tiny.block_count").type(), ValueType::UINT32);
    EXPECT_EQ(f.require_u64("tiny.block_count"), 3u);
    EXPECT_EQ(f.require_string_array("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "bc"}));

    ASSERT_EQ(f.tensors().size(), 2u);
    const TensorInfo& w = f.require_tensor("w");
    EXPECT_EQ(w.dtype, DType::F32);
    EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 1}));
    EXPECT_EQ(w.offset, 256u);
    EXPECT_EQ(w.bytes, 8u);
    float values[2];
    std::memcpy(values, w.data, 8);
    EXPECT_EQ(values[0], 1.0f);
    EXPECT_EQ(values[1], -2.0f);

    const TensorInfo& q = f.require_tensor("q");
    EXPECT_EQ(q.dtype, DType::Q8_0);
    EXPECT_EQ(q.offset, 288u);
    EXPECT_EQ(q.bytes, 34u);
    EXPECT_EQ(q.data[0], 0x00);
    EXPECT_EQ(q.data[1], 0x3C);
    EXPECT_EQ(static_cast<int8_t>(q.data[2]), -16);
    EXPECT_EQ(static_cast<int8_t>(q.data[33]), 15);
}

TEST(GgufHandmade, WriterProducesTheSameBytes) {
    Writer w;
    w.set_string("general.architecture", "tiny");
    w.set_u32("tiny.block_count", 3);
    w.set_string_array("tokenizer.ggml.tokens", {"a", "bc"});
    std::vector<uint8_t> wdata(8);
    const float values[2] = {1.0f, -2.0f};
    std::memcpy(wdata.data(), values, 8);
    std::vector<uint8_t> qdata = {0x00, 0x3C};
    for (int i = 0; i < 32; ++i) qdata.push_back(static_cast<uint8_t>(i - 16));
    w.add_tensor("w", DType::F32, {2, 1}, wdata);
    w.add_tensor("q", DType::Q8_0, {32}, qdata);
    EXPECT_EQ(w.to_bytes(), handmade_file());
}

TEST(GgufHandmade, VersionTwoHasTheSameLayout) {
    std::vector<uint8_t> bytes = handmade_file();
    bytes[4] = 2;
    EXPECT_EQ(File::parse(bytes, "v2.gguf").version(), 2u);
}

TEST(GgufHandmade, TensorsMayBeListedOutOfDataOrder) {
    // The info table may list tensors in any order; the data layout is decided by the offsets.
    Bytes b;
    b.header(2, 0);
    b.tensor("second", {4}, 0, 32);
    b.tensor("first", {8}, 0, 0);
    b.pad_to(32).fill(32, 0x11).fill(16, 0x22).pad_to(32);
    const File f = File::parse(b.bytes, "order.gguf");
    EXPECT_EQ(f.tensors()[0].name, "second");
    EXPECT_EQ(f.require_tensor("first").data[31], 0x11);
    EXPECT_EQ(f.require_tensor("second").data[0], 0x22);
}

TEST(GgufHandmade, NoTensorsNoPadding) {
    // A metadata-only file may end right after its last key-value.
    Bytes b;
    b.header(0, 1).kv_u32("a", 1);
    const File f = File::parse(b.bytes, "meta.gguf");
    EXPECT_TRUE(f.tensors().empty());
    EXPECT_EQ(f.require_u64("a"), 1u);
}

}  // namespace
}  // namespace deltabit::gguf
