#include "models/kv_cache.h"

#include "core/error.h"
#include "core/half.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace deltabit {

namespace {

template <typename T>
StateChunk chunk_of(std::string name, const std::vector<T>& values) {
    StateChunk c{std::move(name), std::vector<std::byte>(values.size() * sizeof(T))};
    if (!values.empty()) std::memcpy(c.bytes.data(), values.data(), c.bytes.size());
    return c;
}

// The chunk's bytes as T values; the size was validated before (image_layout/checkpoint_layout).
template <typename T>
std::vector<T> values_of(const StateChunkIndex& chunks, const std::string& name) {
    const std::vector<std::byte>& bytes = *chunks.at(name);
    std::vector<T> out(bytes.size() / sizeof(T));
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
}

int64_t element_bytes(KvFormat format) { return format == KvFormat::f16 ? 2 : 4; }

// One group's asymmetric 4-bit parameters, as stored (f16 bits).
struct GroupParams {
    uint16_t min = 0, scale = 0;
};

GroupParams group_params(const std::vector<float>& group) {
    const auto [lo, hi] = std::minmax_element(group.begin(), group.end());
    return {float_to_half(*lo), float_to_half((*hi - *lo) / float(kKiviMaxCode))};
}

// Codes are computed against the f16-rounded parameters, so that m + s·code is the nearest level that
// is actually stored.
uint8_t quantise(float x, GroupParams p) {
    const float m = half_to_float(p.min), s = half_to_float(p.scale);
    if (!(s > 0.0f)) return 0;
    const float level = std::rint((x - m) / s);
    return uint8_t(std::clamp(level, 0.0f, float(kKiviMaxCode)));
}

uint8_t nibble(const std::vector<uint8_t>& codes, int64_t index) {
    const uint8_t byte = codes[size_t(index / 2)];
    return index % 2 == 0 ? uint8_t(byte & 0x0f) : uint8_t(byte >> 4);
}

void set_nibble(std::vector<uint8_t>& codes, int64_t index, uint8_t code) {
    uint8_t& byte = codes[size_t(index / 2)];
    byte = index % 2 == 0 ? uint8_t((byte & 0xf0) | code) : uint8_t((byte & 0x0f) | (code << 4));
}

}  // namespace

KiviSplit kivi_split(int64_t n) {
    KiviSplit s;
    s.sinks = std::min(n, kKiviSinks);
    const int64_t after = n - s.sinks;
    // A group leaves the window when kKiviResidual newer positions would remain exact without it.
    s.quantised = after >= kKiviResidual + kKiviGroup ? kKiviGroup * ((after - kKiviResidual) / kKiviGroup) : 0;
    s.residual = after - s.quantised;
    return s;
}

KvStore::KvStore(KvFormat format, KvSide side, int64_t n_head_kv, int64_t head_dim)
    : format_(format), side_(side), n_head_kv_(n_head_kv), head_dim_(head_dim) {
    if (format == KvFormat::kivi4 && head_dim % kKiviGroup != 0)
        fail("kv cache: kivi4 quantises values in groups of {} channels within a head, but head_dim is {}",
             kKiviGroup, head_dim);
}

KiviSplit KvStore::split() const {
    const int64_t row = row_size();
    if (format_ != KvFormat::kivi4 || row == 0) return {};
    return {int64_t(sinks_.size()) / row, int64_t(codes_.size()) * 2 / row, int64_t(residual_.size()) / row};
}

void KvStore::check_invariant() const {
    if (format_ != KvFormat::kivi4) return;
    const KiviSplit s = split();
    if (s.sinks + s.quantised + s.residual != n_positions_ || s.quantised % kKiviGroup != 0 ||
        (s.sinks < kKiviSinks && s.quantised + s.residual != 0))
        throw std::logic_error(fmt::format("kv cache: kivi4 parts {} + {} + {} do not make its {} positions",
                                           s.sinks, s.quantised, s.residual, n_positions_));
}

void KvStore::append(const float* rows, int64_t n_tokens) {
    const int64_t row = row_size();
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* x = rows + t * row;
        switch (format_) {
            case KvFormat::f32: exact_.insert(exact_.end(), x, x + row); break;
            case KvFormat::f16:
                for (int64_t i = 0; i < row; ++i) half_.push_back(float_to_half(x[i]));
                break;
            case KvFormat::kivi4: {
                std::vector<float>& part = int64_t(sinks_.size()) < kKiviSinks * row ? sinks_ : residual_;
                part.insert(part.end(), x, x + row);
                break;
            }
        }
        ++n_positions_;
    }
    check_invariant();
}

