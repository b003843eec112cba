// Writer → reader round trips: every DType, every metadata kind, alignment, and the typed getters.
#include "formats/gguf.h"
#include "test_gguf_helpers.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <limits>

namespace deltabit::gguf {
namespace {

using testing::parse;
using testing::pattern_bytes;

struct DTypeCase {
    DType dtype;
    std::vector<int64_t> shape;
};

// Shapes keep the rows a multiple of each block. The Q2_0 variants need ≥ 64·alignment elements to be
// told apart alone (gguf.h), so they get 256×16 = 4096: 1088 bytes as group-128, 1152 as group-64.
const std::vector<DTypeCase> kDTypeCases = {
    {DType::F32, {3, 5}},     {DType::F16, {7}},          {DType::BF16, {2, 3, 4}},   {DType::Q8_0, {64, 3}},
    {DType::Q4_0, {32, 2, 2}}, {DType::Q1_0, {256, 3}},   {DType::Q2_0, {256, 16}},   {DType::Q2_0_G64, {256, 16}},
    {DType::I32, {5}},
};

TEST(GgufRoundTrip, EveryDTypeAlone) {
    for (const DTypeCase& c : kDTypeCases) {
        SCOPED_TRACE(std::string(dtype_name(c.dtype)));
        uint64_t n = 1;
        for (int64_t d : c.shape) n *= static_cast<uint64_t>(d);
        const std::vector<uint8_t> payload = pattern_bytes(dtype_bytes(c.dtype, n), static_cast<uint32_t>(c.dtype));
        Writer w;
        w.add_tensor("t", c.dtype, c.shape, payload);
        const std::vector<uint8_t> bytes = w.to_bytes();
        const File f = parse(bytes);
        ASSERT_EQ(f.tensors().size(), 1u);
        const TensorInfo& t = f.tensors()[0];
        EXPECT_EQ(t.dtype, c.dtype);
        EXPECT_EQ(t.ggml_id, dtype_info(c.dtype).ggml_id);
        EXPECT_EQ(t.shape, c.shape);
        EXPECT_EQ(t.n_elements(), n);
        EXPECT_EQ(t.row_length(), c.shape[0]);
        EXPECT_EQ(t.n_rows(), n / static_cast<uint64_t>(c.shape[0]));
        EXPECT_EQ(t.bytes, payload.size());
        EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.bytes), payload);
        EXPECT_EQ(t.data, bytes.data() + t.offset);
    }
}

TEST(GgufRoundTrip, EveryDTypeTogether) {
    // One Q2_0 variant per file (a file mixing both is refused, see test_gguf_corrupt.cpp).
    for (DType q2 : {DType::Q2_0, DType::Q2_0_G64}) {
        Writer w;
        std::vector<std::vector<uint8_t>> payloads;
        size_t i = 0;
        for (const DTypeCase& c : kDTypeCases) {
            if ((c.dtype == DType::Q2_0 || c.dtype == DType::Q2_0_G64) && c.dtype != q2) continue;
            uint64_t n = 1;
            for (int64_t d : c.shape) n *= static_cast<uint64_t>(d);
            payloads.push_back(pattern_bytes(dtype_bytes(c.dtype, n), static_cast<uint32_t>(100 + i)));
            w.add_tensor("tensor." + std::to_string(i++), c.dtype, c.shape, payloads.back());
        }
        // A small Q2_0 tensor that is undecided on its own takes the variant of the big one.
        payloads.push_back(pattern_bytes(dtype_bytes(q2, 128), 7));
        w.add_tensor("small_q2", q2, {128}, payloads.back());
        const std::vector<uint8_t> bytes = w.to_bytes();
        const File f = parse(bytes);
        ASSERT_EQ(f.tensors().size(), payloads.size());
        for (size_t k = 0; k < payloads.size(); ++k) {
            const TensorInfo& t = f.tensors()[k];
            EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.bytes), payloads[k]) << t.name;
            EXPECT_EQ(t.offset % 32, 0u) << t.name;
        }
        EXPECT_EQ(f.require_tensor("small_q2").dtype, q2);
    }
}

