// `deltabit bench --serve` on the CPU backend: the real server started inside the bench, driven by
// streaming clients over loopback. The figures are machine-dependent; what is checked is what a correct
// run must show whatever the machine: every request of every level generated exactly max_tokens tokens
// (usage and the scheduler's own count of decode rows agree), the figures are consistent with each other
// and with the history rows, and at 4 streams the scheduler really stepped several streams per decode
// step. A model that declares EOS ids must still run every reply to max_tokens.
#include "cli_command.h"
#include "server_process.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace deltabit {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> lines_of(const fs::path& path) {
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

std::vector<std::string> fields_of(const std::string& line) {
    std::vector<std::string> fields;
    std::stringstream s(line);
    for (std::string f; std::getline(s, f, '\t');) fields.push_back(f);
    return fields;
}

// The checks every level of a run must pass (see the header comment).
void expect_level(const json& m, int streams, int requests_per_stream, int max_tokens, int prompt_tokens) {
    SCOPED_TRACE(m.dump());
    const json& s = m.at("serve");
    const int requests = streams * requests_per_stream;
    EXPECT_EQ(m["test"], "serve" + std::to_string(streams));
    EXPECT_EQ(s["streams"], streams);
    EXPECT_EQ(s["requests"], requests);
    EXPECT_EQ(s["prompt_tokens"], prompt_tokens);
    EXPECT_EQ(s["max_tokens"], max_tokens);
    EXPECT_EQ(s["completion_tokens_min"], max_tokens);
    EXPECT_EQ(s["completion_tokens_max"], max_tokens);
    EXPECT_EQ(m["tokens"], requests * max_tokens);
    // Each request's first token is drawn by its prompt's last piece, every other by a decode step: the
    // scheduler's rows count them independently of what the clients read.
    EXPECT_EQ(s["decode_rows"], requests * (max_tokens - 1));
    const double steps = s["decode_steps"], rows = s["decode_rows"];
    EXPECT_GE(steps * streams, rows) << "a decode step cannot step more rows than there are streams";
    const double seconds = m["seconds"];
    ASSERT_GT(seconds, 0.0);
    EXPECT_NEAR(m["tokens_per_s"].get<double>(), requests * max_tokens / seconds, 1e-6 * requests * max_tokens / seconds);
    EXPECT_EQ(s["aggregate_tokens_per_s"], m["tokens_per_s"]);
    EXPECT_NEAR(s["requests_per_s"].get<double>(), requests / seconds, 1e-6 * requests / seconds);
    EXPECT_GT(s["ttft_p50_ms"].get<double>(), 0.0);
    EXPECT_LE(s["ttft_p50_ms"].get<double>(), s["ttft_p99_ms"].get<double>());
    EXPECT_LT(s["ttft_p99_ms"].get<double>(), seconds * 1e3) << "a first token after the level ended";
    EXPECT_GT(s["stream_tokens_per_s_median"].get<double>(), 0.0);
    EXPECT_EQ(m["depth"], prompt_tokens);
    // The byte-model ceiling (bench_serve.h): exactly 1 for one stream, between 1 and B for B > 1 (the
    // weights are shared, each row's KV and state are not).
    const double ceiling = s["ceiling_vs_one_stream"];
    if (streams == 1) {
        EXPECT_EQ(ceiling, 1.0);
    } else {
        EXPECT_GT(ceiling, 1.0);
        EXPECT_LT(ceiling, double(streams));
    }
    EXPECT_NE(m["note"].get<std::string>().find("(byte ceiling "), std::string::npos);
}

