#include "train/trainer.h"

#include "core/error.h"
#include "train/activation_plan.h"
#include "train/qat.h"
#include "train/reference_model.h"

#ifdef DELTABIT_HAVE_CUDA
#include "backend/cuda_probe.h"
#include "train/cuda/train_model.h"
#else
namespace deltabit::train::cuda {
class TrainModel {};  // never made without CUDA; complete so that Trainer's unique_ptr can be destroyed
}  // namespace deltabit::train::cuda
#endif

#include <fmt/format.h>

#include <algorithm>
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

double milliseconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

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
    const std::string& wanted = config_.run.backend;
#ifdef DELTABIT_HAVE_CUDA
    const bool gpu_present = deltabit::cuda::device_count() > 0;
    if (wanted == "cuda" && !gpu_present) fail("train: run.backend = cuda, but this machine has no usable CUDA device");
    if (wanted == "cuda" || (wanted == "auto" && gpu_present)) {
        device_ = std::make_unique<cuda::TrainModel>(layout_);
        device_->set_parameters(params_);
        device_->set_optimizer_state(adam_);
        // Evaluation batches hold up to kEvalWindowsPerBatch windows of seq_len (bits_per_byte).
        const int64_t windows = (config_.eval.bytes - 1 + config_.run.seq_len - 1) / config_.run.seq_len;
        const ActivationChoice choice = choose_activations(
            config_.run.activations,
            device_->activation_memory(config_.run.batch, config_.run.seq_len, std::min(windows, kEvalWindowsPerBatch)),
            config_.source.string());
        device_->set_keep_activations(choice.keep);
        const double ratio = 1.0 + recompute_flops_per_token(layout_.config(), config_.run.seq_len) /
                                       train_flops_per_token(layout_.config(), config_.run.seq_len);
        activations_summary_ = choice.summary + (choice.keep ? "; the step executes the FLOPs MFU counts"
                                                             : fmt::format("; the step executes {:.2f}× the FLOPs MFU "
                                                                           "counts (every layer's forward twice)",
                                                                           ratio));
    }
#else
    if (wanted == "cuda") fail("train: run.backend = cuda, but this build has no CUDA (configure with nvcc present)");
#endif
}

Trainer::~Trainer() = default;

std::string Trainer::backend_description() const {
#ifdef DELTABIT_HAVE_CUDA
    if (device_) return "cuda (" + device_->device_name() + ")";
#endif
    return "cpu reference";
}

bool Trainer::keeps_activations() const {
#ifdef DELTABIT_HAVE_CUDA
    if (device_) return device_->keeps_activations();
#endif
    return false;
}

double Trainer::device_memory_gib() const {
#ifdef DELTABIT_HAVE_CUDA
    if (device_) return device_->peak_memory_gib();
#endif
    return 0.0;
}

void Trainer::sync_from_device() const {
#ifdef DELTABIT_HAVE_CUDA
    if (!device_ || !host_stale_) return;
    device_->get_parameters(params_);
    device_->get_optimizer_state(adam_);
    host_stale_ = false;
#endif
}

std::span<const float> Trainer::parameters() const {
    sync_from_device();
    return params_;
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
    sync_from_device();
    if (!config_.qat.enabled) return params_;
    std::vector<float> weights(params_.size());
    qat_effective_weights(layout_, params_, binarisation_weight(step_, config_.run.steps), weights);
    return weights;
}

Batch Trainer::next_batch_profiled() {
    if (!profile_) return next_batch();
    const auto start = std::chrono::steady_clock::now();
    Batch batch = next_batch();
    profile_->add(ProfileKind::host_data, ProfilePass::update, milliseconds_since(start), 0.0, 0.0);
    return batch;
}

void Trainer::enable_profile() {
    if (profile_) return;
    profile_ = std::make_unique<StepProfile>();
#ifdef DELTABIT_HAVE_CUDA
    if (device_) device_->set_profile(profile_.get());
#endif
}

