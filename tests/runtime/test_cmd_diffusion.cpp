// `deltabit run` on a block-diffusion model, `--record` and `deltabit replay`, end to end with the real
// binary on the transformers fixture (tests/fixtures/diffusion_gemma): the tokens against the library's
// seeded loop, steps per block in --json, seeded repeats, record → replay identical, a tampered record
// caught at the step that was changed, and one-line errors for records that cannot be replayed.
#include "backend/backend.h"
#include "byte_tokenizer_model.h"
#include "diffusion_chat_model.h"
#include "cli_command.h"
#include "models/diffusion_gemma.h"
#include "models/model.h"
#include "runtime/diffusion_generate.h"
#include "runtime/diffusion_generation_config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

namespace deltabit {
namespace {

#ifdef DELTABIT_HAVE_TEXT  // `run` is a cmd_text_* command

namespace fs = std::filesystem;
using test::CommandResult;

const fs::path kFixture = fs::path(DELTABIT_SOURCE_DIR) / "tests" / "fixtures" / "diffusion_gemma";
constexpr int64_t kCanvas = 8;  // the fixture's canvas_length

CommandResult deltabit(const std::string& args, bool merge_stderr = true) {
    return test::run_deltabit(args, merge_stderr ? test::Stderr::merge : test::Stderr::discard);
}

// On the CPU reference, whatever this machine has: the tokens are compared with the library's CPU loop,
// and the records replay on the CPU (a GPU build on a GPU machine would otherwise pick CUDA).
nlohmann::json run_json(const std::string& extra) {
    const CommandResult r =
        deltabit("run -m " + kFixture.string() + " --ids 5,61,200,7 --backend cpu " + extra + " --json", false);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output);
}

std::string read_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(const fs::path& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// Byte offset of step `index` (1-based) of a version 1 record (runtime/diffusion_record.h).
size_t step_offset(const std::string& record, int64_t index) {
    uint32_t header_bytes = 0;
    std::memcpy(&header_bytes, record.data() + 12, 4);
    return 16 + header_bytes + size_t(index - 1) * size_t(24 + 17 * kCanvas);
}

// Changes canvas token `position` of step `index` to another token.
std::string with_canvas_token_changed(std::string record, int64_t index, int64_t position) {
    const size_t at = step_offset(record, index) + 24 + 4 * size_t(position);
    int32_t token = 0;
    std::memcpy(&token, record.data() + at, 4);
    token = (token + 1) % 512;
    std::memcpy(record.data() + at, &token, 4);
    return record;
}

TEST(CmdRunDiffusion, JsonHasStepsPerBlockAndTheLibrarysTokens) {
    const nlohmann::json out = run_json("--max-tokens 20 --seed 11");
    const std::vector<int64_t> steps = out.at("steps_per_block").get<std::vector<int64_t>>();
    ASSERT_EQ(steps.size(), 3u);  // ceil(20 / 8) whole blocks
    for (int64_t s : steps) {
        EXPECT_GE(s, 1);
        EXPECT_LE(s, 48);  // generation_config.json leaves max_denoising_steps at transformers' 48
    }
    EXPECT_EQ(out.at("blocks"), 3);
    EXPECT_EQ(out.at("denoising_steps").get<int64_t>(), std::accumulate(steps.begin(), steps.end(), int64_t(0)));
    EXPECT_EQ(out.at("finish_reason"), "length");
    EXPECT_EQ(out.at("seed"), 11);
    EXPECT_TRUE(out.at("text").is_null());
    EXPECT_EQ(out.at("backend"), "cpu");
    EXPECT_EQ(out.at("backend_description"), "cpu: block-diffusion reference");

    const Model model = Model::load(kFixture);
    const DiffusionGemma dg(model);
    DiffusionGenerationConfig g = load_diffusion_generation_config(kFixture, model.config());
    g.max_new_tokens = 20;
    SeededDiffusionRandomness random(11);
    const std::vector<int32_t> prompt = {5, 61, 200, 7};
    const DiffusionGeneration want = generate_diffusion(dg, prompt, g, random);
    EXPECT_EQ(out.at("tokens").get<std::vector<int32_t>>(), want.tokens);
    EXPECT_EQ(steps, want.steps_per_block);
    EXPECT_DOUBLE_EQ(out.at("tokens_per_forward").get<double>(), want.tokens_per_forward());
}

// On one backend: CUDA draws its random numbers on the GPU, so the same seed gives other tokens there.
TEST(CmdRunDiffusion, StreamsTheSameIdsAsJsonAndSummarisesOnStderr) {
    const nlohmann::json json = run_json("--max-tokens 9 --seed 4");
    const std::string run = "run -m " + kFixture.string() + " --ids 5,61,200,7 --backend cpu --max-tokens 9 --seed 4";
    const CommandResult plain = deltabit(run, false);
    ASSERT_EQ(plain.exit_code, 0) << plain.output;
    std::string want;
    for (int32_t t : json.at("tokens").get<std::vector<int32_t>>()) want += (want.empty() ? "" : " ") + std::to_string(t);
    EXPECT_EQ(plain.output, want + "\n");
    const CommandResult merged = deltabit(run);
    EXPECT_NE(merged.output.find("2 blocks of 8"), std::string::npos) << merged.output;
}

TEST(CmdRunDiffusion, SeededRunRepeatsAndAnotherSeedDiffers) {
    const nlohmann::json a = run_json("--max-tokens 8 --seed 123");
    const nlohmann::json b = run_json("--max-tokens 8 --seed 123");
    const nlohmann::json c = run_json("--max-tokens 8 --seed 124");
    EXPECT_EQ(a.at("tokens"), b.at("tokens"));
    EXPECT_EQ(a.at("steps_per_block"), b.at("steps_per_block"));
    EXPECT_NE(a.at("tokens"), c.at("tokens"));  // 8 tokens of a 512 vocabulary: equal by chance ~never
}

TEST(CmdRunDiffusion, RefusesFlagsThatDoNotApplyWithOneLine) {
    for (const std::string flag : {"--temperature 0.5", "--top-k 5", "--top-p 0.9", "--repeat-penalty 1.1", "--kv f16",
                                   "--ctx 64", "--threads 2"}) {
        const CommandResult r = deltabit("run -m " + kFixture.string() + " --ids 5,6 --max-tokens 8 " + flag);
        EXPECT_EQ(r.exit_code, 1) << flag;
        const std::string name = flag.substr(0, flag.find(' '));
        EXPECT_NE(r.output.find("run: " + name), std::string::npos) << r.output;
        EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    }
    const CommandResult nowhere =
        deltabit("run -m " + kFixture.string() + " --ids 5,6 --max-tokens 8 --record /nonexistent_folder/run.rec");
    EXPECT_EQ(nowhere.exit_code, 1);
    EXPECT_NE(nowhere.output.find("run: --record"), std::string::npos) << nowhere.output;
    EXPECT_FALSE(fs::exists("/nonexistent_folder"));
    const CommandResult ar = deltabit("run -m " + test::kBinaryFixture.string() +
                                      " --ids 5,6 --max-tokens 2 --record /tmp/never_written.rec");
    EXPECT_EQ(ar.exit_code, 1);
    EXPECT_NE(ar.output.find("--record records the steps of a block-diffusion model"), std::string::npos) << ar.output;
}

// --backend as for any model: cpu always; cuda where this build has CUDA and the machine a GPU, else one
// line saying which is missing; auto picks CUDA exactly when cuda would run.
TEST(CmdRunDiffusion, BackendCudaRunsWhereThereIsOneAndSaysWhyNotElsewhere) {
    const std::string run = "run -m " + kFixture.string() + " --ids 5,61,200,7 --max-tokens 8 --seed 3 --json";
    const CommandResult cuda = deltabit(run + " --backend cuda");
    const CommandResult automatic = deltabit(run + " --backend auto", false);
    ASSERT_EQ(automatic.exit_code, 0) << automatic.output;
    const nlohmann::json chosen = nlohmann::json::parse(automatic.output);
    if (cuda_backend_available()) {
        ASSERT_EQ(cuda.exit_code, 0) << cuda.output;
        EXPECT_EQ(chosen.at("backend"), "cuda");
        EXPECT_EQ(chosen.at("backend_description").get<std::string>().rfind("cuda: ", 0), 0u) << chosen;
        EXPECT_EQ(chosen.at("steps_per_block").size(), 1u);
        return;
    }
    EXPECT_EQ(cuda.exit_code, 1) << cuda.output;
    EXPECT_EQ(std::count(cuda.output.begin(), cuda.output.end(), '\n'), 1) << cuda.output;
#if DELTABIT_HAVE_CUDA
    EXPECT_NE(cuda.output.find("backend cuda: no CUDA device on this machine; use --backend cpu"), std::string::npos)
        << cuda.output;
#else
    EXPECT_NE(cuda.output.find("backend cuda: this build has no CUDA"), std::string::npos) << cuda.output;
#endif
    EXPECT_EQ(chosen.at("backend"), "cpu");
    EXPECT_EQ(chosen.at("tokens"), run_json("--max-tokens 8 --seed 3").at("tokens"));
    // chat loads the model through the same runner (as serve does, which a build without cpp-httplib lacks):
    // the same line, before any input is read.
    const CommandResult chat = deltabit("chat -m " + kFixture.string() + " --backend cuda -q");
    EXPECT_EQ(chat.exit_code, 1) << chat.output;
    EXPECT_NE(chat.output.find("backend cuda: "), std::string::npos) << chat.output;
}

class ReplayDiffusion : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = test::test_scratch_dir("deltabit_replay");
        record_ = dir_ / "run.rec";
        const nlohmann::json out = run_json("--max-tokens 16 --seed 5 --record " + record_.string());
        steps_per_block_ = out.at("steps_per_block").get<std::vector<int64_t>>();
        total_steps_ = out.at("denoising_steps").get<int64_t>();
        ASSERT_EQ(steps_per_block_.size(), 2u);
    }
    void TearDown() override { fs::remove_all(dir_); }

