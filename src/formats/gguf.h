// GGUF, the file format llama.cpp reads and writes: read (mmap, every byte bounds-checked) and write.
//
// Layout (little-endian, version 3; version 2 has the same layout and is read too):
//   "GGUF" u32 version  u64 n_tensors  u64 n_kv
//   n_kv × { string key, u32 value_type, value }            string = u64 length + bytes (no NUL)
//   n_tensors × { string name, u32 n_dims, i64 ne[n_dims], u32 ggml_type, u64 offset }
//   zero padding to `general.alignment` (default 32), then the data section; each tensor's offset is
//   relative to the data section start and a multiple of the alignment.
// Arrays are u32 element_type, u64 count, elements; arrays of arrays nest.
//
// Shapes are in ggml order: shape[0] (ne0) is the contiguous dimension, i.e. the input/row length of a
// weight; shape[1] counts rows. A quantised tensor stores each row as shape[0]/block_elems blocks.
//
// Q2_0 (ggml id 42) names two incompatible block formats: PrismML's group-128 (34-byte blocks,
// DType::Q2_0) and upstream llama.cpp's group-64 (18-byte blocks, DType::Q2_0_G64). The reader
// decides per tensor from the room the tensor has in the file — see q2_0_fits() below.
//
// Every error is one line: "gguf: FILE: what (key/tensor), byte offset".
#pragma once

#include "core/mapped_file.h"

#include "core/dtype.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace deltabit {
class AtomicFile;
}

namespace deltabit::gguf {

inline constexpr uint32_t kVersion = 3;
inline constexpr uint64_t kDefaultAlignment = 32;
inline constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
inline constexpr uint32_t kMaxArrayDepth = 8;   // arrays of arrays nest at most this deep

enum class ValueType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};

// "u32", "string", "array", ...; "type#N" for ids outside the enum.
std::string_view value_type_name(ValueType t);
// Bytes one scalar of type t takes in the file (0 for STRING and ARRAY, whose size varies).
size_t value_type_size(ValueType t);

// One metadata value: a scalar, a string, or an array (whose elements may be arrays). Top-level values
// read from a file carry their key, so a type mismatch names it:
//   "gguf: key qwen35.block_count: expected an integer, found string".
// Arrays are stored compactly by element kind — scalars as their little-endian file bytes, strings as
// std::string, nested arrays as Values — because vocabularies hold ~250k entries per array; at(i)
// therefore returns a copy, and the bulk getters (as_string_array, string_elements, ...) are the fast
// way to read a whole array.
class Value {
public:
    Value() = default;  // u8 0

    static Value u8(uint8_t v);
    static Value i8(int8_t v);
    static Value u16(uint16_t v);
    static Value i16(int16_t v);
    static Value u32(uint32_t v);
    static Value i32(int32_t v);
    static Value u64(uint64_t v);
    static Value i64(int64_t v);
    static Value f32(float v);
    static Value f64(double v);
    static Value boolean(bool v);
    static Value string(std::string v);
    // Every element must have type `element_type` (an empty array still records it, as GGUF does).
    static Value array(ValueType element_type, std::vector<Value> elements);
    static Value string_array(const std::vector<std::string>& v);
    static Value i32_array(const std::vector<int32_t>& v);
    static Value f32_array(const std::vector<float>& v);

    ValueType type() const { return type_; }
    bool is_integer() const;
    bool is_float() const { return type_ == ValueType::FLOAT32 || type_ == ValueType::FLOAT64; }
    bool is_string() const { return type_ == ValueType::STRING; }
    bool is_array() const { return type_ == ValueType::ARRAY; }

    // Any integer type whose value fits; else Error naming the key.
    uint64_t as_u64() const;
    int64_t as_i64() const;
    uint32_t as_u32() const;
    int32_t as_i32() const;
    // FLOAT32/FLOAT64, and integers (converted; hyperparameters are sometimes written as ints).
    double as_f64() const;
    float as_f32() const { return static_cast<float>(as_f64()); }
    bool as_bool() const;
    const std::string& as_string() const;

    // Arrays.
    ValueType element_type() const;  // Error unless an array
    size_t size() const;             // element count; Error unless an array
    Value at(size_t i) const;        // Error when out of range
    const std::vector<std::string>& string_elements() const;  // Error unless an array of strings
    std::vector<std::string> as_string_array() const;
    std::vector<int64_t> as_i64_array() const;
    std::vector<float> as_f32_array() const;

    // The key this value was read under ("" for array elements and hand-built values).
    const std::string& key() const { return key_; }
    void set_key(std::string key) { key_ = std::move(key); }

    bool operator==(const Value& other) const;  // type, element type and contents; ignores the key

private:
    [[noreturn]] void mismatch(std::string_view wanted) const;

