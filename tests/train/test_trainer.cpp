// The training loop (train/trainer.h) on the CPU reference with real files: a run resumed from a
// checkpoint equals the straight run bit for bit, training lowers the held-out BPB, the BPB window is
// what it claims, and bad checkpoints are refused without touching the run.
#include "train/trainer.h"

#include "core/error.h"

#include "tiny_model_section.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numbers>

namespace deltabit::train {
namespace {

namespace fs = std::filesystem;

struct TinyRun {
    fs::path dir;
    std::string text;
    TrainConfig config;
};

std::string tiny_config_text(const fs::path& dir, int64_t steps, double lr, const std::string& optimizer = "adamw") {
    return std::string(test::kTinyModelSection) + "rope_dim = 4\ninit_std = 0.1\n" + fmt::format(R"(
[data]
train = "{}"
heldout = "{}"
[run]
seq_len = 12
batch = 2
grad_accum = 2
steps = {}
seed = 7
[optimizer]
kind = "{}"
lr = {}
min_lr = 1e-3
warmup_steps = 2
[eval]
bytes = 64
)",
                       (dir / "train.txt").string(), (dir / "heldout.txt").string(), steps, optimizer, lr);
}

TinyRun make_run(const std::string& name, int64_t steps, double lr = 1e-2, const std::string& optimizer = "adamw") {
    TinyRun run;
    run.dir = fs::temp_directory_path() / ("deltabit_test_trainer_" + name);
    fs::remove_all(run.dir);
    fs::create_directories(run.dir);
    std::ofstream(run.dir / "train.txt") << [] {
        std::string s;
        for (int i = 0; i < 40; ++i) s += "the cat sat on the mat. the dog sat on the log.\n";
        return s;
    }();
    std::ofstream(run.dir / "heldout.txt") << "the cat sat on the log. the dog sat on the mat.\nthe cat sat on the mat.\n";
    run.text = tiny_config_text(run.dir, steps, lr, optimizer);
    run.config = parse_train_config(run.text, "tiny.toml");
    return run;
}

// Muon's momentum rides in the checkpoint's first-moment slots (train/muon.h): both optimizers resume
// bit-exactly, and for Muon a checkpoint whose momentum were lost would resume differently (checked).
void expect_resume_bit_exact(const std::string& optimizer) {
    const TinyRun run = make_run("resume_" + optimizer, 6, 1e-2, optimizer);
    Trainer straight(run.config, run.text);
    while (!straight.finished()) straight.train_step();

    Trainer first(run.config, run.text);
    for (int i = 0; i < 3; ++i) first.train_step();
    const fs::path checkpoint = run.dir / "checkpoint.bin";
    first.save_checkpoint(checkpoint);
    EXPECT_FALSE(fs::exists(checkpoint.string() + ".tmp"));

    Trainer resumed(run.config, run.text);
    resumed.load_checkpoint(checkpoint);
    EXPECT_EQ(resumed.step(), 3);
    while (!resumed.finished()) resumed.train_step();
    ASSERT_EQ(straight.parameters().size(), resumed.parameters().size());
    EXPECT_EQ(std::memcmp(straight.parameters().data(), resumed.parameters().data(),
                          straight.parameters().size() * sizeof(float)),
              0);
    // And the comparison can fail: a run resumed one step later differs.
    Trainer off_by_one(run.config, run.text);
    off_by_one.load_checkpoint(checkpoint);
    off_by_one.train_step();
    off_by_one.train_step();
    EXPECT_NE(std::memcmp(straight.parameters().data(), off_by_one.parameters().data(),
                          straight.parameters().size() * sizeof(float)),
              0);
}

TEST(Trainer, ResumeIsBitExact) { expect_resume_bit_exact("adamw"); }

// `--profile` only watches: a profiled CPU run (the wall clock around its phases) ends with the same
// losses, gradient norms and parameters, bit for bit, as the same run unprofiled, and it recorded every
// phase of every step (the data drawn once per micro-batch: a second draw would shift the data order).
TEST(Trainer, ProfiledStepsEqualUnprofiledOnes) {
    TinyRun run = make_run("profile", 4);
    run.config.run.backend = "cpu";
    Trainer plain(run.config, run.text), profiled(run.config, run.text);
    profiled.enable_profile();
    for (int s = 0; s < 4; ++s) {
        const StepReport a = plain.train_step(), b = profiled.train_step();
        EXPECT_EQ(a.loss, b.loss) << "step " << s + 1;
        EXPECT_EQ(a.grad_norm, b.grad_norm) << "step " << s + 1;
    }
    ASSERT_EQ(plain.parameters().size(), profiled.parameters().size());
    EXPECT_EQ(std::memcmp(plain.parameters().data(), profiled.parameters().data(),
                          plain.parameters().size() * sizeof(float)),
              0);
    EXPECT_EQ(plain.profile(), nullptr);
    const StepProfile* profile = profiled.profile();
    ASSERT_NE(profile, nullptr);
    EXPECT_EQ(profile->steps(), 4);
    EXPECT_EQ(profile->kind(ProfileKind::cpu_reference).spans, 4 * run.config.run.grad_accum);
    EXPECT_EQ(profile->kind(ProfileKind::host_data).spans, 4 * run.config.run.grad_accum);
    EXPECT_EQ(profile->kind(ProfileKind::qat_weights).spans, 4);
    EXPECT_EQ(profile->kind(ProfileKind::optimizer).spans, 4);
    EXPECT_GT(profile->kind(ProfileKind::cpu_reference).ms, 0.0);
    // The reference's FLOPs are the MFU count (train_flops_per_token) of every token of the step.
    EXPECT_DOUBLE_EQ(profile->kind(ProfileKind::cpu_reference).flops,
                     4.0 * double(run.config.tokens_per_step()) *
                         train_flops_per_token(profiled.layout().config(), run.config.run.seq_len));
    // The phases lie inside the step: their sum cannot pass its wall time.
    EXPECT_LE(profile->device_ms(), profile->wall_ms());
}

TEST(Trainer, MuonResumeIsBitExactAndNeedsItsMomentum) {
    expect_resume_bit_exact("muon");
    // The momentum matters: zero the Muon slots of the checkpoint's first moments and the resumed run
    // leaves the straight one.
    const TinyRun run = make_run("resume_muon_lost", 5, 1e-2, "muon");
    Trainer straight(run.config, run.text);
    while (!straight.finished()) straight.train_step();
    Trainer first(run.config, run.text);
    for (int i = 0; i < 3; ++i) first.train_step();
    const fs::path checkpoint = run.dir / "checkpoint.bin";
    first.save_checkpoint(checkpoint);
    // The layout of the file (trainer.cpp): …, parameters, m, v, trailer; each array is a count then floats.
    const uint64_t P = uint64_t(first.layout().total());
    const uint64_t m_begin = fs::file_size(checkpoint) - 8 - 2 * (8 + 4 * P) + 8;
    {
        std::fstream file(checkpoint, std::ios::in | std::ios::out | std::ios::binary);
        uint64_t count = 0;  // the offset is right: the first moments' count precedes it
        file.seekg(std::streamoff(m_begin - 8));
        file.read(reinterpret_cast<char*>(&count), 8);
        ASSERT_EQ(count, P);
        const std::vector<float> zeros(size_t(P), 0.0f);
        for (const ParameterInfo& p : first.layout().all()) {
            if (!p.hidden_matrix) continue;
            file.seekp(std::streamoff(m_begin + 4 * uint64_t(p.offset)));
            file.write(reinterpret_cast<const char*>(zeros.data()), std::streamsize(4 * p.size));
        }
    }
    Trainer resumed(run.config, run.text);
    resumed.load_checkpoint(checkpoint);
    while (!resumed.finished()) resumed.train_step();
    EXPECT_NE(std::memcmp(straight.parameters().data(), resumed.parameters().data(), P * sizeof(float)), 0);
}

void expect_training_lowers_bpb(const std::string& optimizer) {
    const TinyRun run = make_run("learn_" + optimizer, 40, 2e-2, optimizer);
    Trainer trainer(run.config, run.text);
    const double before = trainer.evaluate_bpb();
    EXPECT_NEAR(before, std::log2(259.0), 0.2);  // near uniform at init (std 0.1)
    double first_loss = 0, last_loss = 0;
    while (!trainer.finished()) {
        const StepReport r = trainer.train_step();
        if (r.step == 1) first_loss = r.loss;
        last_loss = r.loss;
    }
    const double after = trainer.evaluate_bpb();
    std::printf("[ trainer ] %s: held-out BPB %.3f -> %.3f, train loss %.3f -> %.3f nats\n", optimizer.c_str(), before,
                after, first_loss, last_loss);
    EXPECT_LT(after, before - 2.0);  // 40 steps on a 20-letter text: well below log2(259) = 8.02
    EXPECT_LT(last_loss, first_loss - 1.0);
    // The window restarts at the same bytes: evaluating twice gives the same number exactly.
    EXPECT_EQ(trainer.evaluate_bpb(), after);
}

TEST(Trainer, TrainingLowersHeldOutBitsPerByte) { expect_training_lowers_bpb("adamw"); }
TEST(Trainer, MuonTrainingLowersHeldOutBitsPerByte) { expect_training_lowers_bpb("muon"); }

// run.backend = cuda where it cannot be had is refused with one line, before anything runs.
TEST(Trainer, CudaBackendWithoutCudaIsRefused) {
#ifdef DELTABIT_HAVE_CUDA
    GTEST_SKIP() << "this build has CUDA (tests/train/test_cuda_step.cpp runs the cuda backend)";
#else
    TinyRun run = make_run("no_cuda", 2);
    run.config.run.backend = "cuda";
    try {
        Trainer trainer(run.config, run.text);
        FAIL() << "a cuda trainer was made without CUDA";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), "train: run.backend = cuda, but this build has no CUDA (configure with nvcc present)");
    }
    run.config.run.backend = "auto";  // auto falls back to the CPU reference
    Trainer trainer(run.config, run.text);
    EXPECT_FALSE(trainer.on_gpu());
    EXPECT_EQ(trainer.backend_description(), "cpu reference");
