// safetensors reader and writer. Files are built byte by byte here (header length, JSON, data), so the
// reader is checked against the format itself rather than against our own writer.
#include "core/error.h"
#include "formats/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace deltabit::safetensors {
namespace {

std::vector<uint8_t> make_file(const std::string& header, const std::vector<uint8_t>& data) {
    std::vector<uint8_t> out(8);
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out[i] = uint8_t(n >> (8 * i));
    out.insert(out.end(), header.begin(), header.end());
    out.insert(out.end(), data.begin(), data.end());
    return out;
}

// Runs `body`, expects a deltabit::Error whose message contains every fragment.
template <typename Body>
void expect_error(Body body, const std::vector<std::string>& fragments) {
    try {
        body();
        ADD_FAILURE() << "no error; expected one containing '" << fragments.front() << "'";
    } catch (const Error& e) {
        const std::string message = e.what();
        for (const std::string& f : fragments) EXPECT_NE(message.find(f), std::string::npos) << message << "\n  lacks: " << f;
        EXPECT_EQ(message.find('\n'), std::string::npos) << "message must be one line: " << message;
    }
}

void expect_parse_error(const std::vector<uint8_t>& bytes, const std::vector<std::string>& fragments) {
    expect_error([&] { File::parse(bytes, "t.safetensors"); }, fragments);
}

// A scratch folder per test, removed afterwards.
class TempDir {
public:
    TempDir() {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        path_ = std::filesystem::temp_directory_path() /
                (std::string("deltabit-st-") + info->name() + "-" + std::to_string(::getpid()));
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~TempDir() { std::filesystem::remove_all(path_); }
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

void write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

void write_text(const std::filesystem::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
}

TEST(Safetensors, ReadsF32F16Bf16AndOffsets) {
    // 1.5f = 0x3FC00000, -2.0f = 0xC0000000; fp16 1.0 = 0x3C00; bf16 -2.0 = 0xC000 (little-endian).
    const std::vector<uint8_t> data = {0x00, 0x00, 0xC0, 0x3F, 0x00, 0x00, 0x00, 0xC0,  // w: F32 [2]
                                       0x00, 0x3C,                                      // h: F16 [1,1]
                                       0x00, 0xC0, 0x00, 0xC0, 0x00, 0xC0};             // b: BF16 [3]
    const std::string header =
        R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("h":{"dtype":"F16","shape":[1,1],"data_offsets":[8,10]},)"
        R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[10,16]},)"
        R"("__metadata__":{"format":"pt"}})";
    const std::vector<uint8_t> bytes = make_file(header, data);
    const File file = File::parse(bytes, "t.safetensors");

    EXPECT_EQ(file.data_offset(), 8 + header.size());
    ASSERT_EQ(file.tensors().size(), 3u);
    // Listed in data order, not header order.
    EXPECT_EQ(file.tensors()[0].name, "w");
    EXPECT_EQ(file.tensors()[1].name, "h");
    EXPECT_EQ(file.tensors()[2].name, "b");

    const TensorInfo* w = file.find("w");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->require_dtype(), DType::F32);
    EXPECT_EQ(w->shape, (std::vector<int64_t>{2}));
    EXPECT_EQ(w->offset, 8 + header.size());
    EXPECT_EQ(w->bytes, 8u);
    float values[2];
    std::memcpy(values, w->data, 8);
    EXPECT_EQ(values[0], 1.5f);
    EXPECT_EQ(values[1], -2.0f);

    const TensorInfo* h = file.find("h");
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(h->require_dtype(), DType::F16);
    EXPECT_EQ(h->shape, (std::vector<int64_t>{1, 1}));
    EXPECT_EQ(h->offset, 8 + header.size() + 8);
    EXPECT_EQ(h->data[1], 0x3C);

    const TensorInfo* b = file.find("b");
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->require_dtype(), DType::BF16);
    EXPECT_EQ(b->n_elements(), 3u);
    EXPECT_EQ(b->bytes, 6u);
    EXPECT_EQ(b->data - bytes.data(), int64_t(8 + header.size() + 10));

    EXPECT_EQ(file.find("missing"), nullptr);
    EXPECT_EQ(file.metadata().at("format"), "pt");
}

