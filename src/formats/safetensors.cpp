#include "formats/safetensors.h"

#include "core/error.h"
#include "core/file_io.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <utility>

namespace deltabit::safetensors {

namespace {

using nlohmann::json;

// A header nests three levels (root → tensor → shape); deeper JSON is refused while parsing, long
// before it could cost stack or time.
constexpr int kMaxJsonDepth = 8;

struct DTypeEntry {
    std::string_view name;
    size_t size;
};

// Every dtype of the safetensors format with a whole-byte element. The sub-byte ones (F4, F6_*) are
// left out on purpose: a shape × size check cannot be written for them, so they are refused as unknown.
constexpr DTypeEntry kDTypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
    {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},
};

uint64_t read_u64_le(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

// A JSON parser message quotes the bytes it choked on; keep the report on one printable line.
std::string printable(std::string_view text, size_t limit = 160) {
    std::string out;
    for (char c : text.substr(0, limit)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
    if (text.size() > limit) out += "...";
    return out;
}

std::string shape_string(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// Parses JSON from bytes, refusing duplicate top-level keys (nlohmann would keep only the last, so a
// file naming one tensor twice would silently lose a tensor) and nesting deeper than kMaxJsonDepth.
// `prefix` starts messages; `base` is the file offset of text[0], for positions.
json parse_json_object(std::string_view text, const std::string& prefix, uint64_t base, bool check_duplicates) {
    std::set<std::string> seen;
    auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
        if (depth > kMaxJsonDepth)
            fail("{}: JSON nests deeper than {} levels", prefix, kMaxJsonDepth);
        if (check_duplicates && event == json::parse_event_t::key && depth == 1) {
            const std::string& key = parsed.get_ref<const std::string&>();
            if (!seen.insert(key).second) fail("{}: tensor {}: listed twice in the header", prefix, printable(key));
        }
        return true;
    };
    json root;
    try {
        root = json::parse(text.begin(), text.end(), callback);
    } catch (const json::parse_error& e) {
        // e.byte counts from 1 and points just past the offending character.
        const uint64_t at = e.byte > 0 ? e.byte - 1 : 0;
        fail("{}: malformed JSON at header byte {} (file offset {}): {}", prefix, at, base + at, printable(e.what()));
    } catch (const json::exception& e) {
        fail("{}: malformed JSON: {}", prefix, printable(e.what()));
    }
    if (!root.is_object()) fail("{}: the JSON is a {}, not an object", prefix, root.type_name());
    return root;
}

// A non-negative JSON integer; `what` names the field in messages.
uint64_t json_unsigned(const json& value, const std::string& what) {
    if (value.is_number_unsigned()) return value.get<uint64_t>();
    if (value.is_number_integer()) fail("{} is negative ({})", what, value.get<int64_t>());
    fail("{} is not a non-negative integer (found {})", what, printable(value.dump()));
}

}  // namespace

size_t element_size(std::string_view dtype_name) {
    for (const DTypeEntry& e : kDTypes)
        if (e.name == dtype_name) return e.size;
    return 0;
}

std::optional<DType> to_dtype(std::string_view dtype_name) {
    if (dtype_name == "F32") return DType::F32;
    if (dtype_name == "F16") return DType::F16;
    if (dtype_name == "BF16") return DType::BF16;
    if (dtype_name == "I32") return DType::I32;
    return std::nullopt;
}

std::string_view dtype_name_of(DType dtype) {
    switch (dtype) {
        case DType::F32: return "F32";
        case DType::F16: return "F16";
        case DType::BF16: return "BF16";
        case DType::I32: return "I32";
        default: fail("safetensors: cannot store {} tensors (only F32, F16, BF16, I32)", dtype_name(dtype));
    }
}

uint64_t TensorInfo::n_elements() const {
    uint64_t n = 1;
    for (int64_t d : shape) n *= uint64_t(d);  // validated at load: no overflow
    return n;
}

DType TensorInfo::require_dtype() const {
    if (!dtype)
        fail("safetensors: {}: tensor {}: dtype {} is not supported (deltabit reads F32, F16, BF16, I32)", file, name,
             dtype_name);
    return *dtype;
}

// ---- File ----

struct Parser {
    static void run(File& file) {
        const std::span<const uint8_t> bytes = file.bytes_;
        const std::string prefix = fmt::format("safetensors: {}", file.name_);
        if (bytes.size() < 8)
            fail("{}: file is {} bytes, too short for the 8-byte header length", prefix, bytes.size());
        const uint64_t header_len = read_u64_le(bytes.data());
        if (header_len > kMaxHeaderBytes)
            fail("{}: header length {} at byte 0 exceeds the {} MB limit (corrupt or not a safetensors file)", prefix,
                 header_len, kMaxHeaderBytes >> 20);
        if (header_len > bytes.size() - 8)
            fail("{}: header length {} at byte 0 runs past end of file (size {})", prefix, header_len, bytes.size());
        if (header_len < 2 || bytes[8] != '{')
            fail("{}: header at byte 8 does not start with '{{' (not a safetensors file)", prefix);

        file.data_offset_ = 8 + header_len;
        const uint64_t buffer_size = bytes.size() - file.data_offset_;
        const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), header_len);
        const json root = parse_json_object(text, prefix, 8, /*check_duplicates=*/true);

        for (const auto& [key, value] : root.items()) {
            if (key == "__metadata__") {
                read_metadata(file, value, prefix);
                continue;
            }
            file.tensors_.push_back(read_tensor(file, key, value, prefix, buffer_size));
        }

        std::sort(file.tensors_.begin(), file.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
            return a.offset != b.offset ? a.offset < b.offset : a.bytes < b.bytes;
        });
        // Sorted by start, two non-empty tensors overlap iff one starts before the previous one ends.
        const TensorInfo* previous = nullptr;
        for (const TensorInfo& t : file.tensors_) {
            if (t.bytes == 0) continue;
            if (previous && t.offset < previous->offset + previous->bytes)
                fail("{}: tensor {}: bytes {}..{} overlap tensor {} (bytes {}..{})", prefix, t.name, t.offset,
                     t.offset + t.bytes, previous->name, previous->offset, previous->offset + previous->bytes);
            previous = &t;
        }
        for (size_t i = 0; i < file.tensors_.size(); ++i) file.index_.emplace(file.tensors_[i].name, i);
    }

    static void read_metadata(File& file, const json& value, const std::string& prefix) {
        if (!value.is_object()) fail("{}: __metadata__ is a {}, not an object", prefix, value.type_name());
        for (const auto& [k, v] : value.items()) {
            if (!v.is_string())
                fail("{}: __metadata__ key {}: value is a {}, not a string", prefix, printable(k), v.type_name());
            file.metadata_.emplace(k, v.get<std::string>());
        }
    }

    static TensorInfo read_tensor(const File& file, const std::string& key, const json& value,
                                  const std::string& prefix, uint64_t buffer_size) {
        TensorInfo t;
        t.name = key;
        t.file = file.name_;
        const std::string where = fmt::format("{}: tensor {}", prefix, printable(key));
        if (key.empty()) fail("{}: a tensor has an empty name", prefix);
        if (!value.is_object()) fail("{}: entry is a {}, not an object", where, value.type_name());

        const auto dtype_it = value.find("dtype");
        if (dtype_it == value.end() || !dtype_it->is_string()) fail("{}: missing string field dtype", where);
        t.dtype_name = dtype_it->get<std::string>();
        const size_t elem = element_size(t.dtype_name);
        if (elem == 0) fail("{}: unknown dtype '{}'", where, printable(t.dtype_name));
        t.dtype = to_dtype(t.dtype_name);

        const auto shape_it = value.find("shape");
        if (shape_it == value.end() || !shape_it->is_array()) fail("{}: missing array field shape", where);
        uint64_t n_elements = 1;
        for (size_t i = 0; i < shape_it->size(); ++i) {
            const uint64_t dim = json_unsigned((*shape_it)[i], fmt::format("{}: shape[{}]", where, i));
            if (dim > uint64_t(INT64_MAX) || __builtin_mul_overflow(n_elements, dim, &n_elements))
                fail("{}: shape {} overflows 64 bits", where, printable(shape_it->dump()));
            t.shape.push_back(int64_t(dim));
        }
        uint64_t needed = 0;
        if (__builtin_mul_overflow(n_elements, uint64_t(elem), &needed))
            fail("{}: shape {} of {} overflows 64 bits in bytes", where, shape_string(t.shape), t.dtype_name);

        const auto offsets_it = value.find("data_offsets");
        if (offsets_it == value.end() || !offsets_it->is_array() || offsets_it->size() != 2)
            fail("{}: data_offsets must be an array [begin, end]", where);
        const uint64_t begin = json_unsigned((*offsets_it)[0], where + ": data_offsets[0]");
        const uint64_t end = json_unsigned((*offsets_it)[1], where + ": data_offsets[1]");
        if (begin > end) fail("{}: data_offsets [{}, {}]: begin is after end", where, begin, end);
        if (end > buffer_size)
            fail("{}: data_offsets [{}, {}] end at file offset {}, past end of file (size {})", where, begin, end,
                 file.data_offset_ + end, file.bytes_.size());
        if (end - begin != needed)
            fail("{}: data_offsets [{}, {}] hold {} bytes but shape {} of {} needs {}", where, begin, end,
                 end - begin, shape_string(t.shape), t.dtype_name, needed);
        t.offset = file.data_offset_ + begin;
        t.bytes = needed;
        t.data = file.bytes_.data() + t.offset;
        return t;
    }
};