    CommandResult replay(const fs::path& file, const std::string& extra = "") {
        return deltabit("replay " + file.string() + " " + extra);
    }
    fs::path write(const std::string& name, const std::string& bytes) {
        write_bytes(dir_ / name, bytes);
        return dir_ / name;
    }

    fs::path dir_, record_;
    std::vector<int64_t> steps_per_block_;
    int64_t total_steps_ = 0;
};

TEST_F(ReplayDiffusion, RecordThenReplayIsIdentical) {
    const CommandResult r = replay(record_);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output, "identical: " + std::to_string(total_steps_) + " steps\n");
    const CommandResult j = deltabit("replay " + record_.string() + " --json", false);
    const nlohmann::json out = nlohmann::json::parse(j.output);
    EXPECT_TRUE(out.at("identical").get<bool>());
    EXPECT_EQ(out.at("steps_replayed"), total_steps_);
}

TEST_F(ReplayDiffusion, ChangedCanvasTokenIsReportedAtItsStep) {
    const std::string good = read_bytes(record_);
    // Mid-block: the replay's own canvas (from the step before's draws) no longer matches the record.
    const CommandResult mid = replay(write("mid.rec", with_canvas_token_changed(good, 3, 5)));
    EXPECT_EQ(mid.exit_code, 2) << mid.output;
    EXPECT_NE(mid.output.find("differs at step 3 (block 0, denoising step 3): the canvas differs at position 5"),
              std::string::npos) << mid.output;
    EXPECT_NE(mid.output.find("the 2 steps before it are identical"), std::string::npos) << mid.output;
    // A block's first canvas is the block's draw: the decoder then computes other logits at that step.
    const int64_t first_of_block_1 = steps_per_block_[0] + 1;
    const CommandResult start = replay(write("start.rec", with_canvas_token_changed(good, first_of_block_1, 0)));
    EXPECT_EQ(start.exit_code, 2) << start.output;
    EXPECT_NE(start.output.find("differs at step " + std::to_string(first_of_block_1) +
                                " (block 1, denoising step 1): the decoder's logits differ"),
              std::string::npos) << start.output;
}

