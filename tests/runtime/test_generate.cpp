// The generation loop on the transformers fixtures (vocab 256, no tokenizer): greedy decoding against
// a from-scratch forward pass, seeded sampling, the three ways to stop, refusals, and a long run.
#include "core/error.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "engine_test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace deltabit {
namespace {

std::filesystem::path fixture(const std::string& name) {
    return std::filesystem::path(DELTABIT_SOURCE_DIR) / "tests" / "fixtures" / name;
}

// Written out here rather than taken from the sampler, so the test does not check the code with itself.
int32_t naive_argmax(const float* row, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; ++i)
        if (row[i] > row[best]) best = int32_t(i);
    return best;
}

// The greedy next token after `ids`, from a fresh state and one forward call over all of them.
int32_t fresh_greedy_next(const Model& model, const std::vector<int32_t>& ids) {
    SequenceState state = model.new_sequence();
    const std::vector<float> logits = model.forward(state, ids);
    const int64_t n_vocab = model.config().n_vocab;
    return naive_argmax(logits.data() + (int64_t(ids.size()) - 1) * n_vocab, n_vocab);
}

// A sequence on the CPU engine and its ledger: what generate() continues.
struct CpuRun {
    explicit CpuRun(const Model& model)
        : engine(make_cpu_engine(model)), sequence(engine->new_sequence({.max_positions = 4096})) {}
    GenerationResult generate(std::span<const int32_t> prompt, const GenerationOptions& options,
                              const GenerationCallbacks& callbacks = {}) {
        return deltabit::generate(*engine, *sequence, ledger, prompt, options, callbacks);
    }
    int64_t position() const { return sequence->position(); }

    std::unique_ptr<Engine> engine;
    std::unique_ptr<EngineSequence> sequence;
    TokenLedger ledger;
};

GenerationOptions greedy(int64_t max_tokens) {
    GenerationOptions options;
    options.sampling.temperature = 0.0f;
    options.max_tokens = max_tokens;
    return options;
}

const std::vector<int32_t> kPrompt = {17, 3, 200, 45, 9, 128, 77};

class GenerateOnFixture : public ::testing::TestWithParam<std::string> {};

// Greedy tokens must be what recomputing the whole sequence from scratch picks at every step: this
// catches a cache or recurrent state that drifts from the prefill, and an off-by-one in which logits
// row is sampled.
TEST_P(GenerateOnFixture, GreedyEqualsArgmaxOfFullRecompute) {
    const Model model = Model::load(fixture(GetParam()));
    CpuRun state(model);
    const GenerationResult result = state.generate(kPrompt, greedy(6));
    ASSERT_EQ(result.tokens.size(), 6u);
    EXPECT_EQ(result.finish, FinishReason::length);

    std::vector<int32_t> ids = kPrompt;
    for (size_t k = 0; k < result.tokens.size(); ++k) {
        EXPECT_EQ(result.tokens[k], fresh_greedy_next(model, ids)) << "step " << k;
        ids.push_back(result.tokens[k]);
    }
    // The last token is not fed (nothing needs its logits): prompt + 6 − 1 positions.
    EXPECT_EQ(state.position(), int64_t(kPrompt.size()) + 5);
    EXPECT_EQ(state.ledger.size(), state.position());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GenerateOnFixture, ::testing::Values("qwen3_binary", "qwen3_5_binary"));

GenerationOptions random_sampling(uint64_t seed) {
    GenerationOptions options;
    // Flat enough that two seeds almost surely differ within 24 draws over 256 tokens.
    options.sampling.temperature = 1.5f;
    options.sampling.top_k = 0;
    options.sampling.top_p = 1.0f;
    options.sampling.min_p = 0.0f;
    options.sampling.seed = seed;
    options.max_tokens = 24;
    return options;
}

std::vector<int32_t> sample_tokens(const Model& model, uint64_t seed) {
    CpuRun state(model);
    return state.generate(kPrompt, random_sampling(seed)).tokens;
}