File File::parse(std::span<const uint8_t> bytes, std::string name) {
    File file;
    file.name_ = std::move(name);
    file.bytes_ = bytes;
    Parser::run(file);
    return file;
}

File File::open(const std::filesystem::path& path) {
    MappedFile mapping = MappedFile::open(path.string(), "safetensors");
    File file = parse(mapping.bytes(), path.string());  // TensorInfo::data points into the mapping
    file.mapping_ = std::move(mapping);
    return file;
}

// Moving keeps the mapping's address and the tensors' element addresses (Set points at them).
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

const TensorInfo* File::find(std::string_view name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---- Set ----

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

std::string read_text_file(const std::filesystem::path& path, const std::string& prefix) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open", prefix);
    in.seekg(0, std::ios::end);
    const std::streamoff size = in.tellg();
    if (size < 0 || uint64_t(size) > kMaxHeaderBytes)
        fail("{}: {} bytes is not a plausible index file", prefix, int64_t(size));
    in.seekg(0);
    std::string text(size_t(size), '\0');
    if (!in.read(text.data(), size)) fail("{}: read failed", prefix);
    return text;
}

Set open_index(const std::filesystem::path& index_path) {
    const std::string prefix = fmt::format("safetensors: {}", index_path.string());
    const std::string text = read_text_file(index_path, prefix);
    const json root = parse_json_object(text, prefix, 0, /*check_duplicates=*/false);
    const auto map_it = root.find("weight_map");
    if (map_it == root.end() || !map_it->is_object()) fail("{}: missing object weight_map", prefix);

    // tensor → shard, and each shard's path; shards are opened once each, in name order.
    std::map<std::string, std::vector<std::string>> tensors_of_shard;
    for (const auto& [tensor, shard] : map_it->items()) {
        if (!shard.is_string()) fail("{}: weight_map[{}] is a {}, not a file name", prefix, tensor, shard.type_name());
        const std::string shard_name = shard.get<std::string>();
        const std::filesystem::path relative(shard_name);
        bool escapes = shard_name.empty() || relative.is_absolute();
        for (const auto& part : relative) escapes = escapes || part == "..";
        if (escapes)
            fail("{}: weight_map[{}]: shard '{}' is not a file name inside the folder", prefix, tensor,
                 printable(shard_name));
        tensors_of_shard[shard_name].push_back(tensor);
    }
    if (tensors_of_shard.empty()) fail("{}: weight_map is empty", prefix);

    const std::filesystem::path folder = index_path.parent_path();
    std::vector<File> files;
    for (const auto& [shard_name, tensors] : tensors_of_shard) {
        const std::filesystem::path shard_path = folder / shard_name;
        std::error_code ec;
        if (!std::filesystem::exists(shard_path, ec))
            fail("{}: shard {} (listed for tensor {}) is missing: {}", prefix, shard_name, tensors.front(),
                 shard_path.string());
        File file = File::open(shard_path);
        for (const std::string& tensor : tensors)
            if (!file.find(tensor))
                fail("{}: tensor {} is listed in shard {}, but {} does not contain it", prefix, tensor, shard_name,
                     file.name());
        files.push_back(std::move(file));
    }
    return Set::from_files(std::move(files), index_path.string());
}

}  // namespace