void KvStore::compress() {
    if (format_ != KvFormat::kivi4) return;
    while (split().residual >= kKiviResidual + kKiviGroup) quantise_oldest_residual_group();
    check_invariant();
    if (split() != kivi_split(n_positions_))
        throw std::logic_error("kv cache: kivi4 store is not in its settled split after compress");
}

void KvStore::quantise_oldest_residual_group() {
    const int64_t row = row_size(), G = kKiviGroup;
    const int64_t first = int64_t(codes_.size()) * 2 / row;  // quantised position of the group's first row
    codes_.resize(codes_.size() + size_t(G * row / 2), 0);
    auto x = [&](int64_t t, int64_t c) { return residual_[size_t(t * row + c)]; };
    std::vector<float> group(static_cast<size_t>(G));
    if (side_ == KvSide::keys) {
        // Per channel: one (m, s) over the G positions.
        for (int64_t c = 0; c < row; ++c) {
            for (int64_t t = 0; t < G; ++t) group[size_t(t)] = x(t, c);
            const GroupParams p = group_params(group);
            min_.push_back(p.min);
            scale_.push_back(p.scale);
            for (int64_t t = 0; t < G; ++t) set_nibble(codes_, (first + t) * row + c, quantise(x(t, c), p));
        }
    } else {
        // Per token: one (m, s) per G consecutive channels.
        for (int64_t t = 0; t < G; ++t)
            for (int64_t g = 0; g < row / G; ++g) {
                for (int64_t i = 0; i < G; ++i) group[size_t(i)] = x(t, g * G + i);
                const GroupParams p = group_params(group);
                min_.push_back(p.min);
                scale_.push_back(p.scale);
                for (int64_t i = 0; i < G; ++i)
                    set_nibble(codes_, (first + t) * row + g * G + i, quantise(x(t, g * G + i), p));
            }
    }
    residual_.erase(residual_.begin(), residual_.begin() + G * row);
}

void KvStore::dequantise_into(float* out) const {
    const int64_t row = row_size(), G = kKiviGroup, n_quantised = split().quantised;
    // One (m, s) pair per group, read once per group: keys per channel over G positions, values per
    // position over G channels.
    auto level = [&](int64_t q, int64_t c, float m, float s) {
        out[q * row + c] = m + s * float(nibble(codes_, q * row + c));
    };
    if (side_ == KvSide::keys) {
        for (int64_t block = 0; block < n_quantised / G; ++block)
            for (int64_t c = 0; c < row; ++c) {
                const size_t p = size_t(block * row + c);
                const float m = half_to_float(min_[p]), s = half_to_float(scale_[p]);
                for (int64_t q = block * G; q < (block + 1) * G; ++q) level(q, c, m, s);
            }
    } else {
        for (int64_t q = 0; q < n_quantised; ++q)
            for (int64_t g = 0; g < row / G; ++g) {
                const size_t p = size_t(q * (row / G) + g);
                const float m = half_to_float(min_[p]), s = half_to_float(scale_[p]);
                for (int64_t c = g * G; c < (g + 1) * G; ++c) level(q, c, m, s);
            }
    }
}

std::vector<float> KvStore::read() const {
    switch (format_) {
        case KvFormat::f32: return exact_;
        case KvFormat::f16: {
            std::vector<float> out(half_.size());
            for (size_t i = 0; i < half_.size(); ++i) out[i] = half_to_float(half_[i]);
            return out;
        }
        case KvFormat::kivi4: {
            std::vector<float> out(size_t(n_positions_ * row_size()));
            const KiviSplit s = split();
            std::copy(sinks_.begin(), sinks_.end(), out.begin());
            dequantise_into(out.data() + s.sinks * row_size());
            std::copy(residual_.begin(), residual_.end(), out.begin() + (s.sinks + s.quantised) * row_size());
            return out;
        }
    }
    return {};
}

void KvStore::clear() {
    n_positions_ = 0;
    exact_.clear();
    half_.clear();
    sinks_.clear();
    codes_.clear();
    min_.clear();
    scale_.clear();
    residual_.clear();
}