TEST(GgufRoundTrip, AlignmentHonoured) {
    for (uint32_t alignment : {0u, 1u, 8u, 64u, 4096u}) {  // 0 = default, key not written
        SCOPED_TRACE(alignment);
        Writer w;
        if (alignment) w.set_alignment(alignment);
        const uint64_t expected = alignment ? alignment : 32;
        std::vector<std::vector<uint8_t>> payloads;
        for (int i = 0; i < 4; ++i) {
            payloads.push_back(pattern_bytes(dtype_bytes(DType::F16, 3 + i), i));
            w.add_tensor("t" + std::to_string(i), DType::F16, {3 + i}, payloads.back());
        }
        const std::vector<uint8_t> bytes = w.to_bytes();
        const File f = parse(bytes);
        EXPECT_EQ(f.alignment(), expected);
        EXPECT_EQ(f.has("general.alignment"), alignment != 0);
        EXPECT_EQ(f.data_offset() % expected, 0u);
        for (size_t i = 0; i < 4; ++i) {
            const TensorInfo& t = f.tensors()[i];
            EXPECT_EQ(t.offset % expected, 0u) << t.name;
            EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.bytes), payloads[i]);
        }
        // Each tensor starts where the previous one's padded bytes end: 6, 8, 10, 12 bytes of f16.
        uint64_t offset = f.data_offset();
        for (size_t i = 0; i < 4; ++i) {
            EXPECT_EQ(f.tensors()[i].offset, offset);
            offset += (2 * (3 + i) + expected - 1) / expected * expected;
        }
        EXPECT_EQ(bytes.size(), offset);  // the last tensor is padded too, as llama.cpp does
    }
}

// One value of every kind, including nested and empty arrays.
Writer every_kind_writer() {
    Writer w;
    w.set_u8("u8", 255);
    w.set_i8("i8", -128);
    w.set_u16("u16", 65535);
    w.set_i16("i16", -32768);
    w.set_u32("u32", 4000000000u);
    w.set_i32("i32", -2000000000);
    w.set_u64("u64", std::numeric_limits<uint64_t>::max());
    w.set_i64("i64", std::numeric_limits<int64_t>::min());
    w.set_f32("f32", -1.5f);
    w.set_f64("f64", 1e300);
    w.set_bool("bool.true", true);
    w.set_bool("bool.false", false);
    w.set_string("string", "héllo ✓");
    w.set_string("string.empty", "");
    w.set_string_array("strings", {"a", "", "ccc"});
    w.set_string_array("strings.empty", {});
    w.set_i32_array("i32s", {1, -2, 3});
    w.set_f32_array("f32s", {0.5f, -0.25f});
    w.set_array("u8s.empty", ValueType::UINT8, {});
    w.set_array("bools", ValueType::BOOL, {Value::boolean(true), Value::boolean(false)});
    w.set_array("u64s", ValueType::UINT64, {Value::u64(1), Value::u64(uint64_t{1} << 40)});
    w.set_array("nested", ValueType::ARRAY,
                {Value::i32_array({1, 2}), Value::i32_array({}), Value::string_array({"x"})});
    w.set_array("nested.deep", ValueType::ARRAY,
                {Value::array(ValueType::ARRAY, {Value::array(ValueType::ARRAY, {Value::f32_array({9.f})})})});
    w.set_array("nested.empty", ValueType::ARRAY, {});
    return w;
}

