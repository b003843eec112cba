// The cached keys, or the cached values, of one full-attention layer, in one of the formats of
// models/kv_format.h. A layer holds two stores (LayerState::k and ::v): KIVI quantises keys and values
// along different axes, so each side knows which one it is.
//
// Every format presents the same logical tensor, x[position][n_head_kv][head_dim] row-major (one
// "row" = the n_head_kv·head_dim values of one position); only the storage differs:
//
//   f32    rows as given.
//   f16    each value rounded to IEEE half, nearest even (core/half.h), when it is appended.
//   kivi4  KIVI (Liu et al. 2024, "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache"),
//          at 4 bits. Positions fall into three consecutive parts:
//            sinks      the first kKiviSinks positions, exact (f32): attention sinks draw a large share
//                       of every query's weight, so their error would reach every later token;
//            quantised  whole groups of kKiviGroup positions, 4-bit codes, asymmetric: each group of
//                       values x shares min m and scale s = (max − min)/15, both stored as f16, and
//                       code = clamp(rint((x − m) / s), 0, 15) (ties to even; 0 when s = 0) computed
//                       with the f16-rounded m and s; the value read back is m + s·code (f32).
//                       Keys are grouped per channel: one (m, s) per channel per block of kKiviGroup
//                       positions, because key outliers sit in fixed channels (KIVI §3). Values are
//                       grouped per token: one (m, s) per position per kKiviGroup consecutive
//                       channels (groups never straddle a head: head_dim must divide by kKiviGroup);
//            residual   the newest positions, exact (f32): at least kKiviResidual of them once the
//                       sequence is long enough, at most kKiviResidual + kKiviGroup − 1, because keys
//                       can be quantised only a whole group of positions at a time.
//          sinks + quantised + residual = size() always (checked after every change). Which position
//          is in which part is a function of size() alone (kivi_split), so a store's layout never
//          depends on how its tokens were split into calls.
//          A store has one format; which one each layer of a sequence gets is layer_kv_format's
//          (models/kv_format.h): a kivi4 sequence keeps layer 0 in f16 when layer 0 is full
//          attention, because there each token id always brings the same quantisation error.
//
// Tokens enter with append() in their per-token form (f32 or f16 rounding; KIVI: exact, in the
// residual window) and attention reads them that way; compress() then quantises the KIVI groups that
// have left the residual window. So the queries of one call see that call's own keys as appended — a
// whole prompt is attended in full precision, as KIVI does — and every earlier key as stored.
//
// Snapshot chunks (StateImage; names are prefix + suffix, prefix "blk.N.attn.k" or "blk.N.attn.v"),
// all little-endian, always all present (empty when their part is):
//   f32    prefix             f32  [size][n_head_kv][head_dim]
//   f16    prefix             f16  [size][n_head_kv][head_dim]   (IEEE half bits)
//   kivi4  prefix.sink        f32  [sinks][n_head_kv][head_dim]
//          prefix.codes       u8   [quantised][n_head_kv·head_dim / 2]: value 2j in the low nibble of
//                                  byte j, value 2j+1 in the high nibble, j counting along the row
//          prefix.min         f16  keys:   [quantised / kKiviGroup][n_head_kv·head_dim] (per channel)
//          prefix.scale       f16  values: [quantised][n_head_kv·head_dim / kKiviGroup] (per token)
//          prefix.residual    f32  [residual][n_head_kv][head_dim]
// A checkpoint (StateCheckpoint) of a kivi4 store holds prefix.residual only: cutting the store back to
// the checkpoint's position keeps its sinks and quantised groups (a prefix that no later token
// rewrites) but the residual window of that moment may since have been quantised.
#pragma once

#include "models/kv_format.h"
#include "models/state_image.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace deltabit {

// KIVI's settings, from the paper's main experiments (sink tokens from StreamingLLM, Xiao et al. 2023).
// Group 32: (m, s) cost 4 bytes per group, i.e. 1 bit per value at 32 (4 + 1 = 5 bits per value in all);
// 32 divides the head_dim of every supported model (64, 128, 256) and the residual window.
inline constexpr int64_t kKiviSinks = 8;
inline constexpr int64_t kKiviResidual = 128;
inline constexpr int64_t kKiviGroup = 32;
inline constexpr int kKiviMaxCode = 15;  // 4 bits

