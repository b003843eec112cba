// One side (keys or values) of one layer's KV cache on the device, as the decode and prompt kernels
// read and write it (ops/attention/attention_cuda.h), in any of the formats of models/kv_cache.h: f32, f16, or KIVI
// 4-bit. The formats are defined there; this header says how the device stores them.
//
//   f32, f16  data = [capacity][row] (row = n_kv_head·head_dim elements), position p at row p.
//   kivi4     data = the exact rows, f32 [sinks + ring_rows][row]: position p < sinks at row p, a later
//                    position at row sinks + (p − sinks) mod ring_rows. The ring holds the residual
//                    window plus the rows one call appends before they are quantised, so it needs
//                    ring_rows ≥ (residual + block − 1) + tokens per call (CudaSequenceState sizes it).
//             codes = u8 [capacity − sinks][row / 2], quantised position q = p − sinks at row q, value 2j in
//                    the low nibble of byte j — the snapshot chunk's layout, so an image is a prefix copy.
//             min, scale = f16 bits: keys [(capacity − sinks) / block][row] (per channel per block of
//                    positions), values [capacity − sinks][row / value_group] (per position per group of
//                    channels).
// Which positions are quantised is a function of the length alone (models/kv_cache.h, kivi_split):
// with n positions settled, the first sinks + kivi_quantised(n) are sinks or codes and the rest exact.
// A call attends its own new rows exact (they are appended first) and quantises what left the window
// after its attention (kivi_compress) — the CPU store's order.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace deltabit::cuda {

enum class KvElement : uint8_t { f32, f16, kivi4 };
// Bytes per element of a plain cache (f32 or f16); kivi4 has no single element size.
inline size_t kv_element_bytes(KvElement e) { return e == KvElement::f16 ? 2 : 4; }
inline const char* kv_element_name(KvElement e) {
    return e == KvElement::f32 ? "f32" : e == KvElement::f16 ? "f16" : "kivi4";
}

// KIVI's layout parameters (models/kv_cache.h's constants, passed in so that ops/ does not depend on
// models/).
struct KiviLayout {
    int64_t sinks = 8;
    int64_t residual = 128;
    int64_t block = 32;        // positions quantised together (keys' group along positions)
    int64_t value_group = 32;  // channels of one value (m, s) pair
    int64_t ring_rows = 0;
};

struct KvCacheView {
    KvElement element = KvElement::f32;
    void* data = nullptr;
    // kivi4 only
    uint8_t* codes = nullptr;
    uint16_t* min = nullptr;
    uint16_t* scale = nullptr;
    bool keys = true;  // which side: keys quantise per channel, values per position
    KiviLayout kivi;
};

inline KvCacheView plain_kv_view(KvElement element, void* data) {
    KvCacheView v;
    v.element = element;
    v.data = data;
    return v;
}

// How many positions of a settled kivi4 store of n positions are quantised (kivi_split(n).quantised).
__host__ __device__ inline int64_t kivi_quantised(int64_t n, const KiviLayout& k) {
    const int64_t after = n > k.sinks ? n - k.sinks : 0;
    return after >= k.residual + k.block ? k.block * ((after - k.residual) / k.block) : 0;
}

// The row of `data` that holds position p of a plain cache, or the exact row of a kivi4 one (p must
// then be a sink or in the residual window).
__host__ __device__ inline int64_t kv_data_row(const KvCacheView& v, int64_t p) {
    if (v.element != KvElement::kivi4 || p < v.kivi.sinks) return p;
    return v.kivi.sinks + (p - v.kivi.sinks) % v.kivi.ring_rows;
}

// One row of a batched decode step's launch (the rows forms: attention_decode_prologue_rows and
// attention_cached_rows of ops/attention/attention_cuda.h, kivi_compress_rows below): one sequence's caches of
// one attention layer, the position its new token is stored at, and the splits its attention takes
// (attention_decode_splits_run for the sequence's capacity, planned on the host). A launch reads row r from
// a device table of these; the table is written by a copy from the host before the step, never by a kernel.
struct AttentionRow {
    KvCacheView k, v;
    int32_t position = 0;
    int32_t splits = 0;
};

// Rows [n_tokens][row_elems] of f32 keys or values stored at positions *n_past .. *n_past + n_tokens − 1
// (f16: rounded to nearest even; kivi4: exact rows, quantised later by kivi_compress).
void kv_store(const float* rows, int64_t n_tokens, int64_t row_elems, const int32_t* n_past, const KvCacheView& cache,
              cudaStream_t stream);

// kivi4, after a call of n_tokens appended at *n_past: quantises every block of positions that has left
// the residual window, i.e. quantised positions kivi_quantised(*n_past) .. kivi_quantised(*n_past +
// n_tokens), exactly as KvStore::compress does (codes and f16 parameters bit for bit). Reads n_past on
// the device, so a captured graph serves every position; blocks past the real work exit at once.
void kivi_compress(const KvCacheView& cache, int64_t row_elems, const int32_t* n_past, int64_t n_tokens,
                   cudaStream_t stream);
// The same for one new token of each of n_rows rows (rows: a device table), every row in one launch per
// side: row r as kivi_compress(keys ? rows[r].k : rows[r].v, row_elems, &rows[r].position, 1) computes it,
// bit for bit (one kernel body). Rows whose caches are not kivi4 are left alone. `layout` is the rows' KIVI
// layout as the host knows it (every sequence's but for ring_rows), which sizes the grid.
void kivi_compress_rows(const AttentionRow* rows, int64_t n_rows, const KiviLayout& layout, int64_t row_elems,
                        bool keys, cudaStream_t stream);

}  // namespace deltabit::cuda
