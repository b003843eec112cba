#include "models/sequence_state.h"

#include "core/error.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace deltabit {

namespace {

std::string attn_prefix(int64_t layer, char side) { return fmt::format("blk.{}.attn.{}", layer, side); }
std::string gdn_conv_name(int64_t layer) { return fmt::format("blk.{}.gdn.conv", layer); }
std::string gdn_recurrent_name(int64_t layer) { return fmt::format("blk.{}.gdn.recurrent", layer); }

size_t conv_floats(const ModelConfig& c) { return size_t((c.ssm_conv_kernel - 1) * c.ssm_conv_channels()); }
size_t recurrent_floats(const ModelConfig& c) {
    return size_t(c.ssm_n_value_heads * c.ssm_key_dim * c.ssm_value_dim);
}

void append_gdn_layout(const ModelConfig& c, int64_t layer, std::vector<StateChunkSpec>& out) {
    out.push_back({gdn_conv_name(layer), conv_floats(c) * 4});
    out.push_back({gdn_recurrent_name(layer), recurrent_floats(c) * 4});
}

void check_position(std::string_view what, int64_t position) {
    if (position < 0 || position > kMaxStatePosition)
        fail("{}: position {} is outside 0 .. {}", what, position, kMaxStatePosition);
}

// Every wanted chunk exactly once with exactly its size, and nothing else; Error naming the first miss.
StateChunkIndex check_chunks(std::string_view what, const std::vector<StateChunkSpec>& want,
                             const std::vector<StateChunk>& got, int64_t position) {
    StateChunkIndex index;
    for (const StateChunk& c : got)
        if (!index.emplace(c.name, &c.bytes).second) fail("{}: chunk {} appears twice", what, c.name);
    std::set<std::string, std::less<>> wanted;
    for (const StateChunkSpec& spec : want) {
        wanted.insert(spec.name);
        const auto it = index.find(spec.name);
        if (it == index.end()) fail("{}: chunk {} is missing", what, spec.name);
        if (it->second->size() != spec.bytes)
            fail("{}: chunk {} holds {} bytes, but {} at position {} for this model", what, spec.name,
                 it->second->size(), spec.bytes, position);
    }
    for (const StateChunk& c : got)
        if (!wanted.contains(c.name)) fail("{}: chunk {} is not part of this model's state", what, c.name);
    return index;
}

std::vector<float> floats_of(const std::vector<std::byte>& bytes) {
    std::vector<float> out(bytes.size() / 4);
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
}

StateChunk chunk_of(std::string name, const std::vector<float>& values) {
    StateChunk c{std::move(name), std::vector<std::byte>(values.size() * 4)};
    if (!values.empty()) std::memcpy(c.bytes.data(), values.data(), c.bytes.size());
    return c;
}

}  // namespace

std::vector<StateChunkSpec> state_image_layout(const ModelConfig& c, KvFormat kv, int64_t position) {
    std::vector<StateChunkSpec> out;
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        if (c.layers[size_t(l)] == LayerKind::linear_attention) {
            append_gdn_layout(c, l, out);
            continue;
        }
        for (auto [side, letter] : {std::pair{KvSide::keys, 'k'}, std::pair{KvSide::values, 'v'}})
            for (StateChunkSpec& s : KvStore::image_layout(layer_kv_format(c, kv, l), side, c.n_head_kv, c.head_dim,
                                                           position, attn_prefix(l, letter)))
                out.push_back(std::move(s));
    }
    return out;
}

std::vector<StateChunkSpec> state_checkpoint_layout(const ModelConfig& c, KvFormat kv, int64_t position) {
    std::vector<StateChunkSpec> out;
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        if (c.layers[size_t(l)] == LayerKind::linear_attention) {
            append_gdn_layout(c, l, out);
            continue;
        }
        for (auto [side, letter] : {std::pair{KvSide::keys, 'k'}, std::pair{KvSide::values, 'v'}})
            for (StateChunkSpec& s : KvStore::checkpoint_layout(layer_kv_format(c, kv, l), side, c.n_head_kv,
                                                                c.head_dim, position, attn_prefix(l, letter)))
                out.push_back(std::move(s));
    }
    return out;
}

int64_t kv_cache_bytes(const ModelConfig& c, KvFormat kv, int64_t n) {
    int64_t total = 0;
    for (int64_t l = 0; l < c.n_layer(); ++l)
        if (c.layers[size_t(l)] == LayerKind::full_attention)
            total += kv_layer_bytes(layer_kv_format(c, kv, l), c.n_head_kv, c.head_dim, n);
    return total;
}

double kv_bytes_per_token(const ModelConfig& c, KvFormat kv) {
    // From one settled kivi4 split to the next: exactly one group more in the middle, the same window
    // (and one more position in any layer that layer_kv_format keeps in f16).
    const int64_t settled = kKiviSinks + kKiviResidual + kKiviGroup;
    return double(kv_cache_bytes(c, kv, settled + kKiviGroup) - kv_cache_bytes(c, kv, settled)) / double(kKiviGroup);
}

int64_t deltanet_state_bytes(const ModelConfig& c) {
    int64_t total = 0;
    for (LayerKind kind : c.layers)
        if (kind == LayerKind::linear_attention) total += int64_t((conv_floats(c) + recurrent_floats(c)) * 4);
    return total;
}

