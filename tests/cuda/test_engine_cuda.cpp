// The CUDA engine (runtime/engine_cuda.cpp) as the runtime uses it: the same answers as the CPU engine,
// and every state operation — save/load, checkpoint/restore, sessions with prefix reuse, snapshots —
// exact on the GPU, in every KV format; greedy run-ahead and the EOS rewind invisible.
//
// Exactness on one backend is bitwise (the same kernels on the same inputs in the same order give the
// same bits: nothing here is allowed to depend on timing). Across backends the float fixture's bound is
// rung 3's, 1e-4 · max|logit| (tests/cuda/test_model_parity_cuda.cpp says where it comes from).
#include "core/error.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "runtime/session.h"

#if DELTABIT_HAVE_CUDA

#include "backend/cuda_probe.h"
#include "models/model_fingerprint.h"
#include "runtime/engine_test_support.h"
#include "runtime/token_ledger.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>

#include <unistd.h>

namespace deltabit {
namespace {

constexpr double kCrossBackendTolerance = 1e-4;  // × max|logit|, rung 3 (float fixture)

std::filesystem::path fixture(const char* name) {
    return std::filesystem::path(DELTABIT_SOURCE_DIR) / "tests" / "fixtures" / name;
}

std::vector<int32_t> byte_tokens(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(n);
    for (int32_t& id : ids) id = int32_t(rng() % 256);
    return ids;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0.0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(double(a[i]) - double(b[i])));
    return d;
}

double max_abs(const std::vector<float>& a) {
    double m = 0.0;
    for (float v : a) m = std::max(m, std::abs(double(v)));
    return m;
}

SamplingParams sampled(uint64_t seed) {
    SamplingParams p;
    p.temperature = 1.1f;
    p.top_k = 0;
    p.top_p = 0.95f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.2f;
    p.seed = seed;
    return p;
}

// Feeds each chosen token back, `n` times; returns the tokens and the last logits.
struct Continuation {
    std::vector<int32_t> tokens;
    std::vector<float> last_logits;
};
Continuation continue_sequence(Engine& engine, EngineSequence& seq, Sampler& sampler, std::vector<int32_t> history,
                               int n) {
    Continuation out;
    std::vector<uint8_t> generated(history.size(), 0);
    for (int i = 0; i < n; ++i) {
        const int32_t t = engine.next_token(seq, sampler, {history, generated});
        out.tokens.push_back(t);
        history.push_back(t);
        generated.push_back(1);
        const int32_t fed[1] = {t};
        engine.forward(seq, fed);
    }
    out.last_logits = engine.last_logits(seq);
    return out;
}

class CudaEngineTest : public ::testing::Test {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
        model_ = std::make_shared<const Model>(Model::load(fixture("qwen3_5_float")));
        gpu_ = make_cuda_engine(model_);
        cpu_ = make_cpu_engine(model_);
    }
    std::shared_ptr<const Model> model_;
    std::unique_ptr<Engine> gpu_, cpu_;
};

TEST_F(CudaEngineTest, GreedyTokensEqualTheCpuEngines) {
    const std::vector<int32_t> prompt = byte_tokens(63, 1);
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    greedy.repeat_penalty = 1.3f;  // the tiny random model would otherwise settle on one token
    std::vector<Continuation> runs;
    for (Engine* e : {gpu_.get(), cpu_.get()}) {
        auto seq = e->new_sequence({.max_positions = 512});
        e->forward(*seq, prompt);
        Sampler sampler(greedy);
        runs.push_back(continue_sequence(*e, *seq, sampler, prompt, 192));
    }
    EXPECT_EQ(runs[0].tokens, runs[1].tokens);
    EXPECT_LE(max_abs_diff(runs[0].last_logits, runs[1].last_logits),
              kCrossBackendTolerance * max_abs(runs[1].last_logits));
}