    ValueType type_ = ValueType::UINT8;
    ValueType element_type_ = ValueType::UINT8;  // arrays only
    uint64_t bits_ = 0;   // integers (signed ones sign-extended), bool, float/double bit patterns
    uint64_t count_ = 0;  // array element count
    std::string string_;
    std::vector<uint8_t> raw_;          // array of scalars: count_ × value_type_size, little-endian
    std::vector<std::string> strings_;  // array of strings
    std::vector<Value> items_;          // array of arrays
    std::string key_;

    friend class ValueEncoder;
};

struct KeyValue {
    std::string key;
    Value value;
};

struct TensorInfo {
    std::string name;
    DType dtype = DType::F32;
    uint32_t ggml_id = 0;          // as stored in the file (42 for both Q2_0 variants)
    std::vector<int64_t> shape;    // ggml order: shape[0] = ne0, the contiguous (row/input) dimension
    uint64_t offset = 0;           // absolute byte offset in the file
    uint64_t bytes = 0;            // exact payload size (no padding)
    const uint8_t* data = nullptr; // into the mapping; valid while the File lives

    uint64_t n_elements() const;
    int64_t row_length() const { return shape.empty() ? 1 : shape[0]; }
    uint64_t n_rows() const;       // product of shape[1..]; 1 for a vector
    std::span<const uint8_t> span() const { return {data, static_cast<size_t>(bytes)}; }
};

// Which Q2_0 variants a tensor could be, given its row length, element count and the bytes it has
// before the next tensor (or the end of the data section). A variant is a candidate when its block
// size divides the row and its byte size fits the room; it "fills" the room when the leftover is
// less than the alignment, which is what every GGUF writer leaves (it pads each tensor to the
// alignment). Candidates that fill win over ones that merely fit. The two variants differ by 2 bytes
// per 128 weights, so for tensors of ≥ 64·alignment elements exactly one can fill; smaller ones can
// be undecided (count == 2).
DTypeCandidates q2_0_fits(uint64_t row_length, uint64_t n_elements, uint64_t room, uint64_t alignment);

// The DType of a tensor with ggml type `ggml_id`. Unknown ids are refused by name ("q4_k"); a row
// length that is not a multiple of the block is refused; id 42 is decided with q2_0_fits() and refused
// when it fits neither or both variants (room == 0 means "unknown room": id 42 is then refused).
// `what` prefixes the message, e.g. "gguf: model.gguf: tensor blk.0.attn_q.weight".
DType resolve_ggml_type(uint32_t ggml_id, uint64_t row_length, uint64_t n_elements, uint64_t room,
                        uint64_t alignment, std::string_view what);

// A parsed GGUF: either a read-only mmap of a file it owns (open) or a view of bytes the caller keeps
// alive (parse). Move-only. Everything was validated at construction; accessors do not re-check.
//
// Tensor data must lie inside the data section, not overlap, and (like every GGUF writer leaves it)
// be followed by less than `alignment` bytes of padding before the next tensor: a wider gap means the
// shape × type disagrees with the layout and is refused. Tensors may be listed in any order.
// Undecided Q2_0 tensors (see q2_0_fits) take the variant the file's decided id-42 tensors agree on;
// a file whose decided tensors disagree, or whose id-42 tensors are all undecided, is refused.
class File {
public:
    static File open(const std::string& path);
    // Parse bytes held by the caller (fuzzing, tests, embedded files); `name` stands in for the path
    // in messages. TensorInfo::data points into `bytes`.
    static File parse(std::span<const uint8_t> bytes, std::string name);

    File(File&&) noexcept;
    File& operator=(File&&) noexcept;
    File(const File&) = delete;
    File& operator=(const File&) = delete;
    ~File();

    const std::string& path() const { return path_; }
    uint64_t file_size() const { return bytes_.size(); }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }  // absolute start of the data section
    std::span<const uint8_t> bytes() const { return bytes_; }

    // Metadata in file order.
    const std::vector<KeyValue>& metadata() const { return metadata_; }
    const Value* find(std::string_view key) const;
    bool has(std::string_view key) const { return find(key) != nullptr; }
    // Error "gguf: FILE: missing key KEY" when absent.
    const Value& require(std::string_view key) const;

    // Typed getters: the default when the key is absent, Error naming file and key on a wrong type.
    uint64_t get_u64(std::string_view key, uint64_t fallback) const;
    int64_t get_i64(std::string_view key, int64_t fallback) const;
    uint32_t get_u32(std::string_view key, uint32_t fallback) const;
    double get_f64(std::string_view key, double fallback) const;
    float get_f32(std::string_view key, float fallback) const;
    bool get_bool(std::string_view key, bool fallback) const;
    std::string get_string(std::string_view key, std::string fallback) const;
    // Required variants: Error "gguf: FILE: missing key KEY" when absent.
    uint64_t require_u64(std::string_view key) const;
    int64_t require_i64(std::string_view key) const;
    uint32_t require_u32(std::string_view key) const;
    double require_f64(std::string_view key) const;
    float require_f32(std::string_view key) const;
    bool require_bool(std::string_view key) const;
    std::string require_string(std::string_view key) const;
    std::vector<std::string> require_string_array(std::string_view key) const;
    std::vector<int64_t> require_i64_array(std::string_view key) const;
    std::vector<float> require_f32_array(std::string_view key) const;

    // Tensors in file order (the order of the tensor-info table, not of the data).
    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const TensorInfo* find_tensor(std::string_view name) const;
    const TensorInfo& require_tensor(std::string_view name) const;  // "gguf: FILE: missing tensor NAME"

