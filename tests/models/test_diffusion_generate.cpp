// Block-diffusion generation (runtime/diffusion_generate.h): transformers' generate() runs replayed with
// its own recorded random draws must give its tokens exactly (tests/fixtures/diffusion_gemma), and the
// seeded loop's own properties on a random model written by the test.
#include "diffusion_gemma_folder.h"
#include "fixture.h"

#include "core/error.h"
#include "formats/safetensors.h"
#include "models/diffusion_gemma.h"
#include "models/model.h"
#include "runtime/diffusion_generate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

namespace deltabit {
namespace {

namespace fs = std::filesystem;

fs::path fixture_dir() { return test::fixtures_dir() / "diffusion_gemma"; }

// transformers' draws, handed out in the order it made them; a request of the other kind or size means
// the loop's order of operations differs from transformers', which fails the test with a message.
class ReplayRandomness : public DiffusionRandomness {
public:
    struct Draw {
        std::string kind;
        std::vector<int32_t> values;
    };
    explicit ReplayRandomness(std::vector<Draw> draws) : draws_(std::move(draws)) {}
    void uniform_tokens(int64_t, std::span<int32_t> out) override { take("randint", out); }
    void sample(std::span<const float>, int64_t, std::span<int32_t> out) override { take("multinomial", out); }
    size_t left() const { return draws_.size() - next_; }

private:
    void take(const std::string& kind, std::span<int32_t> out) {
        if (next_ >= draws_.size()) throw std::runtime_error("replay: the loop asked for more draws than transformers made");
        const Draw& d = draws_[next_++];
        if (d.kind != kind || d.values.size() != out.size())
            throw std::runtime_error("replay: draw " + std::to_string(next_ - 1) + " is " + d.kind + " of " +
                                     std::to_string(d.values.size()) + ", the loop asked for " + kind + " of " +
                                     std::to_string(out.size()));
        std::copy(d.values.begin(), d.values.end(), out.begin());
    }
    std::vector<Draw> draws_;
    size_t next_ = 0;
};

std::vector<int32_t> ints(const safetensors::File& f, const std::string& name) {
    const safetensors::TensorInfo* t = f.find(name);
    if (!t || t->dtype_name != "I32") throw std::runtime_error("reference.safetensors: no I32 tensor " + name);
    std::vector<int32_t> out(t->n_elements());
    std::memcpy(out.data(), t->data, out.size() * 4);
    return out;
}

// Every generate() run of a fixture folder replayed with its recorded draws on the CPU model loaded from
// the same folder; one line per run that differs.
struct GenerateReplay {
    int64_t replayed = 0;
    std::vector<std::string> failures;
};

// `only`: the names of the runs to replay (empty: every run).
GenerateReplay replay_generate_runs(const fs::path& dir, const std::set<std::string>& only = {}) {
    std::ifstream in(dir / "diffusion.json");
    const nlohmann::json meta = nlohmann::json::parse(in);
    const safetensors::File ref = safetensors::File::open(dir / "reference.safetensors");
    const Model model = Model::load(dir);
    const DiffusionGemma dg(model);
    GenerateReplay out;
    for (const nlohmann::json& run : meta.at("generate")) {
        const std::string name = run.at("name");
        if (!only.empty() && !only.contains(name)) continue;
        if (!run.at("draws_complete").get<bool>()) {
            out.failures.push_back(name + ": the fixture did not capture every random draw of generate()");
            continue;
        }
        const nlohmann::json& s = run.at("settings");
        DiffusionGenerationConfig g;
        g.max_new_tokens = s.value("max_new_tokens", g.max_new_tokens);
        g.max_denoising_steps = s.value("max_denoising_steps", g.max_denoising_steps);
        g.t_min = s.value("t_min", g.t_min);
        g.t_max = s.value("t_max", g.t_max);
        g.stability_threshold = s.value("stability_threshold", g.stability_threshold);
        g.confidence_threshold = s.value("confidence_threshold", g.confidence_threshold);
        g.entropy_bound = s.value("entropy_bound", g.entropy_bound);
        if (s.contains("eos_token_id")) g.eos_ids = s.at("eos_token_id").get<std::vector<int64_t>>();
        g.pad_id = s.value("pad_token_id", g.pad_id);
        std::vector<ReplayRandomness::Draw> draws;
        for (const nlohmann::json& d : run.at("draws")) draws.push_back({d.at("kind"), ints(ref, d.at("tensor"))});
        ReplayRandomness random(std::move(draws));
        const std::vector<int32_t> prompt = ints(ref, run.at("prompt"));
        const std::vector<int32_t> first =
            run.at("decoder_input_ids").is_null() ? std::vector<int32_t>{} : ints(ref, run.at("decoder_input_ids"));
        const std::vector<int32_t> sequences = ints(ref, run.at("sequences"));
        const std::vector<int32_t> want(sequences.begin() + int64_t(prompt.size()), sequences.end());
        ++out.replayed;
        DiffusionGeneration got;
        try {
            got = generate_diffusion(dg, prompt, g, random, first);
        } catch (const std::exception& e) {
            out.failures.push_back(name + ": " + e.what());
            continue;
        }
        if (got.tokens != want) {
            size_t i = 0;
            while (i < std::min(got.tokens.size(), want.size()) && got.tokens[i] == want[i]) ++i;
            out.failures.push_back(name + ": " + std::to_string(got.tokens.size()) + " tokens, transformers " +
                                   std::to_string(want.size()) + "; first difference at new token " + std::to_string(i) +
                                   (run.contains("robust_replay") ? ""
                                                                  : " (the fixture never checked that this run survives "
                                                                    "rounding differences: regenerate it)"));
            continue;
        }
        if (random.left() != 0)
            out.failures.push_back(name + ": transformers made " + std::to_string(random.left()) +
                                   " draws the loop never asked for");
        int64_t passes = 0;
        for (int64_t steps : got.steps_per_block) passes += steps;
        if (passes != run.at("n_multinomial").get<int64_t>())
            out.failures.push_back(name + ": " + std::to_string(passes) + " decoder passes, transformers " +
                                   run.at("n_multinomial").dump());
        if (!run.at("tokens_per_forward").is_null() &&
            float(got.tokens_per_forward()) != run.at("tokens_per_forward")[0].get<float>())  // torch's fp32
            out.failures.push_back(name + ": tokens per forward " + std::to_string(got.tokens_per_forward()));
    }
    return out;
}

// Every recorded run: defaults, near-zero temperature, the confidence and stability early stops, accept-all
// and EOS/pad. tools/fixtures/make_diffusion_fixture.py draws a model whose self-conditioning does not
// amplify rounding and keeps only runs that replay unchanged in transformers under 2e-5 × max|logit| of
// noise on the decoder's logits (this engine is within 3.8e-6 of transformers): with a chaotic model, float
// rounding rather than the loop decided the tokens after 6–8 denoising steps (docs/notes/diffusion-replay.md).
TEST(DiffusionGenerateFixture, ReplayingTransformersDrawsGivesItsTokens) {
    if (!fs::exists(fixture_dir() / "diffusion.json"))
        GTEST_SKIP() << "no DiffusionGemma fixture in " << fixture_dir().string()
                     << ": run tools/fixtures/make_diffusion_fixture.py where torch and transformers 5.17 are installed";
    const GenerateReplay r = replay_generate_runs(fixture_dir());
    for (const std::string& f : r.failures) ADD_FAILURE() << f;
    EXPECT_EQ(r.replayed, 6);
}

// transformers divides an int32 step tensor by N and so rounds T_s in fp32 operation by operation; for 8
// steps that is one ulp above float(0.7) at step 6 and above float(0.45) at step 1 (fp32(0.4) + fp32(0.4·¾)
// and fp32(0.4) + fp32(0.4/8)), where the double formula gives float(0.7) and float(0.45). For 6 steps
// the two agree at every step.
TEST(DiffusionGenerate, StepTemperatureIsRoundedAsTransformersRoundsIt) {
    DiffusionGenerationConfig g;  // t_min 0.4, t_max 0.8
    EXPECT_EQ(diffusion_step_temperature(g, 8, 8), 0.8f);
    EXPECT_EQ(diffusion_step_temperature(g, 6, 8), std::nextafter(0.7f, 1.0f));
    EXPECT_EQ(diffusion_step_temperature(g, 1, 8), std::nextafter(0.45f, 1.0f));
    EXPECT_EQ(diffusion_step_temperature(g, 4, 8), 0.6f);
    for (int64_t s = 1; s <= 6; ++s)  // 6 steps: no difference from the double formula
        EXPECT_EQ(diffusion_step_temperature(g, s, 6), float(0.4 + 0.4 * double(s) / 6.0)) << s;
}

class DiffusionGenerateRandom : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        // ctest runs each test of the suite in its own process, in parallel: one folder per process.
        dir_ = fs::temp_directory_path() / ("deltabit_test_dg_generate_" + std::to_string(::getpid()));
        test::TinyDiffusionGemma().write(dir_);
        model_ = std::make_unique<Model>(Model::load(dir_));
    }
    static void TearDownTestSuite() {
        model_.reset();
        fs::remove_all(dir_);
    }
    static inline fs::path dir_;
    static inline std::unique_ptr<Model> model_;
    const std::vector<int32_t> prompt_ = {3, 17, 5, 9, 33, 21, 8};
};

