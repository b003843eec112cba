#include "train/train_config.h"

#include "core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

namespace deltabit::train {
namespace {

// Reads one [section]: each get() names its key as known; finish() refuses any other key.
class SectionReader {
public:
    SectionReader(const toml::table& root, std::string section, std::string source)
        : section_(std::move(section)), source_(std::move(source)) {
        const toml::node* node = root.get(section_);
        if (node && !node->is_table()) fail("{}: {}: expected a table [{}]", source_, section_, section_);
        table_ = node ? node->as_table() : nullptr;
    }

    void get(const char* key, int64_t& value) {
        if (const toml::node* n = find(key)) {
            if (!n->is_integer()) fail("{}: {}: expected an integer, got {}", source_, name(key), describe(*n));
            value = n->as_integer()->get();
        }
    }
    void get(const char* key, uint64_t& value) {
        int64_t v = int64_t(value);
        get(key, v);
        if (v < 0) fail("{}: {}: must be ≥ 0, got {}", source_, name(key), v);
        value = uint64_t(v);
    }
    void get(const char* key, double& value) {
        if (const toml::node* n = find(key)) {
            if (n->is_integer())
                value = double(n->as_integer()->get());
            else if (n->is_floating_point())
                value = n->as_floating_point()->get();
            else
                fail("{}: {}: expected a number, got {}", source_, name(key), describe(*n));
            if (!std::isfinite(value)) fail("{}: {}: must be finite, got {}", source_, name(key), value);
        }
    }
    void get(const char* key, bool& value) {
        if (const toml::node* n = find(key)) {
            if (!n->is_boolean()) fail("{}: {}: expected true or false, got {}", source_, name(key), describe(*n));
            value = n->as_boolean()->get();
        }
    }
    void get(const char* key, std::string& value) {
        if (const toml::node* n = find(key)) {
            if (!n->is_string()) fail("{}: {}: expected a string, got {}", source_, name(key), describe(*n));
            value = n->as_string()->get();
        }
    }
    void get(const char* key, std::vector<int64_t>& value) {
        if (const toml::node* n = find(key)) {
            const toml::array* array = n->as_array();
            if (!array) fail("{}: {}: expected an array of integers, got {}", source_, name(key), describe(*n));
            value.clear();
            for (const toml::node& item : *array) {
                if (!item.is_integer())
                    fail("{}: {}: expected an array of integers, found {}", source_, name(key), describe(item));
                value.push_back(item.as_integer()->get());
            }
        }
    }
    bool has(const char* key) const { return table_ && table_->contains(key); }

    // Refuses keys no get() asked for: a misspelt key must not silently keep its default.
    void finish() const {
        if (!table_) return;
        for (const auto& [key, node] : *table_)
            if (!known_.count(std::string(key.str())))
                fail("{}: {}.{}: unknown key (known in [{}]: {})", source_, section_, key.str(), section_,
                     fmt::join(known_, ", "));
    }

    std::string name(const char* key) const { return section_ + "." + key; }

private:
    const toml::node* find(const char* key) {
        known_.insert(key);
        return table_ ? table_->get(key) : nullptr;
    }
    static std::string describe(const toml::node& n) {
        std::ostringstream out;
        out << n.type();
        return out.str();
    }