private:
    File() = default;
    friend class Parser;
    friend void parse_into(File& file);
    template <typename T, typename Get>
    T typed(std::string_view key, Get get) const;

    std::string path_;
    std::span<const uint8_t> bytes_;
    MappedFile mapping_;  // owned mapping (open); empty when parsing bytes the caller keeps (parse)
    uint32_t version_ = 0;
    uint64_t alignment_ = kDefaultAlignment;
    uint64_t data_offset_ = 0;
    std::vector<KeyValue> metadata_;
    std::map<std::string, size_t, std::less<>> key_index_;
    std::vector<TensorInfo> tensors_;
    std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Builds a GGUF v3 file as llama.cpp writes it. Metadata keeps insertion order; setting a key again
// replaces its value in place. Tensors are written in the order added, each at an offset aligned to
// `general.alignment` (32 unless set_alignment is called, which also writes the key), zero-padded.
class Writer {
public:
    // Writes the payload of one tensor into `out` (exactly the tensor's byte size) at write time, so
    // a converter can quantise one tensor at a time without holding the whole model.
    using Producer = std::function<void(std::span<uint8_t> out)>;

    void set(std::string key, Value value);
    void set_u8(std::string key, uint8_t v) { set(std::move(key), Value::u8(v)); }
    void set_i8(std::string key, int8_t v) { set(std::move(key), Value::i8(v)); }
    void set_u16(std::string key, uint16_t v) { set(std::move(key), Value::u16(v)); }
    void set_i16(std::string key, int16_t v) { set(std::move(key), Value::i16(v)); }
    void set_u32(std::string key, uint32_t v) { set(std::move(key), Value::u32(v)); }
    void set_i32(std::string key, int32_t v) { set(std::move(key), Value::i32(v)); }
    void set_u64(std::string key, uint64_t v) { set(std::move(key), Value::u64(v)); }
    void set_i64(std::string key, int64_t v) { set(std::move(key), Value::i64(v)); }
    void set_f32(std::string key, float v) { set(std::move(key), Value::f32(v)); }
    void set_f64(std::string key, double v) { set(std::move(key), Value::f64(v)); }
    void set_bool(std::string key, bool v) { set(std::move(key), Value::boolean(v)); }
    void set_string(std::string key, std::string v) { set(std::move(key), Value::string(std::move(v))); }
    void set_string_array(std::string key, const std::vector<std::string>& v) { set(std::move(key), Value::string_array(v)); }
    void set_i32_array(std::string key, const std::vector<int32_t>& v) { set(std::move(key), Value::i32_array(v)); }
    void set_f32_array(std::string key, const std::vector<float>& v) { set(std::move(key), Value::f32_array(v)); }
    void set_array(std::string key, ValueType element_type, std::vector<Value> elements) {
        set(std::move(key), Value::array(element_type, std::move(elements)));
    }
    // Power of two; stored as general.alignment (u32).
    void set_alignment(uint32_t alignment);
    uint64_t alignment() const { return alignment_; }

    // `shape` in ggml order. The payload must be exactly dtype_bytes(dtype, n_elements) bytes.
    // Borrowed: `bytes` must stay alive until write() returns.
    void add_tensor(std::string name, DType dtype, std::vector<int64_t> shape, std::span<const uint8_t> bytes);
    // Owned copy of the payload.
    void add_tensor_owned(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
    // Produced at write time.
    void add_tensor_produced(std::string name, DType dtype, std::vector<int64_t> shape, Producer producer);

    // Through AtomicFile (core/file_io.h): a temporary file renamed over path; a path that is a device,
    // FIFO or folder is refused; nothing is left behind on failure.
    void write(const std::string& path) const;
    // The file's bytes into `file`, not committed (the caller checks the temporary file first).
    void write_into(AtomicFile& file) const;
    // The whole file in memory (tests, fuzz seeds).
    std::vector<uint8_t> to_bytes() const;

private:
    struct PendingTensor {
        std::string name;
        DType dtype;
        std::vector<int64_t> shape;
        uint64_t bytes;
        std::span<const uint8_t> borrowed;
        std::shared_ptr<std::vector<uint8_t>> owned;
        Producer producer;
    };
    void add_pending(PendingTensor tensor);
    template <typename Sink>
    void emit(Sink& sink) const;

    std::vector<KeyValue> metadata_;
    std::vector<PendingTensor> tensors_;
    uint64_t alignment_ = kDefaultAlignment;
};

}  // namespace deltabit::gguf