TEST_F(DiffusionGenerateRandom, SeededRunsRepeatAndBlocksAreWhole) {
    const DiffusionGemma dg(*model_);
    DiffusionGenerationConfig g;
    g.max_new_tokens = 7;  // two blocks of 5: ceil, not truncated
    g.max_denoising_steps = 4;
    SeededDiffusionRandomness a(42), b(42), c(43);
    const DiffusionGeneration ra = generate_diffusion(dg, prompt_, g, a);
    const DiffusionGeneration rb = generate_diffusion(dg, prompt_, g, b);
    const DiffusionGeneration rc = generate_diffusion(dg, prompt_, g, c);
    EXPECT_EQ(ra.tokens.size(), 10u);
    EXPECT_EQ(ra.tokens, rb.tokens);
    EXPECT_EQ(ra.steps_per_block, rb.steps_per_block);
    EXPECT_NE(ra.tokens, rc.tokens);  // 10 tokens over a 40-token vocabulary: equal only by a bug
    ASSERT_EQ(ra.steps_per_block.size(), 2u);
    for (int64_t steps : ra.steps_per_block) {
        EXPECT_GE(steps, 1);
        EXPECT_LE(steps, 4);
    }
}

TEST_F(DiffusionGenerateRandom, NearZeroTemperatureFromAGivenCanvasIgnoresTheSeed) {
    // Every distribution is one-hot, every entropy ~0: all positions accepted, the samples are the argmax,
    // so one block from a given canvas cannot depend on the random numbers.
    const DiffusionGemma dg(*model_);
    DiffusionGenerationConfig g;
    g.max_new_tokens = 5;
    g.max_denoising_steps = 3;
    g.t_min = g.t_max = 1e-4;
    const std::vector<int32_t> canvas = {4, 4, 38, 0, 12};
    SeededDiffusionRandomness a(1), b(2);
    const DiffusionGeneration ra = generate_diffusion(dg, prompt_, g, a, canvas);
    const DiffusionGeneration rb = generate_diffusion(dg, prompt_, g, b, canvas);
    EXPECT_EQ(ra.tokens, rb.tokens);
    // And the first step's argmax of the given canvas is what a stop after one step would commit.
    g.max_denoising_steps = 1;
    SeededDiffusionRandomness d(3);
    const DiffusionGeneration one = generate_diffusion(dg, prompt_, g, d, canvas);
    DiffusionCache cache = dg.new_cache();
    dg.encode(cache, prompt_);
    const std::vector<float> logits = dg.denoise(cache, canvas);
    for (size_t i = 0; i < canvas.size(); ++i) {
        const float* row = logits.data() + i * size_t(dg.config().n_vocab);
        EXPECT_EQ(one.tokens[i], int32_t(std::max_element(row, row + dg.config().n_vocab) - row)) << i;
    }
}

