// A whole file mapped read-only into memory, owned and move-only. The model formats (GGUF,
// safetensors) read weights in place from such a mapping, so loading costs no copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace deltabit {

class MappedFile {
public:
    MappedFile() = default;
    // Maps `path`; `format` prefixes the messages, e.g. "gguf: model.gguf: cannot open: No such file
    // or directory". An empty file maps to an empty span.
    static MappedFile open(const std::string& path, std::string_view format);

    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    ~MappedFile();

    std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(address_), size_}; }

private:
    void release();

    void* address_ = nullptr;
    size_t size_ = 0;
};

}  // namespace deltabit
