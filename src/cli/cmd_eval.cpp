// `deltabit eval -m MODEL FILE`: bits per byte of a byte-level model over a text file, on the CPU
// reference forward, computed over the same windows as the trainer's evaluation (train/trainer.h
// bits_per_byte): consecutive windows of --seq-len predicted bytes, each from an empty context, over
// the first --bytes bytes. For the same model and window it prints the number `deltabit train`
// reports (to the f32 rounding of the engine's forward against the trainer's double one).
//
//   deltabit eval -m MODEL FILE [--seq-len 256] [--bytes N] [--quiet]
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/whole_number_floor.h"
#include "core/error.h"
#include "models/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <numbers>
#include <vector>

namespace deltabit::cli {
namespace {

struct EvalArgs {
    std::string model, file;
    int64_t seq_len = 256;
    int64_t bytes = 0;  // 0: the whole file
    bool quiet = false;
};

void run_eval(const EvalArgs& args) {
    std::ifstream in(args.file, std::ios::binary);
    if (!in) fail("eval: {}: cannot open", args.file);
    std::vector<uint8_t> text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (args.bytes > 0) {
        if (int64_t(text.size()) < args.bytes)
            fail("eval: {}: {} bytes, fewer than --bytes {}", args.file, text.size(), args.bytes);
        text.resize(size_t(args.bytes));
    }
    if (text.size() < 2) fail("eval: {}: needs at least 2 bytes, has {}", args.file, text.size());
    const Model model = Model::load(args.model);
    const int64_t vocab = model.config().n_vocab;
    if (vocab < 256) fail("eval: {}: a vocabulary of {} cannot be a byte model (needs ≥ 256 ids)", args.model, vocab);

    ProgressLine progress(fmt::format("eval {} bytes", text.size()), !args.quiet && stderr_is_terminal());
    double nats = 0.0;
    int64_t predicted = 0;
    const int64_t total = int64_t(text.size()) - 1;
    for (int64_t begin = 0; begin < total; begin += args.seq_len) {
        const int64_t n = std::min(args.seq_len, total - begin);
        std::vector<int32_t> ids(text.begin() + begin, text.begin() + begin + n);
        SequenceState state = model.new_sequence();
        const std::vector<float> logits = model.forward(state, ids);
        for (int64_t t = 0; t < n; ++t) {
            const float* row = logits.data() + t * vocab;
            const double max_logit = *std::max_element(row, row + vocab);
            double sum = 0.0;
            for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(row[i]) - max_logit);
            nats += max_logit + std::log(sum) - double(row[text[size_t(begin + t + 1)]]);
        }
        predicted += n;
        progress.set_fraction(double(predicted) / double(total));
    }
    progress.finish();
    fmt::print("{:.6f} bits per byte over {} predicted bytes of {} (windows of {})\n",
               nats / (double(predicted) * std::numbers::ln2), predicted, args.file, args.seq_len);
}

}  // namespace

void add_eval_command(CLI::App& app) {
    auto args = std::make_shared<EvalArgs>();
    CLI::App* cmd = app.add_subcommand("eval", "Bits per byte of a byte-level model over a text file");
    cmd->add_option("-m,--model", args->model, "GGUF file or Hugging Face folder")->required();
    cmd->add_option("file", args->file, "the text file")->required();
    cmd->add_option("--seq-len", args->seq_len, "predicted bytes per window, each from an empty context (default 256)")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
    cmd->add_option("--bytes", args->bytes, "evaluate the first N bytes (default: the whole file)")
        ->check(whole_number_at_least(1));
    cmd->add_flag("-q,--quiet", args->quiet, "no progress bar (default: one on a terminal)");
    cmd->callback([args] { run_eval(*args); });
}

}  // namespace deltabit::cli
