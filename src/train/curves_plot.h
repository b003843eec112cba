// The training curves as an SVG image (900 × 500), drawn from curves.csv's rows (train/curves_csv.h):
// the per-step training loss and the held-out eval against the step, both in bits per byte on one y
// axis (the loss is nats per predicted byte; ÷ ln 2 makes it the eval's unit, so the two curves compare
// directly), round ticks, grid, legend, the run's name in the title, and a note under the plot for
// anything it did not draw as is. A pure function of its inputs: the trainer redraws the image at every
// evaluation, `deltabit train --plot` from any curves file. No plotting library: SVG is text.
//
// What the image does with awkward data:
//   - NaN or inf values (a diverged step) are left out of the lines; a note counts them and names the
//     first step.
//   - The y range fits the steps after the first 5% of the run (runs of 20 or more steps) and leaves
//     out training-loss outliers (beyond q90 + 3 (q90 − q10), or as far below q10), so the loss of the
//     first steps (5.6 nats at step 1 of the default model, 1.2 at its end) or one spike does not flatten
//     the rest of the curve; points outside the range are cut at the frame and a note says how many.
//     Eval points after the first 5% are always inside the range.
//   - More training-loss points than 2 per pixel column are thinned to each column's lowest and
//     highest value (a spike survives thinning; a note says so).
//   - No rows, or no finite value: an image with the frame and a message instead of curves.
#pragma once

#include "train/curves_csv.h"

#include <span>
#include <string>
#include <vector>

namespace deltabit::train {

// Round axis ticks: step is 1, 2 or 5 × 10^k (and ≥ min_step), the smallest such with at most max_ticks
// ticks covering [lo, hi]; lo and hi are widened to multiples of step. An empty range (hi ≤ lo) is
// widened first.
struct AxisTicks {
    double lo = 0.0, hi = 1.0, step = 1.0;
    std::vector<double> values;  // lo, lo + step, ..., hi
    int decimals = 0;            // what a label needs to show step exactly
};
AxisTicks round_ticks(double lo, double hi, int max_ticks, double min_step = 0.0);

// `title` (the run's name) in bold at the top; `subtitle` (its config or the file drawn) under it,
// followed by the step and token count of the rows.
std::string plot_curves_svg(std::span<const CurveRow> rows, const std::string& title, const std::string& subtitle);

}  // namespace deltabit::train
