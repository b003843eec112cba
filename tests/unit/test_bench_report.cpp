// cli/bench_report.h without a GPU: a deep decode row is read against the same test at depth 0 (in the
// row, its note, the JSON and the history file), and rows without such a partner are left alone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/bench_report.h"

namespace deltabit {
namespace {

using cli::BenchMeasurement;

BenchMeasurement decode_row(int64_t depth, double tokens_per_s, std::string note = "graph replays 128/128") {
    BenchMeasurement m;
    m.test = "tg128";
    m.depth = depth;
    m.tokens = 128;
    m.tokens_per_s = tokens_per_s;
    m.seconds = 128.0 / tokens_per_s;
    m.unit_us = 1e6 / tokens_per_s;
    m.note = std::move(note);
    return m;
}

BenchMeasurement prefill_row() {
    BenchMeasurement m;
    m.test = "pp512";
    m.tokens = 512;
    m.tokens_per_s = 2400.0;
    m.note = "median of 3";
    return m;
}

TEST(BenchReport, DeepDecodeRowsAreReadAgainstDepthZero) {
    std::vector<BenchMeasurement> rows = {prefill_row(), decode_row(0, 289.8), decode_row(4096, 270.0),
                                          decode_row(32768, 238.5)};
    cli::relate_decode_depths(rows);
    EXPECT_FALSE(rows[0].pct_of_depth0);
    EXPECT_EQ(rows[0].note, "median of 3");
    EXPECT_FALSE(rows[1].pct_of_depth0) << "depth 0 is the reference, not related to itself";
    EXPECT_EQ(rows[1].note, "graph replays 128/128");
    ASSERT_TRUE(rows[2].pct_of_depth0);
    EXPECT_NEAR(*rows[2].pct_of_depth0, 100.0 * 270.0 / 289.8, 1e-9);
    ASSERT_TRUE(rows[3].pct_of_depth0);
    EXPECT_NEAR(*rows[3].pct_of_depth0, 100.0 * 238.5 / 289.8, 1e-9);
    EXPECT_EQ(rows[3].note, "82.3% of depth 0's tok/s; graph replays 128/128");

    // A second call changes nothing (the note is not prefixed twice).
    cli::relate_decode_depths(rows);
    EXPECT_EQ(rows[3].note, "82.3% of depth 0's tok/s; graph replays 128/128");
}

TEST(BenchReport, WithoutADepthZeroRowNothingIsRelated) {
    std::vector<BenchMeasurement> rows = {decode_row(32768, 238.5, ""), decode_row(4096, 270.0)};
    cli::relate_decode_depths(rows);
    for (const BenchMeasurement& m : rows) EXPECT_FALSE(m.pct_of_depth0) << m.depth;
    EXPECT_EQ(rows[0].note, "");
    // A depth-0 row of another test (tg64) is no partner for tg128.
    BenchMeasurement other = decode_row(0, 300.0);
    other.test = "tg64";
    rows.push_back(other);
    cli::relate_decode_depths(rows);
    EXPECT_FALSE(rows[0].pct_of_depth0);
}

// The history file append_history writes for `report` alone (a fresh temporary file each call).
std::string history_of(const cli::BenchReport& report) {
    const std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("deltabit_bench_report_" + std::to_string(::getpid()) + ".tsv");
    std::filesystem::remove(path);
    cli::append_history(path, report);
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    std::filesystem::remove(path);
    return text.str();
}

TEST(BenchReport, TheRatioReachesTheJsonAndTheHistory) {
    cli::BenchReport report;
    report.date = "2026-12-02";
    report.commit = "abc1234";
    report.gpu = "NVIDIA H200";
    report.copy_gb_s = 4226;
    report.model = "bonsai-27b";
    report.weight_type = "q1_0";
    report.kv_format = "f16";
    report.measurements = {decode_row(0, 289.8), decode_row(32768, 238.5, "")};
    cli::relate_decode_depths(report.measurements);

    const nlohmann::json json = cli::report_to_json(report);
    ASSERT_EQ(json["measurements"].size(), 2u);
    EXPECT_TRUE(json["measurements"][0]["pct_of_depth0"].is_null());
    EXPECT_NEAR(json["measurements"][1]["pct_of_depth0"].get<double>(), 100.0 * 238.5 / 289.8, 1e-9);
    EXPECT_EQ(json["measurements"][1]["note"], "82.3% of depth 0's tok/s");

    const std::string history = history_of(report);
    EXPECT_NE(history.find("\tKV f16; 82.3% of depth 0's tok/s\t"), std::string::npos) << history;
}

TEST(BenchReport, SwitchesSetInTheEnvironmentMarkEveryHistoryRow) {
    const char* environment[] = {"PATH=/usr/bin", "DELTABIT_GEMM_F16=1", "HOME=/root", "DELTABIT_GEMM_WS=0",
                                 "XDELTABIT_NOT=1", nullptr};
    EXPECT_EQ(cli::deltabit_switches(environment), "DELTABIT_GEMM_F16=1 DELTABIT_GEMM_WS=0");
    const char* none[] = {"PATH=/usr/bin", nullptr};
    EXPECT_EQ(cli::deltabit_switches(none), "");

    cli::BenchReport report;
    report.date = "2026-12-02";
    report.commit = "abc1234";
    report.gpu = "NVIDIA H200";
    report.model = "bonsai-27b";
    report.weight_type = "q1_0";
    report.kv_format = "f16";
    report.environment = cli::deltabit_switches(environment);
    BenchMeasurement m;
    m.test = "pp512";
    m.tokens = 512;
    m.unit_us = 101261.7;
    m.note = "median of 3";
    report.measurements = {m};
    EXPECT_EQ(cli::report_to_json(report)["environment"], "DELTABIT_GEMM_F16=1 DELTABIT_GEMM_WS=0");
    const std::string marked = history_of(report);
    EXPECT_NE(marked.find("\tKV f16; env DELTABIT_GEMM_F16=1 DELTABIT_GEMM_WS=0; median of 3\t"), std::string::npos)
        << marked;
    // Without switches the note is as before.
    report.environment.clear();
    const std::string plain = history_of(report);
    EXPECT_NE(plain.find("\tKV f16; median of 3\t"), std::string::npos) << plain;
}

}  // namespace
}  // namespace deltabit
