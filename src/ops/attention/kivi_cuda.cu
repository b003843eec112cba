// kivi_compress (ops/attention/kv_cuda.h): the GPU twin of KvStore::compress (models/kv_cache.cpp), bit for bit —
// the same f16 rounding of (min, (max − min)/15), the same codes rint((x − m)/s) computed with the
// rounded parameters, no FMA contraction — so a state image saved on the GPU equals the CPU's for the
// same exact rows (tests/cuda/test_kivi_cuda.cpp checks it against KvStore).
#include <cuda_fp16.h>

#include <string>

#include "backend/cuda_buffer.h"
#include "ops/attention/kv_cuda.h"

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 128;
constexpr float kMaxCode = 15.0f;  // 4 bits

struct CompressArgs {
    KvCacheView cache;
    const int32_t* n_past;
    int64_t n_tokens, row;
    const AttentionRow* rows;  // the rows form (kivi_compress_rows): row blockIdx.z's cache and position
};

// What block (·, ·, r) of a rows launch compresses: row r's side `cache.keys` at its position, as a call
// with that row alone would; the single call's own arguments otherwise.
__device__ __forceinline__ CompressArgs compress_row(const CompressArgs& a) {
    const AttentionRow& row = a.rows[blockIdx.z];
    CompressArgs r = a;
    r.cache = a.cache.keys ? row.k : row.v;
    r.n_past = &row.position;
    return r;
}

__device__ __forceinline__ uint16_t to_half_bits(float x) { return __half_as_ushort(__float2half_rn(x)); }
__device__ __forceinline__ float from_half_bits(uint16_t b) { return __half2float(__ushort_as_half(b)); }

// The code of x in a group of stored parameters (m, s), as models/kv_cache.cpp's quantise().
__device__ __forceinline__ uint32_t code_of(float x, float m, float s) {
    if (!(s > 0.0f)) return 0;
    const float level = rintf(__fdiv_rn(__fsub_rn(x, m), s));
    return uint32_t(fminf(fmaxf(level, 0.0f), kMaxCode));
}

// The block (of `block` quantised positions) this grid row quantises, or −1 when there is none.
__device__ __forceinline__ int64_t block_to_quantise(const CompressArgs& a) {
    const KiviLayout& k = a.cache.kivi;
    const int64_t n = *a.n_past;
    const int64_t first = kivi_quantised(n, k) / k.block, end = kivi_quantised(n + a.n_tokens, k) / k.block;
    const int64_t b = first + int64_t(blockIdx.x);
    return b < end ? b : -1;
}

__device__ __forceinline__ const float* exact_row(const CompressArgs& a, int64_t quantised_position) {
    const int64_t p = a.cache.kivi.sinks + quantised_position;
    return static_cast<const float*>(a.cache.data) + kv_data_row(a.cache, p) * a.row;
}

// Keys, per channel: thread = two adjacent channels (one code byte per position), over the block's
// positions.
__device__ __forceinline__ void compress_keys(const CompressArgs& a) {
    const int64_t b = block_to_quantise(a);
    const int64_t c0 = 2 * (int64_t(blockIdx.y) * kThreads + threadIdx.x);
    if (b < 0 || c0 >= a.row) return;
    const int64_t G = a.cache.kivi.block, q0 = b * G;
    float m[2], s[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        float lo = exact_row(a, q0)[c0 + j], hi = lo;
        for (int64_t t = 1; t < G; ++t) {
            const float x = exact_row(a, q0 + t)[c0 + j];
            lo = fminf(lo, x);
            hi = fmaxf(hi, x);
        }
        const uint16_t mb = to_half_bits(lo), sb = to_half_bits(__fdiv_rn(__fsub_rn(hi, lo), kMaxCode));
        a.cache.min[b * a.row + c0 + j] = mb;
        a.cache.scale[b * a.row + c0 + j] = sb;
        m[j] = from_half_bits(mb);
        s[j] = from_half_bits(sb);
    }
    for (int64_t t = 0; t < G; ++t) {
        const float* x = exact_row(a, q0 + t);
        const uint32_t lo = code_of(x[c0], m[0], s[0]), hi = code_of(x[c0 + 1], m[1], s[1]);
        a.cache.codes[((q0 + t) * a.row + c0) / 2] = uint8_t(lo | (hi << 4));
    }
}