TEST(Generate, SameSeedSameTokensOtherSeedDiffers) {
    const Model model = Model::load(fixture("qwen3_5_binary"));
    const std::vector<int32_t> a = sample_tokens(model, 1234);
    EXPECT_EQ(a, sample_tokens(model, 1234));
    EXPECT_NE(a, sample_tokens(model, 1235));
    // Sampling really sampled: greedy would give one fixed sequence.
    CpuRun state(model);
    EXPECT_NE(a, state.generate(kPrompt, greedy(24)).tokens);
}

TEST(Generate, StopsRightAfterEos) {
    // qwen3_binary's greedy run is one token repeated; the hybrid fixture's varies.
    const Model model = Model::load(fixture("qwen3_5_binary"));
    CpuRun probe_state(model);
    const std::vector<int32_t> free_run = probe_state.generate(kPrompt, greedy(12)).tokens;
    // The first token of the run not seen earlier in it, past position 0, plays EOS.
    size_t k = 1;
    while (k < free_run.size() && std::count(free_run.begin(), free_run.begin() + long(k), free_run[k]) > 0) ++k;
    ASSERT_LT(k, free_run.size()) << "greedy run repeats one token; pick another prompt";

    ASSERT_TRUE(model.config().eos_ids.empty());  // the fixture's metadata has none: a copy gets one
    const std::shared_ptr<const Model> with_eos = test::with_eos(model, {free_run[k]});
    GenerationOptions options = greedy(0);
    options.max_tokens.reset();  // open-ended: only EOS can end it
    CpuRun state(*with_eos);
    std::vector<int32_t> streamed;
    GenerationCallbacks callbacks;
    callbacks.on_token = [&](int32_t id, std::string_view) { streamed.push_back(id); };
    const GenerationResult result = state.generate(kPrompt, options, callbacks);

    EXPECT_EQ(result.finish, FinishReason::eos);
    EXPECT_EQ(result.tokens, std::vector<int32_t>(free_run.begin(), free_run.begin() + long(k) + 1));
    EXPECT_EQ(streamed, result.tokens);
    EXPECT_EQ(state.position(), int64_t(kPrompt.size() + k));
}

TEST(Generate, MaxTokensAndLedger) {
    const Model model = Model::load(fixture("qwen3_binary"));
    CpuRun state(model);
    const GenerationResult result = state.generate(kPrompt, greedy(5));
    EXPECT_EQ(result.finish, FinishReason::length);
    ASSERT_EQ(result.tokens.size(), 5u);
    EXPECT_EQ(result.timings.prompt_tokens, int64_t(kPrompt.size()));
    EXPECT_EQ(result.timings.decode_steps, 4);
    EXPECT_TRUE(result.text.empty());  // no detokenizer, no text

    // The ledger is the prompt (not generated) then the tokens the state consumed (generated).
    ASSERT_EQ(state.ledger.size(), int64_t(kPrompt.size()) + 4);
    for (size_t i = 0; i < size_t(state.ledger.size()); ++i) {
        const bool from_prompt = i < kPrompt.size();
        EXPECT_EQ(state.ledger.tokens()[i], from_prompt ? kPrompt[i] : result.tokens[i - kPrompt.size()]) << i;
        EXPECT_EQ(state.ledger.generated()[i], from_prompt ? 0 : 1) << i;
    }

    // max_tokens 1: the prefill's logits give the token, no decode step at all.
    CpuRun one_state(model);
    const GenerationResult one = one_state.generate(kPrompt, greedy(1));
    EXPECT_EQ(one.tokens, std::vector<int32_t>{result.tokens[0]});
    EXPECT_EQ(one.timings.decode_steps, 0);
    EXPECT_EQ(one_state.position(), int64_t(kPrompt.size()));
}

