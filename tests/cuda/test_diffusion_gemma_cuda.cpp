// DiffusionGemma on the GPU (models/diffusion_gemma_cuda.h) against transformers and against the CPU
// reference (models/diffusion_gemma.h): the committed fixture's forward script replayed as
// tests/models/test_diffusion_gemma.cpp replays it on the CPU; every named intermediate and the logits
// against the CPU's on the fixture's model and on a model of the released checkpoint's head geometry; the
// cache rules (sliding windows, capacity, bad ids, a decoder that writes nothing); the steady state
// allocating nothing. Skips cleanly without a GPU.
//
// Bounds, fixed before the first GPU run (none is picked from a run):
//  - kBound = 1e-4, relative: logits to max|logit| of the call, a cached K or V tensor, or a named
//    intermediate, to the largest |value| of that tensor in the reference. Why: with plain-float weights
//    (the fixture's are BF16 holding the fp32 model's values exactly, read exactly by both paths) the GPU
//    computes the same formula as the CPU and as transformers in fp32, in another summation order; the CPU
//    sums in double. One fp32 dot of K terms errs by at most K·u (u = 2^-24) of Σ|x·w| and typically by
//    √K·u; the fixture's widest K is 128 (7.6e-6 worst, 6.7e-7 typical), the head-geometry model's 8192
//    (o_proj over 16 heads of 512: 5.4e-6 typical). Some 60 ops run in sequence from the embedding to the
//    logits (5 layers of ~11 normed ops, self-conditioning, the head); the norms keep errors relative, so
//    they add, in quadrature for independent roundings: ~5e-6 (fixture) and ~4e-5 (head geometry) —
//    below 1e-4, the rung-2 bound the CPU is held to against transformers (DESIGN.md §6). The fixture
//    itself shows what another fp32 order does: its "history in one call vs in pieces" self-check moved
//    logits by 2.7e-5 = 1.7e-6 · max|logit|; and the CPU reference (double sums) sits 9.6e-6 · max|logit|
//    from transformers' fp32 logits (tests/models/test_diffusion_gemma.cpp's printed parity line).
//  - Expert choice cannot flip on those roundings where the router's top-k margin is far wider: the
//    fixture records its smallest, 2.1e-4 (~100× the router logits' rounding). The random models'
//    margins are not known; a flip would show as a failure far past the bound, named by layer.
//  - Argmax: equal to the reference's wherever its top-1 leads the runner-up by more than 2·kBound·max|logit|
//    (two logits each within the bound cannot swap); elsewhere it may differ.
//  - Everything about the cache that is not arithmetic — rows kept, first positions, lengths, bytes left
//    alone by a refused call or by the decoder, allocation counts — is exact.
#include "models/diffusion_fixture.h"
#include "models/diffusion_gemma_folder.h"

#if DELTABIT_HAVE_CUDA

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda_buffer.h"
#include "core/error.h"
#include "models/diffusion_gemma.h"
#include "models/diffusion_gemma_cuda.h"
#include "models/model.h"
#include "op_parity_cuda.h"

namespace deltabit {
namespace {

namespace fs = std::filesystem;

constexpr double kBound = 1e-4;  // relative; see the header comment

// One folder per process: ctest runs each test in its own process, in parallel.
fs::path folder(const std::string& name) {
    return fs::temp_directory_path() / ("deltabit_test_dg_cuda_" + std::to_string(::getpid()) + "_" + name);
}

// The GPU model as test::replay_forward_script's backend.
struct GpuBackend {
    DiffusionGemmaCuda& gpu;
    int64_t capacity;
    DiffusionCacheCuda new_cache() const { return gpu.new_cache(capacity); }
    void encode(DiffusionCacheCuda& cache, std::span<const int32_t> ids) const { gpu.encode(cache, ids); }
    int64_t length(const DiffusionCacheCuda& cache) const { return cache.length; }
    int64_t rows(const DiffusionCacheCuda& cache, int64_t l) const { return cache.layers[size_t(l)].rows; }
    std::vector<float> k(const DiffusionCacheCuda& cache, int64_t l) const { return cache.download_k(l); }
    std::vector<float> v(const DiffusionCacheCuda& cache, int64_t l) const { return cache.download_v(l); }
    std::vector<float> denoise(const DiffusionCacheCuda& cache, std::span<const int32_t> canvas,
                               std::span<const float> sc) const {
        return gpu.denoise(cache, canvas, sc);
    }
};

// max|got − want| / max|want| (0 for an all-zero want equal to got).
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
    EXPECT_EQ(got.size(), want.size());
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
        worst = std::max(worst, std::abs(double(got[i]) - double(want[i])));
        scale = std::max(scale, std::abs(double(want[i])));
    }
    return scale > 0.0 ? worst / scale : worst;
}

