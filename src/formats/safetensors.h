// safetensors, the weight format of Hugging Face model folders: read (mmap, validated against the file
// size) and a small writer.
//
// Layout: u64 N (little-endian), then N bytes of UTF-8 JSON, then the data buffer.
//   { "NAME": {"dtype": "BF16", "shape": [out, in], "data_offsets": [begin, end]}, ...,
//     "__metadata__": {"key": "string value", ...} }
// data_offsets are relative to the start of the data buffer (byte 8 + N); end − begin must equal
// product(shape) × element size. Shapes are in PyTorch order (row-major, last dimension contiguous):
// a Linear weight is [out, in] — the reverse of GGUF's ggml order.
//
// Writers pad the JSON with spaces so the buffer starts at a multiple of 8 and pack tensors largest
// element first, which keeps every tensor naturally aligned in a page-aligned mapping. Files from
// other writers need not be padded, so TensorInfo::data may be unaligned: read it with memcpy.
//
// Every error is one line naming the file, and the tensor and byte offset where they apply:
//   "safetensors: model.safetensors: tensor lm_head.weight: data_offsets [0, 96] hold 96 bytes but
//    shape [4, 8] of F32 needs 128".
#pragma once

#include "core/mapped_file.h"

#include "core/dtype.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace deltabit::safetensors {

// A header larger than this is refused before it is parsed: real headers are well under 10 MB
// (a 1000-shard-tensor model's header is ~100 kB), so anything bigger is a corrupt length field.
inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Bytes per element of a safetensors dtype name ("F32" → 4); 0 when the name is unknown. Covers every
// dtype the format defines, so files holding types deltabit does not compute with can still be listed.
size_t element_size(std::string_view dtype_name);
// The deltabit DType for a safetensors dtype name: F32, F16, BF16 and I32; nullopt for the rest.
std::optional<DType> to_dtype(std::string_view dtype_name);
// The safetensors name of a deltabit DType ("BF16"); Error for quantised types, which safetensors
// cannot hold.
std::string_view dtype_name_of(DType dtype);

struct TensorInfo {
    std::string name;
    std::string dtype_name;       // as in the header: "BF16", "I64", "F8_E4M3", ...
    std::optional<DType> dtype;   // set when deltabit reads this type (see to_dtype)
    std::vector<int64_t> shape;   // PyTorch order: shape.back() is contiguous
    uint64_t offset = 0;          // absolute byte offset in the file
    uint64_t bytes = 0;
    const uint8_t* data = nullptr;  // into the mapping, maybe unaligned; valid while the file lives
    std::string file;             // the file's name as used in messages

    uint64_t n_elements() const;
    std::span<const uint8_t> span() const { return {data, static_cast<size_t>(bytes)}; }
    // The DType, or Error "safetensors: FILE: tensor NAME: dtype I64 is not supported (deltabit reads
    // F32, F16, BF16, I32)" — call this before reading the data.
    DType require_dtype() const;
};

// One parsed .safetensors file: a read-only mmap it owns (open) or a view of bytes the caller keeps
// alive (parse). Move-only; fully validated at construction.
class File {
public:
    static File open(const std::filesystem::path& path);
    // `name` stands in for the path in messages; TensorInfo::data points into `bytes`.
    static File parse(std::span<const uint8_t> bytes, std::string name);

    File(File&&) noexcept;
    File& operator=(File&&) noexcept;
    File(const File&) = delete;
    File& operator=(const File&) = delete;
    ~File();

    const std::string& name() const { return name_; }
    uint64_t file_size() const { return bytes_.size(); }
    uint64_t data_offset() const { return data_offset_; }  // 8 + header length

    // Tensors in ascending data offset order (the order of the bytes in the file).
    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const TensorInfo* find(std::string_view name) const;
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

private:
    File() = default;
    friend struct Parser;

    std::string name_;
    std::span<const uint8_t> bytes_;
    MappedFile mapping_;  // owned mapping (open); empty when parsing bytes the caller keeps (parse)
    uint64_t data_offset_ = 0;
    std::vector<TensorInfo> tensors_;
    std::map<std::string, size_t, std::less<>> index_;
    std::map<std::string, std::string> metadata_;
};

// All weights of a model folder: `model.safetensors.index.json` (its "weight_map" names each tensor's
// shard) or a single `model.safetensors`. Each shard is opened once; lookups span all of them.
class Set {
public:
    // A folder (index or single file, index preferred) or one .safetensors / .index.json path.
    static Set open(const std::filesystem::path& path);
    // Already-open files; a name in two of them is refused. `what` names the set in messages.
    static Set from_files(std::vector<File> files, std::string what);

    const TensorInfo* find(std::string_view name) const;
    // Error "safetensors: WHAT: missing tensor NAME" when absent.
    const TensorInfo& require(std::string_view name) const;
    // Every tensor, sorted by name, so listings are stable whatever the sharding.
    const std::vector<const TensorInfo*>& tensors() const { return sorted_; }
    auto begin() const { return sorted_.begin(); }
    auto end() const { return sorted_.end(); }
    size_t size() const { return sorted_.size(); }
    uint64_t total_bytes() const { return total_bytes_; }
    const std::vector<File>& files() const { return files_; }
    const std::string& what() const { return what_; }

private:
    std::string what_;
    std::vector<File> files_;
    std::map<std::string, const TensorInfo*, std::less<>> index_;
    std::vector<const TensorInfo*> sorted_;
    uint64_t total_bytes_ = 0;
};

// ---- writer ----

struct TensorToWrite {
    std::string name;
    std::string dtype_name;            // any dtype element_size() knows
    std::vector<int64_t> shape;        // PyTorch order
    std::span<const uint8_t> data;     // exactly product(shape) × element size bytes; borrowed
};

// The whole file in memory. Tensors are packed largest element first, then by name, after a header
// padded to a multiple of 8, so every tensor is naturally aligned. Error on a bad name, dtype or size.
std::vector<uint8_t> serialize(const std::vector<TensorToWrite>& tensors,
                               const std::map<std::string, std::string>& metadata = {});
// serialize() through AtomicFile (core/file_io.h): renamed over path; a device, FIFO or folder is refused.
void write(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
           const std::map<std::string, std::string>& metadata = {});

}  // namespace deltabit::safetensors