namespace {

StateChunkIndex checked_image_chunks(const ModelConfig& c, KvFormat kv, const StateImage& image) {
    if (image.kv_format != kv)
        fail("state image: KV cache format {}, but this sequence stores {}", kv_format_name(image.kv_format),
             kv_format_name(kv));
    check_position("state image", image.position);
    return check_chunks("state image", state_image_layout(c, kv, image.position), image.chunks, image.position);
}

}  // namespace

void validate_state_image(const ModelConfig& c, KvFormat kv, const StateImage& image) {
    checked_image_chunks(c, kv, image);
}

void validate_state_checkpoint(const ModelConfig& c, KvFormat kv, const StateCheckpoint& cp) {
    check_position("state checkpoint", cp.position);
    check_chunks("state checkpoint", state_checkpoint_layout(c, kv, cp.position), cp.chunks, cp.position);
}

SequenceState::SequenceState(const ModelConfig& c, KvFormat kv)
    : config_(c), kv_(kv), layers_(size_t(c.n_layer())) {
    for (int64_t i = 0; i < c.n_layer(); ++i) {
        LayerState& s = layers_[size_t(i)];
        if (c.layers[size_t(i)] == LayerKind::full_attention) {
            const KvFormat format = layer_kv_format(c, kv, i);
            s.k = KvStore(format, KvSide::keys, c.n_head_kv, c.head_dim);
            s.v = KvStore(format, KvSide::values, c.n_head_kv, c.head_dim);
            continue;
        }
        s.conv.assign(conv_floats(c), 0.0f);
        s.recurrent.assign(recurrent_floats(c), 0.0f);
    }
}

void SequenceState::reset() {
    position_ = 0;
    for (LayerState& s : layers_) {
        s.k.clear();
        s.v.clear();
        std::fill(s.conv.begin(), s.conv.end(), 0.0f);
        std::fill(s.recurrent.begin(), s.recurrent.end(), 0.0f);
    }
}

StateImage SequenceState::save() const {
    StateImage image{position_, kv_, {}};
    for (int64_t l = 0; l < n_layer(); ++l) {
        const LayerState& s = layers_[size_t(l)];
        if (config_.layers[size_t(l)] == LayerKind::linear_attention) {
            image.chunks.push_back(chunk_of(gdn_conv_name(l), s.conv));
            image.chunks.push_back(chunk_of(gdn_recurrent_name(l), s.recurrent));
        } else {
            s.k.save(attn_prefix(l, 'k'), image.chunks);
            s.v.save(attn_prefix(l, 'v'), image.chunks);
        }
    }
    return image;
}

void SequenceState::load(const StateImage& image) {
    const StateChunkIndex chunks = checked_image_chunks(config_, kv_, image);
    // Nothing below can fail on validated chunks; the layers are built aside anyway, so that even an
    // allocation failure leaves this state as it was.
    std::vector<LayerState> layers = SequenceState(config_, kv_).layers_;
    for (int64_t l = 0; l < n_layer(); ++l) {
        LayerState& s = layers[size_t(l)];
        if (config_.layers[size_t(l)] == LayerKind::linear_attention) {
            s.conv = floats_of(*chunks.at(gdn_conv_name(l)));
            s.recurrent = floats_of(*chunks.at(gdn_recurrent_name(l)));
        } else {
            s.k.load(attn_prefix(l, 'k'), chunks, image.position);
            s.v.load(attn_prefix(l, 'v'), chunks, image.position);
        }
    }
    layers_ = std::move(layers);
    position_ = image.position;
}

StateCheckpoint SequenceState::checkpoint() const {
    StateCheckpoint cp{position_, {}};
    for (int64_t l = 0; l < n_layer(); ++l) {
        const LayerState& s = layers_[size_t(l)];
        if (config_.layers[size_t(l)] == LayerKind::linear_attention) {
            cp.chunks.push_back(chunk_of(gdn_conv_name(l), s.conv));
            cp.chunks.push_back(chunk_of(gdn_recurrent_name(l), s.recurrent));
        } else {
            s.k.save_checkpoint(attn_prefix(l, 'k'), cp.chunks);
            s.v.save_checkpoint(attn_prefix(l, 'v'), cp.chunks);
        }
    }
    return cp;
}

void SequenceState::restore(const StateCheckpoint& cp) {
    check_position("state checkpoint", cp.position);
    if (cp.position > position_)
        fail("state checkpoint: position {} is ahead of the sequence (at {}); a checkpoint can only go back",
             cp.position, position_);
    // validate_state_checkpoint's checks, keeping the index of the chunks.
    const StateChunkIndex chunks = check_chunks(
        "state checkpoint", state_checkpoint_layout(config_, kv_, cp.position), cp.chunks, cp.position);
    // Validated: from here on only cuts and copies of checked sizes (done in place, as copying every KV
    // cache aside would cost what prefix reuse saves).
    for (int64_t l = 0; l < n_layer(); ++l) {
        LayerState& s = layers_[size_t(l)];
        if (config_.layers[size_t(l)] == LayerKind::linear_attention) {
            s.conv = floats_of(*chunks.at(gdn_conv_name(l)));
            s.recurrent = floats_of(*chunks.at(gdn_recurrent_name(l)));
        } else {
            s.k.restore_checkpoint(attn_prefix(l, 'k'), chunks, cp.position);
            s.v.restore_checkpoint(attn_prefix(l, 'v'), chunks, cp.position);
        }
    }
    position_ = cp.position;
}

}  // namespace deltabit