// Two sequences decoded in turn, as the server's scheduler does (each one's forward call, then its
// token): after the prompts no step runs ahead (the other sequence's call would undo it after the GPU
// had spent it), and each sequence's greedy tokens are the ones it decodes alone, with run-ahead. Back
// to one sequence, it runs ahead again.
TEST_F(CudaEngineTest, InterleavedSequencesDoNotRunAhead) {
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    const std::vector<int32_t> prompt_a = byte_tokens(40, 21), prompt_b = byte_tokens(70, 22);
    const SequenceOptions so{.max_positions = 256};
    constexpr int kTokens = 24;
    std::vector<std::vector<int32_t>> alone;
    for (const std::vector<int32_t>* prompt : {&prompt_a, &prompt_b}) {
        auto seq = gpu_->new_sequence(so);
        gpu_->forward(*seq, *prompt);
        Sampler sampler(greedy);
        alone.push_back(continue_sequence(*gpu_, *seq, sampler, *prompt, kTokens).tokens);
    }

    const std::unique_ptr<Engine> engine = make_cuda_engine(model_);
    struct Stream {
        std::unique_ptr<EngineSequence> seq;
        Sampler sampler;
        std::vector<int32_t> history;
        std::vector<uint8_t> generated;
        std::vector<int32_t> tokens;
    };
    Stream a{engine->new_sequence(so), Sampler(greedy), prompt_a, std::vector<uint8_t>(prompt_a.size(), 0), {}};
    Stream b{engine->new_sequence(so), Sampler(greedy), prompt_b, std::vector<uint8_t>(prompt_b.size(), 0), {}};
    auto draw = [&](Stream& s) {
        const int32_t t = engine->next_token(*s.seq, s.sampler, {s.history, s.generated});
        s.tokens.push_back(t);
        s.history.push_back(t);
        s.generated.push_back(1);
    };
    auto feed_and_draw = [&](Stream& s) {
        engine->forward(*s.seq, std::span(&s.tokens.back(), 1));
        draw(s);
    };
    engine->forward(*a.seq, prompt_a);
    draw(a);
    engine->forward(*b.seq, prompt_b);
    draw(b);
    const EngineCounters after_prompts = engine->counters();
    for (int i = 1; i < kTokens; ++i) {
        feed_and_draw(a);
        feed_and_draw(b);
    }
    EXPECT_EQ(engine->counters().run_ahead_steps, after_prompts.run_ahead_steps) << "a step ran ahead while interleaved";
    EXPECT_EQ(a.tokens, alone[0]);
    EXPECT_EQ(b.tokens, alone[1]);

    feed_and_draw(a);  // the last two calls: b's, then a's — still interleaved
    feed_and_draw(a);  // a's twice: one sequence alone
    EXPECT_EQ(engine->counters().run_ahead_steps, after_prompts.run_ahead_steps + 1) << "one sequence alone did not run ahead";
}

// Plain greedy rows of a batch read their tokens from the batch's argmaxes, copied back together
// (CudaModel::argmax_rows): the same tokens as the CPU engine's, every draw counted, and a sampling row
// beside them still drawn from its own logits.
TEST_F(CudaEngineTest, GreedyRowsOfABatchShareOneCopyBack) {
    const std::vector<std::vector<int32_t>> prompts = {byte_tokens(9, 51), byte_tokens(21, 52), byte_tokens(4, 53)};
    SamplingParams greedy_params;
    greedy_params.temperature = 0.0f;
    Sampler greedy(greedy_params);
    std::vector<std::unique_ptr<EngineSequence>> gpu_seqs, cpu_seqs;
    std::vector<EngineSequence*> gpu_rows, cpu_rows;
    std::vector<int32_t> ids;
    for (const std::vector<int32_t>& prompt : prompts) {
        gpu_seqs.push_back(gpu_->new_sequence({.max_positions = 128}));
        cpu_seqs.push_back(cpu_->new_sequence({.max_positions = 128}));
        gpu_rows.push_back(gpu_seqs.back().get());
        cpu_rows.push_back(cpu_seqs.back().get());
        gpu_->forward(*gpu_rows.back(), prompt);
        cpu_->forward(*cpu_rows.back(), prompt);
        ids.push_back(cpu_->next_token(*cpu_rows.back(), greedy, {}));
    }
    const int64_t before = gpu_->counters().batched_argmax_rows;
    constexpr int kSteps = 12;
    for (int step = 0; step < kSteps; ++step) {
        gpu_->forward_batch(gpu_rows, ids);
        cpu_->forward_batch(cpu_rows, ids);
        for (size_t i = 0; i < prompts.size(); ++i) {
            const int32_t g = gpu_->next_token(*gpu_rows[i], greedy, {});
            const int32_t c = cpu_->next_token(*cpu_rows[i], greedy, {});
            ASSERT_EQ(g, c) << "step " << step << ", row " << i;
            ids[i] = c;
        }
    }
    EXPECT_EQ(gpu_->counters().batched_argmax_rows - before, int64_t(kSteps * prompts.size()));

    // A sampling row in the batch is drawn by the GPU sampler from its own row, as the CPU's chain.
    Sampler gpu_sampler(sampled(5)), cpu_sampler(sampled(5));
    gpu_->forward_batch(gpu_rows, ids);
    cpu_->forward_batch(cpu_rows, ids);
    const int64_t greedy_draws = gpu_->counters().batched_argmax_rows;
    EXPECT_EQ(gpu_->next_token(*gpu_rows[1], gpu_sampler, {}), cpu_->next_token(*cpu_rows[1], cpu_sampler, {}));
    EXPECT_EQ(gpu_->counters().batched_argmax_rows, greedy_draws);
    EXPECT_EQ(gpu_->next_token(*gpu_rows[2], greedy, {}), cpu_->next_token(*cpu_rows[2], greedy, {}));
    EXPECT_EQ(gpu_->counters().batched_argmax_rows, greedy_draws + 1);
}

