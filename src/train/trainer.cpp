#include "train/trainer.h"

#include "core/error.h"
#include "train/qat.h"
#include "train/reference_model.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numbers>
#include <sstream>

namespace deltabit::train {
namespace {

std::vector<uint8_t> read_bytes(const std::string& path, const char* key) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("train: {} ({}): cannot open", path, key);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class CpuReferenceBackend final : public GradientBackend {
public:
    explicit CpuReferenceBackend(const ParameterLayout& layout) : layout_(layout) {}

    double accumulate_gradient(std::span<const float> params, const Batch& batch, double scale,
                               std::span<float> grads) override {
        const std::vector<double> p(params.begin(), params.end());
        std::vector<double> g(params.size(), 0.0);
        double total = 0.0;
        for (int64_t b = 0; b < batch.n_sequences; ++b) {
            const auto [tokens, targets] = sequence(batch, b);
            total += ref::sequence_loss_and_gradient(layout_, p, tokens, targets, scale, g).loss_sum;
        }
        for (size_t i = 0; i < grads.size(); ++i) grads[i] += float(g[i]);
        return total;
    }

    double loss(std::span<const float> params, const Batch& batch) override {
        const std::vector<double> p(params.begin(), params.end());
        double total = 0.0;
        for (int64_t b = 0; b < batch.n_sequences; ++b) {
            const auto [tokens, targets] = sequence(batch, b);
            total += ref::sequence_loss(layout_, p, tokens, targets).loss_sum;
        }
        return total;
    }

private:
    static std::pair<std::span<const int32_t>, std::span<const int32_t>> sequence(const Batch& batch, int64_t b) {
        const size_t offset = size_t(b * batch.length), n = size_t(batch.length);
        return {std::span(batch.tokens).subspan(offset, n), std::span(batch.targets).subspan(offset, n)};
    }

    const ParameterLayout& layout_;
};

constexpr char kCheckpointMagic[8] = {'D', 'B', 'T', 'R', 'A', 'I', 'N', '\0'};
constexpr uint32_t kCheckpointVersion = 1;

void write_pod(std::ostream& out, const auto& value) { out.write(reinterpret_cast<const char*>(&value), sizeof value); }
void write_string(std::ostream& out, const std::string& s) {
    write_pod(out, uint64_t(s.size()));
    out.write(s.data(), std::streamsize(s.size()));
}
void write_floats(std::ostream& out, const std::vector<float>& v) {
    write_pod(out, uint64_t(v.size()));
    out.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
}

struct CheckpointReader {
    std::ifstream in;
    std::string path;
    void read(void* dst, size_t n, const char* what) {
        in.read(static_cast<char*>(dst), std::streamsize(n));
        if (!in) fail("train: checkpoint {}: truncated while reading {} (at byte {})", path, what, uint64_t(in.tellg()));
    }
    template <typename T>
    T pod(const char* what) {
        T v;
        read(&v, sizeof v, what);
        return v;
    }
    std::string string(const char* what, uint64_t limit) {
        const uint64_t n = pod<uint64_t>(what);
        if (n > limit) fail("train: checkpoint {}: {} claims {} bytes (limit {})", path, what, n, limit);
        std::string s(n, '\0');
        read(s.data(), n, what);
        return s;
    }
    std::vector<float> floats(const char* what, uint64_t expected) {
        const uint64_t n = pod<uint64_t>(what);
        if (n != expected) fail("train: checkpoint {}: {} holds {} values, the model has {}", path, what, n, expected);
        std::vector<float> v(n);
        read(v.data(), n * sizeof(float), what);
        return v;
    }
};

}  // namespace

std::unique_ptr<GradientBackend> make_cpu_reference_backend(const ParameterLayout& layout) {
    return std::make_unique<CpuReferenceBackend>(layout);
}

Trainer::Trainer(TrainConfig config, std::string config_text)
    : config_(std::move(config)), config_text_(std::move(config_text)), layout_(model_config_of(config_)) {
    train_bytes_ = read_bytes(config_.data.train, "data.train");
    heldout_bytes_ = read_bytes(config_.data.heldout, "data.heldout");
    if (int64_t(train_bytes_.size()) < config_.run.seq_len + 1)
        fail("train: {} (data.train): {} bytes, fewer than run.seq_len + 1 = {}", config_.data.train,
             train_bytes_.size(), config_.run.seq_len + 1);
    if (int64_t(heldout_bytes_.size()) < config_.eval.bytes)
        fail("train: {} (data.heldout): {} bytes, fewer than eval.bytes = {}", config_.data.heldout,
             heldout_bytes_.size(), config_.eval.bytes);
    params_ = initial_parameters(layout_, config_.model.init_std, config_.run.seed);
    grads_.assign(params_.size(), 0.0f);
    data_rng_.seed(config_.run.seed ^ 0x9e3779b97f4a7c15ull);  // a stream apart from the initialisation's
    backend_ = make_cpu_reference_backend(layout_);
}

Batch Trainer::next_batch() {
    Batch batch;
    batch.n_sequences = config_.run.batch;
    batch.length = config_.run.seq_len;
    const uint64_t starts = uint64_t(train_bytes_.size()) - uint64_t(batch.length);  // offset + L ≤ size − 1
    for (int64_t b = 0; b < batch.n_sequences; ++b) {
        // Uniform offsets from the run's own generator: its state is the data position a checkpoint keeps.
        const uint64_t offset = data_rng_() % starts;
        for (int64_t t = 0; t < batch.length; ++t) {
            batch.tokens.push_back(train_bytes_[offset + uint64_t(t)]);
            batch.targets.push_back(train_bytes_[offset + uint64_t(t) + 1]);
        }
        ++sequences_drawn_;
    }
    return batch;
}

std::vector<float> Trainer::forward_weights() const {
    if (!config_.qat.enabled) return params_;
    std::vector<float> weights(params_.size());
    qat_effective_weights(layout_, params_, binarisation_weight(step_, config_.run.steps), weights);
    return weights;
}

StepReport Trainer::train_step() {
    const auto start = std::chrono::steady_clock::now();
    std::fill(grads_.begin(), grads_.end(), 0.0f);
    const RunSection& r = config_.run;
    const double predicted = double(r.batch * r.seq_len * r.grad_accum);
    double loss_sum = 0.0;
    // QAT: the forward sees the binarised weights; their gradient is applied to the latent ones as it
    // is (straight-through).
    const std::vector<float> weights = forward_weights();
    for (int64_t micro = 0; micro < r.grad_accum; ++micro)
        loss_sum += backend_->accumulate_gradient(weights, next_batch(), 1.0 / predicted, grads_);
    StepReport report;
    report.lr = learning_rate(config_.optimizer, step_, r.steps);
    report.grad_norm = adamw_step(layout_, config_.optimizer, report.lr, params_, grads_, adam_);
    report.loss = loss_sum / predicted;
    report.step = ++step_;
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return report;
}

double bits_per_byte(GradientBackend& backend, std::span<const float> params, std::span<const uint8_t> text,
                     int64_t seq_len) {
    double nats = 0.0;
    int64_t predicted = 0;
    for (int64_t begin = 0; begin + 1 < int64_t(text.size()); begin += seq_len) {
        const int64_t n = std::min<int64_t>(seq_len, int64_t(text.size()) - 1 - begin);
        Batch window;
        window.n_sequences = 1;
        window.length = n;
        for (int64_t t = 0; t < n; ++t) {
            window.tokens.push_back(text[size_t(begin + t)]);
            window.targets.push_back(text[size_t(begin + t + 1)]);
        }
        nats += backend.loss(params, window);
        predicted += n;
    }
    return nats / (double(predicted) * std::numbers::ln2);
}

double Trainer::evaluate_bpb() {
    return bits_per_byte(*backend_, forward_weights(), std::span(heldout_bytes_).first(size_t(config_.eval.bytes)),
                         config_.run.seq_len);
}

void Trainer::save_checkpoint(const std::filesystem::path& path) const {
    const std::filesystem::path tmp = path.string() + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) fail("train: {}: cannot open for writing", tmp.string());
        out.write(kCheckpointMagic, sizeof kCheckpointMagic);
        write_pod(out, kCheckpointVersion);
        write_string(out, config_text_);
        write_pod(out, step_);
        write_pod(out, sequences_drawn_);
        std::ostringstream rng;
        rng << data_rng_;
        write_string(out, rng.str());
        write_pod(out, adam_.step);
        write_floats(out, params_);
        write_floats(out, adam_.m.empty() ? std::vector<float>(params_.size(), 0.0f) : adam_.m);
        write_floats(out, adam_.v.empty() ? std::vector<float>(params_.size(), 0.0f) : adam_.v);
        out.write(kCheckpointMagic, sizeof kCheckpointMagic);  // a trailer: a torn write cannot pass
        out.flush();
        if (!out) fail("train: {}: write failed (disk full?)", tmp.string());
    }
    std::filesystem::rename(tmp, path);
}