TEST_F(ReplayDiffusion, BadRecordsGetOneLineNamingTheProblem) {
    const std::string good = read_bytes(record_);
    struct Case {
        std::string name, bytes, expect;
    };
    std::string magic = good, version = good, order = good, settings = good;
    magic[0] = 'X';
    version[8] = 9;
    order[step_offset(order, 2) + 8] = 5;  // step 2 claims to be the block's step 5
    std::string huge = good;  // a step count far past the file: refused as truncated, nothing allocated
    const size_t steps_field = huge.find("\"steps\":" + std::to_string(total_steps_) + ",");
    ASSERT_NE(steps_field, std::string::npos);
    const std::string nines(std::to_string(total_steps_).size() + 1, '9');  // one digit more: past the file
    huge.replace(steps_field + 8, nines.size() - 1, nines);
    const size_t header_at = 12;  // the header grew by one byte: say so in its size field
    uint32_t header_bytes = 0;
    std::memcpy(&header_bytes, huge.data() + header_at, 4);
    ++header_bytes;
    std::memcpy(huge.data() + header_at, &header_bytes, 4);
    const size_t t_min = settings.find("\"t_min\":0.4");
    ASSERT_NE(t_min, std::string::npos);
    settings.replace(t_min, 11, "\"t_min\": -4");  // same length: the header stays well-formed JSON
    const std::vector<Case> cases = {
        {"truncated.rec", good.substr(0, good.size() - 7), "truncated"},
        {"header_cut.rec", good.substr(0, 40), "truncated: the header needs"},
        {"magic.rec", magic, "not a deltabit diffusion record"},
        {"version.rec", version, "record version 9; this build reads version 1"},
        {"trailing.rec", good + "xx", "2 bytes after the last of"},
        {"empty.rec", "", "not a deltabit diffusion record"},
        {"huge.rec", huge, "truncated: " + nines + " steps of 160 bytes need " + std::to_string(std::stoull(nines) * 160)},
        {"order.rec", order, "step 2 is block 0 step 5; expected block 0 step 2"},
        {"settings.rec", settings, "t_min and t_max must be positive"},
    };
    for (const Case& c : cases) {
        const CommandResult r = replay(write(c.name, c.bytes));
        EXPECT_EQ(r.exit_code, 1) << c.name << ": " << r.output;
        EXPECT_NE(r.output.find(c.name), std::string::npos) << r.output;
        EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.name << ": " << r.output;
        EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    }
}