// How a settled kivi4 store of n positions splits them (sinks, then quantised, then residual).
struct KiviSplit {
    int64_t sinks = 0, quantised = 0, residual = 0;
    bool operator==(const KiviSplit&) const = default;
};
KiviSplit kivi_split(int64_t n_positions);

enum class KvSide { keys, values };

// A chunk's name and exact size, for validating an image before anything is touched.
struct StateChunkSpec {
    std::string name;
    size_t bytes = 0;
};

// Chunks by name, as an image or checkpoint holds them (pointers into it).
using StateChunkIndex = std::map<std::string, const std::vector<std::byte>*, std::less<>>;

class KvStore {
public:
    KvStore() = default;  // an unused store (a DeltaNet layer's)
    // Error when kivi4 is asked for a head_dim that kKiviGroup does not divide.
    KvStore(KvFormat format, KvSide side, int64_t n_head_kv, int64_t head_dim);

    KvFormat format() const { return format_; }
    KvSide side() const { return side_; }
    int64_t size() const { return n_positions_; }  // positions held
    int64_t row_size() const { return n_head_kv_ * head_dim_; }

    // Appends n_tokens rows [n_tokens][n_head_kv][head_dim] in their per-token form.
    void append(const float* rows, int64_t n_tokens);
    // kivi4: quantises every whole group that has left the residual window; no-op for f32 and f16.
    void compress();
    // Every position as attention sees it, f32 [size()][n_head_kv][head_dim].
    std::vector<float> read() const;
    void clear();
    // kivi4: the current split (sinks/quantised/residual); the residual may exceed the window between
    // append() and compress().
    KiviSplit split() const;

    // The chunks of a store of n_positions positions (what save() writes).
    static std::vector<StateChunkSpec> image_layout(KvFormat format, KvSide side, int64_t n_head_kv,
                                                    int64_t head_dim, int64_t n_positions,
                                                    const std::string& prefix);
    void save(const std::string& prefix, std::vector<StateChunk>& out) const;
    // Replaces the contents from chunks already checked against image_layout(.., n_positions, prefix).
    void load(const std::string& prefix, const StateChunkIndex& chunks, int64_t n_positions);

    // What a checkpoint at n_positions must hold for this store (kivi4: the residual window).
    static std::vector<StateChunkSpec> checkpoint_layout(KvFormat format, KvSide side, int64_t n_head_kv,
                                                         int64_t head_dim, int64_t n_positions,
                                                         const std::string& prefix);
    void save_checkpoint(const std::string& prefix, std::vector<StateChunk>& out) const;
    // Cuts the store back to n_positions ≤ size() (chunks checked against checkpoint_layout).
    void restore_checkpoint(const std::string& prefix, const StateChunkIndex& chunks, int64_t n_positions);

    bool operator==(const KvStore&) const = default;

private:
    void check_invariant() const;
    void quantise_oldest_residual_group();
    void dequantise_into(float* out) const;  // the quantised part, f32 [quantised][row]

    KvFormat format_ = KvFormat::f32;
    KvSide side_ = KvSide::keys;
    int64_t n_head_kv_ = 0, head_dim_ = 0;
    int64_t n_positions_ = 0;

    std::vector<float> exact_;     // f32: [size][row]
    std::vector<uint16_t> half_;   // f16: [size][row]
    // kivi4
    std::vector<float> sinks_;     // [sinks][row]
    std::vector<uint8_t> codes_;   // [quantised][row / 2]
    std::vector<uint16_t> min_, scale_;  // f16; keys [quantised / G][row], values [quantised][row / G]
    std::vector<float> residual_;  // [residual][row]
};

// Bytes a settled store of both sides of one layer holds at n_positions (the sum of its chunks).
int64_t kv_layer_bytes(KvFormat format, int64_t n_head_kv, int64_t head_dim, int64_t n_positions);

}  // namespace deltabit
