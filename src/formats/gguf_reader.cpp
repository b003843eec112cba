// The GGUF parser: every field is bounds-checked against the bytes before it is read, every count is
// bounded by what the remaining bytes could hold before anything is allocated, and every tensor's
// data is checked to lie inside the data section without overlapping another. Errors name the file,
// the key or tensor, and the byte offset.
#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gguf_codec.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>

namespace deltabit::gguf {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32

// Smallest encodings, used to bound counts before allocating: a key-value is at least a u64 key
// length, a u32 type and a 1-byte value; a tensor info at least a u64 name length, u32 n_dims, one
// i64 dim, u32 type and u64 offset.
constexpr uint64_t kMinKeyValueBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

uint64_t min_element_bytes(ValueType t) {
    if (t == ValueType::STRING) return 8;       // u64 length
    if (t == ValueType::ARRAY) return 4 + 8;    // element type + count
    return value_type_size(t);
}

bool is_known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::FLOAT64); }

// Offset of the first byte that breaks UTF-8 (overlong forms, surrogates and code points past
// U+10FFFF included), or npos when `s` is valid.
size_t first_invalid_utf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        size_t len;
        uint32_t cp;
        if (c < 0x80) {
            ++i;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2, cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, cp = c & 0x07;
        } else {
            return i;
        }
        if (i + len > s.size()) return i;
        for (size_t k = 1; k < len; ++k) {
            const auto cc = static_cast<unsigned char>(s[i + k]);
            if ((cc & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (cc & 0x3F);
        }
        static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < kMinForLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += len;
    }
    return std::string_view::npos;
}

}  // namespace

class Parser {
public:
    explicit Parser(File& file) : file_(file), bytes_(file.bytes_), path_(file.path_) {}

    void run() {
        read_header();
        read_metadata();
        read_alignment();
        read_tensor_infos();
        place_tensors();
    }

private:
    struct RawTensor {
        uint32_t ggml_id;
        uint64_t relative_offset;
        uint64_t room = 0;     // bytes until the next tensor's offset or the end of the data section
    };

    uint64_t remaining() const { return bytes_.size() - pos_; }

    void need(uint64_t n, std::string_view what) const {
        if (n > remaining()) {
            fail("gguf: {}: truncated: {} at offset {} needs {} bytes, only {} left (size {})", path_, what, pos_, n,
                 remaining(), bytes_.size());
        }
    }

