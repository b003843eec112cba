#include "train/curves_plot.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace deltabit::train {
namespace {

// The canvas and the plot frame inside it (pixels). 900 × 500 reads at its natural size on a laptop
// screen and in a GitHub README; the margins hold the tick labels, the title and up to four note lines.
constexpr double kWidth = 900, kHeight = 500;
constexpr double kLeft = 72, kRight = 876, kTop = 70, kBottom = 398;
constexpr int kMaxXTicks = 10, kMaxYTicks = 8;
// Runs shorter than this keep their first steps in the y range: 5% of them is under one step.
constexpr size_t kMinPointsToLeaveOutStart = 20;
constexpr double kStartFraction = 0.05;
// The eval series gets a marker per point up to this many; beyond, the markers merge into a line anyway.
constexpr size_t kMaxEvalMarkers = 100;

const char* const kTrainColor = "#1f77b4";
const char* const kEvalColor = "#d62728";

struct Point {
    double step, value;
};

std::string xml_escape(std::string_view text) {
    std::string out;
    for (char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&apos;"; break;
            default: out += c;
        }
    }
    return out;
}

// 14041088 → "14.0M": the subtitle's token count.
std::string human_count(int64_t n) {
    if (n >= 1'000'000'000) return fmt::format("{:.1f}G", double(n) / 1e9);
    if (n >= 1'000'000) return fmt::format("{:.1f}M", double(n) / 1e6);
    if (n >= 10'000) return fmt::format("{:.1f}K", double(n) / 1e3);
    return fmt::format("{}", n);
}

double quantile(std::vector<double> values, double q) {
    const size_t at = size_t(q * double(values.size() - 1) + 0.5);
    std::nth_element(values.begin(), values.begin() + at, values.end());
    return values[at];
}

// Pixel position of a value; far-off values are pulled in to a few frames' distance (the clip path
// hides them either way) so the numbers in the file stay short.
double clamp_pixel(double p) { return std::clamp(p, -4 * kHeight, 5 * kHeight); }

// Keeps every point while there are at most two per pixel column; beyond, each column's lowest and
// highest value in step order, so the envelope of the noise and any spike stay visible.
std::vector<Point> thin_to_columns(const std::vector<Point>& points, double x_lo, double x_hi) {
    const double columns = kRight - kLeft;
    if (double(points.size()) <= 2 * columns) return points;
    auto column_of = [&](const Point& p) {
        return std::min(std::floor((p.step - x_lo) / (x_hi - x_lo) * columns), columns - 1);
    };
    std::vector<Point> out;
    size_t begin = 0;
    while (begin < points.size()) {
        const double column = column_of(points[begin]);
        size_t end = begin, lowest = begin, highest = begin;
        while (end < points.size() && column_of(points[end]) == column) {
            if (points[end].value < points[lowest].value) lowest = end;
            if (points[end].value > points[highest].value) highest = end;
            ++end;
        }
        out.push_back(points[std::min(lowest, highest)]);
        if (lowest != highest) out.push_back(points[std::max(lowest, highest)]);
        begin = end;
    }
    return out;
}

struct Series {
    std::vector<Point> train, eval;
    size_t nonfinite_train = 0, nonfinite_eval = 0;
    int64_t first_nonfinite_step = 0;
};

Series split_series(std::span<const CurveRow> rows) {
    Series s;
    for (const CurveRow& r : rows) {
        const double bits = r.loss / std::numbers::ln2;
        if (std::isfinite(bits)) {
            s.train.push_back({double(r.step), bits});
        } else {
            ++s.nonfinite_train;
            if (s.first_nonfinite_step == 0) s.first_nonfinite_step = r.step;
        }
        if (!r.eval_bpb) continue;
        if (std::isfinite(*r.eval_bpb)) {
            s.eval.push_back({double(r.step), *r.eval_bpb});
        } else {
            ++s.nonfinite_eval;
            if (s.first_nonfinite_step == 0) s.first_nonfinite_step = r.step;
        }
    }
    return s;
}

struct YRange {
    double lo = 0, hi = 0;
    bool left_out_start = false, left_out_outliers = false;
    int64_t fit_after_step = 0;  // steps ≤ this did not set the range
};

// The y range of the curves as the header describes it: the run's start and the loss outliers out.
YRange fit_y_range(const Series& s, double first_step, double last_step) {
    YRange r;
    r.left_out_start = s.train.size() >= kMinPointsToLeaveOutStart;
    const double cutoff = r.left_out_start ? first_step + kStartFraction * (last_step - first_step) : -INFINITY;
    r.fit_after_step = r.left_out_start ? int64_t(std::floor(cutoff)) : 0;
    std::vector<double> train, eval;
    for (const Point& p : s.train)
        if (p.step > cutoff) train.push_back(p.value);
    for (const Point& p : s.eval)
        if (p.step > cutoff) eval.push_back(p.value);
    if (train.empty() && eval.empty()) {  // everything in the start: fit it all
        r.left_out_start = false;
        r.fit_after_step = 0;
        for (const Point& p : s.train) train.push_back(p.value);
        for (const Point& p : s.eval) eval.push_back(p.value);
    }
    double lo = INFINITY, hi = -INFINITY;
    if (!train.empty()) {
        const double q10 = quantile(train, 0.1), q90 = quantile(train, 0.9), spread = q90 - q10;
        const double floor = q10 - 3 * spread, ceiling = q90 + 3 * spread;
        for (double v : train) {
            if (v < floor || v > ceiling) {
                r.left_out_outliers = true;
                continue;
            }
            lo = std::min(lo, v);
            hi = std::max(hi, v);
        }
    }
    for (double v : eval) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
    }
    r.lo = lo;
    r.hi = hi;
    return r;
}

std::string polyline(const std::vector<Point>& points, const char* css_class, const char* color, double width,
                     auto&& sx, auto&& sy) {
    std::string out = fmt::format(R"~(<polyline class="{}" clip-path="url(#frame)" fill="none" stroke="{}" )~"
                                  R"(stroke-width="{}" stroke-linejoin="round" points=")",
                                  css_class, color, width);
    for (size_t i = 0; i < points.size(); ++i)
        out += fmt::format("{}{:.1f},{:.1f}", i ? " " : "", sx(points[i].step), sy(points[i].value));
    return out + "\"/>\n";
}

std::string tick_label(double value, int decimals) {
    std::string text = fmt::format("{:.{}f}", value, decimals);
    return text == "-0" ? "0" : text;
}

}  // namespace