void Trainer::load_checkpoint(const std::filesystem::path& path) {
    CheckpointReader r{std::ifstream(path, std::ios::binary), path.string()};
    if (!r.in) fail("train: checkpoint {}: cannot open", path.string());
    char magic[8];
    r.read(magic, 8, "the magic");
    if (std::memcmp(magic, kCheckpointMagic, 8) != 0) fail("train: {}: not a deltabit training checkpoint", path.string());
    const uint32_t version = r.pod<uint32_t>("the version");
    if (version != kCheckpointVersion)
        fail("train: checkpoint {}: version {}, this build reads version {}", path.string(), version, kCheckpointVersion);
    const std::string text = r.string("the config", 1 << 20);
    if (text != config_text_)
        fail("train: checkpoint {}: was written with a different config; resume with the same config file",
             path.string());
    const int64_t step = r.pod<int64_t>("the step");
    const int64_t drawn = r.pod<int64_t>("the data position");
    std::istringstream rng_text(r.string("the data RNG", 1 << 16));
    std::mt19937_64 rng;
    rng_text >> rng;
    if (!rng_text) fail("train: checkpoint {}: the data RNG state does not parse", path.string());
    const int64_t adam_step = r.pod<int64_t>("the optimizer step");
    std::vector<float> params = r.floats("the parameters", params_.size());
    std::vector<float> m = r.floats("the first moments", params_.size());
    std::vector<float> v = r.floats("the second moments", params_.size());
    r.read(magic, 8, "the trailer");
    if (std::memcmp(magic, kCheckpointMagic, 8) != 0) fail("train: checkpoint {}: bad trailer", path.string());
    // Only now, with everything read and checked, does the run change.
    step_ = step;
    sequences_drawn_ = drawn;
    data_rng_ = rng;
    params_ = std::move(params);
    adam_.m = std::move(m);
    adam_.v = std::move(v);
    adam_.step = adam_step;
}

}  // namespace deltabit::train