// The CPU model, its DiffusionGemma and the GPU copy of a model folder.
struct Pair {
    Model cpu_model;
    DiffusionGemma cpu;
    DiffusionGemmaCuda gpu;  // after cpu_model: built from it
    explicit Pair(const fs::path& dir) : cpu_model(Model::load(dir)), cpu(cpu_model), gpu(cpu_model) {}
    const ModelConfig& config() const { return cpu.config(); }
};

// The GPU cache's kept rows against the CPU's: rows and first position exactly, K and V within the bound.
void expect_same_cache(const DiffusionCacheCuda& gpu, const DiffusionCache& cpu, const std::string& where) {
    ASSERT_EQ(gpu.layers.size(), cpu.layers.size()) << where;
    EXPECT_EQ(gpu.length, cpu.length) << where;
    for (size_t l = 0; l < cpu.layers.size(); ++l) {
        const DiffusionCache::Layer& want = cpu.layers[l];
        const DiffusionCacheCuda::Layer& got = gpu.layers[l];
        ASSERT_EQ(got.rows, want.rows) << where << " layer " << l;
        EXPECT_EQ(got.first_position, want.first_position) << where << " layer " << l;
        EXPECT_LE(relative_error(gpu.download_k(int64_t(l)), want.k), kBound) << where << " layer " << l << " k";
        EXPECT_LE(relative_error(gpu.download_v(int64_t(l)), want.v), kBound) << where << " layer " << l << " v";
    }
}

// Every layer's kept K and V bytes, for "nothing changed".
std::vector<std::vector<float>> cache_contents(const DiffusionCacheCuda& cache) {
    std::vector<std::vector<float>> out;
    for (size_t l = 0; l < cache.layers.size(); ++l) {
        out.push_back(cache.download_k(int64_t(l)));
        out.push_back(cache.download_v(int64_t(l)));
    }
    return out;
}
struct CacheShape {
    int64_t length;
    std::vector<int64_t> rows, first;
    bool operator==(const CacheShape&) const = default;
};
CacheShape shape_of(const DiffusionCacheCuda& cache) {
    CacheShape s{cache.length, {}, {}};
    for (const auto& layer : cache.layers) {
        s.rows.push_back(layer.rows);
        s.first.push_back(layer.first_position);
    }
    return s;
}

// Every name an observer was handed, its values concatenated over the calls, and how often.
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

// The GPU hands out exactly the CPU's names, as often, each within the bound of the CPU's values.
void expect_same_intermediates(const Dump& got, const Dump& want, const std::string& where) {
    ASSERT_FALSE(want.values.empty()) << where;
    EXPECT_EQ(got.calls, want.calls) << where << ": the GPU hands out other names, or as often";
    for (const auto& [name, reference] : want.values) {
        const auto at = got.values.find(name);
        if (at == got.values.end()) continue;  // reported by the comparison of the calls above
        ASSERT_EQ(at->second.size(), reference.size()) << where << " " << name;
        EXPECT_LE(relative_error(at->second, reference), kBound) << where << " " << name;
    }
}