    std::string section_, source_;
    const toml::table* table_ = nullptr;
    std::set<std::string> known_;
};

void require(bool ok, const std::string& source, const std::string& key, const std::string& rule) {
    if (!ok) fail("{}: {}: {}", source, key, rule);
}

void validate(const TrainConfig& c, const std::string& s) {
    const ModelSection& m = c.model;
    require(m.arch == "qwen35" || m.arch == "qwen3", s, "model.arch",
            fmt::format("expected qwen35 or qwen3, got '{}'", m.arch));
    require(m.vocab == "bytelm", s, "model.vocab", fmt::format("expected bytelm, got '{}'", m.vocab));
    require(m.hidden >= 1 && m.hidden <= 65536, s, "model.hidden", fmt::format("must be in 1..65536, got {}", m.hidden));
    require(m.layers >= 1 && m.layers <= 1024, s, "model.layers", fmt::format("must be in 1..1024, got {}", m.layers));
    require(m.heads >= 1, s, "model.heads", fmt::format("must be ≥ 1, got {}", m.heads));
    require(m.kv_heads >= 1 && m.heads % m.kv_heads == 0, s, "model.kv_heads",
            fmt::format("must divide model.heads ({}), got {}", m.heads, m.kv_heads));
    require(m.head_dim >= 2 && m.head_dim % 2 == 0, s, "model.head_dim",
            fmt::format("must be even and ≥ 2, got {}", m.head_dim));
    require(m.rope_dim >= 0 && m.rope_dim <= m.head_dim && m.rope_dim % 2 == 0, s, "model.rope_dim",
            fmt::format("must be even and in 0..head_dim ({}) (0 = the architecture's default), got {}", m.head_dim,
                        m.rope_dim));
    require(m.rope_theta > 0, s, "model.rope_theta", fmt::format("must be > 0, got {}", m.rope_theta));
    require(m.ffn >= 1, s, "model.ffn", fmt::format("must be ≥ 1, got {}", m.ffn));
    require(m.rms_eps > 0 && m.rms_eps < 1, s, "model.rms_eps", fmt::format("must be in (0, 1), got {}", m.rms_eps));
    require(m.init_std > 0 && m.init_std < 10, s, "model.init_std",
            fmt::format("must be in (0, 10), got {}", m.init_std));
    require(m.full_attention_interval >= 1, s, "model.full_attention_interval",
            fmt::format("must be ≥ 1, got {}", m.full_attention_interval));
    for (int64_t l : m.full_attention_layers)
        require(l >= 0 && l < m.layers, s, "model.full_attention_layers",
                fmt::format("layer {} is outside 0..{}", l, m.layers - 1));
    if (m.arch == "qwen35") {
        require(m.deltanet_key_heads >= 1, s, "model.deltanet_key_heads",
                fmt::format("must be ≥ 1, got {}", m.deltanet_key_heads));
        require(m.deltanet_value_heads >= 1 && m.deltanet_value_heads % m.deltanet_key_heads == 0, s,
                "model.deltanet_value_heads",
                fmt::format("must be a multiple of model.deltanet_key_heads ({}), got {}", m.deltanet_key_heads,
                            m.deltanet_value_heads));
        require(m.deltanet_key_dim >= 1, s, "model.deltanet_key_dim", fmt::format("must be ≥ 1, got {}", m.deltanet_key_dim));
        require(m.deltanet_value_dim >= 1, s, "model.deltanet_value_dim",
                fmt::format("must be ≥ 1, got {}", m.deltanet_value_dim));
        require(m.conv_kernel >= 1 && m.conv_kernel <= 16, s, "model.conv_kernel",
                fmt::format("must be in 1..16, got {}", m.conv_kernel));
    }
    require(!c.data.train.empty(), s, "data.train", "required: the training text file");
    require(!c.data.heldout.empty(), s, "data.heldout", "required: the held-out text file");
    const RunSection& r = c.run;
    require(r.seq_len >= 1 && r.seq_len <= 1 << 20, s, "run.seq_len", fmt::format("must be in 1..1048576, got {}", r.seq_len));
    require(r.batch >= 1, s, "run.batch", fmt::format("must be ≥ 1, got {}", r.batch));
    require(r.grad_accum >= 1, s, "run.grad_accum", fmt::format("must be ≥ 1, got {}", r.grad_accum));
    require(r.steps >= 1, s, "run.steps", fmt::format("must be ≥ 1, got {}", r.steps));
    require(r.backend == "cpu" || r.backend == "cuda" || r.backend == "auto", s, "run.backend",
            fmt::format("expected cpu, cuda or auto, got '{}'", r.backend));
    require(r.activations == "auto" || r.activations == "keep" || r.activations == "recompute", s, "run.activations",
            fmt::format("expected auto, keep or recompute, got '{}'", r.activations));
    require(!r.out_dir.empty(), s, "run.out_dir", "must not be empty");
    const OptimizerSection& o = c.optimizer;
    require(o.kind == "adamw" || o.kind == "muon", s, "optimizer.kind",
            fmt::format("expected adamw or muon, got '{}'", o.kind));
    require(o.lr > 0, s, "optimizer.lr", fmt::format("must be > 0, got {}", o.lr));
    require(o.min_lr >= 0 && o.min_lr <= o.lr, s, "optimizer.min_lr",
            fmt::format("must be in 0..optimizer.lr ({}), got {}", o.lr, o.min_lr));
    require(o.warmup_steps >= 0 && o.warmup_steps <= r.steps, s, "optimizer.warmup_steps",
            fmt::format("must be in 0..run.steps ({}), got {}", r.steps, o.warmup_steps));
    require(o.beta1 >= 0 && o.beta1 < 1, s, "optimizer.beta1", fmt::format("must be in [0, 1), got {}", o.beta1));
    require(o.beta2 >= 0 && o.beta2 < 1, s, "optimizer.beta2", fmt::format("must be in [0, 1), got {}", o.beta2));
    require(o.eps > 0, s, "optimizer.eps", fmt::format("must be > 0, got {}", o.eps));
    require(o.weight_decay >= 0, s, "optimizer.weight_decay", fmt::format("must be ≥ 0, got {}", o.weight_decay));
    require(o.clip >= 0, s, "optimizer.clip", fmt::format("must be ≥ 0 (0 = off), got {}", o.clip));
    require(o.muon_lr > 0, s, "optimizer.muon_lr", fmt::format("must be > 0, got {}", o.muon_lr));
    require(o.muon_momentum >= 0 && o.muon_momentum < 1, s, "optimizer.muon_momentum",
            fmt::format("must be in [0, 1), got {}", o.muon_momentum));
    require(o.muon_ns_steps >= 1 && o.muon_ns_steps <= 100, s, "optimizer.muon_ns_steps",
            fmt::format("must be in 1..100, got {}", o.muon_ns_steps));
    require(o.muon_weight_decay >= 0, s, "optimizer.muon_weight_decay",
            fmt::format("must be ≥ 0, got {}", o.muon_weight_decay));
    require(c.eval.every >= 0, s, "eval.every", fmt::format("must be ≥ 0, got {}", c.eval.every));
    require(c.eval.bytes >= 2, s, "eval.bytes", fmt::format("must be ≥ 2, got {}", c.eval.bytes));
    require(c.checkpoint.every >= 0, s, "checkpoint.every", fmt::format("must be ≥ 0, got {}", c.checkpoint.every));
}

}  // namespace

TrainConfig parse_train_config(std::string_view toml_text, const std::string& source_name) {
    toml::table root;
    try {
        root = toml::parse(toml_text, source_name);
    } catch (const toml::parse_error& e) {
        fail("{}: line {}, column {}: {}", source_name, e.source().begin.line, e.source().begin.column,
             e.description());
    }
    static const std::set<std::string> kSections{"model", "data", "run", "optimizer", "eval", "checkpoint", "qat"};
    for (const auto& [key, node] : root)
        if (!kSections.count(std::string(key.str())))
            fail("{}: {}: unknown section or key (sections: model, data, run, optimizer, eval, checkpoint, qat)",
                 source_name, key.str());

    TrainConfig c;
    c.source = source_name;
    {
        SectionReader r(root, "model", source_name);
        ModelSection& m = c.model;
        r.get("arch", m.arch);
        r.get("vocab", m.vocab);
        r.get("hidden", m.hidden);
        r.get("layers", m.layers);
        r.get("full_attention_layers", m.full_attention_layers);
        r.get("full_attention_interval", m.full_attention_interval);
        if (r.has("full_attention_layers") && r.has("full_attention_interval"))
            fail("{}: model.full_attention_layers: give it or model.full_attention_interval, not both", source_name);
        r.get("heads", m.heads);
        r.get("kv_heads", m.kv_heads);
        r.get("head_dim", m.head_dim);
        r.get("rope_dim", m.rope_dim);
        r.get("rope_theta", m.rope_theta);
        r.get("ffn", m.ffn);
        r.get("deltanet_key_heads", m.deltanet_key_heads);
        r.get("deltanet_value_heads", m.deltanet_value_heads);
        r.get("deltanet_key_dim", m.deltanet_key_dim);
        r.get("deltanet_value_dim", m.deltanet_value_dim);
        r.get("conv_kernel", m.conv_kernel);
        r.get("rms_eps", m.rms_eps);
        r.get("tied_embeddings", m.tied_embeddings);
        r.get("init_std", m.init_std);
        r.finish();
    }
    {
        SectionReader r(root, "data", source_name);
        r.get("train", c.data.train);
        r.get("heldout", c.data.heldout);
        r.finish();
    }
    {
        SectionReader r(root, "run", source_name);
        r.get("seq_len", c.run.seq_len);
        r.get("batch", c.run.batch);
        r.get("grad_accum", c.run.grad_accum);
        r.get("steps", c.run.steps);
        r.get("seed", c.run.seed);
        r.get("backend", c.run.backend);
        r.get("activations", c.run.activations);
        r.get("out_dir", c.run.out_dir);
        r.finish();
    }
    {
        SectionReader r(root, "optimizer", source_name);
        OptimizerSection& o = c.optimizer;
        r.get("kind", o.kind);
        r.get("lr", o.lr);
        r.get("min_lr", o.min_lr);
        r.get("warmup_steps", o.warmup_steps);
        r.get("beta1", o.beta1);
        r.get("beta2", o.beta2);
        r.get("eps", o.eps);
        r.get("weight_decay", o.weight_decay);
        r.get("clip", o.clip);
        o.muon_lr = o.lr;  // unless given: Muon's scale rule (train/muon.h) makes AdamW's rate fit it
        o.muon_weight_decay = o.weight_decay;
        r.get("muon_lr", o.muon_lr);
        r.get("muon_momentum", o.muon_momentum);
        r.get("muon_nesterov", o.muon_nesterov);
        r.get("muon_ns_steps", o.muon_ns_steps);
        r.get("muon_weight_decay", o.muon_weight_decay);
        r.finish();
        if (o.kind == "adamw")
            for (const char* key : {"muon_lr", "muon_momentum", "muon_nesterov", "muon_ns_steps", "muon_weight_decay"})
                if (r.has(key))
                    fail("{}: {}: applies only with optimizer.kind = \"muon\" (kind is '{}')", source_name, r.name(key),
                         o.kind);
    }
    {
        SectionReader r(root, "eval", source_name);
        r.get("every", c.eval.every);
        r.get("bytes", c.eval.bytes);
        r.finish();
    }
    {
        SectionReader r(root, "checkpoint", source_name);
        r.get("every", c.checkpoint.every);
        r.finish();
    }
    {
        SectionReader r(root, "qat", source_name);
        r.get("enabled", c.qat.enabled);
        r.finish();
    }
    validate(c, source_name);
    return c;
}

TrainConfig load_train_config(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("train: {}: cannot open the config file", path.string());
    std::ostringstream text;
    text << in.rdbuf();
    TrainConfig c = parse_train_config(text.str(), path.string());
    // Relative data paths are relative to the config file's folder.
    const std::filesystem::path base = path.parent_path();
    for (std::string* p : {&c.data.train, &c.data.heldout})
        if (std::filesystem::path(*p).is_relative() && !base.empty()) *p = (base / *p).lexically_normal().string();
    return c;
}

std::string config_text_for_run(std::string_view text, const std::string& source_name,
                                 const std::filesystem::path& base, uint64_t seed, const std::string& out_dir) {
    (void)parse_train_config(text, source_name);  // refuse a bad config before rewriting it
    toml::table root = toml::parse(text, source_name);
    if (!root.contains("run")) root.insert("run", toml::table{});
    toml::table& run = *root["run"].as_table();
    run.insert_or_assign("seed", int64_t(seed));
    run.insert_or_assign("out_dir", out_dir);
    if (toml::table* data = root["data"].as_table())
        for (const char* key : {"train", "heldout"})
            if (const std::optional<std::string> path = (*data)[key].value<std::string>())
                if (std::filesystem::path(*path).is_relative() && !base.empty())
                    data->insert_or_assign(key, (base / *path).lexically_normal().string());
    std::ostringstream out;
    out << root << "\n";
    (void)parse_train_config(out.str(), source_name + " (for seed " + std::to_string(seed) + ")");
    return out.str();
}

ModelConfig model_config_of(const TrainConfig& config) {
    const ModelSection& m = config.model;
    ModelConfig c;
    const bool hybrid = m.arch == "qwen35";
    c.arch = hybrid ? Arch::qwen35 : Arch::qwen3;
    c.arch_name = m.arch;
    c.n_vocab = kBytelmVocab;
    c.n_embd = m.hidden;
    c.n_ff = m.ffn;
    c.context_length = config.run.seq_len;
    c.rms_eps = float(m.rms_eps);
    c.tied_embeddings = m.tied_embeddings;
    c.n_head = m.heads;
    c.n_head_kv = m.kv_heads;
    c.head_dim = m.head_dim;
    c.rope_dim = m.rope_dim ? m.rope_dim : (hybrid ? m.head_dim / 4 : m.head_dim);
    c.rope_theta = float(m.rope_theta);
    c.attn_output_gate = hybrid;
    if (hybrid) {
        c.ssm_n_key_heads = m.deltanet_key_heads;
        c.ssm_n_value_heads = m.deltanet_value_heads;
        c.ssm_key_dim = m.deltanet_key_dim;
        c.ssm_value_dim = m.deltanet_value_dim;
        c.ssm_conv_kernel = m.conv_kernel;
        c.value_head_order = ValueHeadOrder::grouped;  // the trainer keeps Hugging Face's order
    }
    for (int64_t l = 0; l < m.layers; ++l) {
        bool full = !hybrid;
        if (hybrid)
            full = m.full_attention_layers.empty()
                       ? (l + 1) % m.full_attention_interval == 0
                       : std::find(m.full_attention_layers.begin(), m.full_attention_layers.end(), l) !=
                             m.full_attention_layers.end();
        c.layers.push_back(full ? LayerKind::full_attention : LayerKind::linear_attention);
        c.layer_is_moe.push_back(false);
    }
    c.bos_id = 257;
    c.eos_ids = {258};
    return c;
}

}  // namespace deltabit::train