// Save a state, load it into a fresh sequence, feed both the same next token and let each sample 300
// more: the tokens and the final logits must be bit-identical, per KV format.
// A batched step (Engine::forward_batch): each row's logits are its sequence's, as the CPU engine computes
// them (rung 3's bound), and greedy tokens drawn from every row after one step equal the CPU engine's; a
// forward call of any sequence after the batch ends the rows' logits, as any forward call does.
TEST_F(CudaEngineTest, BatchedStepRowsAreEachSequencesOwn) {
    const std::vector<std::vector<int32_t>> prompts = {byte_tokens(30, 41), byte_tokens(3, 42), byte_tokens(12, 43),
                                                       byte_tokens(57, 44)};
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    greedy.repeat_penalty = 1.3f;
    Sampler sampler(greedy);
    std::vector<std::unique_ptr<EngineSequence>> gpu_seqs, cpu_seqs;
    std::vector<EngineSequence*> gpu_rows, cpu_rows;
    std::vector<std::vector<int32_t>> histories = prompts;
    // Each row's token drawn from the logits of its last call (the prompt's, then the batch's rows).
    const auto draw = [&](size_t i, int step) {
        const std::vector<uint8_t> generated(histories[i].size(), 0);
        const int32_t g = gpu_->next_token(*gpu_rows[i], sampler, {histories[i], generated});
        const int32_t c = cpu_->next_token(*cpu_rows[i], sampler, {histories[i], generated});
        EXPECT_EQ(g, c) << "step " << step << ", row " << i;
        histories[i].push_back(c);
        return c;
    };
    std::vector<int32_t> ids;
    for (size_t i = 0; i < prompts.size(); ++i) {
        gpu_seqs.push_back(gpu_->new_sequence({.max_positions = 128}));
        cpu_seqs.push_back(cpu_->new_sequence({.max_positions = 128}));
        gpu_rows.push_back(gpu_seqs.back().get());
        cpu_rows.push_back(cpu_seqs.back().get());
        gpu_->forward(*gpu_rows[i], prompts[i]);
        cpu_->forward(*cpu_rows[i], prompts[i]);
        ids.push_back(draw(i, -1));
    }
    const int64_t ahead_before = gpu_->counters().run_ahead_steps;
    for (int step = 0; step < 16; ++step) {
        gpu_->forward_batch(gpu_rows, ids);
        cpu_->forward_batch(cpu_rows, ids);
        for (size_t i = 0; i < prompts.size(); ++i) {
            const std::vector<float> want = cpu_->last_logits(*cpu_rows[i]);
            EXPECT_LE(max_abs_diff(gpu_->last_logits(*gpu_rows[i]), want), kCrossBackendTolerance * max_abs(want))
                << "step " << step << ", row " << i;
            EXPECT_EQ(gpu_rows[i]->position(), int64_t(histories[i].size()));
        }
        for (size_t i = 0; i < prompts.size(); ++i) ids[i] = draw(i, step);
    }
    EXPECT_EQ(gpu_->counters().run_ahead_steps, ahead_before);  // no step ran ahead of a batch's rows
    const int32_t one[1] = {7};
    gpu_->forward(*gpu_rows[0], one);
    const std::vector<uint8_t> generated(histories[1].size(), 0);
    try {
        gpu_->next_token(*gpu_rows[1], sampler, {histories[1], generated});
        ADD_FAILURE() << "a row's logits outlived another sequence's forward call";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("another sequence ran a forward pass"), std::string::npos) << e.what();
    }
}

