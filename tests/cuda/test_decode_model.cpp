// The GPU decode path of CudaModel (models/model_cuda.h) at model level:
//   - graph replay = eager launches, byte for byte, over 256 greedy tokens (argmax on the GPU), and the
//     replay counter proves the graph ran (STYLE habit 16);
//   - save → load → continue, and checkpoint → restore → continue, byte-identical to an uninterrupted
//     run, for f32, f16 and kivi4 KV; the image's chunk layout; load() refusing bad images untouched;
//   - f16 KV against the CPU reference (f32 KV): argmax at decisive positions, the first attention
//     layer's cache exactly the RNE half of the f32 run's, DeltaNet states within a stated bound;
//   - kivi4 KV against the CPU's kivi4 over 600 tokens.
#include "models/fixture.h"

#if DELTABIT_HAVE_CUDA

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <span>

#include "core/error.h"
#include "core/half.h"
#include "cuda/decode_test_models.h"
#include "cuda/op_parity_cuda.h"
#include "models/model.h"
#include "models/model_cuda.h"
#include "models/sequence_state.h"
#include "sampling/sampler.h"

namespace deltabit {
namespace {

std::vector<float> download(const float* device, int64_t n) {
    std::vector<float> host(static_cast<size_t>(n));
    // The legacy-stream copy waits for the model's (blocking) stream.
    cuda::cuda_check(cudaMemcpy(host.data(), device, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost), "download");
    return host;
}

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

constexpr int64_t kGreedy = 256;

class DecodeModel : public ::testing::TestWithParam<std::string> {};

// GetParam(): "<fixture>" (plain weights) or "<fixture>+q1" (matrices as Q1_0, the int8 GEMV path).
Model param_model(const std::string& p) {
    const bool q1 = p.ends_with("+q1");
    return test::load_fixture_model(q1 ? p.substr(0, p.size() - 3) : p, q1);
}
std::string param_fixture(const std::string& p) { return p.ends_with("+q1") ? p.substr(0, p.size() - 3) : p; }

bool has_moe(const ModelConfig& c) { return std::find(c.layer_is_moe.begin(), c.layer_is_moe.end(), true) != c.layer_is_moe.end(); }

// Greedy decoding after `prompt` on two models in lock step (sequence sa of model a, sb of b), `steps` tokens:
// the logits after the prompt and after every token byte-identical, each GPU argmax the sampler's rule.
void expect_lockstep_greedy(CudaModel& a, CudaSequenceState& sa, CudaModel& b, CudaSequenceState& sb,
                            const std::vector<int32_t>& prompt, int64_t steps) {
    const int64_t V = a.config().n_vocab;
    const float* pa = a.forward_last(sa, prompt);
    const float* pb = b.forward_last(sb, prompt);
    for (int64_t step = 0;; ++step) {
        const std::vector<float> la = download(pa, V), lb = download(pb, V);
        ASSERT_TRUE(same_bytes(la, lb)) << "logits differ after greedy step " << step;
        const int32_t ia = a.argmax(pa), ib = b.argmax(pb);
        ASSERT_EQ(ia, argmax_lowest_id(la)) << "GPU argmax vs the sampler's rule at step " << step;
        ASSERT_EQ(ia, ib) << step;
        if (step == steps) break;
        pa = a.forward_last(sa, std::span(&ia, 1));
        pb = b.forward_last(sb, std::span(&ib, 1));
    }
}

TEST_P(DecodeModel, GraphReplayIsByteIdenticalToEagerOver256GreedyTokens) {
    DELTABIT_REQUIRE_GPU();
    const Model cpu = param_model(GetParam());
    const test::Fixture f = test::load_fixture(param_fixture(GetParam()));
    CudaModel graphed(cpu), eager(cpu);
    eager.set_decode_graphs(false);
    CudaSequenceState a = graphed.new_sequence(512), b = eager.new_sequence(512);
    const std::vector<int32_t>& prompt = f.cases.at(1).tokens;
    expect_lockstep_greedy(graphed, a, eager, b, prompt, kGreedy);
    if (HasFatalFailure()) return;
    const CudaDecodeStats g = graphed.decode_stats(), e = eager.decode_stats();
    std::printf("[ decode ] %-22s graphed: %lld captures, %lld replays, %lld eager; eager model: %lld eager steps\n",
                GetParam().c_str(), (long long)g.graph_captures, (long long)g.graph_replays, (long long)g.eager_steps,
                (long long)e.eager_steps);
    EXPECT_EQ(e.graph_replays, 0);
    EXPECT_EQ(e.eager_steps, kGreedy);
    // MoE layers run on the device end to end (ops/moe/moe_experts_cuda.h), so they are captured like the rest.
    if (has_moe(cpu.config())) EXPECT_GT(e.moe_grouped_calls, 0);
    // The first step of the sequence runs eagerly (it sizes the decode arena), every later one replays:
    // two graphs, one per copy of the DeltaNet states (each step reads one and writes the other).
    EXPECT_EQ(g.eager_steps, 1);
    EXPECT_EQ(g.graph_captures, 2);
    EXPECT_EQ(g.graph_replays, kGreedy - 1);
    // A sequence of another capacity (another split count: 128 instead of 8) captures its own graphs in
    // the same decode arena and replays them from its first step.
    CudaSequenceState big = graphed.new_sequence(40000);
    const float* pbig = graphed.forward_last(big, prompt);
    for (int i = 0; i < 3; ++i) {
        const int32_t id = graphed.argmax(pbig);
        pbig = graphed.forward_last(big, std::span(&id, 1));
    }
    EXPECT_EQ(graphed.decode_stats().graph_captures, 4);
    EXPECT_EQ(graphed.decode_stats().graph_replays, kGreedy - 1 + 3);
    EXPECT_EQ(graphed.decode_stats().eager_steps, 1);
}

// CudaModel::set_rope_table: the step's rope angles computed once and read by every attention prologue (the
// default) give the logits of each prologue thread forming its own, byte for byte, graph replays included.
TEST_P(DecodeModel, RopeTableIsByteIdenticalToPerThreadAngles) {
    DELTABIT_REQUIRE_GPU();
    const Model cpu = param_model(GetParam());
    const test::Fixture f = test::load_fixture(param_fixture(GetParam()));
    CudaModel own(cpu), tabled(cpu);
    own.set_rope_table(false);
    tabled.set_rope_table(true);
    CudaSequenceState a = own.new_sequence(512), b = tabled.new_sequence(512);
    constexpr int64_t kSteps = 64;
    expect_lockstep_greedy(own, a, tabled, b, f.cases.at(1).tokens, kSteps);
    EXPECT_EQ(tabled.decode_stats().graph_replays, kSteps - 1);
}

// Feeds `tokens` one at a time; the logits after each.
std::vector<std::vector<float>> continue_with(CudaModel& gpu, CudaSequenceState& s, const std::vector<int32_t>& tokens) {
    std::vector<std::vector<float>> out;
    for (const int32_t t : tokens) out.push_back(download(gpu.forward_last(s, std::span(&t, 1)), gpu.config().n_vocab));
    return out;
}

TEST_P(DecodeModel, SaveLoadAndCheckpointRestoreContinueByteIdentical) {
    DELTABIT_REQUIRE_GPU();
    const Model cpu = param_model(GetParam());
    const test::Fixture f = test::load_fixture(param_fixture(GetParam()));
    const ModelConfig& c = cpu.config();
    CudaModel gpu(cpu);
    // 300 prompt tokens: past kivi4's first quantised block (position 168), so its codes are saved,
    // loaded and restored too.
    std::vector<int32_t> prompt;
    while (prompt.size() < 300)
        for (const test::FixtureCase& fc : f.cases) prompt.insert(prompt.end(), fc.tokens.begin(), fc.tokens.end());
    prompt.resize(300);
    for (const KvFormat kv : {KvFormat::f32, KvFormat::f16, KvFormat::kivi4}) {
        const std::string what = std::string(kv_format_name(kv));
        CudaSequenceState s = gpu.new_sequence(512, kv);
        ASSERT_EQ(s.kv_format(), kv);
        // A prompt (chunked path) then 12 greedy steps (eager first, then graph replays).
        const float* p = gpu.forward_last(s, prompt);
        for (int i = 0; i < 12; ++i) {
            const int32_t id = gpu.argmax(p);
            p = gpu.forward_last(s, std::span(&id, 1));
        }
        const StateImage image = s.save();
        EXPECT_EQ(image.position, s.position());
        EXPECT_EQ(image.kv_format, kv);
        // Layout: per layer, attn.k/attn.v of position rows, or gdn.conv/gdn.recurrent in f32.
        const size_t elem = kv == KvFormat::f16 ? 2 : 4;
        size_t n_chunks = 0;
        for (int64_t l = 0; l < c.n_layer(); ++l) {
            const std::string blk = "blk." + std::to_string(l) + ".";
            auto find = [&](const std::string& name) -> const StateChunk* {
                for (const StateChunk& ch : image.chunks)
                    if (ch.name == name) return &ch;
                return nullptr;
            };
            if (c.layers[size_t(l)] == LayerKind::full_attention) {
                const KvFormat layer_kv = layer_kv_format(c, kv, l);
                if (layer_kv == KvFormat::kivi4) {  // five chunks per side (models/kv_cache.h), checked below
                    n_chunks += 10;
                    continue;
                }
                for (const char* part : {"attn.k", "attn.v"}) {
                    const StateChunk* ch = find(blk + part);
                    ASSERT_NE(ch, nullptr) << what << " " << blk << part;
                    EXPECT_EQ(ch->bytes.size(),
                              size_t(image.position * c.n_head_kv * c.head_dim) * (layer_kv == KvFormat::f16 ? 2 : elem))
                        << blk << part;
                    ++n_chunks;
                }
            } else {
                const StateChunk* conv = find(blk + "gdn.conv");
                const StateChunk* rec = find(blk + "gdn.recurrent");
                ASSERT_TRUE(conv != nullptr && rec != nullptr) << what << " " << blk;
                EXPECT_EQ(conv->bytes.size(), size_t((c.ssm_conv_kernel - 1) * c.ssm_conv_channels()) * 4);
                EXPECT_EQ(rec->bytes.size(), size_t(c.ssm_n_value_heads * c.ssm_key_dim * c.ssm_value_dim) * 4);
                n_chunks += 2;
            }
        }
        EXPECT_EQ(image.chunks.size(), n_chunks);
        // Names, order and sizes exactly the CPU SequenceState's (models/sequence_state.h), and a CPU
        // image of the same position loads here.
        const std::vector<StateChunkSpec> cpu_layout = state_image_layout(c, kv, image.position);
        ASSERT_EQ(cpu_layout.size(), image.chunks.size());
        for (size_t i = 0; i < cpu_layout.size(); ++i) {
            EXPECT_EQ(image.chunks[i].name, cpu_layout[i].name) << i;
            EXPECT_EQ(image.chunks[i].bytes.size(), cpu_layout[i].bytes) << cpu_layout[i].name;
        }
        {
            SequenceState cpu_state(c, kv);
            const std::vector<int32_t> ids(size_t(image.position), 1);
            cpu.forward(cpu_state, ids);
            CudaSequenceState from_cpu = gpu.new_sequence(512, kv);
            EXPECT_NO_THROW(from_cpu.load(cpu_state.save())) << what;
            EXPECT_EQ(from_cpu.position(), image.position);
        }

        // The uninterrupted run: 40 more greedy tokens.
        std::vector<int32_t> tokens;
        std::vector<std::vector<float>> uninterrupted;
        for (int i = 0; i < 40; ++i) {
            const int32_t id = gpu.argmax(p);
            tokens.push_back(id);
            p = gpu.forward_last(s, std::span(&id, 1));
            uninterrupted.push_back(download(p, c.n_vocab));
        }
        // A fresh state loaded from the image continues identically.
        CudaSequenceState loaded = gpu.new_sequence(512, kv);
        loaded.load(image);
        EXPECT_EQ(loaded.position(), image.position);
        const auto resumed = continue_with(gpu, loaded, tokens);
        for (size_t i = 0; i < tokens.size(); ++i)
            ASSERT_TRUE(same_bytes(resumed[i], uninterrupted[i])) << what << ": loaded state, token " << i;
        // Checkpoint at the image's position, run ahead on other tokens, restore, continue identically.
        CudaSequenceState branch = gpu.new_sequence(512, kv);
        branch.load(image);
        const StateCheckpoint cp = branch.checkpoint();
        EXPECT_EQ(cp.position, image.position);
        std::vector<int32_t> detour(tokens.rbegin(), tokens.rend());
        continue_with(gpu, branch, detour);
        branch.restore(cp);
        EXPECT_EQ(branch.position(), image.position);
        const auto restored = continue_with(gpu, branch, tokens);
        for (size_t i = 0; i < tokens.size(); ++i)
            ASSERT_TRUE(same_bytes(restored[i], uninterrupted[i])) << what << ": restored checkpoint, token " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DecodeModel,
                         ::testing::Values("qwen3_5_float", "qwen3_5_binary+q1", "qwen3_binary+q1", "qwen3_next_float",
                                           "qwen3_5_moe_float", "qwen3_5_moe_binary+q1"),
                         [](const auto& info) {
                             std::string n = info.param;
                             std::replace(n.begin(), n.end(), '+', '_');
                             return n;
                         });

bool same_image(const StateImage& a, const StateImage& b) {
    if (a.position != b.position || a.kv_format != b.kv_format || a.chunks.size() != b.chunks.size()) return false;
    for (size_t i = 0; i < a.chunks.size(); ++i)
        if (a.chunks[i].name != b.chunks[i].name || a.chunks[i].bytes != b.chunks[i].bytes) return false;
    return true;
}

TEST(DecodeState, LoadAndRestoreRefuseBadInputsUntouched) {
    DELTABIT_REQUIRE_GPU();
    const Model cpu = Model::load(test::fixtures_dir() / "qwen3_5_float");
    CudaModel gpu(cpu);
    CudaSequenceState s = gpu.new_sequence(64);
    const int32_t prompt[] = {1, 2, 3, 4, 5, 6, 7};
    gpu.forward(s, prompt);
    const StateImage good = s.save();
    CudaSequenceState target = gpu.new_sequence(64);
    gpu.forward(target, std::span(prompt, 3));
    const StateImage before = target.save();

    auto refused = [&](StateImage bad, const std::string& needle, const char* what) {
        try {
            target.load(bad);
            ADD_FAILURE() << what << ": load accepted a bad image";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << what << ": " << e.what();
        }
        EXPECT_TRUE(same_image(target.save(), before)) << what << ": the state changed";
    };
    StateImage bad = good;
    bad.kv_format = KvFormat::f16;
    refused(bad, "f16", "kv format");
    bad = good;
    bad.position = 65;
    refused(bad, "65", "position past capacity");
    bad = good;
    const std::string dropped = bad.chunks.back().name;
    bad.chunks.pop_back();
    refused(bad, dropped, "missing chunk");
    bad = good;
    bad.chunks.front().bytes.pop_back();
    refused(bad, bad.chunks.front().name, "short chunk");
    bad = good;
    bad.chunks.push_back({"blk.99.attn.k", {}});
    refused(bad, "blk.99.attn.k", "unknown chunk");
    bad = good;
    bad.chunks.push_back(bad.chunks.front());
    refused(bad, bad.chunks.front().name, "duplicate chunk");
    // A checkpoint ahead of the sequence cannot be restored (its KV prefix is not there).
    const StateCheckpoint ahead = s.checkpoint();
    EXPECT_THROW(target.restore(ahead), Error);
    EXPECT_TRUE(same_image(target.save(), before));
}

// Over rows of `vocab` logits: the rows where the reference's top-1 leads its runner-up by more than
// `margin` (decisive), and of those, the rows where `got` picks another top-1.
void count_decisive_argmax(const std::vector<float>& want, const std::vector<float>& got, int64_t vocab,
                           double margin, int64_t& decisive, int64_t& mismatches) {
    for (size_t r = 0; r * size_t(vocab) < want.size(); ++r) {
        const std::span<const float> w(want.data() + r * size_t(vocab), size_t(vocab));
        const std::span<const float> g(got.data() + r * size_t(vocab), size_t(vocab));
        const int32_t top = argmax_lowest_id(w);
        double second = -INFINITY;
        for (size_t i = 0; i < w.size(); ++i)
            if (int32_t(i) != top) second = std::max(second, double(w[i]));
        if (double(w[size_t(top)]) - second <= margin) continue;
        ++decisive;
        if (argmax_lowest_id(g) != top) ++mismatches;
    }
}

// f16 KV against the CPU reference (f32 KV), float fixtures.
//  - argmax: identical wherever the CPU's top-1 − top-2 gap exceeds 2·(1e-2·max|logit|). Half rounding
//    moves each cached value by ≤ 2^-11 relative (4.9e-4); a score moves by at most that times
//    Σ|q·k|/sqrt(d) and each attention output by ≤ 2·that·max|v|; through the fixtures' 4–8 layers and
//    the final projection this stays within 20× the per-value rounding, 1e-2 of max|logit|.
//  - the first full-attention layer's cache: its inputs do not depend on the KV format (only DeltaNet
//    layers or the embedding come before), so its f16 rows must be exactly the RNE halves of the f32 run's.
//  - DeltaNet states (f16 run vs f32 run on the GPU): max|Δ| ≤ 1e-2·max|state|, by the same argument.
class DecodeF16Kv : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeF16Kv, MatchesCpuReferenceWithinHalfRounding) {
    DELTABIT_REQUIRE_GPU();
    const test::Fixture f = test::load_fixture(GetParam());
    Model cpu = Model::load(f.dir);
    const ModelConfig& c = cpu.config();
    CudaModel gpu(cpu);
    const double tol = 1e-2 * f.max_abs_logit;
    for (const std::string mode : {"steps", "prompt"}) {
        double max_diff = 0;
        int64_t decisive = 0, mismatches = 0;
        for (const test::FixtureCase& fc : f.cases) {
            SequenceState cs = cpu.new_sequence();
            CudaSequenceState gs = gpu.new_sequence(512, KvFormat::f16);
            const std::vector<float> want = test::feed_in_mode(cpu, cs, mode, fc);
            const std::vector<float> got = test::feed_in_mode(gpu, gs, mode, fc);
            ASSERT_EQ(got.size(), want.size());
            for (size_t i = 0; i < got.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(got[i]) - want[i]));
            count_decisive_argmax(want, got, f.vocab, 2 * tol, decisive, mismatches);
        }
        std::printf("[ decode ] %-22s f16 KV %-6s max|dlogit| vs cpu f32 %.3e (%.2e of max|logit|); argmax differs at "
                    "%lld of %lld decisive positions\n",
                    f.name.c_str(), mode.c_str(), max_diff, max_diff / f.max_abs_logit, (long long)mismatches,
                    (long long)decisive);
        EXPECT_EQ(mismatches, 0) << mode;
    }

