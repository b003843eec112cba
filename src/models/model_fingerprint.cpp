#include "models/model_fingerprint.h"

#include "core/dtype.h"
#include "core/error.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>

#if DELTABIT_HAVE_XXHASH
#define XXH_INLINE_ALL
#include <xxhash.h>
#endif

namespace deltabit {

#if DELTABIT_HAVE_XXHASH
namespace {

// Feeds fixed-width little-endian fields, so that no two different field sequences hash the same bytes
// (strings carry their length first).
class Hasher {
public:
    Hasher() : state_(XXH3_createState(), &XXH3_freeState) {
        if (!state_ || XXH3_128bits_reset(state_.get()) != XXH_OK) fail("fingerprint: xxhash could not start");
    }
    void bytes(const void* data, size_t n) {
        if (n > 0) XXH3_128bits_update(state_.get(), data, n);
    }
    void u64(uint64_t v) {
        unsigned char le[8];
        for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(v >> (8 * i));
        bytes(le, 8);
    }
    void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
    void f32(float v) { u64(std::bit_cast<uint32_t>(v)); }
    void text(std::string_view s) {
        u64(s.size());
        bytes(s.data(), s.size());
    }
    std::string hex() const {
        const XXH128_hash_t h = XXH3_128bits_digest(state_.get());
        return fmt::format("{}:{:016x}{:016x}", kFingerprintScheme, h.high64, h.low64);
    }

private:
    std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state_;
};

void hash_geometry(Hasher& h, const ModelConfig& c) {
    h.text(c.arch_name);
    for (int64_t v : {c.n_vocab, c.n_embd, c.n_ff, c.n_head, c.n_head_kv, c.head_dim, c.rope_dim,
                      c.ssm_n_key_heads, c.ssm_n_value_heads, c.ssm_key_dim, c.ssm_value_dim, c.ssm_conv_kernel,
                      c.n_expert, c.n_expert_used, c.expert_ff, c.shared_expert_ff})
        h.i64(v);
    h.f32(c.rms_eps);
    h.f32(c.rope_theta);
    h.u64(c.tied_embeddings);
    h.u64(c.attn_output_gate);
    h.u64(c.norm_topk_prob);
    h.u64(c.value_head_order == ValueHeadOrder::tiled);
    h.u64(c.layers.size());
    for (LayerKind k : c.layers) h.u64(uint64_t(k));  // 0 full, 1 linear (as before), 2 sliding
    h.u64(c.layer_is_moe.size());
    for (bool moe : c.layer_is_moe) h.u64(moe);
    // Only diffusion_gemma sets these; hashing nothing for the others keeps their fingerprints as they were.
    for (const LayerAttention& a : c.layer_attention) {
        for (int64_t v : {a.n_head_kv, a.head_dim, a.rope_pairs, a.window, int64_t(a.value_is_key)}) h.i64(v);
        h.f32(a.rope_theta);
    }
    if (c.arch == Arch::diffusion_gemma) {
        h.i64(c.canvas_length);
        h.f32(c.final_logit_softcap);
    }
}

}  // namespace

bool fingerprint_available() { return true; }

std::string model_fingerprint(const ModelWeights& weights) {
    Hasher h;
    h.text("deltabit model fingerprint v1");
    hash_geometry(h, weights.config());
    h.u64(weights.tensors().size());
    for (const auto& [name, t] : weights.tensors()) {  // std::map: name order
        h.text(name);
        h.text(dtype_name(t.dtype));
        h.u64(t.shape.size());
        for (int64_t d : t.shape) h.i64(d);
        h.u64(t.bytes);
        h.bytes(t.data, t.bytes);
    }
    return h.hex();
}

#else

bool fingerprint_available() { return false; }

std::string model_fingerprint(const ModelWeights& weights) {
    fail("{}: this build has no model fingerprints (and so no snapshots): it was built without xxhash.h "
         "(install libxxhash-dev, or copy xxhash.h to .carry/include/, and rebuild)",
         weights.source());
}

#endif

}  // namespace deltabit