TEST(Generate, RefusesWhatCouldNotEnd) {
    const Model model = Model::load(fixture("qwen3_binary"));
    ASSERT_TRUE(model.config().eos_ids.empty());
    CpuRun state(model);
    GenerationOptions open_ended = greedy(1);
    open_ended.max_tokens.reset();
    try {
        state.generate(kPrompt, open_ended);
        FAIL() << "generated without EOS and without max_tokens";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("no EOS"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("max_tokens"), std::string::npos) << e.what();
    }
    EXPECT_EQ(state.position(), 0);  // refused before any forward call
    EXPECT_EQ(state.ledger.size(), 0);

    EXPECT_THROW(state.generate(kPrompt, greedy(0)), Error);
    EXPECT_THROW(state.generate({}, greedy(3)), Error);
    GenerationOptions with_stop = greedy(3);
    with_stop.stop = {"x"};
    EXPECT_THROW(state.generate(kPrompt, with_stop), Error);  // no detokenizer
    TokenLedger out_of_step;
    out_of_step.append_prompt(kPrompt);
    EXPECT_THROW(generate(*state.engine, *state.sequence, out_of_step, kPrompt, greedy(3)), Error);
    EXPECT_EQ(state.position(), 0);
}

// Text through a stand-in detokenizer: each id is one lowercase letter, so the expected text and
// where a stop string lands can be worked out by hand from the ids.
std::string letter(int32_t id) { return std::string(1, char('a' + id % 26)); }

TEST(Generate, StopStringEndsTextBeforeIt) {
    const Model model = Model::load(fixture("qwen3_5_binary"));
    CpuRun probe_state(model);
    const std::vector<int32_t> free_run = probe_state.generate(kPrompt, greedy(12)).tokens;
    std::string full;
    for (int32_t id : free_run) full += letter(id);
    // A stop string made of the letters of tokens 4 and 5: the run must end at token 5 (or earlier,
    // if those two letters already occur before), and the text is everything before the match.
    const std::string stop = full.substr(4, 2);
    const size_t match = full.find(stop);
    ASSERT_LE(match, 4u);
    ASSERT_GE(match, 1u) << "a match at the very start would not test the held-back text";

    GenerationOptions options = greedy(12);
    options.stop = {stop};
    GenerationCallbacks callbacks;
    callbacks.detokenize = letter;
    std::string streamed;
    callbacks.on_token = [&](int32_t, std::string_view text) { streamed += text; };
    CpuRun state(model);
    const GenerationResult result = state.generate(kPrompt, options, callbacks);

    EXPECT_EQ(result.finish, FinishReason::stop);
    EXPECT_EQ(result.text, full.substr(0, match));
    EXPECT_EQ(streamed, result.text);  // the stop string's first letter was held back, never streamed
    EXPECT_EQ(result.tokens, std::vector<int32_t>(free_run.begin(), free_run.begin() + long(match) + 2));
}

// Past the 96-token mark of DESIGN.md §6 rung 6 and past 300: the caches grow, the position stays in
// step with what was fed, and the last greedy token still equals a from-scratch recompute.
TEST(Generate, LongGenerationKeepsPositionAndCache) {
    const Model model = Model::load(fixture("qwen3_5_binary"));
    CpuRun state(model);
    GenerationOptions options = greedy(320);
    options.sampling.repeat_penalty = 1.3f;  // keeps the tiny model from settling into one token
    const GenerationResult result = state.generate(kPrompt, options);
    ASSERT_EQ(result.tokens.size(), 320u);
    EXPECT_EQ(result.finish, FinishReason::length);
    EXPECT_EQ(state.position(), int64_t(kPrompt.size()) + 319);
    EXPECT_EQ(state.ledger.size(), state.position());

    // With the penalty off the last step is plain argmax, so it can be recomputed from scratch.
    CpuRun cont(model);  // a copy of the run: its state image and its ledger
    cont.sequence->load(state.sequence->save());
    cont.ledger = state.ledger;
    const std::vector<int32_t> next = {result.tokens.back()};
    const GenerationResult more = cont.generate(next, greedy(1));
    std::vector<int32_t> all = kPrompt;
    all.insert(all.end(), result.tokens.begin(), result.tokens.end());
    EXPECT_EQ(more.tokens.at(0), fresh_greedy_next(model, all));
    EXPECT_EQ(cont.position(), int64_t(all.size()));
}

}  // namespace
}  // namespace deltabit
