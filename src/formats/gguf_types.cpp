// Mapping ggml type ids to DTypes, including the Q2_0 ambiguity (gguf.h explains the rule).
#include "core/error.h"
#include "formats/gguf.h"

namespace deltabit::gguf {

namespace {

std::string variant_need(DType t, uint64_t row_length, uint64_t n_elements) {
    if (!row_fits_blocks(t, row_length)) return fmt::format("needs rows of a multiple of {}", dtype_info(t).block_elems);
    return fmt::format("needs {} bytes", dtype_bytes(t, n_elements));
}

}  // namespace

DTypeCandidates q2_0_fits(uint64_t row_length, uint64_t n_elements, uint64_t room, uint64_t alignment) {
    DTypeCandidates fitting;
    DTypeCandidates filling;
    for (DType t : {DType::Q2_0, DType::Q2_0_G64}) {
        if (!row_fits_blocks(t, row_length)) continue;
        const uint64_t bytes = dtype_bytes(t, n_elements);
        if (bytes > room) continue;
        fitting.types[fitting.count++] = t;
        if (room - bytes < alignment) filling.types[filling.count++] = t;
    }
    return filling.count > 0 ? filling : fitting;
}

DType resolve_ggml_type(uint32_t ggml_id, uint64_t row_length, uint64_t n_elements, uint64_t room,
                        uint64_t alignment, std::string_view what) {
    const DTypeCandidates candidates = dtypes_for_ggml_id(ggml_id);
    if (candidates.count == 0) {
        fail("{}: ggml type {} (id {}) is not supported", what, ggml_type_name(ggml_id), ggml_id);
    }
    if (candidates.count == 1) {
        const DType t = candidates.types[0];
        if (!row_fits_blocks(t, row_length)) {
            fail("{}: row length {} is not a multiple of the {} block size {}", what, row_length, dtype_name(t),
                 dtype_info(t).block_elems);
        }
        return t;
    }
    const DTypeCandidates fits = q2_0_fits(row_length, n_elements, room, alignment);
    if (fits.count == 1) return fits.types[0];
    if (fits.count == 0) {
        fail("{}: q2_0 (id 42) with {} elements (rows of {}) fits neither variant in {} bytes: group-128 {}, "
             "group-64 {}",
             what, n_elements, row_length, room, variant_need(DType::Q2_0, row_length, n_elements),
             variant_need(DType::Q2_0_G64, row_length, n_elements));
    }
    fail("{}: q2_0 (id 42) with {} elements in {} bytes fits both the group-128 and the group-64 variant; "
         "cannot tell which",
         what, n_elements, room);
}

}  // namespace deltabit::gguf