Set Set::from_files(std::vector<File> files, std::string what) {
    Set set;
    set.what_ = std::move(what);
    set.files_ = std::move(files);
    for (const File& file : set.files_) {
        for (const TensorInfo& t : file.tensors()) {
            const auto [it, inserted] = set.index_.emplace(t.name, &t);
            if (!inserted)
                fail("safetensors: {}: tensor {} is in both {} and {}", set.what_, t.name, it->second->file, t.file);
            set.total_bytes_ += t.bytes;
        }
    }
    set.sorted_.reserve(set.index_.size());
    for (const auto& [name, info] : set.index_) set.sorted_.push_back(info);
    return set;
}

Set Set::open(const std::filesystem::path& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        if (std::filesystem::exists(path / kIndexName, ec)) return open_index(path / kIndexName);
        if (std::filesystem::exists(path / kSingleName, ec)) return open(path / kSingleName);
        fail("safetensors: {}: neither {} nor {} is in this folder", path.string(), kIndexName, kSingleName);
    }
    const std::string name = path.filename().string();
    if (name.size() > 11 && name.ends_with(".index.json")) return open_index(path);
    std::vector<File> files;
    files.push_back(File::open(path));
    return from_files(std::move(files), path.string());
}

const TensorInfo* Set::find(std::string_view name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : it->second;
}