AxisTicks round_ticks(double lo, double hi, int max_ticks, double min_step) {
    if (!(hi > lo)) {  // one value: a range around it
        const double pad = std::max({std::abs(lo) * 0.05, min_step, 1e-3});
        lo -= pad;
        hi += pad;
    }
    max_ticks = std::max(max_ticks, 2);
    // The 1e-9 keeps a bound that is a multiple of the step up to rounding from growing a tick.
    auto first = [&](double step) { return std::floor(lo / step + 1e-9); };
    auto last = [&](double step) { return std::ceil(hi / step - 1e-9); };
    double magnitude = std::pow(10.0, std::floor(std::log10((hi - lo) / max_ticks)));
    AxisTicks t;
    for (t.step = 0; t.step == 0; magnitude *= 10) {
        for (double m : {1.0, 2.0, 5.0}) {
            const double step = m * magnitude;
            if (step >= min_step && last(step) - first(step) + 1 <= max_ticks) {
                t.step = step;
                break;
            }
        }
    }
    const double k_lo = first(t.step), k_hi = last(t.step);
    t.lo = k_lo * t.step;
    t.hi = k_hi * t.step;
    for (double k = k_lo; k <= k_hi; ++k) t.values.push_back(k * t.step);
    t.decimals = std::max(0, int(-std::floor(std::log10(t.step) + 1e-9)));
    return t;
}