// The temperature-scaled logits of a step, as the generation loop feeds them back (reference §3.1).
std::vector<float> scaled(const std::vector<float>& logits, float temperature) {
    std::vector<float> out(logits.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = logits[i] / temperature;
    return out;
}

// ---- (a) the transformers fixture ----

TEST(DiffusionGemmaCudaFixture, EncoderCacheAndDecoderLogitsMatchTransformers) {
    DELTABIT_REQUIRE_GPU();
    if (!test::diffusion_fixture_present()) GTEST_SKIP() << "no DiffusionGemma fixture";
    const fs::path dir = test::diffusion_fixture_dir();
    const Model model = Model::load(dir);
    DiffusionGemmaCuda gpu(model);
    GpuBackend backend{gpu, 64};
    const double max_logit = test::DiffusionReference(dir).meta().at("max_abs_logit").get<double>();
    const test::ScriptReplay r = test::replay_forward_script(dir, backend, model.config().n_layer(),
                                                             model.config().n_vocab, 2 * kBound * max_logit);
    EXPECT_TRUE(r.problems.empty()) << r.problems.front();
    EXPECT_LE(r.worst_logit, kBound) << "at " << r.worst_logit_at;
    EXPECT_LE(r.worst_kv, kBound) << "at " << r.worst_kv_at;
    EXPECT_EQ(r.argmax_mismatches, 0) << "of " << r.argmax_checked << " decisive positions";
    EXPECT_GE(r.encodes, 3);
    EXPECT_GE(r.decodes, 5);
    EXPECT_GT(r.argmax_checked, 0);
    std::printf("[ parity ] diffusion_gemma cuda  %lld encoder calls, %lld decoder calls, max|dlogit| %.2g of "
                "max|logit| (at %s), max|dKV| %.2g (at %s), %lld decisive argmaxes\n",
                static_cast<long long>(r.encodes), static_cast<long long>(r.decodes), r.worst_logit,
                r.worst_logit_at.c_str(), r.worst_kv, r.worst_kv_at.c_str(), static_cast<long long>(r.argmax_checked));
}

// ---- (b) the CPU's named intermediates and logits ----

// The fixture's first encoder call, then its first canvas without and with self-conditioning, observed on
// both backends.
TEST(DiffusionGemmaCudaFixture, EveryNamedIntermediateMatchesTheCpu) {
    DELTABIT_REQUIRE_GPU();
    if (!test::diffusion_fixture_present()) GTEST_SKIP() << "no DiffusionGemma fixture";
    const fs::path dir = test::diffusion_fixture_dir();
    const test::DiffusionReference ref(dir);
    Pair p(dir);
    const nlohmann::json& script = ref.meta().at("forward");
    const std::vector<int32_t> prompt = ref.ints(script.at(0).at("ids"));
    std::vector<int32_t> canvas;
    for (const nlohmann::json& op : script)
        if (op.at("op") == "decode") {
            canvas = ref.ints(op.at("canvas"));
            break;
        }
    ASSERT_FALSE(canvas.empty());

    DiffusionCache cpu_cache = p.cpu.new_cache();
    DiffusionCacheCuda gpu_cache = p.gpu.new_cache(64);
    Dump want, got;
    const ActivationObserver want_observer = want.observer(), got_observer = got.observer();
    p.cpu.encode(cpu_cache, prompt, &want_observer);
    p.gpu.encode(gpu_cache, prompt, &got_observer);
    expect_same_intermediates(got, want, "encode");
    expect_same_cache(gpu_cache, cpu_cache, "encode");

    for (const bool self_conditioned : {false, true}) {
        const char* where = self_conditioned ? "denoise (self-conditioned)" : "denoise (step 1)";
        const std::vector<float> previous = p.cpu.denoise(cpu_cache, canvas);
        const std::vector<float> sc = self_conditioned ? scaled(previous, 0.8f) : std::vector<float>{};
        Dump want_step, got_step;
        const ActivationObserver w = want_step.observer(), g = got_step.observer();
        const std::vector<float> cpu_logits = p.cpu.denoise(cpu_cache, canvas, sc, &w);
        const std::vector<float> gpu_logits = p.gpu.denoise(gpu_cache, canvas, sc, &g);
        expect_same_intermediates(got_step, want_step, where);
        EXPECT_EQ(want_step.calls.count("self_conditioning"), self_conditioned ? 1u : 0u) << where;
        EXPECT_LE(relative_error(gpu_logits, cpu_logits), kBound) << where;
    }
}

// The released checkpoint's head geometry (16 query heads; sliding layers 8 kv heads of 256, full layers
// 2 of 512 with proportional RoPE on 64 pairs) on a small random model: the attention kernel's widest
// heads and groups of 2 and 8 query heads per kv head, a window shorter than the prompt, top-4 of 8 experts.
TEST(DiffusionGemmaCuda, HeadGeometryOfTheCheckpointMatchesTheCpu) {
    DELTABIT_REQUIRE_GPU();
    test::TinyDiffusionGemma tiny;
    tiny.vocab = 300;
    tiny.hidden = 128;
    tiny.ff = 96;
    tiny.heads = 16;
    tiny.kv_heads = 8;
    tiny.head_dim = 256;
    tiny.full_head_dim = 512;
    tiny.full_kv_heads = 2;
    tiny.experts = 8;
    tiny.top_k = 4;
    tiny.expert_ff = 32;
    tiny.window = 9;
    tiny.canvas = 16;
    tiny.layer_types = {"sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention"};
    const fs::path dir = folder("geometry");
    tiny.write(dir);
    Pair p(dir);
    ASSERT_EQ(p.config().layer_attention[2].rope_pairs, 64);  // int(0.25 · 512 / 2)

    std::vector<int32_t> prompt(40), canvas(16), block(16);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 37 + 11) % 300);
    for (size_t i = 0; i < canvas.size(); ++i) canvas[i] = int32_t((i * 53 + 5) % 300);
    for (size_t i = 0; i < block.size(); ++i) block[i] = int32_t((i * 29 + 3) % 300);
    DiffusionCache cpu_cache = p.cpu.new_cache();
    DiffusionCacheCuda gpu_cache = p.gpu.new_cache(128);
    Dump want, got;
    const ActivationObserver want_observer = want.observer(), got_observer = got.observer();
    p.cpu.encode(cpu_cache, prompt, &want_observer);
    p.gpu.encode(gpu_cache, prompt, &got_observer);
    expect_same_intermediates(got, want, "encode");
    expect_same_cache(gpu_cache, cpu_cache, "encode");

    // A committed block, then a canvas's two first steps.
    p.cpu.encode(cpu_cache, block);
    p.gpu.encode(gpu_cache, block);
    expect_same_cache(gpu_cache, cpu_cache, "block");
    const std::vector<float> step1_cpu = p.cpu.denoise(cpu_cache, canvas);
    const std::vector<float> step1_gpu = p.gpu.denoise(gpu_cache, canvas);
    EXPECT_LE(relative_error(step1_gpu, step1_cpu), kBound) << "step 1";
    const std::vector<float> sc = scaled(step1_cpu, 0.8f);
    Dump want_step, got_step;
    const ActivationObserver w = want_step.observer(), g = got_step.observer();
    const std::vector<float> step2_cpu = p.cpu.denoise(cpu_cache, canvas, sc, &w);
    const std::vector<float> step2_gpu = p.gpu.denoise(gpu_cache, canvas, sc, &g);
    expect_same_intermediates(got_step, want_step, "step 2");
    EXPECT_LE(relative_error(step2_gpu, step2_cpu), kBound) << "step 2";
    fs::remove_all(dir);
}