    template <typename T>
    T read(std::string_view what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    std::string read_string(std::string_view what) {
        const uint64_t at = pos_;
        const auto length = read<uint64_t>(what);
        if (length > remaining()) {
            fail("gguf: {}: {} at offset {}: string length {} runs past end of file (size {})", path_, what, at, length,
                 bytes_.size());
        }
        std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
        pos_ += length;
        return s;
    }

    // A key or tensor name: a string that must be valid UTF-8.
    std::string read_name(std::string_view what) {
        const uint64_t at = pos_;
        std::string s = read_string(what);
        if (size_t bad = first_invalid_utf8(s); bad != std::string_view::npos) {
            fail("gguf: {}: {} at offset {} is not valid UTF-8 (byte 0x{:02x} at offset {})", path_, what, at,
                 static_cast<unsigned char>(s[bad]), at + 8 + bad);
        }
        return s;
    }

    ValueType read_value_type(std::string_view context) {
        const uint64_t at = pos_;
        const auto t = read<uint32_t>(context);
        if (!is_known_value_type(t)) fail("gguf: {}: {}: unknown value type {} at offset {}", path_, context, t, at);
        return static_cast<ValueType>(t);
    }

    void read_header() {
        const auto magic = read<uint32_t>("magic");
        if (magic != kMagic) {
            fail("gguf: {}: not a GGUF file (magic {:02x} {:02x} {:02x} {:02x} at offset 0, expected \"GGUF\")", path_,
                 bytes_[0], bytes_[1], bytes_[2], bytes_[3]);
        }
        // Version 2 differs from 3 only in allowing big-endian files (which carry a byte-swapped
        // version and so fail here); version 1 used 32-bit counts and is long gone.
        file_.version_ = read<uint32_t>("version");
        if (file_.version_ != 2 && file_.version_ != 3) {
            fail("gguf: {}: unsupported version {} at offset 4 (reads 2 and 3)", path_, file_.version_);
        }
        n_tensors_ = read<uint64_t>("tensor count");
        n_kv_ = read<uint64_t>("metadata count");
        if (n_kv_ > remaining() / kMinKeyValueBytes) {
            fail("gguf: {}: metadata count {} at offset 16 cannot fit in the {} bytes that follow", path_, n_kv_,
                 remaining());
        }
        if (n_tensors_ > remaining() / kMinTensorInfoBytes) {
            fail("gguf: {}: tensor count {} at offset 8 cannot fit in the {} bytes that follow", path_, n_tensors_,
                 remaining());
        }
    }

    void read_metadata() {
        file_.metadata_.reserve(n_kv_);
        for (uint64_t i = 0; i < n_kv_; ++i) {
            const uint64_t at = pos_;
            std::string key = read_name(fmt::format("key #{}", i));
            if (file_.key_index_.count(key)) fail("gguf: {}: duplicate key {} at offset {}", path_, key, at);
            const std::string context = "key " + key;  // built once per key, not per array element
            const ValueType type = read_value_type(context);
            Value value = read_value(type, 0, context);
            value.set_key(key);
            file_.key_index_.emplace(key, file_.metadata_.size());
            file_.metadata_.push_back({std::move(key), std::move(value)});
        }
    }

    Value read_value(ValueType type, uint32_t depth, std::string_view context) {
        if (type == ValueType::STRING) return Value::string(read_string(context));
        if (type == ValueType::ARRAY) return read_array(depth, context);
        need(value_type_size(type), context);
        const uint8_t* p = bytes_.data() + pos_;
        if (type == ValueType::BOOL && *p > 1) fail("gguf: {}: {}: bool {} at offset {} is neither 0 nor 1", path_, context, *p, pos_);
        pos_ += value_type_size(type);
        return ValueEncoder::scalar_from_bytes(type, p);
    }

    Value read_array(uint32_t depth, std::string_view context) {
        const uint64_t at = pos_;
        if (depth >= kMaxArrayDepth) fail("gguf: {}: {}: arrays nested deeper than {} at offset {}", path_, context, kMaxArrayDepth, at);
        const ValueType element_type = read_value_type(context);
        const auto count = read<uint64_t>(context);
        if (count > remaining() / min_element_bytes(element_type)) {
            fail("gguf: {}: {}: array of {} {} at offset {} cannot fit in the {} bytes left", path_, context, count,
                 value_type_name(element_type), at, remaining());
        }
        if (element_type == ValueType::STRING) {
            std::vector<std::string> strings;
            strings.reserve(count);
            for (uint64_t i = 0; i < count; ++i) strings.push_back(read_string(context));
            return ValueEncoder::string_array(std::move(strings));
        }
        if (element_type == ValueType::ARRAY) {
            std::vector<Value> items;  // no reserve: each element's size is only known once read
            for (uint64_t i = 0; i < count; ++i) items.push_back(read_array(depth + 1, context));
            return Value::array(ValueType::ARRAY, std::move(items));
        }
        const uint64_t size = count * value_type_size(element_type);  // ≤ remaining(), checked above
        const uint8_t* p = bytes_.data() + pos_;
        if (element_type == ValueType::BOOL) {
            for (uint64_t i = 0; i < count; ++i) {
                if (p[i] > 1) fail("gguf: {}: {}: bool {} at offset {} is neither 0 nor 1", path_, context, p[i], pos_ + i);
            }
        }
        std::vector<uint8_t> raw(p, p + size);
        pos_ += size;
        return ValueEncoder::scalar_array(element_type, count, std::move(raw));
    }

    void read_alignment() {
        const Value* v = file_.find("general.alignment");
        if (!v) return;
        // llama.cpp stores and requires a u32 here; a file with another type would not load there.
        if (v->type() != ValueType::UINT32) {
            fail("gguf: {}: key general.alignment: expected u32, found {}", path_, value_type_name(v->type()));
        }
        const uint64_t alignment = v->as_u64();
        if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
            fail("gguf: {}: key general.alignment: {} is not a power of two", path_, alignment);
        }
        file_.alignment_ = alignment;
    }

