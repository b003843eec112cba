// libFuzzer target for the GGUF reader (scripts/fuzz.sh). Parses the input from memory; any
// deltabit::Error is a correct refusal, anything else (crash, sanitizer report, oversized
// allocation, another exception type) is a bug. Parsed files are also walked end to end, so a
// validated-but-wrong offset would surface as an out-of-bounds read here.
#include "core/error.h"
#include "formats/gguf.h"

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const auto file = deltabit::gguf::File::parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
        volatile uint8_t sink = 0;
        for (const auto& t : file.tensors()) {
            if (t.bytes > 0) sink = sink ^ t.data[0] ^ t.data[t.bytes - 1];
        }
        for (const auto& kv : file.metadata()) {
            if (kv.value.is_array() && kv.value.size() > 0) (void)kv.value.at(kv.value.size() - 1);
        }
    } catch (const deltabit::Error&) {
    }
    return 0;
}
