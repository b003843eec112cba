// gguf::File: the read-only mapping it owns, and lookups over what the parser validated.
#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gguf_codec.h"

#include <utility>

namespace deltabit::gguf {

uint64_t TensorInfo::n_elements() const {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);  // the reader refused overflowing shapes
    return n;
}

uint64_t TensorInfo::n_rows() const { return shape.empty() ? 1 : n_elements() / static_cast<uint64_t>(shape[0]); }

File File::open(const std::string& path) {
    File file;
    file.path_ = path;
    file.mapping_ = MappedFile::open(path, "gguf");
    file.bytes_ = file.mapping_.bytes();
    parse_into(file);  // on Error, ~File unmaps
    return file;
}

File File::parse(std::span<const uint8_t> bytes, std::string name) {
    File file;
    file.path_ = std::move(name);
    file.bytes_ = bytes;
    parse_into(file);
    return file;
}

// The mapping does not move in memory when the File does, so TensorInfo::data stays valid.
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

const Value* File::find(std::string_view key) const {
    auto it = key_index_.find(key);
    return it == key_index_.end() ? nullptr : &metadata_[it->second].value;
}

const Value& File::require(std::string_view key) const {
    const Value* v = find(key);
    if (!v) fail("gguf: {}: missing key {}", path_, key);
    return *v;
}

// Runs a Value accessor and re-throws its "gguf: key K: ..." message with the file named.
template <typename T, typename Get>
T File::typed(std::string_view key, Get get) const {
    try {
        return get(require(key));
    } catch (const Error& e) {
        std::string_view message = e.what();
        if (message.starts_with("gguf: key ")) {
            message.remove_prefix(6);
            fail("gguf: {}: {}", path_, message);
        }
        throw;
    }
}

uint64_t File::require_u64(std::string_view key) const { return typed<uint64_t>(key, [](const Value& v) { return v.as_u64(); }); }
int64_t File::require_i64(std::string_view key) const { return typed<int64_t>(key, [](const Value& v) { return v.as_i64(); }); }
uint32_t File::require_u32(std::string_view key) const { return typed<uint32_t>(key, [](const Value& v) { return v.as_u32(); }); }
double File::require_f64(std::string_view key) const { return typed<double>(key, [](const Value& v) { return v.as_f64(); }); }
float File::require_f32(std::string_view key) const { return typed<float>(key, [](const Value& v) { return v.as_f32(); }); }
bool File::require_bool(std::string_view key) const { return typed<bool>(key, [](const Value& v) { return v.as_bool(); }); }
std::string File::require_string(std::string_view key) const {
    return typed<std::string>(key, [](const Value& v) { return v.as_string(); });
}
std::vector<std::string> File::require_string_array(std::string_view key) const {
    return typed<std::vector<std::string>>(key, [](const Value& v) { return v.as_string_array(); });
}
std::vector<int64_t> File::require_i64_array(std::string_view key) const {
    return typed<std::vector<int64_t>>(key, [](const Value& v) { return v.as_i64_array(); });
}
std::vector<float> File::require_f32_array(std::string_view key) const {
    return typed<std::vector<float>>(key, [](const Value& v) { return v.as_f32_array(); });
}

uint64_t File::get_u64(std::string_view key, uint64_t fallback) const { return has(key) ? require_u64(key) : fallback; }
int64_t File::get_i64(std::string_view key, int64_t fallback) const { return has(key) ? require_i64(key) : fallback; }
uint32_t File::get_u32(std::string_view key, uint32_t fallback) const { return has(key) ? require_u32(key) : fallback; }
double File::get_f64(std::string_view key, double fallback) const { return has(key) ? require_f64(key) : fallback; }
float File::get_f32(std::string_view key, float fallback) const { return has(key) ? require_f32(key) : fallback; }
bool File::get_bool(std::string_view key, bool fallback) const { return has(key) ? require_bool(key) : fallback; }
std::string File::get_string(std::string_view key, std::string fallback) const {
    return has(key) ? require_string(key) : fallback;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::require_tensor(std::string_view name) const {
    const TensorInfo* t = find_tensor(name);
    if (!t) fail("gguf: {}: missing tensor {}", path_, name);
    return *t;
}

}  // namespace deltabit::gguf
