// gguf::Writer: GGUF v3 as llama.cpp writes it (header, metadata, tensor infos, padding, tensor data
// each padded to the alignment). Files are written through AtomicFile (core/file_io.h), so a reader
// never sees a half-written model and a PATH that is a device, FIFO or folder is refused.
#include "core/error.h"
#include "core/file_io.h"
#include "formats/gguf.h"
#include "formats/gguf_codec.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace deltabit::gguf {

namespace {

constexpr char kAlignmentKey[] = "general.alignment";

// Where emit() sends bytes: memory for to_bytes(), a FILE* for write().
struct MemorySink {
    std::vector<uint8_t>& out;
    void put(std::span<const uint8_t> bytes) { out.insert(out.end(), bytes.begin(), bytes.end()); }
};

// Collects small pieces (metadata, tensor infos) into large writes: a tokenizer's vocabulary is
// hundreds of thousands of puts.
struct FileSink {
    AtomicFile& file;
    std::vector<uint8_t> buffer;
    static constexpr size_t kFlushBytes = size_t(1) << 20;
    void put(std::span<const uint8_t> bytes) {
        if (buffer.size() + bytes.size() > kFlushBytes) flush();
        if (bytes.size() >= kFlushBytes) file.write(bytes.data(), bytes.size());
        else buffer.insert(buffer.end(), bytes.begin(), bytes.end());
    }
    void flush() {
        file.write(buffer.data(), buffer.size());
        buffer.clear();
    }
};

}  // namespace

void Writer::set(std::string key, Value value) {
    if (key == kAlignmentKey) {
        if (value.type() != ValueType::UINT32) fail("gguf: writer: general.alignment must be u32");
        const uint64_t a = value.as_u64();
        if (a == 0 || (a & (a - 1)) != 0) fail("gguf: writer: general.alignment {} is not a power of two", a);
        alignment_ = a;
    }
    value.set_key(key);
    for (KeyValue& kv : metadata_) {
        if (kv.key == key) {
            kv.value = std::move(value);
            return;
        }
    }
    metadata_.push_back({std::move(key), std::move(value)});
}

void Writer::set_alignment(uint32_t alignment) { set_u32(kAlignmentKey, alignment); }

void Writer::add_pending(PendingTensor tensor) {
    const std::string& name = tensor.name;
    for (const PendingTensor& t : tensors_) {
        if (t.name == name) fail("gguf: writer: duplicate tensor {}", name);
    }
    if (tensor.shape.empty() || tensor.shape.size() > kMaxDims) {
        fail("gguf: writer: tensor {}: {} dimensions (1 to {} allowed)", name, tensor.shape.size(), kMaxDims);
    }
    uint64_t n = 1;
    for (int64_t d : tensor.shape) {
        if (d <= 0) fail("gguf: writer: tensor {}: dimension {} must be positive", name, d);
        n *= static_cast<uint64_t>(d);
    }
    if (!row_fits_blocks(tensor.dtype, static_cast<uint64_t>(tensor.shape[0]))) {
        fail("gguf: writer: tensor {}: row length {} is not a multiple of the {} block size {}", name, tensor.shape[0],
             dtype_name(tensor.dtype), dtype_info(tensor.dtype).block_elems);
    }
    const uint64_t expected = dtype_bytes(tensor.dtype, n);
    if (!tensor.producer && tensor.bytes != expected) {
        fail("gguf: writer: tensor {}: {} bytes given, {} {} need {}", name, tensor.bytes, n, dtype_name(tensor.dtype),
             expected);
    }
    tensor.bytes = expected;
    tensors_.push_back(std::move(tensor));
}

void Writer::add_tensor(std::string name, DType dtype, std::vector<int64_t> shape, std::span<const uint8_t> bytes) {
    add_pending({std::move(name), dtype, std::move(shape), bytes.size(), bytes, nullptr, nullptr});
}

void Writer::add_tensor_owned(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    auto owned = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
    const std::span<const uint8_t> view(*owned);
    add_pending({std::move(name), dtype, std::move(shape), view.size(), view, std::move(owned), nullptr});
}

void Writer::add_tensor_produced(std::string name, DType dtype, std::vector<int64_t> shape, Producer producer) {
    if (!producer) fail("gguf: writer: tensor {}: empty producer", name);
    add_pending({std::move(name), dtype, std::move(shape), 0, {}, nullptr, std::move(producer)});
}

template <typename Sink>
void Writer::emit(Sink& sink) const {
    std::vector<uint8_t> header{'G', 'G', 'U', 'F'};
    append_le<uint32_t>(kVersion, header);
    append_le<uint64_t>(tensors_.size(), header);
    append_le<uint64_t>(metadata_.size(), header);
    for (const KeyValue& kv : metadata_) {
        ValueEncoder::append_string(kv.key, header);
        append_le<uint32_t>(static_cast<uint32_t>(kv.value.type()), header);
        ValueEncoder::append_payload(kv.value, header);
    }
    uint64_t offset = 0;  // relative to the data section
    for (const PendingTensor& t : tensors_) {
        ValueEncoder::append_string(t.name, header);
        append_le<uint32_t>(static_cast<uint32_t>(t.shape.size()), header);
        for (int64_t d : t.shape) append_le<int64_t>(d, header);
        append_le<uint32_t>(dtype_info(t.dtype).ggml_id, header);
        append_le<uint64_t>(offset, header);
        offset = align_up(offset + t.bytes, alignment_);
    }
    header.resize(align_up(header.size(), alignment_), 0);
    sink.put(header);

    const std::vector<uint8_t> zeros(alignment_, 0);
    std::vector<uint8_t> produced;
    for (const PendingTensor& t : tensors_) {
        std::span<const uint8_t> payload = t.borrowed;
        if (t.producer) {
            produced.assign(t.bytes, 0);
            t.producer(produced);
            payload = produced;
        }
        sink.put(payload);
        sink.put(std::span(zeros).first(align_up(t.bytes, alignment_) - t.bytes));
    }
}

std::vector<uint8_t> Writer::to_bytes() const {
    std::vector<uint8_t> out;
    MemorySink sink{out};
    emit(sink);
    return out;
}

void Writer::write(const std::string& path) const {
    AtomicFile file(path, "gguf");
    write_into(file);
    file.commit();
}

void Writer::write_into(AtomicFile& file) const {
    FileSink sink{file, {}};
    emit(sink);
    sink.flush();
}

}  // namespace deltabit::gguf
