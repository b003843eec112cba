// The CUDA trainer as a whole (train/cuda/train_model.h) against the CPU reference (double): one
// training step on a tiny qwen35, a tiny qwen3 and the qwen3_5_float fixture (loss, every parameter's
// gradient, every parameter after the AdamW step), the QAT forward weights and their gradient, the Trainer's step loop on the
// GPU matching its CPU loop, and the loss falling over 50 GPU steps. Skips without CUDA or a GPU.
//
// Each step comparison runs twice: with fp32 matrix products, where any plumbing mistake stands out
// against the double reference, and with the training path's bf16 products.
//
// Tolerances (each check prints its measured value):
//   fp32 products: every op is fp32 against double. Run through a CPU emulation of the CUDA thread
//     model (docs/notes/train-cuda.md), the tiny qwen35's worst gradient tensor was 1.1e-4 of its
//     largest value (layer 0's input norm: the end of the longest backward chain, on weights of std
//     0.3), the loss 4e-8: the bounds are 5e-4 per gradient tensor and 2e-5 on the loss.
//   bf16 products: operands rounded to 2⁻⁸ relative in every product of the forward and backward; the
//     errors are independent roundings that add in quadrature, so a gradient tensor's relative L2
//     error stays within 5e-2 (a 2⁻⁸ error through ~8 chained products adds
//     to ~1.1e-2 in quadrature, ×4.5 margin), and the summed
//     loss within 5e-3 relative.
//   parameters after the step: the step uses Adam's eps = 1, so that its first update
//     ĝ/(|ĝ| + 1) + wd·θ (ĝ = clip factor · g) is 1-Lipschitz in ĝ (with the usual 1e-8 the first step
//     is lr·sign(g), which flips wherever a gradient lies within rounding noise of 0). Every parameter
//     is then checked against the bound that follows from the two runs' own gradients:
//     |Δθ| ≤ lr · (|Δg| + |Δfactor|·|g|) + fp32 rounding of θ.
#include "cuda_test_support.h"
#include "models/fixture.h"

#include "formats/safetensors.h"
#include "models/model.h"
#include "train/hf_parameters.h"
#include "train/reference_model.h"
#include "train/muon.h"
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>

#ifdef DELTABIT_HAVE_CUDA
#include "train/cuda/gemm.h"
#include "train/cuda/kernels.h"
#include "train/cuda/train_model.h"
#include "train/qat.h"
#endif