TEST_F(CudaEngineTest, SaveLoadThenContinueIsBitIdentical) {
    for (KvFormat kv : {KvFormat::f32, KvFormat::f16, KvFormat::kivi4}) {
        SCOPED_TRACE(std::string(kv_format_name(kv)));
        const std::vector<int32_t> prompt = byte_tokens(70, 2);
        const std::span<const int32_t> head(prompt.data(), prompt.size() - 1), last(&prompt.back(), 1);
        auto a = gpu_->new_sequence({.max_positions = 512, .kv_format = kv});
        gpu_->forward(*a, head);
        const StateImage image = a->save();
        gpu_->forward(*a, last);
        Sampler sa(sampled(7));
        const Continuation straight = continue_sequence(*gpu_, *a, sa, prompt, 300);

        auto b = gpu_->new_sequence({.max_positions = 512, .kv_format = kv});
        b->load(image);
        EXPECT_EQ(b->position(), int64_t(head.size()));
        gpu_->forward(*b, last);
        Sampler sb(sampled(7));
        const Continuation resumed = continue_sequence(*gpu_, *b, sb, prompt, 300);
        EXPECT_EQ(straight.tokens, resumed.tokens);
        EXPECT_TRUE(same_bits(straight.last_logits, resumed.last_logits));
    }
}

// A state image is backend-neutral: saved on the GPU, loaded on the CPU (and back), the next logits
// agree within rung 3's bound.
TEST_F(CudaEngineTest, StateImagesMoveBetweenBackends) {
    const std::vector<int32_t> prompt = byte_tokens(65, 3);
    const std::span<const int32_t> head(prompt.data(), 64), last(&prompt.back(), 1);
    auto g = gpu_->new_sequence({.max_positions = 256});
    gpu_->forward(*g, head);
    auto c = cpu_->new_sequence({.max_positions = 256});
    c->load(g->save());
    gpu_->forward(*g, last);
    cpu_->forward(*c, last);
    const std::vector<float> lg = gpu_->last_logits(*g), lc = cpu_->last_logits(*c);
    EXPECT_LE(max_abs_diff(lg, lc), kCrossBackendTolerance * max_abs(lc));

    auto g2 = gpu_->new_sequence({.max_positions = 256});
    g2->load(c->save());  // the CPU state now holds all 65 tokens
    const int32_t next[1] = {17};
    gpu_->forward(*g2, next);
    const std::vector<float> from_cpu_state = gpu_->last_logits(*g2);  // before g's forward reuses the buffer
    gpu_->forward(*g, next);
    EXPECT_THROW(gpu_->last_logits(*g2), Error);  // the engine's one logits buffer now holds g's
    EXPECT_LE(max_abs_diff(from_cpu_state, gpu_->last_logits(*g)), kCrossBackendTolerance * max_abs(lc));
}

