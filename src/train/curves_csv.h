// curves.csv, the training record `deltabit train` writes into run.out_dir: one row per optimizer step,
//
//   step,tokens,lr,loss,grad_norm,tokens_per_s,eval_bpb
//
// loss is the step's mean cross entropy in nats per predicted byte (train/trainer.h StepReport);
// eval_bpb is the held-out bits per byte, present only on evaluation steps (empty otherwise).
// The writer (cli/cmd_train.cpp) and the plot (train/curves_plot.h) share this one definition.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deltabit::train {

struct CurveRow {
    int64_t step = 0;
    int64_t tokens = 0;
    double lr = 0.0;
    double loss = 0.0;  // nats per predicted byte; may be NaN or inf when a step diverged
    double grad_norm = 0.0;
    double tokens_per_s = 0.0;
    std::optional<double> eval_bpb;  // nullopt: no evaluation at this step
};

// The header line, newline included.
std::string curves_csv_header();
// One row, newline included, as the trainer writes it (NaN and inf print as nan, inf).
std::string format_curve_row(const CurveRow& row);

// The rows of a curves file's text; `name` (the file's path) prefixes every message. The header must
// name the columns step, loss and eval_bpb (others are read when present, unknown ones ignored); every
// row has the header's field count and numbers in them (nan and inf are numbers here: the plot skips
// them, with a note). Steps need not be in order only across a resume: a row whose step is at or
// below an earlier row's replaces that row and everything after it (a run resumed from a checkpoint
// older than the file's last rows writes those steps again). A last line without its newline that
// has too few fields is a row still being written and is left out. Error with the line number for
// anything else; a file with a header and no rows gives no rows.
std::vector<CurveRow> parse_curves_csv(std::string_view text, std::string_view name);

}  // namespace deltabit::train