TEST_F(DiffusionGenerateRandom, EosStopsAndPadsTheRestOfItsBlock) {
    const DiffusionGemma dg(*model_);
    DiffusionGenerationConfig g;
    g.max_new_tokens = 15;
    g.max_denoising_steps = 3;
    SeededDiffusionRandomness a(9);
    const DiffusionGeneration plain = generate_diffusion(dg, prompt_, g, a);
    ASSERT_EQ(plain.tokens.size(), 15u);
    // EOS = the first block's third token: the same seed makes the same first block, so it stops there.
    const int32_t eos = plain.tokens[2];
    g.eos_ids = {eos};
    g.pad_id = 0;
    SeededDiffusionRandomness b(9);
    const DiffusionGeneration stopped = generate_diffusion(dg, prompt_, g, b);
    EXPECT_TRUE(stopped.finished);
    ASSERT_EQ(stopped.tokens.size(), 5u);
    const size_t first = size_t(std::find(plain.tokens.begin(), plain.tokens.end(), eos) - plain.tokens.begin());
    for (size_t i = 0; i < 5; ++i)
        EXPECT_EQ(stopped.tokens[i], i <= first ? plain.tokens[i] : 0) << i;
}

TEST_F(DiffusionGenerateRandom, BadSettingsAreRefusedBeforeAnythingRuns) {
    const DiffusionGemma dg(*model_);
    SeededDiffusionRandomness r(1);
    DiffusionGenerationConfig g;
    g.max_denoising_steps = 0;
    EXPECT_THROW(generate_diffusion(dg, prompt_, g, r), Error);
    g = {};
    g.t_min = 0.0;
    EXPECT_THROW(generate_diffusion(dg, prompt_, g, r), Error);
    g = {};
    const std::vector<int32_t> short_canvas = {1, 2};
    EXPECT_THROW(generate_diffusion(dg, prompt_, g, r, short_canvas), Error);
    EXPECT_THROW(generate_diffusion(dg, std::span<const int32_t>{}, g, r), Error);
}