TEST(Safetensors, ListsUnsupportedDtypesButRefusesTheirData) {
    const std::vector<uint8_t> bytes = make_file(
        R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},"f8":{"dtype":"F8_E4M3","shape":[3],"data_offsets":[16,19]}})",
        std::vector<uint8_t>(19, 0));
    const File file = File::parse(bytes, "t.safetensors");
    ASSERT_EQ(file.tensors().size(), 2u);
    const TensorInfo* ids = file.find("ids");
    ASSERT_NE(ids, nullptr);
    EXPECT_EQ(ids->dtype_name, "I64");
    EXPECT_FALSE(ids->dtype.has_value());
    expect_error([&] { ids->require_dtype(); }, {"t.safetensors", "tensor ids", "dtype I64 is not supported"});
    expect_error([&] { file.find("f8")->require_dtype(); }, {"tensor f8", "F8_E4M3"});
}

TEST(Safetensors, EmptyAndZeroSizedTensors) {
    // A header with no tensors is a valid file; a tensor with a 0 dimension takes no bytes and may sit
    // at the same offset as a real one without overlapping it.
    EXPECT_EQ(File::parse(make_file("{}", {}), "e").tensors().size(), 0u);
    const File file = File::parse(
        make_file(R"({"z":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]},"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
                  {1, 2, 3, 4}),
        "t");
    EXPECT_EQ(file.find("z")->bytes, 0u);
    EXPECT_EQ(file.find("a")->n_elements(), 1u);  // a scalar: empty shape, one element
}

TEST(Safetensors, RefusesBadLengths) {
    expect_parse_error({1, 2, 3}, {"safetensors: t.safetensors", "3 bytes", "too short"});
    // 200 MB header length: refused before anything is read.
    std::vector<uint8_t> huge = make_file("{}", {});
    const uint64_t n = 200ull << 20;
    for (int i = 0; i < 8; ++i) huge[i] = uint8_t(n >> (8 * i));
    expect_parse_error(huge, {"header length 209715200 at byte 0", "100 MB"});
    // 64-byte header claimed, 2 bytes present.
    std::vector<uint8_t> short_header = make_file("{}", {});
    short_header[0] = 64;
    expect_parse_error(short_header, {"header length 64 at byte 0 runs past end of file (size 10)"});
    expect_parse_error(make_file("[1]", {}), {"does not start with '{'"});
}

TEST(Safetensors, ReportsJsonErrorPosition) {
    // The '}' at header byte 5 is where a value was expected; file offset = 8 + 5.
    expect_parse_error(make_file(R"({"a":})", {}), {"malformed JSON at header byte 5 (file offset 13)"});
    expect_parse_error(make_file(R"({"a":{"dtype":"F32"})", {}), {"malformed JSON", "header byte 20 (file offset 28)"});
}

TEST(Safetensors, RefusesBadTensorEntries) {
    const std::vector<uint8_t> data(16, 0);
    auto one = [&](const std::string& entry) { return make_file(R"({"t":)" + entry + "}", data); };
    expect_parse_error(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,24]})"),
                       {"tensor t", "data_offsets [0, 24]", "past end of file (size"});
    expect_parse_error(one(R"({"dtype":"F32","shape":[1],"data_offsets":[8,4]})"),
                       {"tensor t", "data_offsets [8, 4]", "begin is after end"});
    expect_parse_error(one(R"({"dtype":"F32","shape":[2,2],"data_offsets":[0,12]})"),
                       {"tensor t", "hold 12 bytes but shape [2, 2] of F32 needs 16"});
    expect_parse_error(one(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), {"tensor t: shape[0] is negative"});
    expect_parse_error(one(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,8]})"), {"shape[0] is not a non-negative integer"});
    // 2^32 · 2^32 elements overflow 64 bits; so do 2^62 F32 elements in bytes.
    expect_parse_error(one(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"),
                       {"tensor t", "overflows 64 bits"});
    expect_parse_error(one(R"({"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,8]})"),
                       {"tensor t", "overflows 64 bits in bytes"});
    expect_parse_error(one(R"({"dtype":"Q4","shape":[2],"data_offsets":[0,8]})"), {"tensor t", "unknown dtype 'Q4'"});
    expect_parse_error(one(R"({"shape":[2],"data_offsets":[0,8]})"), {"tensor t", "missing string field dtype"});
    expect_parse_error(one(R"({"dtype":"F32","data_offsets":[0,8]})"), {"tensor t", "missing array field shape"});
    expect_parse_error(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"), {"tensor t", "data_offsets must be"});
    expect_parse_error(one(R"([1,2])"), {"tensor t", "not an object"});
    expect_parse_error(make_file(R"({"__metadata__":{"k":1}})", {}), {"__metadata__ key k", "not a string"});
}