TEST_F(ReplayDiffusion, ACudaRecordIsRefusedWhereThereIsNoCuda) {
    if (cuda_backend_available()) GTEST_SKIP() << "this machine replays CUDA records (tests/cuda/test_diffusion_runner_cuda.cpp)";
    std::string record = read_bytes(record_);
    const size_t backend = record.find("\"backend\":\"cpu\"");
    ASSERT_NE(backend, std::string::npos);
    record.replace(backend + 11, 3, "cuda");
    uint32_t header_bytes = 0;  // the header grew by one byte: say so in its size field
    std::memcpy(&header_bytes, record.data() + 12, 4);
    ++header_bytes;
    std::memcpy(record.data() + 12, &header_bytes, 4);
    const CommandResult r = replay(write("cuda.rec", record));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
#if DELTABIT_HAVE_CUDA
    const std::string why = "this machine has no CUDA device";
#else
    const std::string why = "this build has no CUDA";
#endif
    EXPECT_NE(r.output.find("cuda.rec was recorded on cuda; a record replays on the backend it was made on, and " + why),
              std::string::npos) << r.output;
}

TEST_F(ReplayDiffusion, AnotherModelIsRefusedByFingerprint) {
    // The same geometry with one byte of token_embd changed (the first tensor after the safetensors header:
    // the file ends with vision tensors the text model never reads, which the fingerprint rightly skips).
    const fs::path other = dir_ / "other_model";
    fs::create_directories(other);
    for (const char* f : {"config.json", "generation_config.json"}) fs::copy_file(kFixture / f, other / f);
    std::string weights = read_bytes(kFixture / "model.safetensors");
    uint64_t header = 0;
    std::memcpy(&header, weights.data(), 8);
    weights[8 + header + 1] = char(weights[8 + header + 1] ^ 0x01);
    write_bytes(other / "model.safetensors", weights);
    const CommandResult r = replay(record_, "-m " + other.string());
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("was recorded with another model (fingerprint xxh3-128:"), std::string::npos) << r.output;

    const CommandResult ar = replay(record_, "-m " + test::kBinaryFixture.string());
    EXPECT_EQ(ar.exit_code, 1);
    EXPECT_NE(ar.output.find("records are of block-diffusion runs"), std::string::npos) << ar.output;
}

