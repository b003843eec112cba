#include "models/model.h"

#include "core/env_switch.h"
#include "core/error.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "models/architectures.h"
#include "models/config_gguf.h"
#include "models/config_loader.h"
#include "models/hf_folder.h"
#include "ops/embedding.h"
#include "ops/matmul.h"
#include "ops/rms_norm.h"

#include <memory>

namespace deltabit {

namespace {

void add_into(float* x, const float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace

bool is_diffusion_model(const std::filesystem::path& path) {
    try {
        if (is_hf_folder(path)) return load_hf_config(path).arch == Arch::diffusion_gemma;
        const gguf::File file = gguf::File::open(path);
        return model_config_from_gguf(file).arch == Arch::diffusion_gemma;
    } catch (const Error&) {
        return false;
    }
}

Model Model::load(const std::filesystem::path& path, const LoadProgress& progress) {
    if (is_hf_folder(path)) {
        HfFolder folder = open_hf_folder(path);
        auto files = std::make_shared<const safetensors::Set>(std::move(folder.weights));
        return Model(ModelWeights::from_hf(std::move(files), std::move(folder.config), progress));
    }
    auto file = std::make_shared<const gguf::File>(gguf::File::open(path.string()));
    ModelConfig config = model_config_from_gguf(*file);
    return Model(ModelWeights::from_gguf(std::move(file), std::move(config), progress));
}

Model::Model(ModelWeights weights) : weights_(std::move(weights)) {
    parts_ = architecture_of(weights_.config().arch).bind(weights_);
}

bool cpu_reference_switch() { return env_switch("DELTABIT_CPU_REFERENCE", false); }

ThreadPool& shared_cpu_pool() {
    static ThreadPool pool;
    return pool;
}

std::vector<float> Model::forward(SequenceState& state, std::span<const int32_t> ids,
                                  const ActivationObserver* observer) const {
    return forward(state, ids, observer, {numerics_, cpu_reference_switch() ? nullptr : &shared_cpu_pool(), true});
}

std::vector<float> Model::forward(SequenceState& state, std::span<const int32_t> ids, const ActivationObserver* observer,
                                  const ForwardOptions& options) const {
    const MatmulNumerics numerics = options.numerics;
    ThreadPool* const pool = options.pool;
    const ModelConfig& c = config();
    const int64_t T = int64_t(ids.size()), D = c.n_embd;
    if (parts_.diffusion)
        fail("forward: {} is a block-diffusion model ({}): it has no left-to-right forward pass", weights_.source(),
             c.arch_name);
    if (state.n_layer() != c.n_layer())
        fail("forward: the sequence state has {} layers but the model has {}", state.n_layer(), c.n_layer());
    if (T == 0) return {};

    std::vector<float> x(size_t(T * D)), h(size_t(T * D)), m(size_t(T * D));
    cpu::embedding_lookup(parts_.token_embd, ids.data(), T, x.data());  // throws on a bad id, before any state change
    const int64_t n_past = state.position();
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        const LayerWeights& L = parts_.layers[size_t(l)];
        const BlockContext ctx{c, l, observer, numerics, pool};
        cpu::rms_norm(x.data(), L.attn_norm, T, D, c.rms_eps, cpu::NormWeight::plain, h.data());
        if (L.kind == LayerKind::linear_attention)
            gated_deltanet_block(ctx, L.deltanet, h.data(), T, state.layer(l), m.data());
        else
            attention_block(ctx, L.attention, h.data(), T, n_past, state.layer(l), m.data());
        add_into(x.data(), m.data(), T * D);

        cpu::rms_norm(x.data(), L.ffn_norm, T, D, c.rms_eps, cpu::NormWeight::plain, h.data());
        if (L.moe)
            moe_ffn(ctx, L.experts, h.data(), T, m.data());
        else
            swiglu_ffn(ctx, L.ffn, h.data(), T, m.data());
        add_into(x.data(), m.data(), T * D);
        ctx.observe("out", x.data(), T * D);
    }
    cpu::rms_norm(x.data(), parts_.output_norm, T, D, c.rms_eps, cpu::NormWeight::plain, h.data());
    const int64_t rows = options.all_logits ? T : 1;
    std::vector<float> logits(size_t(rows * c.n_vocab));
    matmul_with(numerics, h.data() + (T - rows) * D, parts_.output, rows, logits.data(), pool);
    state.advance(T);
    return logits;
}

}  // namespace deltabit