// Draws of a seeded run, recorded as the fixture script records transformers' draws.
class RecordingRandomness : public DiffusionRandomness {
public:
    explicit RecordingRandomness(uint64_t seed) : inner_(seed) {}
    void uniform_tokens(int64_t n_vocab, std::span<int32_t> out) override {
        inner_.uniform_tokens(n_vocab, out);
        draws.push_back({"randint", std::vector<int32_t>(out.begin(), out.end())});
    }
    void sample(std::span<const float> probs, int64_t n_vocab, std::span<int32_t> out) override {
        inner_.sample(probs, n_vocab, out);
        draws.push_back({"multinomial", std::vector<int32_t>(out.begin(), out.end())});
    }
    std::vector<ReplayRandomness::Draw> draws;

private:
    SeededDiffusionRandomness inner_;
};

// Writes generate() runs in make_diffusion_fixture.py's format from seeded runs of this engine, with the
// recorded draws passed through `edit` first.
void write_own_runs(const fs::path& dir, const Model& model,
                    const std::function<void(std::vector<ReplayRandomness::Draw>&)>& edit) {
    const DiffusionGemma dg(model);
    std::deque<std::vector<int32_t>> storage;
    std::vector<safetensors::TensorToWrite> tensors;
    auto add = [&](const std::string& name, std::vector<int32_t> v, std::vector<int64_t> shape) {
        storage.push_back(std::move(v));
        tensors.push_back({name, "I32", std::move(shape),
                           {reinterpret_cast<const uint8_t*>(storage.back().data()), storage.back().size() * 4}});
        return name;
    };
    const std::vector<int32_t> prompt = {3, 17, 5, 9, 33, 21, 8};
    const int64_t L = dg.config().canvas_length;
    nlohmann::json runs = nlohmann::json::array();
    const std::vector<std::pair<std::string, nlohmann::json>> settings = {
        {"defaults", {{"max_new_tokens", 10}, {"max_denoising_steps", 4}}},
        {"stop", {{"max_new_tokens", 10}, {"max_denoising_steps", 6}, {"stability_threshold", 1},
                  {"confidence_threshold", 10.0}}},
    };
    for (const auto& [name, s] : settings) {
        DiffusionGenerationConfig g;
        g.max_new_tokens = s.at("max_new_tokens");
        g.max_denoising_steps = s.at("max_denoising_steps");
        g.stability_threshold = s.value("stability_threshold", g.stability_threshold);
        g.confidence_threshold = s.value("confidence_threshold", g.confidence_threshold);
        RecordingRandomness random(5);
        const DiffusionGeneration result = generate_diffusion(dg, prompt, g, random);
        std::vector<int32_t> sequence = prompt;
        sequence.insert(sequence.end(), result.tokens.begin(), result.tokens.end());
        edit(random.draws);
        nlohmann::json run = {{"name", name}, {"settings", s}, {"decoder_input_ids", nullptr},
                              {"prompt", add("gen." + name + ".prompt", prompt, {int64_t(prompt.size())})},
                              {"sequences", add("gen." + name + ".sequences", sequence, {int64_t(sequence.size())})},
                              {"tokens_per_forward", {result.tokens_per_forward()}}, {"draws_complete", true}};
        int64_t multinomial = 0;
        run["draws"] = nlohmann::json::array();
        for (size_t j = 0; j < random.draws.size(); ++j) {
            const auto& d = random.draws[j];
            multinomial += d.kind == "multinomial";
            const std::vector<int64_t> shape = d.kind == "randint" ? std::vector<int64_t>{1, L} : std::vector<int64_t>{L, 1};
            run["draws"].push_back({{"kind", d.kind}, {"shape", shape},
                                    {"tensor", add("gen." + name + ".draw" + std::to_string(j) + "." + d.kind, d.values, shape)}});
        }
        run["n_multinomial"] = multinomial;
        runs.push_back(run);
    }
    safetensors::write(dir / "reference.safetensors", tensors);
    std::ofstream(dir / "diffusion.json") << nlohmann::json{{"format", 1}, {"generate", runs}}.dump(1);
}

TEST_F(DiffusionGenerateRandom, ReplayOfRecordedDrawsReproducesARunAndNoticesTampering) {
    write_own_runs(dir_, *model_, [](std::vector<ReplayRandomness::Draw>&) {});
    const GenerateReplay same = replay_generate_runs(dir_);
    EXPECT_EQ(same.replayed, 2);
    for (const std::string& f : same.failures) ADD_FAILURE() << f;

    // One draw too few, and the order of two draws swapped: both are reported, not silently absorbed.
    write_own_runs(dir_, *model_, [](std::vector<ReplayRandomness::Draw>& d) { d.pop_back(); });
    EXPECT_EQ(replay_generate_runs(dir_).failures.size(), 2u);
    write_own_runs(dir_, *model_, [](std::vector<ReplayRandomness::Draw>& d) { std::swap(d[0], d[1]); });
    const GenerateReplay swapped = replay_generate_runs(dir_);
    ASSERT_EQ(swapped.failures.size(), 2u);
    EXPECT_NE(swapped.failures[0].find("the loop asked for randint"), std::string::npos) << swapped.failures[0];
}

}  // namespace
}  // namespace deltabit