using test::diffusion_chat_model;

TEST(CmdChatDiffusion, RepliesBlockByBlockWithStepsAndRepeatsWithASeed) {
    const fs::path dir = test::test_scratch_dir("deltabit_chat_diffusion");
    const fs::path model = diffusion_chat_model(dir / "model");
    write_bytes(dir / "script.txt", "hello\n/stats\nagain\n");
    const std::string args = "chat -m " + model.string() + " --backend cpu --max-tokens 8 --seed 9 --json -q";
    const CommandResult a = test::run_deltabit(args, test::Stderr::discard, (dir / "script.txt").string());
    const CommandResult b = test::run_deltabit(args, test::Stderr::discard, (dir / "script.txt").string());
    EXPECT_EQ(a.exit_code, 1);  // /stats acts on a left-to-right session: refused, and the script says so
    const auto replies_of = [](const std::string& output) {
        std::vector<nlohmann::json> replies;
        for (size_t start = 0, end; (end = output.find('\n', start)) != std::string::npos; start = end + 1) {
            replies.push_back(nlohmann::json::parse(output.substr(start, end - start)));
            replies.back().erase("timings");
        }
        return replies;
    };
    const std::vector<nlohmann::json> replies = replies_of(a.output);
    ASSERT_EQ(replies.size(), 2u) << a.output;
    EXPECT_EQ(replies, replies_of(b.output));
    EXPECT_EQ(replies[0].at("steps_per_block").size(), 1u);
    EXPECT_EQ(replies[0].at("tokens").size(), 8u);
    EXPECT_GT(replies[1].at("prompt_tokens").get<int64_t>(), replies[0].at("prompt_tokens").get<int64_t>());

    // Turn 0 is the library's loop over the rendered prompt (one byte per token) with the chat's seed.
    const std::string rendered = "user: hello\nassistant: ";
    const std::vector<int32_t> prompt(rendered.begin(), rendered.end());
    EXPECT_EQ(replies[0].at("prompt_tokens"), prompt.size());
    const Model loaded = Model::load(model);
    const DiffusionGemma dg(loaded);
    DiffusionGenerationConfig g = load_diffusion_generation_config(model, loaded.config());
    g.max_new_tokens = 8;
    SeededDiffusionRandomness random(9);
    EXPECT_EQ(replies[0].at("tokens").get<std::vector<int32_t>>(), generate_diffusion(dg, prompt, g, random).tokens);

    const CommandResult errors = test::run_deltabit(args, test::Stderr::merge, (dir / "script.txt").string());
    EXPECT_NE(errors.output.find("chat: error: /stats is not available with a block-diffusion model"), std::string::npos)
        << errors.output;
    const CommandResult refused = deltabit("chat -m " + model.string() + " --top-p 0.5");
    EXPECT_EQ(refused.exit_code, 1);
    EXPECT_NE(refused.output.find("chat: --top-p does not apply to a block-diffusion model"), std::string::npos)
        << refused.output;
    fs::remove_all(dir);
}

#endif  // DELTABIT_HAVE_TEXT

}  // namespace
}  // namespace deltabit