std::string plot_curves_svg(std::span<const CurveRow> rows, const std::string& title, const std::string& subtitle) {
    const Series s = split_series(rows);
    std::string svg = fmt::format(
        R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" viewBox="0 0 {0} {1}" )"
        R"(font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">)"
        "\n<title>{2}: training curves</title>\n"
        R"(<rect width="{0}" height="{1}" fill="white"/>)"
        "\n",
        kWidth, kHeight, xml_escape(title));
    std::string about = subtitle;
    if (!rows.empty())
        about += fmt::format("{}{} step{}", about.empty() ? "" : " · ", rows.back().step,
                             rows.back().step == 1 ? "" : "s") +
                 (rows.back().tokens > 0 ? fmt::format(", {} tokens", human_count(rows.back().tokens)) : "");
    svg += fmt::format(R"(<text class="title" x="{}" y="26" font-size="17" font-weight="bold">{}</text>)"
                       "\n"
                       R"(<text class="subtitle" x="{}" y="46" fill="#555">{}</text>)"
                       "\n",
                       kLeft, xml_escape(title), kLeft, xml_escape(about));
    svg += fmt::format(R"(<defs><clipPath id="frame"><rect x="{}" y="{}" width="{}" height="{}"/></clipPath></defs>)"
                       "\n",
                       kLeft, kTop, kRight - kLeft, kBottom - kTop);
    const std::string frame = fmt::format(
        R"(<rect class="frame" x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#333" stroke-width="1"/>)"
        "\n",
        kLeft, kTop, kRight - kLeft, kBottom - kTop);

    if (s.train.empty() && s.eval.empty()) {
        const std::string message =
            rows.empty() ? "no steps recorded yet"
                         : fmt::format("no finite value to plot: {} step{}, every loss NaN or infinite", rows.size(),
                                       rows.size() == 1 ? "" : "s");
        svg += frame;
        svg += fmt::format(R"(<text class="empty" x="{}" y="{}" text-anchor="middle" font-size="15" fill="#555">)"
                           "{}</text>"
                           "\n</svg>\n",
                           (kLeft + kRight) / 2, (kTop + kBottom) / 2, xml_escape(message));
        return svg;
    }

    // Axes. Steps start at 1, the x axis at 0; its ticks are whole steps.
    double first_step = INFINITY, last_step = -INFINITY;
    for (const std::vector<Point>* series : {&s.train, &s.eval})
        for (const Point& p : *series) {
            first_step = std::min(first_step, p.step);
            last_step = std::max(last_step, p.step);
        }
    const AxisTicks x = round_ticks(0.0, last_step, kMaxXTicks, 1.0);
    const YRange fit = fit_y_range(s, first_step, last_step);
    const AxisTicks y = round_ticks(fit.lo, fit.hi, kMaxYTicks);
    auto sx = [&](double step) { return kLeft + (step - x.lo) / (x.hi - x.lo) * (kRight - kLeft); };
    auto sy = [&](double v) { return clamp_pixel(kBottom - (v - y.lo) / (y.hi - y.lo) * (kBottom - kTop)); };

    svg += R"(<g class="grid" stroke="#e4e4e4" stroke-width="1">)"
           "\n";
    for (double v : x.values)
        svg += fmt::format(R"(<line x1="{0:.1f}" y1="{1}" x2="{0:.1f}" y2="{2}"/>)"
                           "\n",
                           sx(v), kTop, kBottom);
    for (double v : y.values)
        svg += fmt::format(R"(<line x1="{0}" y1="{1:.1f}" x2="{2}" y2="{1:.1f}"/>)"
                           "\n",
                           kLeft, sy(v), kRight);
    svg += "</g>\n";
    svg += R"(<g class="x-ticks" text-anchor="middle" fill="#333">)"
           "\n";
    for (double v : x.values)
        svg += fmt::format(R"(<text class="tick-x" x="{:.1f}" y="{}">{}</text>)"
                           "\n",
                           sx(v), kBottom + 16, tick_label(v, x.decimals));
    svg += "</g>\n";
    svg += R"(<g class="y-ticks" text-anchor="end" fill="#333">)"
           "\n";
    for (double v : y.values)
        svg += fmt::format(R"(<text class="tick-y" x="{}" y="{:.1f}">{}</text>)"
                           "\n",
                           kLeft - 6, sy(v) + 4, tick_label(v, y.decimals));
    svg += "</g>\n";
    svg += fmt::format(R"(<text class="axis-label" x="{}" y="{}" text-anchor="middle">optimizer step</text>)"
                       "\n"
                       R"~(<text class="axis-label" transform="translate(20 {}) rotate(-90)" text-anchor="middle">)~"
                       "bits per byte</text>\n",
                       (kLeft + kRight) / 2, kBottom + 36, (kTop + kBottom) / 2);

    // The curves: the noisy per-step loss thin and under, the eval on top.
    const std::vector<Point> train = thin_to_columns(s.train, x.lo, x.hi);
    if (!train.empty()) svg += polyline(train, "train-loss", kTrainColor, 1.2, sx, sy);
    if (!s.eval.empty()) {
        svg += polyline(s.eval, "eval-bpb", kEvalColor, 2, sx, sy);
        if (s.eval.size() <= kMaxEvalMarkers) {
            svg += fmt::format(R"~(<g class="eval-points" fill="{}" clip-path="url(#frame)">)~"
                               "\n",
                               kEvalColor);
            for (const Point& p : s.eval)
                svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3.5"/>)"
                                   "\n",
                                   sx(p.step), sy(p.value));
            svg += "</g>\n";
        }
    }
    svg += frame;

    // Legend, top right inside the frame (loss curves fall away from that corner).
    const std::string train_entry =
        s.train.empty() ? "training loss: none finite"
                        : fmt::format("training loss (last {:.4f} at step {:.0f})", s.train.back().value,
                                      s.train.back().step);
    const std::string eval_entry =
        s.eval.empty() ? "held-out eval: none yet"
                       : fmt::format("held-out eval (last {:.4f} at step {:.0f})", s.eval.back().value,
                                     s.eval.back().step);
    // ~6.8 pixels a character at 12 px covers this font's digits and lower case.
    const double legend_width = 44 + 6.8 * double(std::max(train_entry.size(), eval_entry.size()));
    const double lx = kRight - 10 - legend_width, ly = kTop + 10;
    svg += fmt::format(
        R"(<g class="legend"><rect x="{0:.1f}" y="{1}" width="{2:.1f}" height="46" fill="white" )"
        R"(fill-opacity="0.9" stroke="#bbb"/>)"
        "\n"
        R"(<line x1="{3:.1f}" y1="{4}" x2="{5:.1f}" y2="{4}" stroke="{6}" stroke-width="2"/>)"
        R"(<text x="{7:.1f}" y="{8}">{9}</text>)"
        "\n"
        R"(<line x1="{3:.1f}" y1="{10}" x2="{5:.1f}" y2="{10}" stroke="{11}" stroke-width="2"/>)"
        R"(<circle cx="{12:.1f}" cy="{10}" r="3.5" fill="{11}"/>)"
        R"(<text x="{7:.1f}" y="{13}">{14}</text></g>)"
        "\n",
        lx, ly, legend_width, lx + 8, ly + 15, lx + 30, kTrainColor, lx + 36, ly + 19, xml_escape(train_entry),
        ly + 32, kEvalColor, lx + 19, ly + 36, xml_escape(eval_entry));

    // Notes: the unit always; then what was not drawn as is.
    std::vector<std::string> notes = {
        "Training loss: the step's mean cross entropy, nats per byte (curves.csv) ÷ ln 2. "
        "Held-out eval: bits per byte on the fixed held-out window."};
    size_t outside = 0;
    for (const std::vector<Point>* series : {&s.train, &s.eval})
        for (const Point& p : *series)
            if (p.value < y.lo - 1e-9 * (y.hi - y.lo) || p.value > y.hi + 1e-9 * (y.hi - y.lo)) ++outside;
    if (outside > 0) {
        std::string why;
        if (fit.left_out_start)
            why = fmt::format("the steps after step {} (the first 5% left out)", fit.fit_after_step);
        if (fit.left_out_outliers) why += std::string(why.empty() ? "" : ", ") + "without loss outliers";
        notes.push_back(fmt::format("The y axis fits {}: {} point{} outside it {} cut at the frame.", why, outside,
                                    outside == 1 ? "" : "s", outside == 1 ? "is" : "are"));
    }
    if (s.nonfinite_train + s.nonfinite_eval > 0) {
        std::vector<std::string> what;
        if (s.nonfinite_train > 0)
            what.push_back(fmt::format("{} loss{}", s.nonfinite_train, s.nonfinite_train == 1 ? "" : "es"));
        if (s.nonfinite_eval > 0)
            what.push_back(fmt::format("{} eval value{}", s.nonfinite_eval, s.nonfinite_eval == 1 ? "" : "s"));
        notes.push_back(fmt::format("Left out as NaN or infinite: {} (the first at step {}).", fmt::join(what, " and "),
                                    s.first_nonfinite_step));
    }
    if (train.size() < s.train.size())
        notes.push_back(fmt::format("Training loss thinned to each pixel column's lowest and highest value ({} of {} "
                                    "points).",
                                    train.size(), s.train.size()));
    for (size_t i = 0; i < notes.size(); ++i)
        svg += fmt::format(R"(<text class="note" x="12" y="{}" font-size="11" fill="#555">{}</text>)"
                           "\n",
                           kBottom + 54 + 14 * double(i), xml_escape(notes[i]));
    return svg + "</svg>\n";
}

}  // namespace deltabit::train
