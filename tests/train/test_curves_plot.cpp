// The training record: curves.csv reads back what the trainer writes (and refuses what it did not write,
// naming the line), and the SVG drawn from it is well-formed, has both series with every point, round
// ticks, and a y range that an early or a single spike does not flatten.
#include "svg_check.h"
#include "train/curves_csv.h"
#include "train/curves_plot.h"

#include "core/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numbers>

namespace deltabit {
namespace {

using train::CurveRow;

std::vector<CurveRow> decaying_run(int steps, int eval_every) {
    std::vector<CurveRow> rows;
    for (int s = 1; s <= steps; ++s) {
        CurveRow r;
        r.step = s;
        r.tokens = 1024 * s;
        r.loss = 1.0 + 2.0 * std::exp(-s / 40.0) + 0.02 * std::sin(s);  // nats
        if (s % eval_every == 0 || s == steps) r.eval_bpb = (1.05 + 2.0 * std::exp(-s / 40.0)) / std::numbers::ln2;
        rows.push_back(r);
    }
    return rows;
}

// A run whose loss is flat from the first step: nothing to leave out of the y range.
std::vector<CurveRow> flat_run(int steps, int eval_every) {
    std::vector<CurveRow> rows = decaying_run(steps, eval_every);
    for (CurveRow& r : rows) {
        r.loss = 2.0 + 0.02 * std::sin(r.step);
        if (r.eval_bpb) r.eval_bpb = 2.1 / std::numbers::ln2;
    }
    return rows;
}

std::string csv_of(const std::vector<CurveRow>& rows) {
    std::string text = train::curves_csv_header();
    for (const CurveRow& r : rows) text += train::format_curve_row(r);
    return text;
}

// Throws through parse_curves_csv and returns the message ("" if it did not throw).
std::string parse_error(const std::string& text) {
    try {
        train::parse_curves_csv(text, "runs/x/curves.csv");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

test::SvgDocument parsed(const std::string& svg) {
    test::SvgDocument doc = test::parse_svg(svg);
    EXPECT_EQ(doc.error, "") << svg;
    return doc;
}

size_t points_of(const test::SvgDocument& doc, const std::string& css_class) {
    const auto lines = doc.with_class(css_class);
    return lines.empty() ? 0 : test::polyline_points(lines[0]).size();
}

std::vector<double> tick_values(const test::SvgDocument& doc, const std::string& css_class) {
    std::vector<double> values;
    for (const test::SvgElement& e : doc.with_class(css_class)) values.push_back(std::stod(e.text));
    return values;
}

// Round: consecutive ticks differ by one step that is 1, 2 or 5 × 10^k, and every tick is a multiple of it.
void expect_round_ticks(const std::vector<double>& ticks) {
    ASSERT_GE(ticks.size(), 2u);
    const double step = ticks[1] - ticks[0];
    const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
    EXPECT_TRUE(std::abs(mantissa - 1) < 1e-6 || std::abs(mantissa - 2) < 1e-6 || std::abs(mantissa - 5) < 1e-6)
        << "step " << step;
    for (size_t i = 0; i < ticks.size(); ++i) {
        EXPECT_NEAR(ticks[i] - ticks[0], double(i) * step, 1e-9 * std::abs(step) * double(ticks.size()));
        EXPECT_NEAR(ticks[i] / step, std::round(ticks[i] / step), 1e-6) << ticks[i];
    }
}

// The frame's top and bottom (pixels), from the clip path the curves are drawn through.
std::pair<double, double> frame_top_bottom(const test::SvgDocument& doc) {
    for (size_t i = 0; i + 1 < doc.elements.size(); ++i)
        if (doc.elements[i].name == "clipPath") {
            const test::SvgElement& r = doc.elements[i + 1];
            const double y = std::stod(r.attribute("y"));
            return {y, y + std::stod(r.attribute("height"))};
        }
    ADD_FAILURE() << "no clip path";
    return {0, 0};
}

std::string notes_of(const test::SvgDocument& doc) {
    std::string all;
    for (const test::SvgElement& e : doc.with_class("note")) all += e.text + "\n";
    return all;
}

TEST(SvgCheck, RefusesMalformedDocuments) {
    EXPECT_EQ(test::parse_svg(R"(<svg a="1"><g><line/></g><text>x &amp; y</text></svg>)").error, "");
    EXPECT_NE(test::parse_svg("<svg><g></svg>").error, "");
    EXPECT_NE(test::parse_svg("<svg><g></g>").error, "");
    EXPECT_NE(test::parse_svg("<svg a=1></svg>").error, "");
    EXPECT_NE(test::parse_svg(R"(<svg a="1" a="2"></svg>)").error, "");
    EXPECT_NE(test::parse_svg("<svg><text>a & b</text></svg>").error, "");
    EXPECT_NE(test::parse_svg("<svg><text>a < b</text></svg>").error, "");
    EXPECT_NE(test::parse_svg("<svg></svg><svg></svg>").error, "");
    EXPECT_NE(test::parse_svg("<g></g>").error, "");
}

TEST(CurvesCsv, ReadsTheShippedRecord) {
    const std::filesystem::path path = std::filesystem::path(DELTABIT_SOURCE_DIR) / "models" /
                                       "bytelm-hybrid-14m.curves.csv";
    std::ifstream in(path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::vector<CurveRow> rows = train::parse_curves_csv(text, path.string());
    ASSERT_EQ(rows.size(), 857u);
    EXPECT_EQ(rows.front().step, 1);
    EXPECT_EQ(rows.back().tokens, 14041088);
    EXPECT_DOUBLE_EQ(rows.front().loss, 5.637724);
    size_t evals = 0;
    for (const CurveRow& r : rows) evals += r.eval_bpb.has_value();
    EXPECT_EQ(evals, 5u);  // every 214 steps and the last
    EXPECT_DOUBLE_EQ(*rows.back().eval_bpb, 1.71612);
    EXPECT_EQ(csv_of(rows), text);  // the writer's format reads back to the same bytes
}

TEST(CurvesCsv, AResumedRunsRowsReplaceTheOnesItWroteAgain) {
    std::string text = csv_of(decaying_run(6, 3));
    const std::vector<CurveRow> again = decaying_run(5, 3);
    text += train::format_curve_row(again[3]) + train::format_curve_row(again[4]);  // steps 4, 5 once more
    const std::vector<CurveRow> rows = train::parse_curves_csv(text, "c.csv");
    ASSERT_EQ(rows.size(), 5u);
    for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i].step, int64_t(i + 1));
}

TEST(CurvesCsv, NanAndInfAreNumbersAndAHalfWrittenLastLineIsLeftOut) {
    const std::string text = "step,tokens,lr,loss,grad_norm,tokens_per_s,eval_bpb\n"
                             "1,10,0.001,nan,inf,5.0,\n"
                             "2,20,0.001,2.5,1.0,5.0,-inf\n"
                             "3,30,0.0";
    const std::vector<CurveRow> rows = train::parse_curves_csv(text, "c.csv");
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_TRUE(std::isnan(rows[0].loss));
    EXPECT_FALSE(rows[0].eval_bpb.has_value());
    EXPECT_TRUE(std::isinf(*rows[1].eval_bpb));
}

TEST(CurvesCsv, BadFilesNameTheFileTheLineAndTheProblem) {
    EXPECT_EQ(parse_error(""),
              "runs/x/curves.csv: empty file (a curves.csv starts with a header line: step,tokens,...)");
    EXPECT_EQ(parse_error("step,tokens,lr\n1,2,3\n"),
              "runs/x/curves.csv: line 1: the header has no 'loss' column (is this a curves.csv of deltabit train? it "
              "starts 'step,tokens,lr')");
    const std::string header = train::curves_csv_header();
    EXPECT_EQ(parse_error(header + "1,10,0.1,2.0,1,5,\n2,20,0.1,abc,1,5,\n"),
              "runs/x/curves.csv: line 3: loss 'abc' is not a number");
    EXPECT_EQ(parse_error(header + "1,10,0.1,2.0,1,5\n2,20,0.1,2.0,1,5,\n"),
              "runs/x/curves.csv: line 2: 6 fields, the header has 7");
    EXPECT_EQ(parse_error(header + "0,10,0.1,2.0,1,5,\n"),
              "runs/x/curves.csv: line 2: step '0' is not a whole number ≥ 1");
    EXPECT_EQ(parse_error(header + "1,10,0.1,2.0,1,5,\n\n2,20,0.1,2.0,1,5,\n"),
              "runs/x/curves.csv: line 3: empty line inside the file");
    EXPECT_EQ(parse_error(header + "1,10,0.1,2.0,1,5,2.x\n"),
              "runs/x/curves.csv: line 2: eval_bpb '2.x' is not a number");
    EXPECT_TRUE(train::parse_curves_csv(header, "c.csv").empty());  // a run that has not stepped yet
}

TEST(RoundTicks, StepsAreOneTwoOrFiveTimesAPowerOfTenAndCoverTheRange) {
    struct Case {
        double lo, hi;
        int max_ticks;
        double min_step;
    };
    for (const Case c : {Case{0, 857, 10, 1}, Case{1.6, 3.45, 8, 0}, Case{0, 1, 10, 1}, Case{0, 3, 10, 1},
                         Case{0.00123, 0.00131, 8, 0}, Case{-7.3, 12.2, 6, 0}, Case{0, 123456, 10, 1},
                         Case{1.7161, 1.7161, 8, 0}}) {
        const train::AxisTicks t = train::round_ticks(c.lo, c.hi, c.max_ticks, c.min_step);
        EXPECT_LE(t.lo, c.lo);
        EXPECT_GE(t.hi, c.hi);
        EXPECT_LE(int(t.values.size()), c.max_ticks) << c.lo << " " << c.hi;
        EXPECT_GE(t.step, c.min_step);
        expect_round_ticks(t.values);
        // The next smaller round step would need more ticks than allowed (or fall below min_step): the
        // step is the smallest that fits.
        const double mantissa = std::round(t.step / std::pow(10.0, std::floor(std::log10(t.step) + 1e-9)));
        const double smaller = t.step * (mantissa == 1 ? 0.5 : mantissa == 2 ? 0.5 : 0.4);
        const double smaller_count = std::ceil(c.hi / smaller - 1e-9) - std::floor(c.lo / smaller + 1e-9) + 1;
        EXPECT_TRUE(smaller < c.min_step || smaller_count > c.max_ticks || c.hi == c.lo) << c.lo << " " << c.hi;
    }
    const train::AxisTicks steps = train::round_ticks(0, 857, 10, 1);
    EXPECT_EQ(steps.step, 100);
    EXPECT_EQ(steps.hi, 900);
    EXPECT_EQ(steps.decimals, 0);
    EXPECT_EQ(train::round_ticks(1.6, 3.45, 8).step, 0.5);
    EXPECT_EQ(train::round_ticks(1.6, 3.45, 8).decimals, 1);
}

TEST(CurvesPlot, DrawsEveryPointOfBothSeriesWithRoundTicksAndALegend) {
    const std::vector<CurveRow> rows = decaying_run(120, 25);  // evals at 25, 50, 75, 100, 120
    const test::SvgDocument doc = parsed(train::plot_curves_svg(rows, "tiny <run> & co", "config runs/tiny.toml"));
    EXPECT_EQ(doc.elements[0].attribute("width"), "900");
    EXPECT_EQ(doc.elements[0].attribute("height"), "500");
    EXPECT_EQ(points_of(doc, "train-loss"), 120u);
    EXPECT_EQ(points_of(doc, "eval-bpb"), 5u);
    EXPECT_EQ(doc.named("circle").size(), 5u + 1u);  // the eval markers and the legend's
    expect_round_ticks(tick_values(doc, "tick-x"));
    expect_round_ticks(tick_values(doc, "tick-y"));
    EXPECT_EQ(tick_values(doc, "tick-x").front(), 0);
    EXPECT_GE(tick_values(doc, "tick-x").back(), 120);
    EXPECT_EQ(doc.with_class("title")[0].text, "tiny &lt;run&gt; &amp; co");
    EXPECT_EQ(doc.with_class("subtitle")[0].text, "config runs/tiny.toml · 120 steps, 122.9K tokens");
    EXPECT_NE(notes_of(doc).find("÷ ln 2"), std::string::npos);
    bool eval_in_legend = false;
    for (const test::SvgElement& e : doc.named("text"))
        eval_in_legend = eval_in_legend || e.text.find("held-out eval (last 1.6585 at step 120)") != std::string::npos;
    EXPECT_TRUE(eval_in_legend);
    // The training loss is drawn in bits: the last point sits where loss / ln 2 falls on the y ticks.
    const std::vector<double> y_ticks = tick_values(doc, "tick-y");
    const auto [top, bottom] = frame_top_bottom(doc);
    const double last_bits = rows.back().loss / std::numbers::ln2;
    const double expected_y =
        bottom - (last_bits - y_ticks.front()) / (y_ticks.back() - y_ticks.front()) * (bottom - top);
    EXPECT_NEAR(test::polyline_points(doc.with_class("train-loss")[0]).back().y, expected_y, 0.06);  // 1 decimal
}

TEST(CurvesPlot, AnEarlySpikeDoesNotSetTheYRange) {
    std::vector<CurveRow> rows = decaying_run(400, 100);
    rows[0].loss = 40.0;  // nats: 57.7 bits, 30× the rest of the run
    rows[1].loss = 20.0;
    const test::SvgDocument doc = parsed(train::plot_curves_svg(rows, "spike", ""));
    const std::vector<double> y_ticks = tick_values(doc, "tick-y");
    EXPECT_LT(y_ticks.back(), 5.0);  // the run after its start spans 1.45–~3 bits
    EXPECT_EQ(points_of(doc, "train-loss"), 400u);  // still drawn, cut by the frame
    const auto [top, bottom] = frame_top_bottom(doc);
    EXPECT_LT(test::polyline_points(doc.with_class("train-loss")[0])[0].y, top);
    const std::string notes = notes_of(doc);
    EXPECT_NE(notes.find("after step 20 (the first 5% left out)"), std::string::npos) << notes;
    EXPECT_NE(notes.find("outside it are cut at the frame"), std::string::npos) << notes;
    // Without a spike every point fits and no such note appears.
    const test::SvgDocument plain = parsed(train::plot_curves_svg(flat_run(400, 100), "plain", ""));
    EXPECT_EQ(notes_of(plain).find("cut at the frame"), std::string::npos) << notes_of(plain);
}

TEST(CurvesPlot, ASpikeMidRunIsAnOutlierNotTheRange) {
    std::vector<CurveRow> rows = flat_run(400, 100);
    rows[250].loss = 30.0;
    const test::SvgDocument doc = parsed(train::plot_curves_svg(rows, "spike", ""));
    EXPECT_LT(tick_values(doc, "tick-y").back(), 4.0);  // the rest is 2.86–2.92 bits, the eval 3.03
    EXPECT_NE(notes_of(doc).find("without loss outliers: 1 point outside it is cut"), std::string::npos)
        << notes_of(doc);
}

TEST(CurvesPlot, NoRowsGiveAnEmptyStateImage) {
    const test::SvgDocument doc = parsed(train::plot_curves_svg({}, "fresh", "config fresh.toml"));
    ASSERT_EQ(doc.with_class("empty").size(), 1u);
    EXPECT_EQ(doc.with_class("empty")[0].text, "no steps recorded yet");
    EXPECT_TRUE(doc.named("polyline").empty());
    EXPECT_EQ(doc.with_class("title")[0].text, "fresh");
}

TEST(CurvesPlot, OnePointAndNoEvalYet) {
    std::vector<CurveRow> one = decaying_run(1, 100);  // step 1 is the last: evaluated
    const test::SvgDocument doc = parsed(train::plot_curves_svg(one, "one", ""));
    EXPECT_EQ(points_of(doc, "train-loss"), 1u);
    EXPECT_EQ(points_of(doc, "eval-bpb"), 1u);
    expect_round_ticks(tick_values(doc, "tick-x"));
    expect_round_ticks(tick_values(doc, "tick-y"));
    for (double v : tick_values(doc, "tick-y")) EXPECT_TRUE(std::isfinite(v));

    std::vector<CurveRow> no_eval = decaying_run(30, 100);
    no_eval.back().eval_bpb.reset();
    const test::SvgDocument pending = parsed(train::plot_curves_svg(no_eval, "pending", ""));
    EXPECT_EQ(points_of(pending, "train-loss"), 30u);
    EXPECT_TRUE(pending.with_class("eval-bpb").empty());
    bool said = false;
    for (const test::SvgElement& e : pending.named("text")) said = said || e.text == "held-out eval: none yet";
    EXPECT_TRUE(said);
}

TEST(CurvesPlot, NonFiniteValuesAreLeftOutWithANote) {
    std::vector<CurveRow> rows = decaying_run(60, 20);
    rows[9].loss = NAN;
    rows[30].loss = INFINITY;
    rows[39].eval_bpb = NAN;  // step 40's evaluation
    const test::SvgDocument doc = parsed(train::plot_curves_svg(rows, "diverged", ""));
    EXPECT_EQ(points_of(doc, "train-loss"), 58u);
    EXPECT_EQ(points_of(doc, "eval-bpb"), 2u);  // steps 20 and 60
    for (const test::SvgPoint& p : test::polyline_points(doc.with_class("train-loss")[0]))
        EXPECT_TRUE(std::isfinite(p.x) && std::isfinite(p.y));
    EXPECT_NE(notes_of(doc).find("Left out as NaN or infinite: 2 losses and 1 eval value (the first at step 10)"),
              std::string::npos)
        << notes_of(doc);

    for (CurveRow& r : rows) r.loss = NAN, r.eval_bpb.reset();
    const test::SvgDocument none = parsed(train::plot_curves_svg(rows, "diverged", ""));
    ASSERT_EQ(none.with_class("empty").size(), 1u);
    EXPECT_EQ(none.with_class("empty")[0].text, "no finite value to plot: 60 steps, every loss NaN or infinite");
}

TEST(CurvesPlot, ALongRunIsThinnedPerPixelColumnKeepingItsExtremes) {
    std::vector<CurveRow> rows = decaying_run(20000, 1000);
    // A bump of 3 noise amplitudes at step 12346: inside the y range (not an outlier), the highest value
    // of the run's second half, and 1 of the ~25 steps sharing its pixel column: thinning must keep it.
    rows[12345].loss = 1.06;
    const test::SvgDocument doc = parsed(train::plot_curves_svg(rows, "long", ""));
    const std::vector<test::SvgPoint> points = test::polyline_points(doc.with_class("train-loss")[0]);
    EXPECT_LE(points.size(), 2u * 804u);  // two per column of the 804-pixel frame
    EXPECT_GE(points.size(), 804u);
    double highest_late = 1e9;  // smallest y = highest value, among points after step 10000 (x > 474)
    for (const test::SvgPoint& p : points)
        if (p.x > 474) highest_late = std::min(highest_late, p.y);
    const std::vector<double> y_ticks = tick_values(doc, "tick-y");
    const auto [top, bottom] = frame_top_bottom(doc);
    const double bump_y = bottom - (1.06 / std::numbers::ln2 - y_ticks.front()) / (y_ticks.back() - y_ticks.front()) *
                                       (bottom - top);
    EXPECT_NEAR(highest_late, bump_y, 0.06);
    EXPECT_EQ(points_of(doc, "eval-bpb"), 20u);
    EXPECT_NE(notes_of(doc).find("thinned"), std::string::npos);
}

}  // namespace
}  // namespace deltabit