TEST(GgufRoundTrip, EveryMetadataKind) {
    const Writer w = every_kind_writer();
    const std::vector<uint8_t> bytes = w.to_bytes();
    const File f = parse(bytes);

    EXPECT_EQ(f.require_u64("u8"), 255u);
    EXPECT_EQ(f.require_i64("i8"), -128);
    EXPECT_EQ(f.require_u64("u16"), 65535u);
    EXPECT_EQ(f.require_i64("i16"), -32768);
    EXPECT_EQ(f.require_u32("u32"), 4000000000u);
    EXPECT_EQ(f.require_i64("i32"), -2000000000);
    EXPECT_EQ(f.require_u64("u64"), std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(f.require_i64("i64"), std::numeric_limits<int64_t>::min());
    EXPECT_EQ(f.require_f32("f32"), -1.5f);
    EXPECT_EQ(f.require_f64("f64"), 1e300);
    EXPECT_TRUE(f.require_bool("bool.true"));
    EXPECT_FALSE(f.require_bool("bool.false"));
    EXPECT_EQ(f.require_string("string"), "héllo ✓");
    EXPECT_EQ(f.require_string("string.empty"), "");
    EXPECT_EQ(f.require_string_array("strings"), (std::vector<std::string>{"a", "", "ccc"}));
    EXPECT_TRUE(f.require_string_array("strings.empty").empty());
    EXPECT_EQ(f.require("strings.empty").element_type(), ValueType::STRING);
    EXPECT_EQ(f.require_i64_array("i32s"), (std::vector<int64_t>{1, -2, 3}));
    EXPECT_EQ(f.require_f32_array("f32s"), (std::vector<float>{0.5f, -0.25f}));
    EXPECT_EQ(f.require("u8s.empty").size(), 0u);
    EXPECT_EQ(f.require("u8s.empty").element_type(), ValueType::UINT8);
    EXPECT_TRUE(f.require("bools").at(0).as_bool());
    EXPECT_FALSE(f.require("bools").at(1).as_bool());
    EXPECT_EQ(f.require_i64_array("u64s"), (std::vector<int64_t>{1, int64_t{1} << 40}));

    const Value& nested = f.require("nested");
    ASSERT_EQ(nested.size(), 3u);
    EXPECT_EQ(nested.at(0).as_i64_array(), (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(nested.at(1).size(), 0u);
    EXPECT_EQ(nested.at(1).element_type(), ValueType::INT32);
    EXPECT_EQ(nested.at(2).as_string_array(), (std::vector<std::string>{"x"}));
    EXPECT_EQ(f.require("nested.deep").at(0).at(0).at(0).as_f32_array(), (std::vector<float>{9.f}));
    EXPECT_EQ(f.require("nested.empty").size(), 0u);
    EXPECT_EQ(f.require("nested.empty").element_type(), ValueType::ARRAY);

    // Everything compares equal to what was written, and in the order it was written.
    ASSERT_EQ(f.metadata().size(), 24u);
    const std::vector<uint8_t> again = every_kind_writer().to_bytes();
    EXPECT_EQ(again, bytes);
    EXPECT_EQ(f.metadata()[0].key, "u8");
    EXPECT_EQ(f.metadata()[23].key, "nested.empty");
    EXPECT_EQ(f.require("nested"), Value::array(ValueType::ARRAY, {Value::i32_array({1, 2}), Value::i32_array({}),
                                                                  Value::string_array({"x"})}));
}

TEST(GgufRoundTrip, FloatBitsSurvive) {
    Writer w;
    w.set_f32("nan", std::numeric_limits<float>::quiet_NaN());
    w.set_f32("neg0", -0.0f);
    w.set_f64("denorm", std::numeric_limits<double>::denorm_min());
    const std::vector<uint8_t> bytes = w.to_bytes();
    const File f = parse(bytes);
    EXPECT_TRUE(std::isnan(f.require_f32("nan")));
    EXPECT_EQ(std::bit_cast<uint32_t>(f.require_f32("neg0")), 0x80000000u);
    EXPECT_EQ(f.require_f64("denorm"), std::numeric_limits<double>::denorm_min());
}

TEST(GgufValues, TypedAccessorsRefuseMismatchesNamingFileAndKey) {
    Writer w;
    w.set_string("general.name", "x");
    w.set_i8("neg", -1);
    w.set_u64("big", uint64_t{1} << 63);
    w.set_u64("u33", uint64_t{1} << 33);
    w.set_i32("i", 7);
    const std::vector<uint8_t> bytes = w.to_bytes();
    const File f = parse(bytes);
    auto message = [](auto&& call) -> std::string {
        try {
            call();
        } catch (const Error& e) {
            return e.what();
        }
        return "no error";
    };
    EXPECT_EQ(message([&] { f.require_u64("general.name"); }),
              "gguf: test.gguf: key general.name: expected an integer, found string");
    EXPECT_EQ(message([&] { f.require_string("i"); }), "gguf: test.gguf: key i: expected string, found i32");
    EXPECT_EQ(message([&] { f.require_u64("missing.key"); }), "gguf: test.gguf: missing key missing.key");
    EXPECT_EQ(message([&] { f.require_tensor("nope"); }), "gguf: test.gguf: missing tensor nope");
    EXPECT_NE(message([&] { f.require_u64("neg"); }).find("non-negative"), std::string::npos);
    EXPECT_NE(message([&] { f.require_i64("big"); }).find("does not fit in i64"), std::string::npos);
    EXPECT_NE(message([&] { f.require_u32("u33"); }).find("does not fit in u32"), std::string::npos);
    EXPECT_NE(message([&] { f.require("i").at(0); }).find("expected array, found i32"), std::string::npos);
    EXPECT_EQ(f.require_i64("neg"), -1);
    EXPECT_EQ(f.require_f64("i"), 7.0);  // integers widen to floats
    EXPECT_EQ(f.get_u64("absent", 42), 42u);
    EXPECT_EQ(f.get_string("absent", "dflt"), "dflt");
    EXPECT_EQ(f.get_u64("i", 42), 7u);
    EXPECT_THROW(f.get_u64("general.name", 1), Error);  // present with the wrong type is an error
}

TEST(GgufWriter, RefusesInconsistentTensors) {
    Writer w;
    const std::vector<uint8_t> six(6);
    EXPECT_THROW(w.add_tensor("a", DType::F16, {4}, six), Error);          // 8 bytes needed
    EXPECT_THROW(w.add_tensor("b", DType::Q8_0, {16}, six), Error);        // row not a multiple of 32
    EXPECT_THROW(w.add_tensor("c", DType::F16, {0, 3}, six), Error);       // zero dimension
    EXPECT_THROW(w.add_tensor("d", DType::F16, {1, 1, 1, 1, 3}, six), Error);  // 5 dims
    w.add_tensor("e", DType::F16, {3}, six);
    EXPECT_THROW(w.add_tensor("e", DType::F16, {3}, six), Error);          // duplicate name
    EXPECT_THROW(w.set_alignment(48), Error);
    EXPECT_THROW(w.set_u64("general.alignment", 64), Error);               // llama.cpp requires u32
    EXPECT_THROW(Value::array(ValueType::INT32, {Value::u8(1)}), Error);  // mixed element types
}

TEST(GgufWriter, WritesThroughTempFileAndProducers) {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "deltabit_gguf_writer_test";
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "model.gguf").string();
    Writer w;
    w.set_string("general.architecture", "tiny");
    w.add_tensor_owned("owned", DType::F32, {2}, pattern_bytes(8, 1));
    w.add_tensor_produced("produced", DType::Q8_0, {32}, [](std::span<uint8_t> out) {
        ASSERT_EQ(out.size(), 34u);
        for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i);
    });
    w.write(path);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    File f = File::open(path);
    EXPECT_EQ(f.path(), path);
    EXPECT_EQ(f.file_size(), std::filesystem::file_size(path));
    EXPECT_EQ(f.require_string("general.architecture"), "tiny");
    EXPECT_EQ(std::vector<uint8_t>(f.require_tensor("owned").data, f.require_tensor("owned").data + 8),
              pattern_bytes(8, 1));
    EXPECT_EQ(f.require_tensor("produced").data[33], 33);

    // Move keeps the mapping alive and valid.
    File moved = std::move(f);
    EXPECT_EQ(moved.require_tensor("produced").data[33], 33);

    // A producer that throws leaves neither the file nor the .tmp behind.
    Writer bad;
    bad.add_tensor_produced("p", DType::F32, {1}, [](std::span<uint8_t>) { throw Error("boom"); });
    EXPECT_THROW(bad.write((dir / "bad.gguf").string()), Error);
    EXPECT_FALSE(std::filesystem::exists(dir / "bad.gguf"));
    EXPECT_FALSE(std::filesystem::exists(dir / "bad.gguf.tmp"));
    std::filesystem::remove_all(dir);
}

TEST(GgufFile, OpenRefusesMissingAndDirectories) {
    EXPECT_THROW(File::open("/nonexistent/model.gguf"), Error);
    EXPECT_THROW(File::open(std::filesystem::temp_directory_path().string()), Error);
}

}  // namespace
}  // namespace deltabit::gguf
