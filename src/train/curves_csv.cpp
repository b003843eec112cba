#include "train/curves_csv.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>

namespace deltabit::train {
namespace {

constexpr std::array<std::string_view, 7> kColumns = {"step",      "tokens",       "lr",      "loss",
                                                      "grad_norm", "tokens_per_s", "eval_bpb"};
constexpr size_t kStep = 0, kTokens = 1, kLr = 2, kLoss = 3, kGradNorm = 4, kTokensPerS = 5, kEvalBpb = 6;

std::vector<std::string_view> split_fields(std::string_view line) {
    std::vector<std::string_view> fields;
    size_t start = 0;
    while (true) {
        const size_t comma = line.find(',', start);
        fields.push_back(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
        if (comma == std::string_view::npos) return fields;
        start = comma + 1;
    }
}

// The whole field as a double; "nan", "inf" and "-inf" included (the writer prints a diverged step so).
bool parse_double(std::string_view field, double& value) {
    if (field.empty()) return false;
    const char* begin = field.data() + (field[0] == '+' ? 1 : 0);
    const auto [end, ec] = std::from_chars(begin, field.data() + field.size(), value);
    return ec == std::errc() && end == field.data() + field.size();
}

bool parse_int(std::string_view field, int64_t& value) {
    const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
    return !field.empty() && ec == std::errc() && end == field.data() + field.size();
}

}  // namespace

std::string curves_csv_header() {
    std::string header;
    for (std::string_view column : kColumns) header += fmt::format("{}{}", header.empty() ? "" : ",", column);
    return header + "\n";
}

std::string format_curve_row(const CurveRow& r) {
    return fmt::format("{},{},{:.6g},{:.6f},{:.6g},{:.1f},{}\n", r.step, r.tokens, r.lr, r.loss, r.grad_norm,
                       r.tokens_per_s, r.eval_bpb ? fmt::format("{:.5f}", *r.eval_bpb) : std::string());
}

std::vector<CurveRow> parse_curves_csv(std::string_view text, std::string_view name) {
    if (text.empty()) fail("{}: empty file (a curves.csv starts with a header line: step,tokens,...)", name);
    std::vector<std::string_view> lines;
    for (size_t start = 0; start < text.size();) {
        const size_t newline = text.find('\n', start);
        const size_t end = newline == std::string_view::npos ? text.size() : newline;
        std::string_view line = text.substr(start, end - start);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        lines.push_back(line);
        start = newline == std::string_view::npos ? text.size() : newline + 1;
    }
    const bool last_line_complete = text.back() == '\n';

    // Where each known column sits in this file (npos: absent).
    const std::vector<std::string_view> header = split_fields(lines[0]);
    std::array<size_t, kColumns.size()> at;
    at.fill(std::string_view::npos);
    for (size_t i = 0; i < header.size(); ++i)
        for (size_t c = 0; c < kColumns.size(); ++c)
            if (header[i] == kColumns[c]) at[c] = i;
    for (size_t c : {kStep, kLoss, kEvalBpb})
        if (at[c] == std::string_view::npos)
            fail("{}: line 1: the header has no '{}' column (is this a curves.csv of deltabit train? it starts "
                 "'{}')",
                 name, kColumns[c], lines[0].substr(0, 60));

    std::vector<CurveRow> rows;
    for (size_t n = 1; n < lines.size(); ++n) {
        const std::string_view line = lines[n];
        if (line.empty()) {
            if (n + 1 == lines.size()) break;
            fail("{}: line {}: empty line inside the file", name, n + 1);
        }
        const std::vector<std::string_view> fields = split_fields(line);
        if (fields.size() < header.size() && n + 1 == lines.size() && !last_line_complete) break;  // being written
        if (fields.size() != header.size())
            fail("{}: line {}: {} fields, the header has {}", name, n + 1, fields.size(), header.size());
        CurveRow row;
        if (!parse_int(fields[at[kStep]], row.step) || row.step < 1)
            fail("{}: line {}: step '{}' is not a whole number ≥ 1", name, n + 1, fields[at[kStep]]);
        auto number = [&](size_t column, double& value) {
            if (at[column] == std::string_view::npos) return;
            if (!parse_double(fields[at[column]], value))
                fail("{}: line {}: {} '{}' is not a number", name, n + 1, kColumns[column], fields[at[column]]);
        };
        if (at[kTokens] != std::string_view::npos && !parse_int(fields[at[kTokens]], row.tokens))
            fail("{}: line {}: tokens '{}' is not a whole number", name, n + 1, fields[at[kTokens]]);
        number(kLr, row.lr);
        number(kLoss, row.loss);
        number(kGradNorm, row.grad_norm);
        number(kTokensPerS, row.tokens_per_s);
        if (!fields[at[kEvalBpb]].empty()) {
            double bpb = 0.0;
            number(kEvalBpb, bpb);
            row.eval_bpb = bpb;
        }
        // A resumed run writes again the steps after its checkpoint: the later rows are the run's record.
        while (!rows.empty() && rows.back().step >= row.step) rows.pop_back();
        rows.push_back(row);
    }
    return rows;
}

}  // namespace deltabit::train