    void read_tensor_infos() {
        if (n_tensors_ > remaining() / kMinTensorInfoBytes) {
            fail("gguf: {}: tensor count {} cannot fit in the {} bytes after the metadata (offset {})", path_,
                 n_tensors_, remaining(), pos_);
        }
        file_.tensors_.reserve(n_tensors_);
        raw_.reserve(n_tensors_);
        for (uint64_t i = 0; i < n_tensors_; ++i) read_tensor_info(i);
    }

    void read_tensor_info(uint64_t index) {
        const uint64_t at = pos_;
        TensorInfo info;
        info.name = read_name(fmt::format("tensor #{} name", index));
        const std::string what = fmt::format("tensor {} (info at offset {})", info.name, at);
        if (file_.tensor_index_.count(info.name)) fail("gguf: {}: duplicate {}", path_, what);

        const auto n_dims = read<uint32_t>(what);
        if (n_dims == 0 || n_dims > kMaxDims) fail("gguf: {}: {}: {} dimensions (1 to {} allowed)", path_, what, n_dims, kMaxDims);
        int64_t n_elements = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const auto dim = read<int64_t>(what);
            if (dim <= 0) fail("gguf: {}: {}: dimension {} is {} (must be positive)", path_, what, d, dim);
            if (__builtin_mul_overflow(n_elements, dim, &n_elements)) {
                fail("gguf: {}: {}: element count overflows at dimension {}", path_, what, d);
            }
            info.shape.push_back(dim);
        }
        info.ggml_id = read<uint32_t>(what);
        if (dtypes_for_ggml_id(info.ggml_id).count == 0) {
            fail("gguf: {}: {}: ggml type {} (id {}) is not supported", path_, what, ggml_type_name(info.ggml_id), info.ggml_id);
        }
        const auto offset = read<uint64_t>(what);
        if (offset % file_.alignment_ != 0) {
            fail("gguf: {}: {}: data offset {} is not a multiple of the alignment {}", path_, what, offset, file_.alignment_);
        }
        file_.tensor_index_.emplace(info.name, file_.tensors_.size());
        file_.tensors_.push_back(std::move(info));
        raw_.push_back({file_.tensors_.back().ggml_id, offset});
    }

    std::string tensor_what(size_t i) const {
        return fmt::format("gguf: {}: tensor {}", path_, file_.tensors_[i].name);
    }

    void place_tensors() {
        const uint64_t data_offset = align_up(pos_, file_.alignment_);
        file_.data_offset_ = data_offset;
        if (raw_.empty()) return;
        if (data_offset > bytes_.size()) {
            fail("gguf: {}: data section starts at offset {} (header ends at {}, alignment {}), past end of file (size {})",
                 path_, data_offset, pos_, file_.alignment_, bytes_.size());
        }
        const uint64_t data_size = bytes_.size() - data_offset;

        // Sorted by data offset, each tensor's room runs to the next tensor (or the data's end).
        std::vector<size_t> order(raw_.size());
        std::iota(order.begin(), order.end(), size_t{0});
        std::stable_sort(order.begin(), order.end(),
                         [&](size_t a, size_t b) { return raw_[a].relative_offset < raw_[b].relative_offset; });
        for (size_t k = 0; k < order.size(); ++k) {
            RawTensor& t = raw_[order[k]];
            if (t.relative_offset > data_size) {
                fail("{}: data offset {} (data section at {}) is past end of file (size {})", tensor_what(order[k]),
                     t.relative_offset, data_offset, bytes_.size());
            }
            const uint64_t end = k + 1 < order.size() ? std::min(raw_[order[k + 1]].relative_offset, data_size) : data_size;
            t.room = end - t.relative_offset;
        }

        resolve_types();
        for (size_t k = 0; k < order.size(); ++k) {
            check_extent(order[k], k + 1 < order.size() ? std::optional<size_t>(order[k + 1]) : std::nullopt,
                         data_offset, data_size);
        }
    }

    // Decides each tensor's DType; Q2_0 tensors too small to decide alone take the variant their
    // decided siblings agree on (one file comes from one converter, so it uses one variant).
    void resolve_types() {
        std::optional<size_t> decided[2];  // first tensor decided as Q2_0, as Q2_0_G64
        std::vector<size_t> undecided;
        for (size_t i = 0; i < raw_.size(); ++i) {
            TensorInfo& info = file_.tensors_[i];
            const RawTensor& t = raw_[i];
            if (t.ggml_id == dtype_info(DType::Q2_0).ggml_id &&
                q2_0_fits(info.row_length(), info.n_elements(), t.room, file_.alignment_).count == 2) {
                undecided.push_back(i);
                continue;
            }
            info.dtype = resolve_ggml_type(t.ggml_id, info.row_length(), info.n_elements(), t.room, file_.alignment_,
                                           tensor_what(i));
            if (info.dtype == DType::Q2_0 && !decided[0]) decided[0] = i;
            if (info.dtype == DType::Q2_0_G64 && !decided[1]) decided[1] = i;
        }
        if (decided[0] && decided[1]) {
            fail("gguf: {}: tensors {} (q2_0 group-128) and {} (q2_0 group-64) disagree on the q2_0 variant", path_,
                 file_.tensors_[*decided[0]].name, file_.tensors_[*decided[1]].name);
        }
        for (size_t i : undecided) {
            TensorInfo& info = file_.tensors_[i];
            if (decided[0]) {
                info.dtype = DType::Q2_0;
            } else if (decided[1]) {
                info.dtype = DType::Q2_0_G64;
            } else {
                resolve_ggml_type(raw_[i].ggml_id, info.row_length(), info.n_elements(), raw_[i].room, file_.alignment_,
                                  tensor_what(i) + " (and no larger q2_0 tensor in the file decides the variant)");
            }
        }
    }

    void check_extent(size_t i, std::optional<size_t> next, uint64_t data_offset, uint64_t data_size) {
        TensorInfo& info = file_.tensors_[i];
        const RawTensor& t = raw_[i];
        const uint64_t absolute = data_offset + t.relative_offset;
        info.bytes = dtype_bytes(info.dtype, info.n_elements());
        if (info.bytes > data_size - t.relative_offset) {
            fail("{}: data at offset {} + {} bytes runs past end of file (size {})", tensor_what(i), absolute,
                 info.bytes, bytes_.size());
        }
        if (next) {
            const uint64_t next_offset = raw_[*next].relative_offset;
            const uint64_t end = t.relative_offset + info.bytes;
            if (end > next_offset) {
                fail("{}: data at offset {} + {} bytes overlaps tensor {} at offset {}", tensor_what(i), absolute,
                     info.bytes, file_.tensors_[*next].name, data_offset + next_offset);
            }
            // Writers pad each tensor to the alignment and nothing more; a wider gap means the shape or
            // type disagrees with the layout the file was written with.
            if (next_offset - end >= file_.alignment_) {
                fail("{}: {} {} of shape [{}] take {} bytes at offset {}, but the next tensor ({}) starts {} bytes "
                     "later: size does not match shape × type",
                     tensor_what(i), info.n_elements(), dtype_name(info.dtype), fmt::join(info.shape, ", "), info.bytes,
                     absolute, file_.tensors_[*next].name, next_offset - t.relative_offset);
            }
        }
        info.offset = absolute;
        info.data = bytes_.data() + absolute;
    }

    File& file_;
    std::span<const uint8_t> bytes_;
    const std::string& path_;
    uint64_t pos_ = 0;
    uint64_t n_tensors_ = 0;
    uint64_t n_kv_ = 0;
    std::vector<RawTensor> raw_;
};

void parse_into(File& file) { Parser(file).run(); }

}  // namespace deltabit::gguf
