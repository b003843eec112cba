// Named intermediates on the GPU (CudaModel::forward with an observer, models/model_cuda.h) against the CPU
// reference's (Model::forward's observer, models/blocks.h), name by name, so that a GPU mismatch can be
// bisected layer by layer the way a CPU one can (`deltabit logits --backend cuda --dump NAME`).
//
// Every float fixture (their BF16 matrices run the fp32 plain-weight kernel on the GPU, so the two paths
// differ by rounding only), the first prompt's first kTokens tokens, fed as one call (prompt) and one token
// a call (steps: an observed call takes the prompt path at T = 1 too). Checked: the GPU hands out exactly the
// CPU's names, each as often and with as many values, and each intermediate is within
//   kBound · max|CPU values of that intermediate|, kBound = 1e-4,
// the rung-2 bound the logits are held to (test_model_parity_cuda.cpp's header: fp32 on the GPU against the
// reference's arithmetic; the fixtures show fp32 paths agree to ~1e-5 · max|logit|) applied to each named
// tensor. Set before the first GPU run of this test. Skips cleanly without a GPU.
#include "models/fixture.h"

#if DELTABIT_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/model_cuda.h"
#include "op_parity_cuda.h"

namespace deltabit {
namespace {

constexpr double kBound = 1e-4;  // × max|CPU intermediate|; see the header comment
constexpr size_t kTokens = 24;

// Every name's values, concatenated over the calls of one run, and how many times it was handed out.
struct Dump {
    std::map<std::string, std::vector<float>> values;
    std::map<std::string, int> calls;
    ActivationObserver observer() {
        return [this](std::string_view name, const float* data, int64_t n) {
            std::vector<float>& v = values[std::string(name)];
            v.insert(v.end(), data, data + n);
            ++calls[std::string(name)];
        };
    }
};

// The tokens fed as one call, or one a call.
std::vector<std::span<const int32_t>> chunks(const std::vector<int32_t>& ids, bool steps) {
    if (!steps) return {std::span<const int32_t>(ids)};
    std::vector<std::span<const int32_t>> out;
    for (size_t i = 0; i < ids.size(); ++i) out.push_back(std::span<const int32_t>(ids).subspan(i, 1));
    return out;
}

class NamedIntermediatesCuda : public ::testing::TestWithParam<std::string> {};

TEST_P(NamedIntermediatesCuda, EveryNameMatchesTheCpu) {
    DELTABIT_REQUIRE_GPU();
    const test::Fixture f = test::load_fixture(GetParam());
    const Model cpu = Model::load(f.dir);
    CudaModel gpu(cpu);
    const std::vector<int32_t>& prompt = f.cases.at(0).tokens;
    const std::vector<int32_t> ids(prompt.begin(), prompt.begin() + std::min(kTokens, prompt.size()));
    for (const bool steps : {false, true}) {
        const char* mode = steps ? "steps" : "prompt";
        Dump want, got;
        const ActivationObserver want_observer = want.observer(), got_observer = got.observer();
        SequenceState cpu_state = cpu.new_sequence();
        CudaSequenceState gpu_state = gpu.new_sequence(int64_t(ids.size()));
        for (const std::span<const int32_t> part : chunks(ids, steps)) {
            cpu.forward(cpu_state, part, &want_observer);
            gpu.forward(gpu_state, part, &got_observer);
        }
        ASSERT_FALSE(want.values.empty()) << mode;
        EXPECT_EQ(got.calls, want.calls) << mode << ": the GPU hands out other names, or as often";
        for (const auto& [name, reference] : want.values) {
            const auto at = got.values.find(name);
            if (at == got.values.end()) continue;  // reported by the comparison of the calls above
            ASSERT_EQ(at->second.size(), reference.size()) << mode << " " << name;
            double scale = 0.0, worst = 0.0;
            for (size_t i = 0; i < reference.size(); ++i) {
                scale = std::max(scale, std::abs(double(reference[i])));
                worst = std::max(worst, std::abs(double(at->second[i]) - double(reference[i])));
            }
            EXPECT_LE(worst, kBound * scale) << f.name << " " << mode << " " << name << ": max|Δ| " << worst
                                             << " against max|cpu| " << scale;
        }
    }
}

// The float fixtures only: the binary ones' int8 GEMV rounds activations (the parity test's header).
std::vector<std::string> float_fixtures() {
    std::vector<std::string> names;
    for (const std::string& name : test::fixture_names())
        if (name.ends_with("_float")) names.push_back(name);
    return names;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, NamedIntermediatesCuda, ::testing::ValuesIn(float_fixtures()),
                         [](const auto& info) { return info.param; });

TEST(NamedIntermediatesCuda, AnObservedCallLeavesTheFastPathAsItWas) {
    // After an observed call the observer is gone: a decode step captures and replays its graph as usual.
    DELTABIT_REQUIRE_GPU();
    const Model cpu = Model::load(test::fixtures_dir() / "qwen3_5_float");
    CudaModel gpu(cpu);
    CudaSequenceState state = gpu.new_sequence(16);
    int seen = 0;
    const ActivationObserver count = [&](std::string_view, const float*, int64_t) { ++seen; };
    const std::vector<int32_t> ids{3, 1, 4, 1, 5};
    gpu.forward(state, ids, &count);
    EXPECT_GT(seen, 0);
    const int after_observed = seen;
    for (const int32_t id : {9, 2, 6}) gpu.forward(state, std::span(&id, 1));
    EXPECT_EQ(seen, after_observed) << "the observer outlived its call";
    // The first step eager (it sizes the decode arena), the next two each captured for its DeltaNet parity and
    // replayed.
    EXPECT_EQ(gpu.decode_stats().eager_steps, 1);
    EXPECT_EQ(gpu.decode_stats().graph_replays, 2);
}

}  // namespace
}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