const TensorInfo& Set::require(std::string_view name) const {
    const TensorInfo* t = find(name);
    if (!t) fail("safetensors: {}: missing tensor {}", what_, name);
    return *t;
}

// ---- writer ----

std::vector<uint8_t> serialize(const std::vector<TensorToWrite>& tensors,
                               const std::map<std::string, std::string>& metadata) {
    std::vector<const TensorToWrite*> order;
    std::set<std::string_view> names;
    for (const TensorToWrite& t : tensors) {
        const size_t elem = element_size(t.dtype_name);
        if (t.name.empty() || t.name == "__metadata__") fail("safetensors: writer: bad tensor name '{}'", t.name);
        if (!names.insert(t.name).second) fail("safetensors: writer: tensor {} added twice", t.name);
        if (elem == 0) fail("safetensors: writer: tensor {}: unknown dtype '{}'", t.name, t.dtype_name);
        uint64_t n = 1;
        for (int64_t d : t.shape) {
            if (d < 0) fail("safetensors: writer: tensor {}: negative dimension in shape {}", t.name, shape_string(t.shape));
            n *= uint64_t(d);
        }
        if (t.data.size() != n * elem)
            fail("safetensors: writer: tensor {}: {} bytes given, shape {} of {} needs {}", t.name, t.data.size(),
                 shape_string(t.shape), t.dtype_name, n * elem);
        order.push_back(&t);
    }
    // Largest element first: with the buffer 8-aligned, each tensor then starts at a multiple of its
    // own element size (all sizes are powers of two ≤ 8).
    std::sort(order.begin(), order.end(), [](const TensorToWrite* a, const TensorToWrite* b) {
        const size_t ea = element_size(a->dtype_name), eb = element_size(b->dtype_name);
        return ea != eb ? ea > eb : a->name < b->name;
    });

    json header = json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    uint64_t offset = 0;
    for (const TensorToWrite* t : order) {
        header[t->name] = {{"dtype", t->dtype_name},
                           {"shape", t->shape},
                           {"data_offsets", {offset, offset + t->data.size()}}};
        offset += t->data.size();
    }
    std::string text = header.dump();
    text.append((8 - (8 + text.size()) % 8) % 8, ' ');

    std::vector<uint8_t> out(8 + text.size() + offset);
    for (int i = 0; i < 8; ++i) out[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
    std::memcpy(out.data() + 8, text.data(), text.size());
    uint8_t* data = out.data() + 8 + text.size();
    for (const TensorToWrite* t : order) {
        if (!t->data.empty()) std::memcpy(data, t->data.data(), t->data.size());
        data += t->data.size();
    }
    return out;
}

void write(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
           const std::map<std::string, std::string>& metadata) {
    const std::vector<uint8_t> bytes = serialize(tensors, metadata);
    write_file_atomically(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                          "safetensors");
}

}  // namespace deltabit::safetensors