    // The same prompt with f32 and f16 caches on the GPU.
    const std::vector<int32_t>& prompt = f.cases.back().tokens;
    CudaSequenceState s32 = gpu.new_sequence(512, KvFormat::f32), s16 = gpu.new_sequence(512, KvFormat::f16);
    gpu.forward_last(s32, prompt);
    gpu.forward_last(s16, prompt);
    const StateImage i32 = s32.save(), i16 = s16.save();
    ASSERT_EQ(i32.chunks.size(), i16.chunks.size());
    const int64_t first_attention = std::find(c.layers.begin(), c.layers.end(), LayerKind::full_attention) - c.layers.begin();
    double state_diff = 0, state_max = 0;
    for (size_t ch = 0; ch < i32.chunks.size(); ++ch) {
        const StateChunk& a = i32.chunks[ch];
        const StateChunk& b = i16.chunks[ch];
        ASSERT_EQ(a.name, b.name);
        const std::string first = "blk." + std::to_string(first_attention) + ".attn.";
        if (a.name.starts_with(first)) {
            ASSERT_EQ(b.bytes.size() * 2, a.bytes.size()) << a.name;
            for (size_t i = 0; i < b.bytes.size() / 2; ++i) {
                float x;
                uint16_t h;
                std::memcpy(&x, a.bytes.data() + 4 * i, 4);
                std::memcpy(&h, b.bytes.data() + 2 * i, 2);
                ASSERT_EQ(h, float_to_half(x)) << a.name << " element " << i;
            }
        } else if (a.name.ends_with("gdn.conv") || a.name.ends_with("gdn.recurrent")) {
            for (size_t i = 0; i < a.bytes.size() / 4; ++i) {
                float x, y;
                std::memcpy(&x, a.bytes.data() + 4 * i, 4);
                std::memcpy(&y, b.bytes.data() + 4 * i, 4);
                state_diff = std::max(state_diff, std::fabs(double(x) - y));
                state_max = std::max(state_max, std::fabs(double(x)));
            }
        }
    }
    std::printf("[ decode ] %-22s f16 vs f32 KV: DeltaNet state max|d| %.3e of max|state| %.3e\n", f.name.c_str(),
                state_diff, state_max);
    EXPECT_LE(state_diff, 1e-2 * state_max);
}

// kivi4 KV on the GPU against kivi4 on the CPU (the reference), float fixtures, 600 tokens: a 300-token
// prompt (one call on both), then 300 single steps, so the cache quantises during prompts and decode.
// Both quantise the same way (tests/cuda/test_decode_kernels.cpp checks codes byte for byte); their
// inputs differ by the backends' rounding, which can move a value across a code boundary now and then —
// one level is (max − min)/15 of its group. The check is the f16 test's: argmax identical wherever the
// CPU's top-1 − top-2 gap exceeds 2·(1e-2·max|logit|). And the GPU's kivi4 run must differ from its f32
// run (else nothing was quantised).
class DecodeKivi4Kv : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeKivi4Kv, MatchesCpuKivi4) {
    DELTABIT_REQUIRE_GPU();
    const test::Fixture f = test::load_fixture(GetParam());
    const Model cpu = Model::load(f.dir);
    CudaModel gpu(cpu);
    const int64_t V = f.vocab;
    std::mt19937 rng(606);
    std::vector<int32_t> ids(600);
    for (int32_t& id : ids) id = int32_t(rng() % uint32_t(V));
    const std::span<const int32_t> prompt(ids.data(), 300);

