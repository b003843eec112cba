// `deltabit logits` end to end: the binary's output file against transformers' logits of a fixture.
#include "cli_command.h"
#include "diffusion_gemma_folder.h"
#include "fixture.h"

#include "models/diffusion_gemma.h"
#include "models/model.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace deltabit {
namespace {

using test::CommandResult;

CommandResult run(const std::string& args) { return test::run_deltabit(args); }

std::vector<float> read_floats(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<float> values(bytes.size() / 4);
    std::memcpy(values.data(), bytes.data(), values.size() * 4);
    return values;
}

TEST(CmdLogits, EveryModeWritesTransformersLogits) {
    const test::Fixture f = test::load_fixture("qwen3_5_binary");
    const test::FixtureCase& c = f.cases.at(1);  // L = 5, split at 2
    ASSERT_EQ(c.length, 5);
    std::string ids;
    for (int32_t id : c.tokens) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    const std::filesystem::path out = std::filesystem::temp_directory_path() / "deltabit_test_cmd_logits.bin";

    for (const std::string mode : {"prompt", "steps", "split:2"}) {
        std::filesystem::remove(out);
        const CommandResult r = run("logits -m " + f.dir.string() + " --ids " + ids + " --mode " + mode + " -o " + out.string());
        ASSERT_EQ(r.exit_code, 0) << r.output;
        const std::vector<float> got = read_floats(out);
        const std::vector<float>& want = c.logits.at("prompt");
        ASSERT_EQ(got.size(), want.size()) << mode;
        double worst = 0.0;
        for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - want[i]));
        // Same bound as test_fixture_parity (DESIGN.md §6 rung 2).
        EXPECT_LE(worst, 1e-4 * f.max_abs_logit) << mode;
    }
    std::filesystem::remove(out);
}

TEST(CmdLogits, DumpWritesTheNamedIntermediateForEveryPosition) {
    // blk.2 is the full-attention layer of qwen3_5 (lin, lin, full): its output is [positions][n_embd],
    // and it must not depend on how the ids were fed (prompt vs steps).
    const std::string model = (test::fixtures_dir() / "qwen3_5_float").string();
    const std::filesystem::path out = std::filesystem::temp_directory_path() / "deltabit_test_cmd_dump.bin";
    std::vector<std::vector<float>> dumps;
    for (const std::string mode : {"prompt", "steps"}) {
        std::filesystem::remove(out);
        const CommandResult r =
            run("logits -m " + model + " --ids 3,1,4,1,5 --mode " + mode + " --dump blk.2.attn.out -o " + out.string());
        ASSERT_EQ(r.exit_code, 0) << r.output;
        dumps.push_back(read_floats(out));
        ASSERT_EQ(dumps.back().size(), 5u * 128u) << mode;  // 5 positions × hidden 128
    }
    double scale = 0.0, worst = 0.0;
    for (size_t i = 0; i < dumps[0].size(); ++i) {
        scale = std::max(scale, std::abs(double(dumps[0][i])));
        worst = std::max(worst, std::abs(double(dumps[0][i]) - dumps[1][i]));
    }
    EXPECT_GT(scale, 0.0);
    EXPECT_LE(worst, 1e-5 * scale);  // fp32 summation order differs between one call and five
    const CommandResult unknown = run("logits -m " + model + " --ids 1 --dump blk.9.nothing -o " + out.string());
    EXPECT_EQ(unknown.exit_code, 1);
    EXPECT_NE(unknown.output.find("blk.9.nothing"), std::string::npos) << unknown.output;
    std::filesystem::remove(out);
}

TEST(Cli, UnknownCommandIsNamedWithTheChoices) {
    const CommandResult r = run("logit --ids 1");  // a misspelt `logits`
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("unknown command 'logit'"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("logits"), std::string::npos) << r.output;
}

