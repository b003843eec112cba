// A corpus of broken GGUF files, each built by hand so the test shows what is wrong, each refused with
// its own one-line message; and every prefix and single-byte mutation of valid files parses cleanly
// or fails with deltabit::Error (never a crash — run under DELTABIT_SANITIZE to see it).
#include "formats/gguf.h"
#include "test_gguf_helpers.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace deltabit::gguf {
namespace {

using testing::Bytes;
using testing::parse;
using testing::parse_error;

constexpr uint32_t kF32 = 0, kQ8_0 = 8, kQ2_0 = 42;
constexpr uint64_t k2Pow60 = uint64_t{1} << 60;

// A file with one tensor (info at 24, 33 + 8·(dims−1) bytes) and `data_bytes` of data after the padding.
Bytes one_tensor(const std::vector<int64_t>& shape, uint32_t type, uint64_t offset, size_t data_bytes) {
    Bytes b;
    b.header(1, 0).tensor("t", shape, type, offset).pad_to(32).fill(data_bytes, 0x5A);
    return b;
}

// ---- header ----

TEST(GgufCorrupt, EmptyFile) { EXPECT_PARSE_ERROR(std::vector<uint8_t>{}, "truncated: magic at offset 0 needs 4 bytes, only 0 left"); }

TEST(GgufCorrupt, WrongMagic) {
    Bytes b;
    b.raw("GGML").u32(3).u64(0).u64(0);
    EXPECT_PARSE_ERROR(b.bytes, "not a GGUF file (magic 47 47 4d 4c at offset 0");
}

TEST(GgufCorrupt, UnsupportedVersions) {
    for (uint32_t v : {0u, 1u, 4u, 0x03000000u /* big-endian v3 */}) {
        Bytes b;
        b.header(0, 0, v);
        EXPECT_PARSE_ERROR(b.bytes, "unsupported version " + std::to_string(v) + " at offset 4");
    }
}

TEST(GgufCorrupt, AbsurdCounts) {
    Bytes kv;
    kv.header(0, k2Pow60);
    EXPECT_PARSE_ERROR(kv.bytes, "metadata count 1152921504606846976 at offset 16 cannot fit in the 0 bytes");
    Bytes tensors;
    tensors.header(k2Pow60, 0).zeros(64);
    EXPECT_PARSE_ERROR(tensors.bytes, "tensor count 1152921504606846976 at offset 8 cannot fit in the 64 bytes");
}

// ---- metadata ----

TEST(GgufCorrupt, StringLengthPastEnd) {
    Bytes b;
    b.header(0, 1).u64(uint64_t{1} << 62).raw("key").zeros(16);
    EXPECT_PARSE_ERROR(b.bytes, "key #0 at offset 24: string length 4611686018427387904 runs past end of file (size 51)");
    Bytes value;
    value.header(0, 1).str("k").u32(8).u64(uint64_t{1} << 62);
    EXPECT_PARSE_ERROR(value.bytes, "key k at offset 37: string length 4611686018427387904 runs past end of file");
}

TEST(GgufCorrupt, HugeArrayRefusedWithoutAllocating) {
    for (uint32_t element : {0u /*u8*/, 8u /*string*/, 9u /*array*/, 12u /*f64*/}) {
        Bytes b;
        b.header(0, 1).str("big").u32(9).u32(element).u64(k2Pow60).zeros(16);
        EXPECT_PARSE_ERROR(b.bytes, "key big: array of 1152921504606846976 ");
        EXPECT_PARSE_ERROR(b.bytes, "at offset 39 cannot fit in the 16 bytes left");
    }
}

TEST(GgufCorrupt, NonUtf8Key) {
    Bytes b;
    b.header(0, 1).str("ab\xff").u32(4).u32(1);
    // Key length at 24, key bytes at 32: the bad byte is at 34.
    EXPECT_PARSE_ERROR(b.bytes, "key #0 at offset 24 is not valid UTF-8 (byte 0xff at offset 34)");
    Bytes overlong;  // "/" encoded in two bytes is not valid UTF-8
    overlong.header(0, 1).str("a\xc0\xaf").u32(4).u32(1);
    EXPECT_PARSE_ERROR(overlong.bytes, "byte 0xc0 at offset 33");
    Bytes surrogate;
    surrogate.header(0, 1).str("\xed\xa0\x80").u32(4).u32(1);
    EXPECT_PARSE_ERROR(surrogate.bytes, "not valid UTF-8");
}

TEST(GgufCorrupt, DuplicateKey) {
    Bytes b;
    b.header(0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2);
    EXPECT_PARSE_ERROR(b.bytes, "duplicate key a.b at offset 43");
}

TEST(GgufCorrupt, UnknownValueType) {
    Bytes b;
    b.header(0, 1).str("k").u32(13).u32(0);
    EXPECT_PARSE_ERROR(b.bytes, "key k: unknown value type 13 at offset 33");
    Bytes element;
    element.header(0, 1).str("k").u32(9).u32(99).u64(0);
    EXPECT_PARSE_ERROR(element.bytes, "key k: unknown value type 99 at offset 37");
}

TEST(GgufCorrupt, BoolThatIsNeitherZeroNorOne) {
    Bytes b;
    b.header(0, 1).str("k").u32(7).u8(2);
    EXPECT_PARSE_ERROR(b.bytes, "key k: bool 2 at offset 37 is neither 0 nor 1");
}

TEST(GgufCorrupt, ArraysNestedTooDeep) {
    Bytes b;
    b.header(0, 1).str("deep").u32(9);
    for (uint32_t i = 0; i < kMaxArrayDepth + 1; ++i) b.u32(9).u64(1);
    b.u32(0).u64(0);
    EXPECT_PARSE_ERROR(b.bytes, "key deep: arrays nested deeper than 8");
}

TEST(GgufCorrupt, BadAlignment) {
    Bytes npot;
    npot.header(0, 1).kv_u32("general.alignment", 48);
    EXPECT_PARSE_ERROR(npot.bytes, "key general.alignment: 48 is not a power of two");
    Bytes zero;
    zero.header(0, 1).kv_u32("general.alignment", 0);
    EXPECT_PARSE_ERROR(zero.bytes, "key general.alignment: 0 is not a power of two");
    Bytes wide;
    wide.header(0, 1).str("general.alignment").u32(10).u64(64);
    EXPECT_PARSE_ERROR(wide.bytes, "key general.alignment: expected u32, found u64");
}

// ---- tensor infos ----

TEST(GgufCorrupt, ZeroAndNegativeDims) {
    EXPECT_PARSE_ERROR(one_tensor({4, 0}, kF32, 0, 32).bytes, "tensor t (info at offset 24): dimension 1 is 0");
    EXPECT_PARSE_ERROR(one_tensor({-4}, kF32, 0, 32).bytes, "dimension 0 is -4");
}

TEST(GgufCorrupt, TooManyOrNoDims) {
    EXPECT_PARSE_ERROR(one_tensor({1, 1, 1, 1, 4}, kF32, 0, 32).bytes, "tensor t (info at offset 24): 5 dimensions");
    EXPECT_PARSE_ERROR(one_tensor({}, kF32, 0, 32).bytes, "0 dimensions (1 to 4 allowed)");
}

TEST(GgufCorrupt, ElementCountOverflow) {
    EXPECT_PARSE_ERROR(one_tensor({int64_t{1} << 32, int64_t{1} << 32}, kF32, 0, 32).bytes,
                       "element count overflows at dimension 1");
}

TEST(GgufCorrupt, UnknownTensorType) {
    EXPECT_PARSE_ERROR(one_tensor({256}, 12, 0, 256).bytes, "tensor t (info at offset 24): ggml type q4_k (id 12) is not supported");
    EXPECT_PARSE_ERROR(one_tensor({256}, 1000, 0, 256).bytes, "ggml type unknown (id 1000) is not supported");
}

TEST(GgufCorrupt, RowNotAMultipleOfTheBlock) {
    EXPECT_PARSE_ERROR(one_tensor({16, 2}, kQ8_0, 0, 64).bytes, "tensor t: row length 16 is not a multiple of the q8_0 block size 32");
}

TEST(GgufCorrupt, MisalignedOffset) {
    EXPECT_PARSE_ERROR(one_tensor({4}, kF32, 16, 64).bytes, "tensor t (info at offset 24): data offset 16 is not a multiple of the alignment 32");
}

TEST(GgufCorrupt, DuplicateAndNonUtf8TensorNames) {
    Bytes dup;
    dup.header(2, 0).tensor("t", {8}, kF32, 0).tensor("t", {8}, kF32, 32).pad_to(32).zeros(64);
    EXPECT_PARSE_ERROR(dup.bytes, "duplicate tensor t (info at offset 57)");
    EXPECT_EQ(parse_error(one_tensor({8}, kF32, 0, 32).bytes), "");  // the helper's file itself is fine
    Bytes bad;
    bad.header(1, 0).tensor("t\x80", {8}, kF32, 0).pad_to(32).zeros(32);
    EXPECT_PARSE_ERROR(bad.bytes, "tensor #0 name at offset 24 is not valid UTF-8 (byte 0x80 at offset 33)");
}

// ---- data placement ----

TEST(GgufCorrupt, DataSectionPastEnd) {
    Bytes b;
    b.header(1, 0).tensor("t", {8}, kF32, 0);  // 24 + 33 = 57 bytes, no padding, no data
    EXPECT_PARSE_ERROR(b.bytes, "data section starts at offset 64 (header ends at 57, alignment 32), past end of file (size 57)");
}

TEST(GgufCorrupt, OffsetPastEnd) {
    EXPECT_PARSE_ERROR(one_tensor({8}, kF32, 1024, 32).bytes, "tensor t: data offset 1024 (data section at 64) is past end of file (size 96)");
}

TEST(GgufCorrupt, DataRunsPastEnd) {
    // 8 f32 = 32 bytes at 64, but only 16 bytes follow the data section start.
    EXPECT_PARSE_ERROR(one_tensor({8}, kF32, 0, 16).bytes, "tensor t: data at offset 64 + 32 bytes runs past end of file (size 80)");
}

TEST(GgufCorrupt, OverlappingTensors) {
    Bytes b;  // "a" is 16 f32 = 64 bytes at 0; "b" starts at 32.
    b.header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", {8}, kF32, 32).pad_to(32).zeros(96);
    EXPECT_PARSE_ERROR(b.bytes, "tensor a: data at offset 96 + 64 bytes overlaps tensor b at offset 128");
    Bytes same;
    same.header(2, 0).tensor("a", {8}, kF32, 0).tensor("b", {8}, kF32, 0).pad_to(32).zeros(32);
    EXPECT_PARSE_ERROR(same.bytes, "overlaps tensor b");
}

TEST(GgufCorrupt, SizeDoesNotMatchShapeTimesType) {
    Bytes b;  // "a" claims 4 f32 (16 bytes) but the next tensor starts 96 bytes later.
    b.header(2, 0).tensor("a", {4}, kF32, 0).tensor("b", {8}, kF32, 96).pad_to(32).zeros(128);
    EXPECT_PARSE_ERROR(b.bytes, "tensor a: 4 f32 of shape [4] take 16 bytes at offset 96, but the next tensor (b) starts 96 "
                                "bytes later: size does not match shape × type");
}

// ---- Q2_0 variants ----

TEST(GgufCorrupt, Q2_0ThatFitsNeitherVariant) {
    // 128 values need 34 bytes (group-128) or 36 (group-64); only 32 remain.
    EXPECT_PARSE_ERROR(one_tensor({128}, kQ2_0, 0, 32).bytes,
                       "tensor t: q2_0 (id 42) with 128 elements (rows of 128) fits neither variant in 32 bytes: "
                       "group-128 needs 34 bytes, group-64 needs 36 bytes");
    // A row of 64 rules out group-128; 18 bytes are 2 short of group-64's 36 for 128 values.
    EXPECT_PARSE_ERROR(one_tensor({64, 2}, kQ2_0, 0, 18).bytes,
                       "group-128 needs rows of a multiple of 128, group-64 needs 36 bytes");
}

TEST(GgufQ2_0, RoomDecidesTheVariant) {
    // 4096 values: 1088 bytes as group-128, 1152 as group-64; with 32-byte padding only one fills.
    EXPECT_EQ(parse(one_tensor({4096}, kQ2_0, 0, 1088).bytes).tensors()[0].dtype, DType::Q2_0);
    EXPECT_EQ(parse(one_tensor({4096}, kQ2_0, 0, 1152).bytes).tensors()[0].dtype, DType::Q2_0_G64);
    // A row of 64 can only be group-64, whatever the room.
    EXPECT_EQ(parse(one_tensor({64}, kQ2_0, 0, 32).bytes).tensors()[0].dtype, DType::Q2_0_G64);
    // q2_0_fits itself: both fill 64 bytes for 128 values; only group-128 fits 35.
    EXPECT_EQ(q2_0_fits(128, 128, 64, 32).count, 2);
    const DTypeCandidates one = q2_0_fits(128, 128, 35, 32);
    ASSERT_EQ(one.count, 1);
    EXPECT_EQ(one.types[0], DType::Q2_0);
}

TEST(GgufCorrupt, Q2_0TooSmallToDecide) {
    EXPECT_PARSE_ERROR(one_tensor({128}, kQ2_0, 0, 64).bytes,
                       "fits both the group-128 and the group-64 variant; cannot tell which");
}

TEST(GgufCorrupt, Q2_0VariantsDisagree) {
    Bytes b;  // "a" fills 1088 bytes (group-128), "b" fills 1152 (group-64).
    b.header(2, 0).tensor("a", {4096}, kQ2_0, 0).tensor("b", {4096}, kQ2_0, 1088).pad_to(32).zeros(1088 + 1152);
    EXPECT_PARSE_ERROR(b.bytes, "tensors a (q2_0 group-128) and b (q2_0 group-64) disagree on the q2_0 variant");
}

// ---- no input crashes the reader ----

// Valid files with every kind of field, to cut and mutate.
std::vector<std::vector<uint8_t>> valid_files() {
    Writer w;
    w.set_string("general.architecture", "tiny");
    w.set_u32("tiny.block_count", 2);
    w.set_f32("tiny.rope.freq_base", 10000.f);
    w.set_string_array("tokenizer.ggml.tokens", {"a", "bc", ""});
    w.set_array("nested", ValueType::ARRAY, {Value::i32_array({1, 2}), Value::string_array({"x"})});
    w.set_bool("flag", true);
    w.add_tensor_owned("blk.0.w", DType::Q8_0, {32, 2}, testing::pattern_bytes(68, 1));
    w.add_tensor_owned("blk.0.n", DType::F32, {3}, testing::pattern_bytes(12, 2));
    w.add_tensor_owned("blk.0.q2", DType::Q2_0, {128}, testing::pattern_bytes(34, 3));
    w.add_tensor_owned("blk.1.q2", DType::Q2_0, {256, 8}, testing::pattern_bytes(544, 4));
    Writer small;
    small.set_alignment(8);
    small.set_i64("x", -1);
    small.add_tensor_owned("t", DType::Q1_0, {128}, testing::pattern_bytes(18, 5));
    return {w.to_bytes(), small.to_bytes()};
}

TEST(GgufCorrupt, EveryPrefixFailsCleanlyOrParses) {
    for (const std::vector<uint8_t>& full : valid_files()) {
        ASSERT_EQ(parse_error(full), "");
        size_t parsed = 0;
        for (size_t n = 0; n < full.size(); ++n) {
            const std::vector<uint8_t> prefix(full.begin(), full.begin() + static_cast<ptrdiff_t>(n));
            const std::string message = parse_error(prefix);  // throws only deltabit::Error, or nothing
            parsed += message.empty();
            EXPECT_EQ(message.find('\n'), std::string::npos);
        }
        // Only cuts inside the last tensor's padding can parse; everything else must be refused.
        EXPECT_LT(parsed, 32u);
    }
}

TEST(GgufCorrupt, EverySingleByteMutationFailsCleanlyOrParses) {
    for (const std::vector<uint8_t>& full : valid_files()) {
        for (size_t i = 0; i < full.size(); ++i) {
            for (uint8_t v : {uint8_t{0x00}, uint8_t{0xFF}, static_cast<uint8_t>(full[i] + 1), static_cast<uint8_t>(full[i] ^ 0x80)}) {
                std::vector<uint8_t> mutated = full;
                mutated[i] = v;
                parse_error(mutated);  // any deltabit::Error is fine; anything else fails the test
            }
        }
    }
}

// Writes a few of the corpus files as fuzzing seeds (fuzz/corpus/gguf/) when asked:
//   DELTABIT_WRITE_FUZZ_SEEDS=1 test_formats --gtest_filter='GgufCorrupt.WriteFuzzSeeds'
TEST(GgufCorrupt, WriteFuzzSeeds) {
    if (!std::getenv("DELTABIT_WRITE_FUZZ_SEEDS")) GTEST_SKIP() << "set DELTABIT_WRITE_FUZZ_SEEDS=1 to write seeds";
    const std::filesystem::path dir = std::filesystem::path(DELTABIT_SOURCE_DIR) / "fuzz/corpus/gguf";
    std::filesystem::create_directories(dir);
    auto save = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
        ASSERT_LT(bytes.size(), 4096u) << name;
        std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    };
    const auto valid = valid_files();
    save("valid_mixed.gguf", valid[0]);
    save("valid_align8_q1.gguf", valid[1]);
    Bytes overlap;
    overlap.header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", {8}, kF32, 32).pad_to(32).zeros(96);
    save("overlap.gguf", overlap.bytes);
    save("q2_ambiguous.gguf", one_tensor({128}, kQ2_0, 0, 64).bytes);
    Bytes deep;
    deep.header(0, 1).str("deep").u32(9);
    for (int i = 0; i < 4; ++i) deep.u32(9).u64(1);
    deep.u32(8).u64(1).str("s");
    save("nested_arrays.gguf", deep.bytes);
}

}  // namespace
}  // namespace deltabit::gguf
