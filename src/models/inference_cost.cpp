#include "models/inference_cost.h"

#include "models/kv_cache.h"

#include <charconv>
#include <string_view>

namespace deltabit {

namespace {

// The layer index of "blk.N.…", or −1 for a global tensor.
int64_t layer_of(std::string_view name) {
    if (!name.starts_with("blk.")) return -1;
    int64_t layer = -1;
    std::from_chars(name.data() + 4, name.data() + name.size(), layer);
    return layer;
}

}  // namespace

InferenceCost::InferenceCost(const ModelWeights& weights, KvFormat kv)
    : config_(weights.config()), kv_(kv) {
    const ModelConfig& c = config_;
    const bool tied = weights.find("output.weight") == nullptr;
    for (const auto& [name, t] : weights.tensors()) {
        const double elements = double(t.n_elements());
        stored_weight_bytes_ += t.bytes;
        parameters_ += elements;
        if (layer_of(name) >= c.n_layer()) continue;  // MTP layers: stored, never run
        if (name == "token_embd.weight") {
            if (tied) {
                weight_bytes_per_token_ += t.bytes;
                lm_head_weights_ = elements;
            } else {
                weight_bytes_per_token_ += t.bytes / uint64_t(c.n_vocab);
            }
        } else if (name == "output.weight") {
            weight_bytes_per_token_ += t.bytes;
            lm_head_weights_ = elements;
        } else if (name.ends_with("_exps.weight")) {
            // Only the chosen experts' rows are read; the stack is n_expert equal slices.
            weight_bytes_per_token_ += t.bytes / uint64_t(c.n_expert) * uint64_t(c.n_expert_used);
            matrix_weights_ += elements / double(c.n_expert) * double(c.n_expert_used);
        } else {
            weight_bytes_per_token_ += t.bytes;
            if (t.shape.size() >= 2) matrix_weights_ += elements;
        }
    }
}

DecodeTraffic InferenceCost::decode_traffic(int64_t depth) const {
    const ModelConfig& c = config_;
    DecodeTraffic traffic;
    traffic.weight_bytes = weight_bytes_per_token_;
    const uint64_t row = 2 * uint64_t(c.n_head_kv * c.head_dim);  // K and V of one position
    const uint64_t recurrent = uint64_t(c.ssm_n_value_heads * c.ssm_key_dim * c.ssm_value_dim);
    const uint64_t conv = uint64_t((c.ssm_conv_kernel - 1) * c.ssm_conv_channels());
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        const LayerKind kind = c.layers[size_t(l)];
        const KvFormat kv = layer_kv_format(c, kv_, l);
        if (kind == LayerKind::full_attention && kv == KvFormat::kivi4)
            traffic.kv_bytes += uint64_t(kv_layer_bytes(kv, c.n_head_kv, c.head_dim, depth + 1)) + row * sizeof(float);
        else if (kind == LayerKind::full_attention)
            traffic.kv_bytes += row * (kv == KvFormat::f16 ? 2 : 4) * uint64_t(depth + 2);  // read 0..depth, write depth
        else
            traffic.state_bytes += 2 * sizeof(float) * (recurrent + conv);  // read and write back
    }
    return traffic;
}

double InferenceCost::prefill_flops(int64_t n_past, int64_t n_tokens, int64_t lm_head_tokens) const {
    const ModelConfig& c = config_;
    const double T = double(n_tokens);
    // Σ_{t<T} (n_past + t + 1) visible keys over the T queries.
    const double pairs = T * double(n_past) + T * (T + 1) / 2;
    double attention = 0;
    for (LayerKind kind : c.layers)
        if (kind == LayerKind::full_attention) attention += 4.0 * double(c.n_head * c.head_dim) * pairs;
    return 2.0 * T * matrix_weights_ + 2.0 * double(lm_head_tokens) * lm_head_weights_ + attention;
}

}  // namespace deltabit