TEST(CmdLogits, BadArgumentsAreOneLineErrors) {
    const std::string model = (test::fixtures_dir() / "qwen3_float").string();
    const CommandResult bad_mode = run("logits -m " + model + " --ids 1,2 --mode split:2 -o /dev/null");
    EXPECT_EQ(bad_mode.exit_code, 1);
    EXPECT_NE(bad_mode.output.find("split:2"), std::string::npos) << bad_mode.output;
    const CommandResult bad_id = run("logits -m " + model + " --ids 1,256 -o /dev/null");
    EXPECT_EQ(bad_id.exit_code, 1);
    EXPECT_NE(bad_id.output.find("256"), std::string::npos) << bad_id.output;
    const CommandResult not_number = run("logits -m " + model + " --ids 1,x -o /dev/null");
    EXPECT_EQ(not_number.exit_code, 1);
    EXPECT_NE(not_number.output.find("\"x\""), std::string::npos) << not_number.output;
}

TEST(CmdLogits, CanvasModeWritesTheDecodersLogits) {
    // A block-diffusion model: encode --ids (in any mode), then the decoder's logits over --canvas, with
    // --sc-logits as self-conditioning; the binary must write what DiffusionGemma computes in process.
    const test::TinyDiffusionGemma tiny;
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "deltabit_test_cmd_logits_dg";
    tiny.write(dir);
    const Model model = Model::load(dir);
    const DiffusionGemma dg(model);
    DiffusionCache cache = dg.new_cache();
    const std::vector<int32_t> ids = {3, 17, 5, 9, 33, 21, 8}, canvas = {4, 4, 38, 0, 12};
    dg.encode(cache, ids);
    const std::vector<float> step1 = dg.denoise(cache, canvas);
    std::vector<float> sc(step1.size());
    for (size_t i = 0; i < sc.size(); ++i) sc[i] = step1[i] / 0.8f;
    const std::vector<float> step2 = dg.denoise(cache, canvas, sc);
    const std::filesystem::path out = dir / "out.bin", sc_file = dir / "sc.bin";
    std::ofstream(sc_file, std::ios::binary).write(reinterpret_cast<const char*>(sc.data()), std::streamsize(sc.size() * 4));

    const std::string base = "logits -m " + dir.string() + " --ids 3,17,5,9,33,21,8 --canvas 4,4,38,0,12 -o " + out.string();
    const CommandResult plain = run(base + " --mode split:3");
    ASSERT_EQ(plain.exit_code, 0) << plain.output;
    const std::vector<float> got1 = read_floats(out);
    ASSERT_EQ(got1.size(), step1.size());
    double worst = 0.0;
    for (size_t i = 0; i < got1.size(); ++i) worst = std::max(worst, std::abs(double(got1[i]) - step1[i]));
    EXPECT_LE(worst, 1e-5 * 30.0);  // the encoder fed in two calls: fp32 summation order only
    const CommandResult conditioned = run(base + " --sc-logits " + sc_file.string());
    ASSERT_EQ(conditioned.exit_code, 0) << conditioned.output;
    EXPECT_EQ(read_floats(out), step2);  // the same calls in the same order: bit for bit

    const CommandResult short_sc = run(base + " --sc-logits " + out.string() + "x");
    EXPECT_EQ(short_sc.exit_code, 1);
    std::ofstream(sc_file, std::ios::binary | std::ios::trunc).write("abcd", 4);
    const CommandResult wrong_size = run(base + " --sc-logits " + sc_file.string());
    EXPECT_EQ(wrong_size.exit_code, 1);
    EXPECT_NE(wrong_size.output.find("4 bytes, expected 800"), std::string::npos) << wrong_size.output;
    const CommandResult not_diffusion = run("logits -m " + (test::fixtures_dir() / "qwen3_float").string() +
                                            " --ids 1,2 --canvas 3,4 -o " + out.string());
    EXPECT_EQ(not_diffusion.exit_code, 1);
    EXPECT_NE(not_diffusion.output.find("not a block-diffusion one"), std::string::npos) << not_diffusion.output;
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace deltabit