namespace deltabit::train {
namespace {

#ifndef DELTABIT_HAVE_CUDA
TEST(CudaTrainStep, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#else

using Vec = std::vector<double>;
namespace fs = std::filesystem;

constexpr double kFp32LossTolerance = 2e-5;
constexpr double kFp32GradientTolerance = 5e-4;
constexpr double kLossTolerance = 5e-3;
constexpr double kGradientTolerance = 5e-2;

// Every awkward choice at once (as tests/train/test_reference_model.cpp's tiny model): Hv ≠ Hk, dk ≠ dv,
// GQA, partial rotary, odd sizes; three layers so that both mixers sit between others.
ModelConfig tiny_config(bool hybrid) {
    ModelConfig c;
    c.arch = hybrid ? Arch::qwen35 : Arch::qwen3;
    c.arch_name = hybrid ? "qwen35" : "qwen3";
    c.n_vocab = 11;
    c.n_embd = 24;
    c.n_ff = 40;
    c.rms_eps = 1e-6f;
    c.n_head = 4;
    c.n_head_kv = 2;
    c.head_dim = 8;
    c.rope_dim = hybrid ? 4 : 8;
    c.rope_theta = 1.0e4f;
    c.attn_output_gate = hybrid;
    c.ssm_n_key_heads = 1;
    c.ssm_n_value_heads = 2;
    c.ssm_key_dim = 6;
    c.ssm_value_dim = 10;
    c.ssm_conv_kernel = 4;
    c.layers = hybrid ? std::vector{LayerKind::linear_attention, LayerKind::full_attention, LayerKind::linear_attention}
                      : std::vector{LayerKind::full_attention, LayerKind::full_attention, LayerKind::full_attention};
    c.layer_is_moe = {false, false, false};
    return c;
}

// Weights big enough that every path matters (std 0.3; `std` 0.02 is the trainer's init, init_std):
// norms away from their rest values too.
std::vector<float> random_parameters(const ParameterLayout& layout, uint64_t seed, double std = 0.3) {
    std::vector<float> p = initial_parameters(layout, std, seed);
    const Vec noise = testing::normal_values(p.size(), seed + 1000, 0.2);
    for (const ParameterInfo& info : layout.all())
        if (info.role == ParameterRole::norm)
            for (int64_t i = info.offset; i < info.offset + info.size; ++i) p[size_t(i)] += float(noise[size_t(i)]);
    return p;
}

// Two sequences of 70 tokens (past several delta-rule checkpoints, the last chunk partial), some targets
// ignored.
Batch make_batch(int64_t V, int64_t T = 70) {
    Batch b;
    b.n_sequences = 2;
    b.length = T;
    for (int64_t s = 0; s < 2; ++s)
        for (int64_t t = 0; t < T; ++t) {
            b.tokens.push_back(int32_t((t * 7 + s * 3 + t / 5) % V));
            b.targets.push_back(t % 23 == 11 ? -1 : int32_t((t * 5 + s + 1) % V));
        }
    return b;
}

struct ReferenceStep {
    double loss = 0.0;
    Vec grads;
};

ReferenceStep reference_gradient(const ParameterLayout& layout, const std::vector<float>& weights, const Batch& batch,
                                 double scale) {
    ReferenceStep r;
    const Vec p(weights.begin(), weights.end());
    r.grads.assign(p.size(), 0.0);
    for (int64_t s = 0; s < batch.n_sequences; ++s) {
        const size_t o = size_t(s * batch.length), n = size_t(batch.length);
        r.loss += ref::sequence_loss_and_gradient(layout, p, std::span(batch.tokens).subspan(o, n),
                                                  std::span(batch.targets).subspan(o, n), scale, r.grads)
                      .loss_sum;
    }
    return r;
}

Vec slice(const std::vector<float>& v, const ParameterInfo& p) {
    return Vec(v.begin() + p.offset, v.begin() + p.offset + p.size);
}
Vec slice(const Vec& v, const ParameterInfo& p) { return Vec(v.begin() + p.offset, v.begin() + p.offset + p.size); }

double max_abs(const Vec& v) {
    double m = 0.0;
    for (double x : v) m = std::max(m, std::fabs(x));
    return m;
}

double relative_l2(const std::string& what, const Vec& got, const Vec& want) {
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
        diff += (got[i] - want[i]) * (got[i] - want[i]);
        norm += want[i] * want[i];
    }
    const double rel = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
    std::printf("[ cuda train ] %-58s rel L2 %.3g\n", what.c_str(), rel);
    return rel;
}

void expect_step_matches(const ParameterLayout& layout, const std::vector<float>& params, const Batch& batch,
                         const std::string& name, cuda::GemmMath math) {
    const bool fp32 = math == cuda::GemmMath::fp32;
    int64_t counted = 0;
    for (int32_t t : batch.targets) counted += t >= 0;
    const double scale = 1.0 / double(counted);
    const ReferenceStep want = reference_gradient(layout, params, batch, scale);

    const cuda::GemmMath saved = cuda::gemm_math();
    cuda::set_gemm_math(math);
    cuda::TrainModel model(layout);
    model.set_parameters(params);
    model.set_optimizer_state(AdamState{});
    model.use_qat_weights(0.0);
    model.zero_gradients();
    const double loss = model.accumulate_gradient(batch, scale);
    std::vector<float> grads(params.size());
    model.get_gradients(grads);
    const std::string tag = name + (fp32 ? " fp32" : " bf16");
    DELTABIT_EXPECT_CLOSE(tag + " step loss", Vec{loss}, Vec{want.loss}, fp32 ? kFp32LossTolerance : kLossTolerance);
    for (const ParameterInfo& p : layout.all()) {
        if (fp32)
            DELTABIT_EXPECT_CLOSE(tag + " grad " + p.name, slice(grads, p), slice(want.grads, p), kFp32GradientTolerance);
        else
            EXPECT_LE(relative_l2(tag + " grad " + p.name, slice(grads, p), slice(want.grads, p)), kGradientTolerance)
                << p.name;
    }

    OptimizerSection o;
    o.eps = 1.0;  // see the file comment
    o.weight_decay = 0.1;
    o.clip = 1.0;
    const double lr = 1e-2;
    std::vector<float> cpu_params = params, cpu_grads(want.grads.begin(), want.grads.end());
    AdamState cpu_state;
    const double cpu_norm = adamw_step(layout, o, lr, cpu_params, cpu_grads, cpu_state);
    const double norm = model.optimizer_step(o, lr);
    cuda::set_gemm_math(saved);
    EXPECT_NEAR(norm, cpu_norm, (fp32 ? kFp32GradientTolerance : kGradientTolerance) * cpu_norm);
    const double cpu_factor = cpu_norm > o.clip ? o.clip / cpu_norm : 1.0, factor = norm > o.clip ? o.clip / norm : 1.0;
    std::vector<float> after(params.size());
    model.get_parameters(after);
    int64_t outside = 0;
    double worst_ratio = 0.0;
    for (size_t i = 0; i < after.size(); ++i) {
        const double g_cpu = want.grads[i], dg = std::fabs(double(grads[i]) - g_cpu);
        const double bound = lr * (dg + std::fabs(factor - cpu_factor) * std::fabs(g_cpu)) +
                             1e-6 * std::fabs(double(cpu_params[i])) + 1e-9;
        const double diff = std::fabs(double(after[i]) - double(cpu_params[i]));
        worst_ratio = std::max(worst_ratio, diff / bound);
        if (diff > bound && outside++ < 5)
            ADD_FAILURE() << tag << " parameter " << i << " after the step: gpu " << after[i] << " cpu "
                          << cpu_params[i] << " (bound " << bound << ")";
    }
    std::printf("[ cuda train ] %s parameters after the step: worst |Δθ| / bound %.3g\n", tag.c_str(), worst_ratio);
    // And the step moved the weights (a step that did nothing would pass only if the CPU's did nothing too).
    EXPECT_NE(std::memcmp(after.data(), params.data(), params.size() * 4), 0);
}

// fp32 products on weights of std 0.3, where a plumbing mistake stands out; bf16 products on weights at
// the trainer's init scale. At std 0.3 the tiny qwen35's logits reach ±480 (one-hot softmax), and on the
// H200 its bf16 gradients differed from the reference by up to 0.17 relative L2 (layer 0's A_log, the
// longest chain) while the fp32 products' matched within 8e-5: that is the ill-conditioned model
// amplifying bf16 rounding, not the kernels; the fixture below checks bf16 on transformers' own init.
void expect_tiny_step_matches(bool hybrid) {
    const ParameterLayout layout(tiny_config(hybrid));
    const Batch batch = make_batch(layout.config().n_vocab);
    const std::string name = hybrid ? "tiny qwen35" : "tiny qwen3";
    expect_step_matches(layout, random_parameters(layout, hybrid ? 1 : 2), batch, name, cuda::GemmMath::fp32);
    expect_step_matches(layout, random_parameters(layout, hybrid ? 1 : 2, 0.02), batch, name + " (init 0.02)",
                        cuda::GemmMath::bf16);
}

TEST(CudaTrainStep, OneStepMatchesCpuReferenceQwen35) {
    SKIP_WITHOUT_GPU();
    expect_tiny_step_matches(true);
}

TEST(CudaTrainStep, OneStepMatchesCpuReferenceQwen3) {
    SKIP_WITHOUT_GPU();
    expect_tiny_step_matches(false);
}

// The qwen3_5_float fixture (tests/fixtures: the transformers model the engine is checked against;
// hidden 128, DeltaNet heads of 32 × 128, V = 256) on its longest prompt, predicting each next token.
TEST(CudaTrainStep, OneStepMatchesCpuReferenceOnTheQwen35Fixture) {
    SKIP_WITHOUT_GPU();
    const test::Fixture f = test::load_fixture("qwen3_5_float");
    const Model engine = Model::load(f.dir);
    const ParameterLayout layout(engine.config());
    const std::vector<float> params = load_hf_parameters(layout, safetensors::Set::open(f.dir / "model.safetensors"));
    const test::FixtureCase* longest = &f.cases.front();
    for (const test::FixtureCase& c : f.cases)
        if (c.tokens.size() > longest->tokens.size()) longest = &c;
    Batch batch;
    batch.n_sequences = 1;
    batch.length = int64_t(longest->tokens.size());
    batch.tokens = longest->tokens;
    batch.targets.assign(longest->tokens.begin() + 1, longest->tokens.end());
    batch.targets.push_back(-1);
    for (cuda::GemmMath math : {cuda::GemmMath::fp32, cuda::GemmMath::bf16})
        expect_step_matches(layout, params, batch, "fixture qwen3_5_float", math);
}

// The training path's tensor-core kernels inside a whole step: DeltaNet keys of 64 (the delta rule's
// bf16 forward, carry and gradients, delta_rule_chunked_mma_kernels.cu) and attention heads of 64 (flash
// attention), over three chunks with the last partial, against the double reference at the bf16 bounds
// of expect_step_matches (the fixture above, with keys of 32, runs the fp32 delta rule).
TEST(CudaTrainStep, OneStepMatchesCpuReferenceWithTheTensorCoreKernels) {
    SKIP_WITHOUT_GPU();
    ModelConfig c = tiny_config(true);
    c.head_dim = 64;
    c.rope_dim = 16;
    c.ssm_key_dim = 64;
    c.ssm_value_dim = 32;
    const ParameterLayout layout(c);
    testing::MarkedKernels marks;
    expect_step_matches(layout, random_parameters(layout, 3, 0.02), make_batch(c.n_vocab, 150), "tensor-core tiny qwen35",
                        cuda::GemmMath::bf16);
    for (const char* kernel : {"delta: chunk_factors_mma_kernel", "delta: forward_walk_mma_kernel",
                               "delta: backward_carry_mma_kernel", "delta: backward_gradients_mma_kernel"})
        EXPECT_TRUE(marks.ran(kernel)) << kernel << " did not run";
    for (const char* kernel : {"delta: forward_walk_kernel", "delta: backward_carry_kernel",
                               "delta: backward_gradients_kernel"})
        EXPECT_FALSE(marks.ran(kernel)) << kernel << " ran on the bf16 path";
}

// The delta rule's keys live in shared memory: wider ones are refused when the model is made, not
// at its first step.
TEST(CudaTrainStep, RefusesDeltaNetKeysWiderThanTheGpuDeltaRule) {
    SKIP_WITHOUT_GPU();
    ModelConfig c = tiny_config(true);
    c.ssm_key_dim = cuda::kDeltaMaxKeyDim + 1;
    const ParameterLayout layout(c);
    EXPECT_THROW(cuda::TrainModel model(layout), Error);
    c.ssm_key_dim = cuda::kDeltaMaxKeyDim;  // the limit itself is accepted
    const ParameterLayout at_limit(c);
    EXPECT_NO_THROW(cuda::TrainModel model(at_limit));
}

// QAT: the device's forward weights equal train/qat.cpp's bit for bit, and the gradient it produces is
// the reference's gradient at those weights (straight-through: applied to the latent weights as is).
TEST(CudaTrainStep, QatForwardWeightsAndGradient) {
    SKIP_WITHOUT_GPU();
    ModelConfig c = tiny_config(true);
    c.n_embd = 128;  // whole groups of 128: the projections reading the residual are binarised
    const ParameterLayout layout(c);
    const std::vector<float> params = random_parameters(layout, 3);
    const double lambda = 0.6;
    std::vector<float> want_weights(params.size());
    qat_effective_weights(layout, params, lambda, want_weights);
    cuda::TrainModel model(layout);
    model.set_parameters(params);
    model.use_qat_weights(lambda);
    std::vector<float> weights(params.size());
    model.get_forward_weights(weights);
    EXPECT_EQ(std::memcmp(weights.data(), want_weights.data(), weights.size() * 4), 0);
    EXPECT_NE(std::memcmp(weights.data(), params.data(), weights.size() * 4), 0);  // something was binarised

    const Batch batch = make_batch(c.n_vocab, 20);
    const ReferenceStep want = reference_gradient(layout, want_weights, batch, 1.0 / 40.0);
    model.zero_gradients();
    const double loss = model.accumulate_gradient(batch, 1.0 / 40.0);
    std::vector<float> grads(params.size());
    model.get_gradients(grads);
    DELTABIT_EXPECT_CLOSE("qat loss", Vec{loss}, Vec{want.loss}, kLossTolerance);
    for (const ParameterInfo& p : layout.all())
        EXPECT_LE(relative_l2("qat grad " + p.name, slice(grads, p), slice(want.grads, p)), kGradientTolerance)
            << p.name;
}

// run.activations = keep: the backward that reads the activations each layer's forward kept gives the
// bits of the one that re-runs the layer's forward first (the same kernels on the same inputs), on the
// hybrid model (DeltaNet, attention, DeltaNet: the delta rule's saved states, the attention's
// log-sum-exp, both mixers' and the FFN's activations), over three steps of two micro-batches of
// different shapes (the second wider: the kept buffers grow mid-step), an evaluation between steps
// (it writes the shared buffers, never a layer's own), and AdamW.
//
// No gradient sums with atomics (kernels.h: every gradient sum has a fixed order; only the loss and the
// gradient norm add doubles atomically, and neither feeds a gradient). So every tensor's gradient, its
// value after AdamW (clipping off: the clip factor would carry the norm's atomic sum into every weight)
// and both moments must be equal to the bit, kept against recomputed, and a second recomputing model
// (the control) against the first (the premise: a step repeats itself). The losses, the evaluation and
// the norm are doubles summed in a varying order: within 1e-12. (An emulated run of an earlier version,
// when the embedding's gradient still summed with float atomics, had two of its values an ulp apart.)
// The control tells a step that does not repeat itself apart from a wrong activation. Each step starts
// the three models from the first one's state.
// Returns the recomputing run's profile (the training path's bf16 products, as `deltabit train`).
StepProfile expect_kept_activations_give_the_recomputed_bits(const ModelConfig& config) {
    const cuda::GemmMath saved_math = cuda::gemm_math();
    cuda::set_gemm_math(cuda::GemmMath::bf16);
    const ParameterLayout layout(config);
    const int64_t V = layout.config().n_vocab;
    const auto batch_of = [&](int64_t sequences, int64_t T, int32_t shift) {
        Batch b;
        b.n_sequences = sequences;
        b.length = T;
        for (int64_t s = 0; s < sequences; ++s)
            for (int64_t t = 0; t < T; ++t) {
                b.tokens.push_back(int32_t((t * 7 + s * 3 + t / 5 + shift) % V));
                b.targets.push_back(t % 19 == 7 ? -1 : int32_t((t * 5 + s + shift + 1) % V));
            }
        return b;
    };
    std::vector<float> params = random_parameters(layout, 11, 0.02);
    AdamState adam;
    cuda::TrainModel recomputed(layout), control(layout), kept(layout);
    kept.set_keep_activations(true);
    EXPECT_TRUE(kept.keeps_activations());
    EXPECT_FALSE(recomputed.keeps_activations());
    cuda::TrainModel* models[3] = {&recomputed, &control, &kept};
    StepProfile profiles[3];
    recomputed.set_profile(&profiles[0]);
    kept.set_profile(&profiles[2]);
    OptimizerSection o;
    o.clip = 0.0;  // see above
    const double scale = 1.0 / 400.0;
    int64_t bit_equal = 0;
    // `got` (the kept run's) and the control equal `want` (the recomputing run's) to the bit.
    const auto expect_same = [&](const std::string& what, std::span<const float> want,
                                 std::span<const float> control_values, std::span<const float> got) {
        int64_t reported = 0;
        for (size_t i = 0; i < want.size(); ++i) {
            if (std::memcmp(&want[i], &control_values[i], 4) != 0 && reported++ < 3)
                ADD_FAILURE() << what << "[" << i << "]: two recomputing runs differ (" << want[i] << ", "
                              << control_values[i] << "): the premise of this test is wrong, not the kept run";
            if (std::memcmp(&want[i], &got[i], 4) != 0 && reported++ < 3)
                ADD_FAILURE() << what << "[" << i << "]: kept " << got[i] << ", recomputed " << want[i];
        }
        bit_equal += int64_t(want.size());
    };
    for (int step = 0; step < 3; ++step) {
        const Batch first = batch_of(2, 70, step), second = batch_of(3, 64, 5 + step);
        double losses[3][2] = {}, norms[3] = {};
        std::vector<float> grads[3], after[3];
        AdamState states[3];
        for (int m = 0; m < 3; ++m) {
            cuda::TrainModel& model = *models[m];
            model.set_parameters(params);
            model.set_optimizer_state(adam);
            model.profile_step_begin();
            model.use_qat_weights(0.0);
            model.zero_gradients();
            losses[m][0] = model.accumulate_gradient(first, scale);
            if (m == 2 && step == 0) {  // the estimate the run's header reports is what the forward allocated
                EXPECT_EQ(kept.kept_activation_bytes(), kept.activation_memory(2, 70, 0).kept_bytes);
                EXPECT_GT(kept.kept_activation_bytes(), 0);
                EXPECT_EQ(recomputed.kept_activation_bytes(), 0);
            }
            losses[m][1] = model.accumulate_gradient(second, scale);
            grads[m].resize(params.size());
            model.get_gradients(grads[m]);
            norms[m] = model.optimizer_step(o, 1e-2);
            model.profile_step_end(1.0);
            after[m].resize(params.size());
            model.get_parameters(after[m]);
            model.get_optimizer_state(states[m]);
        }
        const std::string tag = fmt::format("step {} ", step + 1);
        // The losses and the norm: doubles summed with atomics.
        for (int micro = 0; micro < 2; ++micro) {
            EXPECT_NEAR(losses[2][micro], losses[0][micro], 1e-12 * losses[0][micro]) << tag << "loss " << micro;
            EXPECT_NEAR(losses[1][micro], losses[0][micro], 1e-12 * losses[0][micro]) << tag << "loss " << micro;
        }
        EXPECT_NEAR(norms[2], norms[0], 1e-12 * norms[0]) << tag << "gradient norm";
        for (const ParameterInfo& p : layout.all()) {
            const auto part = [&](const std::vector<float>& v) {
                return std::span<const float>(v).subspan(size_t(p.offset), size_t(p.size));
            };
            expect_same(tag + "gradient " + p.name, part(grads[0]), part(grads[1]), part(grads[2]));
            expect_same(tag + "parameter " + p.name, part(after[0]), part(after[1]), part(after[2]));
            expect_same(tag + "first moment " + p.name, part(states[0].m), part(states[1].m), part(states[2].m));
            expect_same(tag + "second moment " + p.name, part(states[0].v), part(states[1].v), part(states[2].v));
        }
        EXPECT_NE(std::memcmp(after[0].data(), params.data(), params.size() * 4), 0) << tag << "moved nothing";
        // An evaluation between steps (the shared buffers, a batch wider than either micro-batch).
        const Batch eval = batch_of(4, 50, 9 + step);
        const double eval_recomputed = recomputed.loss(eval), eval_control = control.loss(eval),
                     eval_kept = kept.loss(eval);
        EXPECT_NEAR(eval_kept, eval_recomputed, 1e-12 * eval_recomputed) << tag << "evaluation";
        EXPECT_NEAR(eval_control, eval_recomputed, 1e-12 * eval_recomputed) << tag << "evaluation";
        params = after[0];
        adam = states[0];
        std::printf("[ cuda train ] kept vs recomputed, step %d: losses %.9g %.9g (kept %.9g %.9g)\n", step + 1,
                    losses[0][0], losses[0][1], losses[2][0], losses[2][1]);
        std::fflush(stdout);  // the emulated run takes minutes a step
    }
    std::printf("[ cuda train ] kept vs recomputed activations, 3 steps × 2 micro-batches: %lld values (gradients, "
                "parameters, moments) equal to the bit\n",
                static_cast<long long>(bit_equal));
    EXPECT_EQ(bit_equal, 3 * 4 * layout.total());

    // The profile: the kept run has no recompute pass, and its forward and backward passes are the
    // recomputing run's, span for span and FLOP for FLOP.
    const StepProfile &with = profiles[0], &without = profiles[2];
    EXPECT_EQ(without.steps(), 3);
    EXPECT_GT(with.pass(ProfilePass::recompute).spans, 0);
    EXPECT_EQ(without.pass(ProfilePass::recompute).spans, 0);
    for (const ProfilePass pass : {ProfilePass::forward, ProfilePass::backward, ProfilePass::update}) {
        EXPECT_EQ(without.pass(pass).spans, with.pass(pass).spans) << profile_pass_name(pass);
        EXPECT_DOUBLE_EQ(without.pass(pass).flops, with.pass(pass).flops) << profile_pass_name(pass);
    }
    // Recomputation re-runs each layer's forward, not the embedding or the LM head: it has fewer spans and
    // FLOPs than the forward pass, and every one of its FLOPs is gone from the kept run's total.
    EXPECT_LT(with.pass(ProfilePass::recompute).spans, with.pass(ProfilePass::forward).spans);
    EXPECT_LT(with.pass(ProfilePass::recompute).flops, with.pass(ProfilePass::forward).flops);
    cuda::set_gemm_math(saved_math);
    return with;
}

// The tiny hybrid: attention on the CUDA-core kernels (head_dim 8).
TEST(CudaTrainStep, KeptActivationsGiveTheRecomputedStepsBits) {
    SKIP_WITHOUT_GPU();
    const StepProfile profile = expect_kept_activations_give_the_recomputed_bits(tiny_config(true));
    EXPECT_EQ(profile.kernel("attention: flash_dq_kernel"), nullptr);  // head_dim 8: the CUDA-core kernels
}

// The same at head_dim 64, where the training path's bf16 products take the flash attention kernels
// (attention_flash.h), as qwen35-100m's head_dim 128 does: their forward and its log-sum-exp kept.
TEST(CudaTrainStep, KeptActivationsGiveTheRecomputedStepsBitsWithFlashAttention) {
    SKIP_WITHOUT_GPU();
    ModelConfig c = tiny_config(true);
    c.head_dim = 64;
    c.rope_dim = 16;
    const StepProfile profile = expect_kept_activations_give_the_recomputed_bits(c);
    EXPECT_NE(profile.kernel("attention: flash_dq_kernel"), nullptr) << "the flash kernels did not run";
}

// optimizer.kind = "muon" on the device: two optimizer steps on the device's own gradients against
// train/muon.cpp's muon_step on the same gradients (downloaded). Only the clip factor differs between the
// two (the device sums squares in float blocks, the CPU in double). Bounds per value:
//   AdamW tensors: Adam's eps = 1 (as expect_step_matches) makes the update 1-Lipschitz in the clipped
//     gradient: |Δθ| ≤ 2 steps · lr · |Δfactor|·|g| + fp32 rounding of θ.
//   hidden matrices: test_cuda_muon.cpp's bound for low-rank updates (a short batch's gradient is one),
//     1e-3 of η·s·max|O| per step, O read off the CPU's own step; Newton–Schulz is scale-free, so the
//     clip factor's difference does not enter. Their momentum: (1 + μ)·|Δfactor|·|g| + fp32 rounding,
//     and AdamW's second moment stays exactly 0 there.
TEST(CudaTrainStep, MuonStepMatchesCpuOnTheSameGradients) {
    SKIP_WITHOUT_GPU();
    constexpr double kMuonTolerance = 1e-3;
    const ParameterLayout layout(tiny_config(true));
    const std::vector<float> params = random_parameters(layout, 5, 0.02);
    const Batch batch = make_batch(layout.config().n_vocab);
    cuda::TrainModel model(layout);
    model.set_parameters(params);
    model.set_optimizer_state(AdamState{});
    model.use_qat_weights(0.0);
    model.zero_gradients();
    model.accumulate_gradient(batch, 1.0 / 140.0);
    std::vector<float> grads(params.size());
    model.get_gradients(grads);

    OptimizerSection o;
    o.kind = "muon";
    o.eps = 1.0;
    o.lr = 1e-2;
    o.muon_lr = 2e-2;
    o.clip = 0.5 * global_norm(grads);  // clipping on: the factor's path is exercised
    const double lr = 1e-2, eta = muon_learning_rate(o, lr);
    std::vector<float> cpu_params = params;
    AdamState cpu_state;
    double factor_difference = 0.0;
    std::vector<double> max_o(layout.all().size(), 0.0);  // per tensor, over both steps
    for (int step = 0; step < 2; ++step) {
        const std::vector<float> before = cpu_params;
        std::vector<float> g = grads;
        const double cpu_norm = optimizer_step(layout, o, lr, cpu_params, g, cpu_state);
        const double norm = model.optimizer_step(o, lr);
        EXPECT_NEAR(norm, cpu_norm, 1e-6 * cpu_norm);
        factor_difference += std::fabs(double(float(o.clip / norm)) - double(float(o.clip / cpu_norm)));
        for (size_t t = 0; t < layout.all().size(); ++t) {
            const ParameterInfo& p = layout.all()[t];
            if (!p.hidden_matrix) continue;
            const double s = muon_update_scale(p.shape[0], p.shape[1]);
            for (int64_t i = p.offset; i < p.offset + p.size; ++i) {
                const double o_value = (double(before[size_t(i)]) * (1.0 - eta * o.muon_weight_decay) -
                                        double(cpu_params[size_t(i)])) / (eta * s);
                max_o[t] = std::max(max_o[t], std::fabs(o_value));
            }
        }
    }
    std::vector<float> after(params.size());
    model.get_parameters(after);
    AdamState gpu_state;
    model.get_optimizer_state(gpu_state);
    EXPECT_EQ(gpu_state.step, 2);
    double worst_adam = 0.0, worst_muon = 0.0;
    int64_t outside = 0;
    for (size_t t = 0; t < layout.all().size(); ++t) {
        const ParameterInfo& p = layout.all()[t];
        const double s = p.hidden_matrix ? muon_update_scale(p.shape[0], p.shape[1]) : 0.0;
        for (int64_t i = p.offset; i < p.offset + p.size; ++i) {
            const size_t k = size_t(i);
            const double rounding = 1e-6 * std::fabs(double(cpu_params[k])) + 1e-9;
            const double bound = p.hidden_matrix ? 2.0 * eta * s * kMuonTolerance * max_o[t] + rounding
                                                 : 2.0 * lr * factor_difference * std::fabs(double(grads[k])) + rounding;
            const double diff = std::fabs(double(after[k]) - double(cpu_params[k]));
            (p.hidden_matrix ? worst_muon : worst_adam) = std::max(p.hidden_matrix ? worst_muon : worst_adam, diff / bound);
            if (diff > bound && outside++ < 5)
                ADD_FAILURE() << p.name << " value " << i - p.offset << ": gpu " << after[k] << " cpu " << cpu_params[k]
                              << " (bound " << bound << ")";
            if (!p.hidden_matrix) continue;
            const double m_bound = (1.0 + o.muon_momentum) * factor_difference * std::fabs(double(grads[k])) +
                                   0x1p-22 * std::fabs(double(cpu_state.m[k]));
            EXPECT_LE(std::fabs(double(gpu_state.m[k]) - double(cpu_state.m[k])), m_bound) << p.name;
            EXPECT_EQ(gpu_state.v[k], 0.0f) << p.name;
        }
    }
    std::printf("[ cuda train ] muon step x2 on the device's gradients: worst |dtheta|/bound AdamW tensors %.3g, "
                "hidden matrices %.3g (clip factor differs by %.3g)\n",
                worst_adam, worst_muon, factor_difference);
    EXPECT_NE(std::memcmp(after.data(), params.data(), params.size() * 4), 0);
}

// The Trainer's loop on the GPU (backend = cuda) against the same run on the CPU reference.
std::string run_config_text(const fs::path& dir, const std::string& backend, int64_t steps, bool qat,
                            const std::string& optimizer = "adamw") {
    return fmt::format(R"(
[model]
hidden = 128
layers = 2
full_attention_interval = 2
heads = 2
kv_heads = 1
head_dim = 32
rope_dim = 8
ffn = 256
deltanet_key_heads = 1
deltanet_value_heads = 2
deltanet_key_dim = 32
deltanet_value_dim = 32
init_std = 0.05
[data]
train = "{}"
heldout = "{}"
[run]
seq_len = 64
batch = 4
grad_accum = 2
steps = {}
seed = 5
backend = "{}"
[optimizer]
kind = "{}"
lr = 1e-2
min_lr = 1e-3
warmup_steps = 2
[eval]
bytes = 256
[qat]
enabled = {}
)",
                       (dir / "train.txt").string(), (dir / "heldout.txt").string(), steps, backend, optimizer, qat);
}

fs::path make_text(const std::string& name) {
    const fs::path dir = fs::temp_directory_path() / ("deltabit_test_cuda_trainer_" + name);
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream train(dir / "train.txt");
    for (int i = 0; i < 200; ++i)
        train << "the cat sat on the mat. the dog sat on the log. " << (i % 7) << " birds sang in the tree.\n";
    std::ofstream(dir / "heldout.txt") << [] {
        std::string s;
        for (int i = 0; i < 6; ++i) s += "the dog sat on the mat. the cat sat on the log. 3 birds sang.\n";
        return s;
    }();
    return dir;
}

// The whole training loop (data order, schedule, AdamW, QAT, evaluation) on the GPU against the CPU
// reference, with fp32 products: plain training stays together step after step (losses and the held-out
// BPB within the fp32 bound). The runs still part at AdamW's first update, g / (|g| + ε) per weight: where
// a gradient lies within the products' error of 0 (far above ε = 1e-8) the two updates differ by up to
// 2·lr (H200: max|Δw| 3.6e-4 after step 1). Plain training barely feels those weights (their gradient is
// ~0); under QAT each moves its group's d = mean|w|, whose fp16 rounding then flips for some groups, and
// every weight of such a group changes (measured after steps 1, 2, 3: 2,521, 22,236 and 47,958 binarised
// weights differing, 0, 4 and 72 of them in sign). So QAT runs are compared on the steps whose forward
// reads at most one update (1 and 2; measured 0 and 1.0e-5 relative); after that they are two trainings,
// compared by what they learn (LossFallsOverFiftySteps). With bf16 products (what training runs) only
// the first step shares its weights.
TEST(CudaTrainer, LoopMatchesCpuReferenceLoop) {
    SKIP_WITHOUT_GPU();
    const fs::path dir = make_text("match");
    const cuda::GemmMath saved = cuda::gemm_math();
    for (cuda::GemmMath math : {cuda::GemmMath::fp32, cuda::GemmMath::bf16}) {
        const bool fp32 = math == cuda::GemmMath::fp32;
        cuda::set_gemm_math(math);
        for (bool qat : {false, true}) {
            const std::string cpu_text = run_config_text(dir, "cpu", 4, qat), gpu_text = run_config_text(dir, "cuda", 4, qat);
            Trainer cpu(parse_train_config(cpu_text, "cpu.toml"), cpu_text);
            Trainer gpu(parse_train_config(gpu_text, "gpu.toml"), gpu_text);
            EXPECT_TRUE(gpu.on_gpu());
            EXPECT_FALSE(cpu.on_gpu());
            for (int s = 0; s < (!fp32 ? 1 : qat ? 2 : 3); ++s) {
                const StepReport a = cpu.train_step(), b = gpu.train_step();
                std::printf("[ cuda train ] %s qat=%d step %d: loss cpu %.7f gpu %.7f, grad norm cpu %.6g gpu %.6g\n",
                            fp32 ? "fp32" : "bf16", qat, s + 1, a.loss, b.loss, a.grad_norm, b.grad_norm);
                EXPECT_NEAR(b.loss, a.loss, (fp32 ? kFp32LossTolerance : kLossTolerance) * a.loss);
                EXPECT_EQ(b.lr, a.lr);
            }
            if (!fp32 || qat) continue;
            const double bpb_cpu = cpu.evaluate_bpb(), bpb_gpu = gpu.evaluate_bpb();
            std::printf("[ cuda train ] fp32 held-out BPB after 3 steps: cpu %.7f gpu %.7f\n", bpb_cpu, bpb_gpu);
            EXPECT_NEAR(bpb_gpu, bpb_cpu, kFp32LossTolerance * bpb_cpu);
        }
    }
    cuda::set_gemm_math(saved);
}

// run.activations through the Trainer: each setting reaches the device model and the run's header line
// says which (with the FLOPs the step executes against MFU's count); "keep" that cannot fit is refused
// in one line when the run is made, before any step, and "auto" then recomputes.
TEST(CudaTrainer, ActivationsSettingReachesTheDeviceModel) {
    SKIP_WITHOUT_GPU();
    const fs::path dir = make_text("activations");
    const auto config = [&](const std::string& setting, int64_t batch) {
        std::string text = run_config_text(dir, "cuda", 4, false);
        const std::string line = "batch = 4\n";
        text.replace(text.find(line), line.size(), fmt::format("batch = {}\nactivations = \"{}\"\n", batch, setting));
        return text;
    };
    const auto trainer = [&](const std::string& text) { return Trainer(parse_train_config(text, "a.toml"), text); };
    const Trainer keep = trainer(config("keep", 4)), recompute = trainer(config("recompute", 4)),
                  automatic = trainer(config("auto", 4));
    EXPECT_TRUE(keep.keeps_activations());
    EXPECT_FALSE(recompute.keeps_activations());
    EXPECT_TRUE(automatic.keeps_activations());  // a few MB: any GPU has room
    for (const Trainer* t : {&keep, &recompute, &automatic})
        std::printf("[ cuda train ] %s\n", t->activations_summary().c_str());
    EXPECT_EQ(keep.activations_summary().rfind("activations kept for the backward: ", 0), 0u);
    EXPECT_TRUE(keep.activations_summary().ends_with("; the step executes the FLOPs MFU counts"));
    EXPECT_NE(automatic.activations_summary().find("(run.activations = auto; "), std::string::npos);
    const ModelConfig& m = recompute.layout().config();
    const double ratio = 1.0 + recompute_flops_per_token(m, 64) / train_flops_per_token(m, 64);
    EXPECT_GT(ratio, 1.0);
    EXPECT_TRUE(recompute.activations_summary().ends_with(
        fmt::format("; the step executes {:.2f}× the FLOPs MFU counts (every layer's forward twice)", ratio)))
        << recompute.activations_summary();
    // A million sequences a micro-batch: terabytes of activations (only estimated: nothing runs).
    const Trainer huge = trainer(config("auto", 1000000));
    EXPECT_FALSE(huge.keeps_activations());
    EXPECT_NE(huge.activations_summary().find("(run.activations = auto: keeping them takes "), std::string::npos)
        << huge.activations_summary();
    try {
        trainer(config("keep", 1000000));
        ADD_FAILURE() << "run.activations = keep did not refuse terabytes";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_EQ(what.rfind("train: a.toml: run.activations = keep: every layer's activations take ", 0), 0u) << what;
        EXPECT_NE(what.find("GiB free on the GPU; set run.activations = \"auto\" or \"recompute\""), std::string::npos)
            << what;
        EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
}

TEST(CudaTrainer, LossFallsOverFiftySteps) {
    SKIP_WITHOUT_GPU();
    const fs::path dir = make_text("learn");
    const std::string text = run_config_text(dir, "cuda", 50, true);
    Trainer trainer(parse_train_config(text, "learn.toml"), text);
    const double before = trainer.evaluate_bpb();
    std::vector<double> losses;
    while (!trainer.finished()) losses.push_back(trainer.train_step().loss);
    const double after = trainer.evaluate_bpb();
    double first = 0.0, last = 0.0;
    for (int i = 0; i < 5; ++i) {
        first += losses[size_t(i)] / 5;
        last += losses[losses.size() - 1 - size_t(i)] / 5;
    }
    std::printf("[ cuda train ] 50 QAT steps: loss %.3f -> %.3f nats, held-out BPB %.3f -> %.3f\n", first, last,
                before, after);
    // The CPU reference backend on this config and text (same data order): mean loss of the first 5
    // steps 2.875 → last 5 0.238 nats, held-out 8.33 → 0.75 bits per byte. The GPU run must learn as
    // much, give or take bf16: at least 1.5 nats and 5 bits per byte of that.
    EXPECT_LT(last, first - 1.5);
    EXPECT_LT(after, before - 5.0);
    // Checkpoints hold the device's weights: a save → load round trip changes nothing.
    const fs::path checkpoint = dir / "checkpoint.bin";
    trainer.save_checkpoint(checkpoint);
    Trainer resumed(parse_train_config(text, "learn.toml"), text);
    resumed.load_checkpoint(checkpoint);
    EXPECT_EQ(std::memcmp(resumed.parameters().data(), trainer.parameters().data(), trainer.parameters().size() * 4), 0);
    // The loss sums with double atomics, whose order may vary: equal to rounding, not to the bit.
    EXPECT_NEAR(resumed.evaluate_bpb(), after, 1e-12 * after);
}

// optimizer.kind = "muon" through the whole GPU loop (bf16 products, Muon's Newton–Schulz in fp32).
TEST(CudaTrainer, MuonLossFallsOverFiftySteps) {
    SKIP_WITHOUT_GPU();
    const fs::path dir = make_text("learn_muon");
    const std::string text = run_config_text(dir, "cuda", 50, false, "muon");
    Trainer trainer(parse_train_config(text, "learn_muon.toml"), text);
    const double before = trainer.evaluate_bpb();
    std::vector<double> losses;
    while (!trainer.finished()) losses.push_back(trainer.train_step().loss);
    const double after = trainer.evaluate_bpb();
    double first = 0.0, last = 0.0;
    for (int i = 0; i < 5; ++i) {
        first += losses[size_t(i)] / 5;
        last += losses[losses.size() - 1 - size_t(i)] / 5;
    }
    std::printf("[ cuda train ] 50 Muon steps: loss %.3f -> %.3f nats, held-out BPB %.3f -> %.3f\n", first, last,
                before, after);
    // The CPU reference on this config and text (`deltabit train` with backend = cpu): mean loss of the
    // first 5 steps 2.821 → last 5 0.078 nats, held-out 0.680 bits per byte at the end (AdamW, no QAT:
    // 2.735 → 0.155, 0.664). The same margins as the QAT run above: 1.5 nats and 5 bits per byte.
    EXPECT_LT(last, first - 1.5);
    EXPECT_LT(after, before - 5.0);
    // The checkpoint holds the device's optimizer state: Muon's momentum in the hidden matrices' slots
    // of the first moments (non-zero), AdamW's second moments 0 there and non-zero elsewhere. The file
    // ends with parameters, m, v (each a count and floats) and an 8-byte trailer (trainer.cpp).
    const fs::path checkpoint = dir / "checkpoint.bin";
    trainer.save_checkpoint(checkpoint);
    const uint64_t P = uint64_t(trainer.layout().total());
    std::ifstream file(checkpoint, std::ios::binary);
    const uint64_t m_begin = fs::file_size(checkpoint) - 8 - 2 * (8 + 4 * P) + 8, v_begin = m_begin + 4 * P + 8;
    std::vector<float> m(static_cast<size_t>(P)), v(static_cast<size_t>(P));
    file.seekg(std::streamoff(m_begin));
    file.read(reinterpret_cast<char*>(m.data()), std::streamsize(4 * P));
    file.seekg(std::streamoff(v_begin));
    file.read(reinterpret_cast<char*>(v.data()), std::streamsize(4 * P));
    ASSERT_TRUE(file);
    for (const ParameterInfo& p : trainer.layout().all()) {
        double m_abs = 0.0, v_abs = 0.0;
        for (int64_t i = p.offset; i < p.offset + p.size; ++i) {
            m_abs += std::fabs(m[size_t(i)]);
            v_abs += std::fabs(v[size_t(i)]);
        }
        EXPECT_GT(m_abs, 0.0) << p.name;
        if (p.hidden_matrix)
            EXPECT_EQ(v_abs, 0.0) << p.name;
        else
            EXPECT_GT(v_abs, 0.0) << p.name;
    }
    Trainer resumed(parse_train_config(text, "learn_muon.toml"), text);
    resumed.load_checkpoint(checkpoint);
    EXPECT_EQ(std::memcmp(resumed.parameters().data(), trainer.parameters().data(), P * 4), 0);
}

// `deltabit train --profile` on the GPU: CUDA events between the launches change nothing they compute.
// A GPU run's loss and gradient norm sum with double atomics (their last bits vary), but every gradient
// sum has a fixed order, so with clipping off (the clip factor would carry the norm's rounding into
// every weight) one step's parameters depend on no atomic: after one step every parameter of two
// unprofiled runs is equal to the bit (checked: the premise), and so must the profiled run's be.
// Then the profile's spans are counted against the step's structure, with an evaluation between two
// profiled steps that must record nothing.
TEST(CudaTrainer, ProfiledStepChangesNothingAndTimesEveryKind) {
    SKIP_WITHOUT_GPU();
    const fs::path dir = make_text("profile");
    std::string text = run_config_text(dir, "cuda", 4, false);
    // One sequence a micro-batch (the emulated run of tests/tools/cuda_emulation_train.sh is 4× faster).
    const std::string warmup = "warmup_steps = 2\n", batch = "batch = 4\n";
    ASSERT_NE(text.find(warmup), std::string::npos);
    ASSERT_NE(text.find(batch), std::string::npos);
    text.replace(text.find(warmup), warmup.size(), warmup + "clip = 0\n");
    // The recomputing backward, whose passes this test counts (KeptActivationsGiveTheRecomputedStepsBits
    // checks the kept one's profile against it).
    text.replace(text.find(batch), batch.size(), "batch = 1\nactivations = \"recompute\"\n");
    const TrainConfig config = parse_train_config(text, "profile.toml");
    Trainer a(config, text), b(config, text), profiled(config, text);
    profiled.enable_profile();
    const StepReport ra = a.train_step(), rb = b.train_step(), rp = profiled.train_step();
    // The loss sums with double atomics: equal to rounding (as LossFallsOverFiftySteps).
    EXPECT_NEAR(rb.loss, ra.loss, 1e-12 * ra.loss);
    EXPECT_NEAR(rp.loss, ra.loss, 1e-12 * ra.loss);
    int64_t compared = 0;
    for (const ParameterInfo& p : a.layout().all()) {
        compared += p.size;
        const size_t bytes = size_t(p.size) * sizeof(float);
        EXPECT_EQ(std::memcmp(a.parameters().data() + p.offset, b.parameters().data() + p.offset, bytes), 0)
            << p.name << ": two unprofiled runs differ (the premise of this test is wrong, not the profile)";
        EXPECT_EQ(std::memcmp(a.parameters().data() + p.offset, profiled.parameters().data() + p.offset, bytes), 0)
            << p.name << ": the profiled run differs from the unprofiled one";
    }
    EXPECT_EQ(compared, a.layout().total());

    profiled.evaluate_bpb();  // not a training step: nothing recorded
    profiled.train_step();
    const StepProfile& profile = *profiled.profile();
    ASSERT_EQ(profile.steps(), 2);
    // Spans per step of this config: 2 micro-batches of 1 × 64 tokens (one LM-head chunk each); layer
    // 0 DeltaNet (5 products), layer 1 attention (4), each with an FFN (3); every layer's forward runs
    // twice (forward, recompute), its backward once.
    const int64_t micro = config.run.grad_accum, steps = 2;
    const std::vector<std::pair<ProfileKind, int64_t>> per_step = {
        {ProfileKind::upload, micro},
        {ProfileKind::embedding, 2 * micro},
        {ProfileKind::gemm_forward, (2 * (5 + 3) + 2 * (4 + 3) + 1) * micro},
        {ProfileKind::gemm_backward_data, (5 + 4 + 2 * 3 + 1) * micro},
        {ProfileKind::gemm_backward_weight, (5 + 4 + 2 * 3 + 1) * micro},
        {ProfileKind::attention_forward, 2 * micro},
        {ProfileKind::attention_backward, micro},
        {ProfileKind::delta_rule_forward, 2 * micro},
        {ProfileKind::delta_rule_backward, micro},
        {ProfileKind::causal_conv, 3 * micro},
        {ProfileKind::lm_head_loss, micro},
        {ProfileKind::gradient_norm, 1},
        {ProfileKind::optimizer, 1},
        {ProfileKind::host_data, micro},
        {ProfileKind::host_wait, 2 * micro + 2},
        {ProfileKind::qat_weights, 0},
        {ProfileKind::cpu_reference, 0},
    };
    for (const auto& [kind, spans] : per_step)
        EXPECT_EQ(profile.kind(kind).spans, steps * spans) << profile_kind_name(kind);
    for (const ProfileKind kind : {ProfileKind::norm, ProfileKind::pointwise, ProfileKind::zero_and_copy})
        EXPECT_GT(profile.kind(kind).spans, 0) << profile_kind_name(kind);
    // The delta rule's kernels, split out of its spans by their marks (kernel_marks.h): two forward
    // kernels per forward call, three backward ones per backward call, every one with a time.
    const std::vector<std::pair<const char*, int64_t>> delta_kernels = {
        {"delta: chunk_factors_kernel", 2 * micro}, {"delta: forward_walk_kernel", 2 * micro},
        {"delta: backward_carry_kernel", micro},    {"delta: backward_gradients_kernel", micro},
        {"delta: delta_rule_reduce_kernel", micro}};
    for (const auto& [name, calls] : delta_kernels) {
        const ProfileTotals* k = profile.kernel(name);
        ASSERT_NE(k, nullptr) << name;
        EXPECT_EQ(k->spans, steps * calls) << name;
        EXPECT_GT(k->ms, 0.0) << name;
    }
    // A kernel's share lies inside its op's span.
    double delta_kernels_ms = 0.0;
    for (const auto& [name, calls] : delta_kernels) delta_kernels_ms += profile.kernel(name)->ms;
    EXPECT_LE(delta_kernels_ms, (profile.kind(ProfileKind::delta_rule_forward).ms +
                                 profile.kind(ProfileKind::delta_rule_backward).ms) * (1.0 + 1e-6));
    for (size_t k = 0; k < kProfileKinds; ++k) {
        if (profile.kind(ProfileKind(k)).spans == 0) continue;
        EXPECT_GT(profile.kind(ProfileKind(k)).ms, 0.0) << profile_kind_name(ProfileKind(k));
    }
    // The spans follow one another on one stream, inside the step: their sum is at most the device's
    // span (to the float rounding of cudaEventElapsedTime, 2⁻²⁴ of each), which is inside the wall time.
    EXPECT_LE(profile.device_ms(), profile.device_span_ms() * (1.0 + 1e-6));
    EXPECT_LE(profile.device_span_ms(), profile.wall_ms());
    std::printf("%s", profile.report("[ cuda train ] --profile, tiny hybrid, 2 steps", {}).c_str());
}

#endif

}  // namespace
}  // namespace deltabit::train
