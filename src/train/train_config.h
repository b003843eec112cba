// `deltabit train CONFIG.toml`: what a training run is, read from TOML (toml++) and validated at the
// edge. Every field has a default stated here; a bad value or an unknown key is refused with one line
// naming the file and the key ("train.toml: optimizer.lr: must be > 0, got -1"). configs/ holds
// examples; docs/train.md documents the fields for users.
//
// Schedule: steps counts optimizer steps (each one sums grad_accum micro-batches of batch sequences of
// seq_len tokens). The learning rate warms up linearly over warmup_steps and then follows a cosine
// from lr down to min_lr, reaching min_lr exactly at the last step (train/schedule.h).
#pragma once

#include "models/model_config.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace deltabit::train {

// The bytelm vocabulary: 256 byte ids + pad, bos, eos (text/byte_tokenizer.h).
inline constexpr int64_t kBytelmVocab = 259;

struct ModelSection {
    std::string arch = "qwen35";     // qwen35 (hybrid: DeltaNet + gated attention) or qwen3 (dense attention)
    std::string vocab = "bytelm";    // bytelm: 256 byte ids + 3 specials (text/byte_tokenizer.h)
    int64_t hidden = 256;
    int64_t layers = 8;
    std::vector<int64_t> full_attention_layers;  // empty: every full_attention_interval-th layer (qwen35)
    int64_t full_attention_interval = 4;         // layer i is full attention iff (i + 1) % interval == 0
    int64_t heads = 4;
    int64_t kv_heads = 2;
    int64_t head_dim = 64;
    int64_t rope_dim = 0;            // 0: head_dim / 4 (qwen35) or head_dim (qwen3)
    double rope_theta = 1.0e6;
    int64_t ffn = 768;
    int64_t deltanet_key_heads = 2;
    int64_t deltanet_value_heads = 4;
    int64_t deltanet_key_dim = 64;
    int64_t deltanet_value_dim = 64;
    int64_t conv_kernel = 4;
    double rms_eps = 1e-6;
    bool tied_embeddings = false;
    double init_std = 0.02;          // N(0, init_std²) for projections and embeddings
};

struct DataSection {
    std::string train;               // required: UTF-8 (any bytes) text file
    std::string heldout;             // required
};

struct RunSection {
    int64_t seq_len = 256;
    int64_t batch = 8;
    int64_t grad_accum = 1;
    int64_t steps = 1000;            // optimizer steps
    uint64_t seed = 1;
    std::string backend = "cpu";     // cpu (the double reference), cuda (train/cuda/), auto (cuda when a GPU is present)
    // The CUDA trainer's backward: "keep" every layer's forward activations for it, "recompute" each
    // layer's forward right before its backward, or "auto": keep when they fit the GPU's free memory
    // (train/activation_plan.h). The CPU reference ignores it.
    std::string activations = "auto";
    std::string out_dir = "runs/default";
};

struct OptimizerSection {
    std::string kind = "adamw";      // adamw, or muon: Muon on the hidden matrices, AdamW on the rest
    double lr = 3e-3;
    double min_lr = 3e-4;
    int64_t warmup_steps = 100;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double weight_decay = 0.1;       // decoupled; applied to matrices only, not norms, gates or biases
    double clip = 1.0;               // global gradient norm; 0 = off
    // kind = "muon" (train/muon.h): the hidden matrices (ParameterInfo::hidden_matrix) take Muon with
    // these; every other tensor takes AdamW with the settings above. The keys are refused with adamw.
    // A file that omits muon_lr or muon_weight_decay gets lr or weight_decay (the values below are those
    // defaults' defaults).
    double muon_lr = 3e-3;           // peak rate; the schedule scales it as it scales lr
    double muon_momentum = 0.95;
    bool muon_nesterov = true;
    int64_t muon_ns_steps = 5;       // Newton–Schulz iterations
    double muon_weight_decay = 0.1;  // decoupled, times the Muon rate
};

struct EvalSection {
    int64_t every = 100;             // optimizer steps; 0 = only at the end
    int64_t bytes = 65536;           // held-out window: the first `bytes` bytes of the held-out file
};

struct CheckpointSection {
    int64_t every = 500;             // optimizer steps; 0 = only at the end
};

struct QatSection {
    bool enabled = false;            // 1-bit QAT: Q1_0 forward, straight-through gradient
};

struct TrainConfig {
    std::filesystem::path source;    // the file it was read from (for messages)
    ModelSection model;
    DataSection data;
    RunSection run;
    OptimizerSection optimizer;
    EvalSection eval;
    CheckpointSection checkpoint;
    QatSection qat;

    int64_t tokens_per_step() const { return run.seq_len * run.batch * run.grad_accum; }
};

// Reads and validates; throws deltabit::Error with one line naming file and key.
TrainConfig load_train_config(const std::filesystem::path& path);
// The text of one run of an A/B comparison (cli/cmd_train_ab.cpp): `text`, a config read from a file in
// folder `base`, with run.seed and run.out_dir set and data.train / data.heldout made absolute, so that the
// run's own copy of it can live in its out_dir and still name the same data. Comments are not kept; the
// result is refused as a config would be (parse_train_config) if anything in it is not.
std::string config_text_for_run(std::string_view text, const std::string& source_name,
                                 const std::filesystem::path& base, uint64_t seed, const std::string& out_dir);
TrainConfig parse_train_config(std::string_view toml_text, const std::string& source_name);

// The engine's geometry for the configured model (GGUF-side fields included, for the export).
ModelConfig model_config_of(const TrainConfig& config);

}  // namespace deltabit::train