StepReport Trainer::train_step() {
    const auto start = std::chrono::steady_clock::now();
    const RunSection& r = config_.run;
    const double predicted = double(r.batch * r.seq_len * r.grad_accum);
    double loss_sum = 0.0;
#ifdef DELTABIT_HAVE_CUDA
    if (device_) {
        if (profile_) device_->profile_step_begin();
        // The same step on the GPU: QAT weights, gradients, clipping and AdamW stay on the device.
        device_->use_qat_weights(config_.qat.enabled ? binarisation_weight(step_, r.steps) : 0.0);
        device_->zero_gradients();
        for (int64_t micro = 0; micro < r.grad_accum; ++micro)
            loss_sum += device_->accumulate_gradient(next_batch_profiled(), 1.0 / predicted);
        StepReport report;
        report.lr = learning_rate(config_.optimizer, step_, r.steps);
        report.grad_norm = device_->optimizer_step(config_.optimizer, report.lr);
        host_stale_ = true;
        report.loss = loss_sum / predicted;
        report.step = ++step_;
        report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (profile_) device_->profile_step_end(1e3 * report.seconds);
        return report;
    }
#endif
    // Profiling on the CPU: the wall clock around each phase (one branch each when off).
    auto phase_start = std::chrono::steady_clock::now();
    const auto phase_end = [&](ProfileKind kind, double flops) {
        if (!profile_) return;
        profile_->add(kind, ProfilePass::update, milliseconds_since(phase_start), flops, 0.0);
        phase_start = std::chrono::steady_clock::now();
    };
    std::fill(grads_.begin(), grads_.end(), 0.0f);
    // QAT: the forward sees the binarised weights; their gradient is applied to the latent ones as it
    // is (straight-through).
    const std::vector<float> weights = forward_weights();
    phase_end(ProfileKind::qat_weights, 0.0);
    const double flops_per_batch = train_flops_per_token(layout_.config(), r.seq_len) * double(r.batch * r.seq_len);
    for (int64_t micro = 0; micro < r.grad_accum; ++micro) {
        const Batch batch = next_batch_profiled();
        phase_start = std::chrono::steady_clock::now();
        loss_sum += backend_->accumulate_gradient(weights, batch, 1.0 / predicted, grads_);
        phase_end(ProfileKind::cpu_reference, flops_per_batch);
    }
    StepReport report;
    report.lr = learning_rate(config_.optimizer, step_, r.steps);
    report.grad_norm = optimizer_step(layout_, config_.optimizer, report.lr, params_, grads_, adam_);
    phase_end(ProfileKind::optimizer, 0.0);
    report.loss = loss_sum / predicted;
    report.step = ++step_;
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (profile_) profile_->end_step(1e3 * report.seconds, 0.0);
    return report;
}

double bits_per_byte(const std::function<double(const Batch&)>& batch_loss, std::span<const uint8_t> text,
                     int64_t seq_len) {
    double nats = 0.0;
    int64_t predicted = 0;
    Batch batch;
    const auto flush = [&] {
        if (batch.n_sequences == 0) return;
        nats += batch_loss(batch);
        predicted += batch.n_sequences * batch.length;
        batch = Batch{};
    };
    for (int64_t begin = 0; begin + 1 < int64_t(text.size()); begin += seq_len) {
        const int64_t n = std::min<int64_t>(seq_len, int64_t(text.size()) - 1 - begin);
        if (batch.n_sequences == kEvalWindowsPerBatch || (batch.n_sequences > 0 && batch.length != n)) flush();
        batch.length = n;
        ++batch.n_sequences;
        for (int64_t t = 0; t < n; ++t) {
            batch.tokens.push_back(text[size_t(begin + t)]);
            batch.targets.push_back(text[size_t(begin + t + 1)]);
        }
    }
    flush();
    return nats / (double(predicted) * std::numbers::ln2);
}

double bits_per_byte(GradientBackend& backend, std::span<const float> params, std::span<const uint8_t> text,
                     int64_t seq_len) {
    return bits_per_byte([&](const Batch& batch) { return backend.loss(params, batch); }, text, seq_len);
}

double Trainer::evaluate_bpb() {
    const std::span<const uint8_t> window = std::span(heldout_bytes_).first(size_t(config_.eval.bytes));
#ifdef DELTABIT_HAVE_CUDA
    if (device_) {
        device_->use_qat_weights(config_.qat.enabled ? binarisation_weight(step_, config_.run.steps) : 0.0);
        return bits_per_byte([&](const Batch& batch) { return device_->loss(batch); }, window, config_.run.seq_len);
    }
#endif
    return bits_per_byte(*backend_, forward_weights(), window, config_.run.seq_len);
}

double train_flops_per_token(const ModelConfig& c, int64_t seq_len) {
    const ParameterLayout layout(c);
    double matrix_weights = 0.0;
    for (const ParameterInfo& p : layout.all())
        if (p.role == ParameterRole::matrix) matrix_weights += double(p.size);
    if (c.tied_embeddings) matrix_weights += double(c.n_vocab * c.n_embd);  // the head is still a product
    double flops = 6.0 * matrix_weights;
    for (const LayerKind kind : c.layers) {
        if (kind == LayerKind::full_attention)
            flops += 6.0 * double(seq_len) * double(c.n_head * c.head_dim);
        else
            flops += 18.0 * double(c.ssm_n_value_heads * c.ssm_key_dim * c.ssm_value_dim);
    }
    return flops;
}

double recompute_flops_per_token(const ModelConfig& c, int64_t seq_len) {
    const ParameterLayout layout(c);
    double flops = 0.0;
    for (const ParameterInfo& p : layout.all())
        if (p.role == ParameterRole::matrix && p.name.starts_with("model.layers.")) flops += 2.0 * double(p.size);
    for (const LayerKind kind : c.layers) {
        if (kind == LayerKind::full_attention)
            flops += 2.0 * double(seq_len) * double(c.n_head * c.head_dim);
        else
            flops += 6.0 * double(c.ssm_n_value_heads * c.ssm_key_dim * c.ssm_value_dim);
    }
    return flops;
}

void Trainer::save_checkpoint(const std::filesystem::path& path) const {
    sync_from_device();
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
#ifdef DELTABIT_HAVE_CUDA
    if (device_) {
        device_->set_parameters(params_);
        device_->set_optimizer_state(adam_);
        host_stale_ = false;
    }
#endif
}

}  // namespace deltabit::train
