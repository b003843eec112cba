// libFuzzer target for the safetensors reader: any byte string must either parse into tensors whose
// bytes lie inside the input, or raise deltabit::Error — never crash, hang or read out of bounds.
#include "core/error.h"
#include "formats/safetensors.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace deltabit::safetensors;
    try {
        const File file = File::parse({data, size}, "fuzz.safetensors");
        uint64_t checksum = 0;
        for (const TensorInfo& t : file.tensors()) {
            // Touch the first and last byte so ASan sees any range that escapes the input.
            if (t.bytes > 0) checksum += t.data[0] + t.data[t.bytes - 1];
            if (file.find(t.name) != &t) __builtin_trap();
            if (t.offset < file.data_offset() || t.offset + t.bytes > size) __builtin_trap();
            try {
                t.require_dtype();
            } catch (const deltabit::Error&) {
            }
        }
        (void)checksum;
    } catch (const deltabit::Error&) {
    }
    return 0;
}