// ---- (c) the cache rules ----

// Encodes shorter and longer than the window (4: the cache keeps 3), then a refused one past the capacity,
// then one that fits: after each, the GPU's kept rows are the CPU's.
TEST(DiffusionGemmaCuda, SlidingCachesKeepTheCpusRowsAndACapacityErrorChangesNothing) {
    DELTABIT_REQUIRE_GPU();
    const test::TinyDiffusionGemma tiny;
    const fs::path dir = folder("window");
    tiny.write(dir);
    Pair p(dir);
    DiffusionCache cpu_cache = p.cpu.new_cache();
    DiffusionCacheCuda gpu_cache = p.gpu.new_cache(24);
    int32_t next = 3;
    auto ids_of = [&](int64_t n) {
        std::vector<int32_t> ids(static_cast<size_t>(n));
        for (int32_t& id : ids) id = (next = (next * 7 + 5) % int32_t(tiny.vocab - 1));  // never the image token
        return ids;
    };
    for (const int64_t n : {2, 1, 5, 3, 7, 4}) {  // 22 tokens
        const std::vector<int32_t> ids = ids_of(n);
        p.cpu.encode(cpu_cache, ids);
        p.gpu.encode(gpu_cache, ids);
        expect_same_cache(gpu_cache, cpu_cache, "after " + std::to_string(cpu_cache.length) + " tokens");
    }
    ASSERT_EQ(gpu_cache.layers[0].rows, tiny.window - 1);
    ASSERT_EQ(gpu_cache.layers[1].rows, 22);

    const CacheShape shape = shape_of(gpu_cache);
    const auto contents = cache_contents(gpu_cache);
    try {
        p.gpu.encode(gpu_cache, ids_of(3));
        ADD_FAILURE() << "3 tokens after 22 fit a capacity of 24";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("3 tokens after position 22 exceed the cache's capacity of 24"),
                  std::string::npos) << e.what();
    }
    EXPECT_TRUE(shape_of(gpu_cache) == shape);
    EXPECT_EQ(cache_contents(gpu_cache), contents);

    // Still usable: two more fit, and the decoder reads them as the CPU does.
    const std::vector<int32_t> last = ids_of(2);
    p.cpu.encode(cpu_cache, last);
    p.gpu.encode(gpu_cache, last);
    expect_same_cache(gpu_cache, cpu_cache, "after the refusal");
    EXPECT_EQ(gpu_cache.length, 24);
    const std::vector<int32_t> canvas = {4, 4, 38, 0, 12};
    EXPECT_LE(relative_error(p.gpu.denoise(gpu_cache, canvas), p.cpu.denoise(cpu_cache, canvas)), kBound);
    fs::remove_all(dir);
}