#endif
}

TEST(Trainer, BitsPerByteOfAUniformModel) {
    const TinyRun run = make_run("uniform", 2);
    const ParameterLayout layout(model_config_of(run.config));
    const std::vector<float> zeros(size_t(layout.total()), 0.0f);  // zero weights: uniform over 259 ids
    auto backend = make_cpu_reference_backend(layout);
    const std::string text = "abcdefghijklmnopqrstuvwxyz";  // 25 predictions in windows of 12, 12, 1
    const std::vector<uint8_t> bytes(text.begin(), text.end());
    EXPECT_NEAR(bits_per_byte(*backend, zeros, bytes, 12), std::log2(259.0), 1e-12);
}

TEST(Trainer, BadCheckpointsAreRefusedAndChangeNothing) {
    const TinyRun run = make_run("badckpt", 4);
    Trainer trainer(run.config, run.text);
    trainer.train_step();
    const fs::path good = run.dir / "good.bin";
    trainer.save_checkpoint(good);

    Trainer other(run.config, run.text);
    const std::vector<float> before(other.parameters().begin(), other.parameters().end());
    auto expect_error = [&](const fs::path& path, const std::string& expected) {
        try {
            other.load_checkpoint(path);
            ADD_FAILURE() << "accepted " << path;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
        }
        EXPECT_EQ(other.step(), 0);
        EXPECT_EQ(std::memcmp(before.data(), other.parameters().data(), before.size() * 4), 0);
    };
    // Truncated.
    const auto size = fs::file_size(good);
    fs::copy_file(good, run.dir / "short.bin", fs::copy_options::overwrite_existing);
    fs::resize_file(run.dir / "short.bin", size - 100);
    expect_error(run.dir / "short.bin", "truncated while reading");
    // Not a checkpoint.
    std::ofstream(run.dir / "junk.bin") << "hello, this is not a checkpoint";
    expect_error(run.dir / "junk.bin", "not a deltabit training checkpoint");
    // Another config.
    const std::string changed = tiny_config_text(run.dir, 5, 1e-2);
    Trainer different(parse_train_config(changed, "tiny.toml"), changed);
    try {
        different.load_checkpoint(good);
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("different config"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace deltabit::train
