// Every `deltabit` subcommand lives in its own cmd_<name>.cpp and registers itself on the app here.
// A command's callback throws deltabit::Error for bad input; main() prints it as one line and exits 1.
#pragma once

#include <CLI/CLI.hpp>

namespace deltabit::cli {
#ifdef DELTABIT_HAVE_TEXT
// `deltabit tokenize` and `deltabit detokenize` (cmd_text_tokenize.cpp; built only with utf8proc + pcre2).
void add_tokenize_commands(CLI::App& app);
// `deltabit run -m MODEL (-p TEXT | --ids ...)` (cmd_text_run.cpp): one-shot generation.
void add_run_command(CLI::App& app);
// `deltabit chat -m MODEL` (cmd_text_chat.cpp): interactive multi-turn chat with /commands.
void add_chat_command(CLI::App& app);
#endif
#ifdef DELTABIT_HAVE_SERVER
// `deltabit serve [-m MODEL]` (cmd_text_serve.cpp; built only with cpp-httplib): the OpenAI-compatible server.
void add_serve_command(CLI::App& app);
#endif
// `deltabit logits` (cmd_logits.cpp): a forward pass (any backend; --dump on the CPU reference), logits to a file.
void add_logits_command(CLI::App& app);
// `deltabit info MODEL [--json]` (cmd_info.cpp): metadata, tensors, types and sizes of a model.
void add_info_command(CLI::App& app);
// `deltabit convert HF_DIR -o OUT.gguf --type T` (cmd_convert.cpp): HF folder → GGUF, every tensor proven.
void add_convert_command(CLI::App& app);
// `deltabit bench (-m MODEL | --geometry NAME)` (cmd_bench.cpp): GPU prefill/decode speed vs the roofline.
void add_bench_command(CLI::App& app);
// `deltabit eval -m MODEL FILE` (cmd_eval.cpp): bits per byte of a byte-level model over a text file.
void add_eval_command(CLI::App& app);
// `deltabit replay FILE` (cmd_replay.cpp): re-runs a recorded block-diffusion run, names the first step that differs.
void add_replay_command(CLI::App& app);
#ifdef DELTABIT_HAVE_TRAIN
// `deltabit train CONFIG.toml [--resume]` and `deltabit train --plot CURVES.csv` (cmd_train.cpp; built only
// with toml++).
void add_train_command(CLI::App& app);
// `deltabit train-ab A.toml B.toml [--seeds 1,2,3]` (cmd_train_ab.cpp): the recipe A/B protocol over seeds.
void add_train_ab_command(CLI::App& app);
#endif


}  // namespace deltabit::cli