// Values, per position: thread = one group of value_group channels of one position of the block.
__device__ __forceinline__ void compress_values(const CompressArgs& a) {
    const int64_t b = block_to_quantise(a);
    const int64_t VG = a.cache.kivi.value_group, groups = a.row / VG;
    const int64_t item = int64_t(blockIdx.y) * kThreads + threadIdx.x;
    if (b < 0 || item >= a.cache.kivi.block * groups) return;
    const int64_t q = b * a.cache.kivi.block + item / groups, g = item % groups;
    const float* x = exact_row(a, q) + g * VG;
    float lo = x[0], hi = x[0];
    for (int64_t i = 1; i < VG; ++i) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
    }
    const uint16_t mb = to_half_bits(lo), sb = to_half_bits(__fdiv_rn(__fsub_rn(hi, lo), kMaxCode));
    a.cache.min[q * groups + g] = mb;
    a.cache.scale[q * groups + g] = sb;
    const float m = from_half_bits(mb), s = from_half_bits(sb);
    uint8_t* out = a.cache.codes + (q * a.row + g * VG) / 2;
    for (int64_t i = 0; i < VG; i += 2) out[i / 2] = uint8_t(code_of(x[i], m, s) | (code_of(x[i + 1], m, s) << 4));
}

// kRows: the rows form, the body on the block's row's arguments (rows of another format left alone); a single
// call's launch hands the body its own arguments in place.
template <bool kRows>
__global__ void __launch_bounds__(kThreads) kivi_compress_keys_kernel(CompressArgs a) {
    if constexpr (kRows) {
        const CompressArgs r = compress_row(a);
        if (r.cache.element == KvElement::kivi4) compress_keys(r);
    } else {
        compress_keys(a);
    }
}
template <bool kRows>
__global__ void __launch_bounds__(kThreads) kivi_compress_values_kernel(CompressArgs a) {
    if constexpr (kRows) {
        const CompressArgs r = compress_row(a);
        if (r.cache.element == KvElement::kivi4) compress_values(r);
    } else {
        compress_values(a);
    }
}

// The grid and launch of both forms: blockIdx.x the blocks one call may quantise, y the channels (keys) or
// items (values), z the rows (one for a single call).
void launch_compress(const CompressArgs& args, int64_t n_rows, cudaStream_t stream) {
    const KiviLayout& k = args.cache.kivi;
    const int64_t row_elems = args.row;
    if (k.block <= 0 || k.value_group <= 0 || row_elems % 2 != 0 || row_elems % k.value_group != 0 ||
        k.value_group % 2 != 0 || k.ring_rows <= 0)
        fail_message("kivi_compress (cuda): not a kivi4 cache of a supported shape (row " + std::to_string(row_elems) +
                     ", value group " + std::to_string(k.value_group) + ")");
    if (args.n_tokens <= 0 || n_rows <= 0) return;
    if (n_rows > 65535) fail_message("kivi_compress_rows (cuda): " + std::to_string(n_rows) + " rows, at most 65535");
    // Appending n tokens moves the quantised end by at most n + block − 1 positions (a whole block).
    const int64_t max_blocks = (args.n_tokens + k.block - 1) / k.block + 1;
    const bool rows = args.rows != nullptr;
    if (args.cache.keys) {
        const dim3 grid(unsigned(max_blocks), unsigned((row_elems / 2 + kThreads - 1) / kThreads), unsigned(n_rows));
        if (rows) kivi_compress_keys_kernel<true><<<grid, kThreads, 0, stream>>>(args);
        else kivi_compress_keys_kernel<false><<<grid, kThreads, 0, stream>>>(args);
    } else {
        const int64_t items = k.block * (row_elems / k.value_group);
        const dim3 grid(unsigned(max_blocks), unsigned((items + kThreads - 1) / kThreads), unsigned(n_rows));
        if (rows) kivi_compress_values_kernel<true><<<grid, kThreads, 0, stream>>>(args);
        else kivi_compress_values_kernel<false><<<grid, kThreads, 0, stream>>>(args);
    }
    cuda_check_launch("kivi_compress");
}

}  // namespace

void kivi_compress(const KvCacheView& cache, int64_t row_elems, const int32_t* n_past, int64_t n_tokens,
                   cudaStream_t stream) {
    if (cache.element != KvElement::kivi4)
        fail_message("kivi_compress (cuda): not a kivi4 cache of a supported shape (row " + std::to_string(row_elems) +
                     ", value group " + std::to_string(cache.kivi.value_group) + ")");
    launch_compress(CompressArgs{cache, n_past, n_tokens, row_elems, nullptr}, 1, stream);
}

void kivi_compress_rows(const AttentionRow* rows, int64_t n_rows, const KiviLayout& layout, int64_t row_elems,
                        bool keys, cudaStream_t stream) {
    KvCacheView side;  // the launch's shape; each block reads its row's own view
    side.element = KvElement::kivi4;
    side.keys = keys;
    side.kivi = layout;
    launch_compress(CompressArgs{side, nullptr, 1, row_elems, rows}, n_rows, stream);
}

}  // namespace deltabit::cuda
