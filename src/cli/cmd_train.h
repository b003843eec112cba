// One `deltabit train` invocation (cmd_train.cpp), shared with `deltabit train-ab` (cmd_train_ab.cpp), which
// runs it once per configuration and seed. Built only with toml++ (the train module).
#pragma once

#include <cstdint>
#include <string>

namespace deltabit::cli {

struct TrainArgs {
    std::string config;
    bool resume = false;
    bool quiet = false;
    int64_t max_steps = 0;  // 0: run to run.steps
    std::string backend;    // "": the config's run.backend
    std::string history = std::string(DELTABIT_SOURCE_DIR) + "/bench/history.tsv";
    bool no_history = false;
    std::string commit;
    // --profile N: after profile_warmup steps, time N steps by kind of op, print the table and stop
    // (train/step_profile.h).
    int64_t profile_steps = 0;
    int64_t profile_warmup = 2;
    // --plot: redraw the image of a curves file instead of training.
    std::string plot;
    std::string plot_output;  // "": CURVES.csv's name with .svg; "-": standard output
    std::string title;        // "": the run's name, from the file's name
};

// Trains (or resumes, or with `plot` draws) as `deltabit train` does; Error on anything wrong.
void run_train(const TrainArgs& args);

}  // namespace deltabit::cli