std::vector<StateChunkSpec> KvStore::image_layout(KvFormat format, KvSide side, int64_t n_head_kv,
                                                  int64_t head_dim, int64_t n, const std::string& prefix) {
    const int64_t row = n_head_kv * head_dim;
    if (format != KvFormat::kivi4) return {{prefix, size_t(n * row * element_bytes(format))}};
    const KiviSplit s = kivi_split(n);
    const int64_t n_params = side == KvSide::keys ? s.quantised / kKiviGroup * row : s.quantised * (row / kKiviGroup);
    return {{prefix + ".sink", size_t(s.sinks * row * 4)},
            {prefix + ".codes", size_t(s.quantised * row / 2)},
            {prefix + ".min", size_t(n_params * 2)},
            {prefix + ".scale", size_t(n_params * 2)},
            {prefix + ".residual", size_t(s.residual * row * 4)}};
}

void KvStore::save(const std::string& prefix, std::vector<StateChunk>& out) const {
    switch (format_) {
        case KvFormat::f32: out.push_back(chunk_of(prefix, exact_)); break;
        case KvFormat::f16: out.push_back(chunk_of(prefix, half_)); break;
        case KvFormat::kivi4:
            if (split() != kivi_split(n_positions_))
                throw std::logic_error("kv cache: saving a kivi4 store between append() and compress()");
            out.push_back(chunk_of(prefix + ".sink", sinks_));
            out.push_back(chunk_of(prefix + ".codes", codes_));
            out.push_back(chunk_of(prefix + ".min", min_));
            out.push_back(chunk_of(prefix + ".scale", scale_));
            out.push_back(chunk_of(prefix + ".residual", residual_));
            break;
    }
}

void KvStore::load(const std::string& prefix, const StateChunkIndex& chunks, int64_t n) {
    clear();
    switch (format_) {
        case KvFormat::f32: exact_ = values_of<float>(chunks, prefix); break;
        case KvFormat::f16: half_ = values_of<uint16_t>(chunks, prefix); break;
        case KvFormat::kivi4:
            sinks_ = values_of<float>(chunks, prefix + ".sink");
            codes_ = values_of<uint8_t>(chunks, prefix + ".codes");
            min_ = values_of<uint16_t>(chunks, prefix + ".min");
            scale_ = values_of<uint16_t>(chunks, prefix + ".scale");
            residual_ = values_of<float>(chunks, prefix + ".residual");
            break;
    }
    n_positions_ = n;
    check_invariant();
}

std::vector<StateChunkSpec> KvStore::checkpoint_layout(KvFormat format, KvSide, int64_t n_head_kv,
                                                       int64_t head_dim, int64_t n, const std::string& prefix) {
    if (format != KvFormat::kivi4) return {};
    return {{prefix + ".residual", size_t(kivi_split(n).residual * n_head_kv * head_dim * 4)}};
}

void KvStore::save_checkpoint(const std::string& prefix, std::vector<StateChunk>& out) const {
    if (format_ == KvFormat::kivi4) out.push_back(chunk_of(prefix + ".residual", residual_));
}

void KvStore::restore_checkpoint(const std::string& prefix, const StateChunkIndex& chunks, int64_t n) {
    const int64_t row = row_size();
    switch (format_) {
        case KvFormat::f32: exact_.resize(size_t(n * row)); break;
        case KvFormat::f16: half_.resize(size_t(n * row)); break;
        case KvFormat::kivi4: {
            // Sinks and quantised groups up to n are a prefix no later token rewrote: cut them back.
            const KiviSplit s = kivi_split(n);
            sinks_.resize(size_t(s.sinks * row));
            codes_.resize(size_t(s.quantised * row / 2));
            const int64_t n_params =
                side_ == KvSide::keys ? s.quantised / kKiviGroup * row : s.quantised * (row / kKiviGroup);
            min_.resize(size_t(n_params));
            scale_.resize(size_t(n_params));
            residual_ = values_of<float>(chunks, prefix + ".residual");
            break;
        }
    }
    n_positions_ = n;
    check_invariant();
}

int64_t kv_layer_bytes(KvFormat format, int64_t n_head_kv, int64_t head_dim, int64_t n) {
    int64_t total = 0;
    for (KvSide side : {KvSide::keys, KvSide::values})
        for (const StateChunkSpec& c : KvStore::image_layout(format, side, n_head_kv, head_dim, n, ""))
            total += int64_t(c.bytes);
    return total;
}

}  // namespace deltabit