TEST(BenchServe, EveryRequestOfEveryLevelGeneratesMaxTokensAndTheRowsAgree) {
    const fs::path dir = test::scratch_dir("deltabit_test_bench_serve");
    fs::remove_all(dir);
    fs::create_directories(dir);
    const fs::path history = dir / "history.tsv";
    const test::CommandResult r = test::run_deltabit(
        "bench --serve --geometry tiny-qwen3 --backend cpu --threads 1 --streams 1,4 --requests 3 --prompts 5 "
        "--decode-tokens 16 --json --commit abc1234 --history '" + history.string() + "'",
        test::Stderr::discard);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const json report = json::parse(r.output);  // stdout is the JSON alone
    EXPECT_EQ(report["model"], "tiny-qwen3");
    const json& levels = report["measurements"];
    ASSERT_EQ(levels.size(), 2u);
    expect_level(levels[0], 1, 3, 16, 5);
    expect_level(levels[1], 4, 3, 16, 5);

    // One stream steps one row at a time; four streams must have shared decode steps. How many rows a step
    // holds depends on when the clients' requests arrive (a loaded machine desynchronises them), so only
    // "more than one on average" is certain: the four first requests are released together, and each runs
    // 15 decode steps. A server that stepped the streams one by one shows exactly 1.
    EXPECT_EQ(levels[0]["serve"]["decode_steps"], levels[0]["serve"]["decode_rows"]);
    EXPECT_LT(levels[1]["serve"]["decode_steps"].get<int64_t>(), levels[1]["serve"]["decode_rows"].get<int64_t>())
        << "4 streams were never decoded together";
    EXPECT_EQ(levels[0]["serve"]["vs_one_stream"], 1.0);
    EXPECT_NEAR(levels[1]["serve"]["vs_one_stream"].get<double>(),
                levels[1]["tokens_per_s"].get<double>() / levels[0]["tokens_per_s"].get<double>(), 1e-9);

    // The history: its header, then one row per level with the level's figures.
    const std::vector<std::string> lines = lines_of(history);
    ASSERT_EQ(lines.size(), 3u);
    const std::vector<std::string> header = fields_of(lines[0]);
    for (size_t i = 1; i < lines.size(); ++i) {
        const std::vector<std::string> row = fields_of(lines[i]);
        ASSERT_EQ(row.size(), header.size()) << lines[i];
        const json& m = levels[i - 1];
        auto column = [&](const std::string& name) {
            const auto at = std::find(header.begin(), header.end(), name);
            EXPECT_NE(at, header.end()) << name;
            return row[size_t(at - header.begin())];
        };
        EXPECT_EQ(column("commit"), "abc1234");
        EXPECT_EQ(column("bench"), "deltabit bench");
        EXPECT_EQ(column("geometry"), "tiny-qwen3");
        EXPECT_EQ(column("shape"), m["test"].get<std::string>());
        EXPECT_EQ(column("depth"), "5");
        EXPECT_NEAR(std::stod(column("tok_s")), m["tokens_per_s"].get<double>(), 0.051);
        const std::string note = column("note");
        // "KV f32; ", the DELTABIT_* variables set (as "env ...; ", e.g. the suite's backend), then the serve run.
        EXPECT_TRUE(note.starts_with("KV f32; ")) << note;
        EXPECT_NE(note.find("; serve: " + std::to_string(m["serve"]["streams"].get<int>()) +
                            " streams x 3 streamed /v1/completions requests"),
                  std::string::npos)
            << note;
        EXPECT_NE(note.find("prompt 5 + 16 generated tokens"), std::string::npos) << note;
    }
    fs::remove_all(dir);
}

TEST(BenchServe, AModelWithEosIdsStillRunsEveryReplyToMaxTokens) {
    const fs::path dir = test::scratch_dir("deltabit_test_bench_serve_eos");
    fs::remove_all(dir);
    const fs::path model = test::server_model(dir / "model");
    // Every token an EOS: a server that honoured them would end each reply after its first token.
    json config = json::parse(std::ifstream(model / "config.json"));
    json every_id = json::array();
    for (int id = 0; id < 256; ++id) every_id.push_back(id);
    config["eos_token_id"] = every_id;
    std::ofstream(model / "config.json") << config.dump();

    const test::CommandResult r = test::run_deltabit(
        "bench --serve -m '" + model.string() + "' --backend cpu --threads 1 --streams 2 --requests 2 --prompts 4 "
        "--decode-tokens 5 --no-history",
        test::Stderr::discard);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // The table: a header, the level's row, and the note saying what was done about EOS.
    EXPECT_NE(r.output.find("agg tok/s"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("\nserve2 "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("note: the model's EOS ids were hidden from the server"), std::string::npos) << r.output;
    fs::remove_all(dir);
}

TEST(BenchServe, OptionsOfTheOtherModesAreRefusedWithOneLine) {
    for (const auto& [args, expected] : std::vector<std::pair<std::string, std::string>>{
             {"bench --serve --geometry tiny-qwen3 --backend cpu --batch 8", "--batch does not apply to --serve"},
             {"bench --serve --geometry tiny-qwen3 --backend cpu --prompts 4,8", "give one prompt length"},
             {"bench --serve --geometry tiny-qwen3 --backend cpu --decode-tokens 1", "expected 2 or more"},
             {"bench --serve --geometry tiny-qwen3 --backend cpu --streams 0", "below the minimum 1"},
             {"bench --geometry tiny-qwen3 --backend cpu --streams 4", "belong to --serve"}}) {
        const test::CommandResult r = test::run_deltabit(args + " --no-history");
        EXPECT_NE(r.exit_code, 0) << args;
        EXPECT_NE(r.output.find(expected), std::string::npos) << args << "\n" << r.output;
    }
}

}  // namespace
}  // namespace deltabit