// Checkpoint, run on, restore, run the same tokens again: bit-identical logits (the DeltaNet state came
// back exactly, and the KV beyond the checkpoint was cut).
TEST_F(CudaEngineTest, CheckpointRestoreIsExact) {
    for (KvFormat kv : {KvFormat::f32, KvFormat::f16, KvFormat::kivi4}) {
        SCOPED_TRACE(std::string(kv_format_name(kv)));
        // 200 tokens: kivi4 has quantised 32 positions (from 168), and the detours quantise more.
        const std::vector<int32_t> prompt = byte_tokens(200, 4), more = byte_tokens(30, 5), other = byte_tokens(40, 6);
        auto s = gpu_->new_sequence({.max_positions = 256, .kv_format = kv});
        gpu_->forward(*s, prompt);
        const StateCheckpoint cp = s->checkpoint();
        const std::vector<float> first = gpu_->forward_all(*s, more);
        s->restore(cp);
        EXPECT_EQ(s->position(), 200);
        gpu_->forward(*s, other);  // a different continuation overwrites the KV past 50
        s->restore(cp);
        EXPECT_TRUE(same_bits(first, gpu_->forward_all(*s, more)));
    }
}

// A session on the GPU: turn 2 reuses turn 1's prefix and generates exactly what a fresh session given
// the whole turn-2 prompt generates; a snapshot taken after turn 1 resumes to the same turn 2.
TEST_F(CudaEngineTest, SessionPrefixReuseAndSnapshotAreExact) {
    if (!fingerprint_available()) GTEST_SKIP() << "built without xxhash: no snapshots";
    GenerationOptions options;
    options.sampling = sampled(11);
    options.max_tokens = 150;
    for (KvFormat kv : {KvFormat::f32, KvFormat::f16, KvFormat::kivi4}) {
        SCOPED_TRACE(std::string(kv_format_name(kv)));
        const SessionOptions so{.sequence = {.max_positions = 1024, .kv_format = kv}, .checkpoints = {.interval = 64}};
        const std::vector<int32_t> turn1 = byte_tokens(90, 8);
        Session session(*gpu_, so);
        const TurnResult r1 = session.run_turn(turn1, options);
        const std::filesystem::path file =
            std::filesystem::temp_directory_path() / ("deltabit_cuda_session_" + std::to_string(::getpid()) + "_" +
                                                      std::string(kv_format_name(kv)) + ".snap");
        session.save(file);

        std::vector<int32_t> turn2 = turn1;  // the reply re-rendered, minus its last token, plus a new message
        turn2.insert(turn2.end(), r1.generation.tokens.begin(), r1.generation.tokens.end() - 1);
        const std::vector<int32_t> message = byte_tokens(25, 9);
        turn2.insert(turn2.end(), message.begin(), message.end());
        const TurnResult reused = session.run_turn(turn2, options);
        EXPECT_GT(reused.reuse.reused, int64_t(turn1.size()));

        Session fresh(*gpu_, so);
        const TurnResult recomputed = fresh.run_turn(turn2, options);
        EXPECT_EQ(recomputed.reuse.reused, 0);
        EXPECT_EQ(reused.generation.tokens, recomputed.generation.tokens);

        Session restored(*gpu_, so);
        restored.load(file);
        const TurnResult resumed = restored.run_turn(turn2, options);
        EXPECT_EQ(resumed.generation.tokens, reused.generation.tokens);
        std::filesystem::remove(file);
    }
}