    SequenceState cs = cpu.new_sequence(KvFormat::kivi4);
    CudaSequenceState gs = gpu.new_sequence(1024, KvFormat::kivi4), g32 = gpu.new_sequence(1024, KvFormat::f32);
    std::vector<float> want = cpu.forward(cs, prompt), got = gpu.forward(gs, prompt), f32 = gpu.forward(g32, prompt);
    want.erase(want.begin(), want.end() - V);  // the prompt's last row only
    got.erase(got.begin(), got.end() - V);
    f32.erase(f32.begin(), f32.end() - V);
    for (size_t t = 300; t < ids.size(); ++t) {
        const std::span<const int32_t> one(&ids[t], 1);
        for (auto [rows, step] : {std::pair{&want, cpu.forward(cs, one)}, std::pair{&got, gpu.forward(gs, one)},
                                  std::pair{&f32, gpu.forward(g32, one)}})
            rows->insert(rows->end(), step.begin(), step.end());
    }
    const double tol = 1e-2 * f.max_abs_logit;
    double max_diff = 0, diff_f32 = 0;
    int64_t decisive = 0, mismatches = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        max_diff = std::max(max_diff, std::fabs(double(got[i]) - want[i]));
        diff_f32 = std::max(diff_f32, std::fabs(double(got[i]) - f32[i]));
    }
    count_decisive_argmax(want, got, V, 2 * tol, decisive, mismatches);
    std::printf("[ decode ] %-22s kivi4 GPU vs CPU kivi4: max|dlogit| %.3e (%.2e of max|logit|), vs GPU f32 %.3e; "
                "argmax differs at %lld of %lld decisive positions\n",
                f.name.c_str(), max_diff, max_diff / f.max_abs_logit, diff_f32, (long long)mismatches,
                (long long)decisive);
    EXPECT_EQ(mismatches, 0);
    EXPECT_GT(decisive, 100);
    EXPECT_GT(diff_f32, max_diff) << "kivi4 on the GPU is no further from f32 than from the CPU's kivi4";
}

std::vector<std::string> float_fixtures() {
    std::vector<std::string> out;
    for (const std::string& n : test::fixture_names())
        if (n.ends_with("_float")) out.push_back(n);
    return out;
}
INSTANTIATE_TEST_SUITE_P(Fixtures, DecodeF16Kv, ::testing::ValuesIn(float_fixtures()),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Fixtures, DecodeKivi4Kv, ::testing::ValuesIn(float_fixtures()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