TEST(DiffusionGemmaCuda, BadIdsAreRefusedWithTheCacheUnchanged) {
    DELTABIT_REQUIRE_GPU();
    const test::TinyDiffusionGemma tiny;
    const fs::path dir = folder("bad");
    tiny.write(dir);
    Pair p(dir);
    DiffusionCacheCuda cache = p.gpu.new_cache(32);
    p.gpu.encode(cache, std::vector<int32_t>{3, 17, 5});
    const CacheShape shape = shape_of(cache);
    const auto contents = cache_contents(cache);
    const std::vector<int32_t> bad = {3, int32_t(tiny.vocab)};
    try {
        p.gpu.encode(cache, bad);
        ADD_FAILURE() << "an id past the vocabulary was encoded";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("token id 40 at index 1"), std::string::npos) << e.what();
    }
    EXPECT_THROW(p.gpu.encode(cache, std::vector<int32_t>{-1}), Error);
    EXPECT_TRUE(shape_of(cache) == shape);
    EXPECT_EQ(cache_contents(cache), contents);
    EXPECT_THROW(p.gpu.denoise(cache, bad), Error);
    const std::vector<int32_t> canvas = {1, 2};
    EXPECT_THROW(p.gpu.denoise(cache, canvas, std::vector<float>(size_t(tiny.vocab))), Error);  // 1 row for 2
    EXPECT_THROW(p.gpu.new_cache(0), Error);
    // A canvas longer than the room behind the kept rows is refused, not written past it.
    EXPECT_THROW(p.gpu.denoise(cache, std::vector<int32_t>(size_t(cache.max_new + 1), 1)), Error);
    // An image placeholder is encoded as pad, as on the CPU.
    DiffusionCacheCuda image = p.gpu.new_cache(8), pad = p.gpu.new_cache(8);
    p.gpu.encode(image, std::vector<int32_t>{3, int32_t(tiny.vocab - 1), 5});
    p.gpu.encode(pad, std::vector<int32_t>{3, int32_t(p.config().pad_id), 5});
    EXPECT_EQ(cache_contents(image), cache_contents(pad));
    fs::remove_all(dir);
}

// A prompt longer than one encode chunk (DiffusionGemmaCuda::kEncodeChunk) runs in chunks and ends in the
// cache one call on the CPU makes.
TEST(DiffusionGemmaCuda, ALongPromptEncodesInChunksAsTheCpuInOneCall) {
    DELTABIT_REQUIRE_GPU();
    const test::TinyDiffusionGemma tiny;
    const fs::path dir = folder("chunks");
    tiny.write(dir);
    Pair p(dir);
    std::vector<int32_t> prompt(600);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 13 + 7) % size_t(tiny.vocab - 1));
    DiffusionCache cpu_cache = p.cpu.new_cache();
    DiffusionCacheCuda gpu_cache = p.gpu.new_cache(640);
    ASSERT_EQ(gpu_cache.max_new, DiffusionGemmaCuda::kEncodeChunk);
    p.cpu.encode(cpu_cache, prompt);
    p.gpu.encode(gpu_cache, prompt);
    EXPECT_EQ(p.gpu.stats().encode_chunks, 3);  // 256 + 256 + 88
    expect_same_cache(gpu_cache, cpu_cache, "600 tokens");
    const std::vector<int32_t> canvas = {4, 4, 38, 0, 12};
    EXPECT_LE(relative_error(p.gpu.denoise(gpu_cache, canvas), p.cpu.denoise(cpu_cache, canvas)), kBound);
    fs::remove_all(dir);
}