// Plain greedy decoding runs one step ahead on the GPU (runtime/engine.h, "Running ahead"): generation
// that ends at an EOS leaves the sequence exactly where a run that never ran ahead leaves it — the same
// position and every state byte the same as a twin fed the same tokens one forward call at a time — and
// both continue to the same bits. So does a caller that feeds a token other than the one run ahead on.
TEST_F(CudaEngineTest, GreedyRunsAheadAndAnEosRewindsExactly) {
    const std::vector<int32_t> prompt = byte_tokens(200, 12);  // past 168: kivi4 has quantised
    for (KvFormat kv : {KvFormat::f32, KvFormat::f16, KvFormat::kivi4}) {
        SCOPED_TRACE(std::string(kv_format_name(kv)));
        const SequenceOptions so{.max_positions = 512, .kv_format = kv};
        // The greedy tokens of the fixture (no EOS in its metadata) pick the EOS: the token whose first
        // occurrence comes latest, so that many steps ran ahead before it.
        GenerationOptions free_run;
        free_run.sampling.temperature = 0.0f;
        free_run.max_tokens = 200;
        auto probe = gpu_->new_sequence(so);
        TokenLedger probe_ledger;
        const std::vector<int32_t> free_tokens = generate(*gpu_, *probe, probe_ledger, prompt, free_run).tokens;
        size_t first_use = 0;
        for (size_t i = 0; i < free_tokens.size(); ++i)
            if (std::find(free_tokens.begin(), free_tokens.begin() + i, free_tokens[i]) == free_tokens.begin() + i)
                first_use = i;  // the latest first occurrence so far
        ASSERT_GE(first_use, size_t(10)) << "the greedy run repeats too early to test anything";
        const int32_t eos = free_tokens[first_use];

        const std::shared_ptr<const Model> eos_model = test::with_eos(*model_, {eos});
        const std::unique_ptr<Engine> engine = make_cuda_engine(eos_model);
        auto seq = engine->new_sequence(so);
        TokenLedger ledger;
        GenerationOptions until_eos;
        until_eos.sampling.temperature = 0.0f;
        const GenerationResult r = generate(*engine, *seq, ledger, prompt, until_eos);
        EXPECT_EQ(r.finish, FinishReason::eos);
        ASSERT_EQ(r.tokens, std::vector<int32_t>(free_tokens.begin(), free_tokens.begin() + int64_t(first_use) + 1));
        const int64_t consumed = int64_t(prompt.size()) + int64_t(first_use);  // the EOS is not consumed
        EXPECT_EQ(seq->position(), consumed);
        EXPECT_EQ(int64_t(ledger.size()), consumed);
        const EngineCounters counters = engine->counters();
        EXPECT_GT(counters.run_ahead_steps, int64_t(first_use) - 5) << "greedy did not run ahead";

        // The twin: the same forward calls, no next_token, so nothing runs ahead.
        auto twin = engine->new_sequence(so);
        engine->forward(*twin, prompt);
        for (size_t i = 0; i < first_use; ++i) engine->forward(*twin, std::span(&r.tokens[i], 1));
        const StateImage a = seq->save(), b = twin->save();
        EXPECT_EQ(engine->counters().run_ahead_undone, counters.run_ahead_undone + 1) << "the EOS step was not undone";
        EXPECT_EQ(a.position, b.position);
        ASSERT_EQ(a.chunks.size(), b.chunks.size());
        for (size_t i = 0; i < a.chunks.size(); ++i)
            EXPECT_TRUE(a.chunks[i].bytes == b.chunks[i].bytes) << a.chunks[i].name << " differs from the twin's";
        // Both consume the EOS and go on greedily: the same tokens and logits, bit for bit. Then `seq` is
        // handed another token than the one it ran ahead on: the step is undone, the other token consumed.
        Sampler greedy_a(until_eos.sampling), greedy_b(until_eos.sampling), greedy_c(until_eos.sampling);
        std::vector<int32_t> history = prompt;
        history.insert(history.end(), r.tokens.begin(), r.tokens.end() - 1);
        engine->forward(*seq, std::span(&eos, 1));
        const Continuation on_a = continue_sequence(*engine, *seq, greedy_a, history, 30);
        const int32_t chosen = engine->next_token(*seq, greedy_c, {history, std::vector<uint8_t>(history.size(), 0)});
        const int32_t other = (chosen + 1) % int32_t(engine->config().n_vocab);
        const EngineCounters before_other = engine->counters();
        engine->forward(*seq, std::span(&other, 1));
        EXPECT_EQ(engine->counters().run_ahead_steps, before_other.run_ahead_steps);
        EXPECT_EQ(engine->counters().run_ahead_undone, before_other.run_ahead_undone + 1);
        const std::vector<float> after_other = engine->last_logits(*seq);

        engine->forward(*twin, std::span(&eos, 1));
        const Continuation on_b = continue_sequence(*engine, *twin, greedy_b, history, 30);
        engine->forward(*twin, std::span(&other, 1));
        EXPECT_EQ(on_a.tokens, on_b.tokens);
        EXPECT_TRUE(same_bits(on_a.last_logits, on_b.last_logits));
        EXPECT_TRUE(same_bits(after_other, engine->last_logits(*twin)));
    }
}

}  // namespace
}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