TEST(Safetensors, RefusesOverlapsAndDuplicates) {
    const std::vector<uint8_t> data(16, 0);
    expect_parse_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                 R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                 data),
                       {"tensor b: bytes", "overlap tensor a"});
    expect_parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                 R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                 data),
                       {"tensor a: listed twice"});
}

TEST(Safetensors, WriterRoundTripKeepsAlignment) {
    const std::vector<uint8_t> f16 = {1, 2, 3, 4, 5, 6};          // 3 × F16: odd count
    const std::vector<uint8_t> f32 = {9, 9, 9, 9, 8, 8, 8, 8};    // 2 × F32
    const std::vector<uint8_t> i64(8, 7);                          // 1 × I64
    const std::vector<uint8_t> u8 = {42};
    const std::vector<uint8_t> bytes = serialize(
        {{"half", "F16", {3}, f16}, {"single", "F32", {1, 2}, f32}, {"long", "I64", {1}, i64}, {"byte", "U8", {1}, u8}},
        {{"format", "pt"}});
    const File file = File::parse(bytes, "w");
    EXPECT_EQ(file.data_offset() % 8, 0u);
    // Largest element first: I64, F32, F16, U8 — so each starts at a multiple of its element size.
    ASSERT_EQ(file.tensors().size(), 4u);
    EXPECT_EQ(file.tensors()[0].name, "long");
    EXPECT_EQ(file.tensors()[1].name, "single");
    EXPECT_EQ(file.tensors()[2].name, "half");
    EXPECT_EQ(file.tensors()[3].name, "byte");
    for (const TensorInfo& t : file.tensors()) EXPECT_EQ(t.offset % element_size(t.dtype_name), 0u) << t.name;
    EXPECT_EQ(file.find("single")->shape, (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(std::vector<uint8_t>(file.find("half")->data, file.find("half")->data + 6), f16);
    EXPECT_EQ(std::vector<uint8_t>(file.find("single")->data, file.find("single")->data + 8), f32);
    EXPECT_EQ(file.metadata().at("format"), "pt");
    EXPECT_EQ(bytes.size(), file.data_offset() + 8 + 8 + 6 + 1);  // no padding between tensors

    expect_error([&] { serialize({{"x", "F32", {3}, f32}}); }, {"tensor x", "8 bytes given", "needs 12"});
    expect_error([&] { serialize({{"x", "F32", {2}, f32}, {"x", "F32", {2}, f32}}); }, {"tensor x added twice"});
    expect_error([&] { serialize({{"x", "Q4_0", {2}, f32}}); }, {"unknown dtype"});
}

TEST(Safetensors, OpensFileAndSingleFileFolder) {
    TempDir dir;
    const std::vector<uint8_t> payload = {0, 0, 0x80, 0x3F};  // 1.0f
    write(dir.path() / "model.safetensors", {{"x", "F32", {1}, payload}});
    EXPECT_FALSE(std::filesystem::exists(dir.path() / "model.safetensors.tmp"));

    const File file = File::open(dir.path() / "model.safetensors");
    float v = 0;
    std::memcpy(&v, file.find("x")->data, 4);
    EXPECT_EQ(v, 1.0f);

    const Set set = Set::open(dir.path());
    EXPECT_EQ(set.size(), 1u);
    EXPECT_EQ(set.total_bytes(), 4u);
    EXPECT_EQ(set.require("x").bytes, 4u);
    expect_error([&] { set.require("y"); }, {"missing tensor y"});

    expect_error([&] { File::open(dir.path() / "absent.safetensors"); }, {"absent.safetensors", "cannot open"});
    std::filesystem::remove(dir.path() / "model.safetensors");
    expect_error([&] { Set::open(dir.path()); }, {"neither model.safetensors.index.json nor model.safetensors"});
    write_bytes(dir.path() / "empty.safetensors", {});
    expect_error([&] { File::open(dir.path() / "empty.safetensors"); }, {"empty.safetensors", "0 bytes"});
}

TEST(Safetensors, ShardedIndexSpansShards) {
    TempDir dir;
    const std::vector<uint8_t> a(8, 1), b(12, 2), c(2, 3);
    write(dir.path() / "model-00001-of-00002.safetensors", {{"layers.0.w", "F32", {2}, a}, {"embed", "F16", {1}, c}});
    write(dir.path() / "model-00002-of-00002.safetensors", {{"layers.1.w", "F32", {3}, b}});
    write_text(dir.path() / "model.safetensors.index.json",
               R"({"metadata":{"total_size":22},"weight_map":{)"
               R"("layers.0.w":"model-00001-of-00002.safetensors","embed":"model-00001-of-00002.safetensors",)"
               R"("layers.1.w":"model-00002-of-00002.safetensors"}})");
    Set set = Set::open(dir.path());
    EXPECT_EQ(set.files().size(), 2u);
    EXPECT_EQ(set.size(), 3u);
    EXPECT_EQ(set.total_bytes(), 22u);
    EXPECT_EQ(set.require("layers.1.w").shape, (std::vector<int64_t>{3}));
    EXPECT_NE(set.require("layers.1.w").file.find("00002"), std::string::npos);
    std::vector<std::string> names;
    for (const TensorInfo* t : set) names.push_back(t->name);
    EXPECT_EQ(names, (std::vector<std::string>{"embed", "layers.0.w", "layers.1.w"}));

    // Moving the set keeps its lookups valid (they point into the files' tensor lists).
    const Set moved = std::move(set);
    EXPECT_EQ(moved.require("embed").bytes, 2u);
    EXPECT_EQ(moved.require("embed").data[0], 3);
}

TEST(Safetensors, ShardedIndexErrorsNameTensorAndShard) {
    TempDir dir;
    const std::vector<uint8_t> a(8, 1);
    write(dir.path() / "s1.safetensors", {{"w", "F32", {2}, a}});
    write(dir.path() / "s2.safetensors", {{"w", "F32", {2}, a}, {"z", "F32", {2}, a}});
    const auto index = dir.path() / "model.safetensors.index.json";

    write_text(index, R"({"weight_map":{"w":"s1.safetensors","v":"gone.safetensors"}})");
    expect_error([&] { Set::open(dir.path()); }, {"shard gone.safetensors (listed for tensor v) is missing"});

    write_text(index, R"({"weight_map":{"w":"s1.safetensors","v":"s1.safetensors"}})");
    expect_error([&] { Set::open(dir.path()); }, {"tensor v is listed in shard s1.safetensors", "does not contain it"});

    // s2 also holds w: the same name in two shards is ambiguous.
    write_text(index, R"({"weight_map":{"w":"s1.safetensors","z":"s2.safetensors"}})");
    expect_error([&] { Set::open(dir.path()); }, {"tensor w is in both", "s1.safetensors", "s2.safetensors"});
    std::vector<File> both;
    both.push_back(File::open(dir.path() / "s1.safetensors"));
    both.push_back(File::open(dir.path() / "s2.safetensors"));
    expect_error([&] { Set::from_files(std::move(both), "pair"); }, {"tensor w is in both", "s1.safetensors", "s2.safetensors"});

    write_text(index, R"({"weight_map":{"w":"../s1.safetensors"}})");
    expect_error([&] { Set::open(dir.path()); }, {"weight_map[w]", "not a file name inside the folder"});
    write_text(index, R"({"metadata":{}})");
    expect_error([&] { Set::open(dir.path()); }, {"missing object weight_map"});
    write_text(index, R"({"weight_map":)");
    expect_error([&] { Set::open(index); }, {"model.safetensors.index.json", "malformed JSON"});
}

}  // namespace
}  // namespace deltabit::safetensors