// ---- (d) the decoder writes nothing; (e) the steady state allocates nothing ----

TEST(DiffusionGemmaCuda, DenoisingLeavesTheCacheAsItWasAndAllocatesNothingOnceWarm) {
    DELTABIT_REQUIRE_GPU();
    const test::TinyDiffusionGemma tiny;
    const fs::path dir = folder("steady");
    tiny.write(dir);
    Pair p(dir);
    const int64_t V = tiny.vocab;
    DiffusionCacheCuda cache = p.gpu.new_cache(64);
    p.gpu.encode(cache, std::vector<int32_t>{3, 17, 5, 9, 33, 21, 8, 2, 30, 11, 19});
    const CacheShape shape = shape_of(cache);
    const auto contents = cache_contents(cache);

    const std::vector<int32_t> canvas = {4, 4, 38, 0, 12};
    const int64_t L = int64_t(canvas.size());
    const std::vector<float> step1 = p.gpu.denoise(cache, canvas);
    const std::vector<float> sc = scaled(step1, 0.8f);
    const std::vector<float> step2 = p.gpu.denoise(cache, canvas, sc);
    EXPECT_TRUE(shape_of(cache) == shape);
    EXPECT_EQ(cache_contents(cache), contents) << "the decoder wrote into the kept rows";
    // The first call overflowed the empty arena, the second (which also runs the self-conditioning branch)
    // the buffer sized for the first; the third grows it to the high water of both.
    EXPECT_EQ(p.gpu.denoise(cache, canvas), step1) << "the same call twice, other bits";

    // Warm: host calls and device calls of both kinds allocate nothing and give the same bits every time.
    const DiffusionCudaStats warm = p.gpu.stats();
    EXPECT_GT(warm.denoise_arena_bytes, 0u);
    EXPECT_EQ(p.gpu.denoise(cache, canvas), step1);
    EXPECT_EQ(p.gpu.denoise(cache, canvas, sc), step2);
    cuda::DeviceBuffer d_canvas(size_t(L) * sizeof(int32_t)), d_sc(sc.size() * sizeof(float)),
        d_logits(size_t(L * V) * sizeof(float));
    d_canvas.upload(canvas.data(), d_canvas.bytes());
    d_sc.upload(sc.data(), d_sc.bytes());
    std::vector<float> device_step(size_t(L * V));
    for (const bool self_conditioned : {false, true}) {
        p.gpu.denoise(cache, d_canvas.get<int32_t>(), L, self_conditioned ? d_sc.get<float>() : nullptr,
                      d_logits.get<float>());
        cuda::cuda_check(cudaStreamSynchronize(p.gpu.stream()), "denoise");
        d_logits.download(device_step.data(), d_logits.bytes());
        EXPECT_EQ(device_step, self_conditioned ? step2 : step1) << "device in, device out";
    }
    const DiffusionCudaStats after = p.gpu.stats();
    EXPECT_EQ(after.arena_allocations, warm.arena_allocations);
    EXPECT_EQ(after.io_allocations, warm.io_allocations);
    EXPECT_EQ(after.denoise_calls, warm.denoise_calls + 4);
    EXPECT_TRUE(shape_of(cache) == shape);
    EXPECT_EQ(cache_contents(cache), contents);

    // Committed blocks of one size: after two, encoding allocates nothing either.
    for (int i = 0; i < 2; ++i) p.gpu.encode(cache, canvas);
    const int64_t encoded_warm = p.gpu.stats().arena_allocations;
    for (int i = 0; i < 3; ++i) p.gpu.encode(cache, canvas);
    EXPECT_EQ(p.gpu.stats().arena_allocations, encoded_warm);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
