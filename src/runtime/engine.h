// One loaded model on one backend, as the generation loop and sessions see it: feed tokens to a
// sequence, choose the next token, and take or give back the sequence's state. Two implementations:
// the CPU reference (models/model.h) and CUDA (models/model_cuda.h), chosen at run time by
// open_engine(path, "cpu" | "cuda" | "auto").
//
// Where logits live. forward() leaves the last token's logits on the engine's device, inside the
// sequence; next_token() chooses from them there — on the GPU greedy decoding is an argmax kernel and
// sampling the GPU sampler chain (sampling/sampler_cuda.h), so only the chosen id comes back. Logits
// reach the host only when asked for (last_logits, forward_all: tests, logprobs, `deltabit logits`).
//
// Running ahead. An engine may start consuming the token next_token() chose before returning it (the
// CUDA engine does for plain greedy decoding), so the device works while the caller looks at the id.
// It is invisible: forward() with that id then finds the work done; any other use of the sequence
// (another token, save, checkpoint, position...) first undoes the step — so a generation that stops at
// an EOS leaves the sequence exactly after the tokens it consumed, as if nothing had run ahead.
//
// Sequences belong to the engine that made them; passing one to another engine is a programming error
// (checked, Error). State images (models/state_image.h) are backend-neutral: an image saved on the GPU
// loads on the CPU and the other way round, for the same model and KV format.
#pragma once

#include "models/kv_format.h"
#include "models/model_config.h"
#include "models/state_image.h"
#include "sampling/sampler.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace deltabit {

class Model;

struct SequenceOptions {
    int64_t max_positions = 4096;  // KV capacity: the sequence can hold this many tokens
    KvFormat kv_format = KvFormat::f32;
};

// What an engine did beyond forward calls, for tests and diagnostics.
struct EngineCounters {
    int64_t run_ahead_steps = 0;   // greedy steps started before the chosen token reached the host
    int64_t run_ahead_undone = 0;  // of those, undone: the caller stopped, or fed another token
    int64_t batched_argmax_rows = 0;  // greedy tokens read from a batch's argmaxes, copied back together
};

class EngineSequence {
public:
    virtual ~EngineSequence() = default;
    virtual int64_t position() const = 0;       // tokens consumed so far
    virtual int64_t max_positions() const = 0;  // capacity; forward() past it is an Error
    virtual KvFormat kv_format() const = 0;

    // Whole state (snapshots). load() validates the image against this sequence's model and format
    // before changing anything; on Error the sequence is untouched.
    virtual StateImage save() const = 0;
    virtual void load(const StateImage& image) = 0;
    // What cannot be rewound (prefix reuse); restore() returns this sequence to the checkpoint's
    // position, given that its first position() tokens are still the checkpoint's history.
    virtual StateCheckpoint checkpoint() const = 0;
    virtual void restore(const StateCheckpoint& checkpoint) = 0;
    // Back to an empty sequence.
    virtual void reset() = 0;
};

class Engine {
public:
    virtual ~Engine() = default;

    virtual const ModelConfig& config() const = 0;
    virtual std::string_view backend_name() const = 0;  // "cpu", "cuda"
    virtual std::string description() const = 0;        // for logs and --json: "cuda: NVIDIA H200, ..."
    // Identifies the model for snapshots: a hash of its architecture, geometry and weight bytes
    // (models/model_fingerprint.h), computed on first use.
    virtual std::string fingerprint() const = 0;

    virtual std::unique_ptr<EngineSequence> new_sequence(const SequenceOptions& options) const = 0;

    // Consumes `ids` (not empty) after the sequence's position and keeps the last token's logits on
    // the engine. Error for an id outside the vocabulary or a sequence that would outgrow its
    // capacity; the sequence is then unchanged.
    virtual void forward(EngineSequence& sequence, std::span<const int32_t> ids) = 0;
    // The next token from the sequence's last logits: Sampler::sample's chain and RNG (greedy when the
    // temperature is 0), computed where the logits are. Error if forward() has not run since the
    // sequence was made, reset, loaded or restored, and (fail_non_finite_logit, runtime/engine_checks.h)
    // when a logit is NaN or ±inf, naming the lowest such token; the sequence is then unchanged.
    virtual int32_t next_token(EngineSequence& sequence, Sampler& sampler, const TokenHistory& history) = 0;
    // One decode step of several sequences at once (the server's continuous batching): sequences[i]
    // consumes ids[i]. Afterwards each sequence's last logits are its own for next_token and last_logits,
    // as after its own forward() — on CUDA until the engine's next forward call, so draw every row's token
    // before feeding any sequence again. The CUDA engine reads the weights once for all the rows
    // (CudaModel::forward_batch); the CPU engine, whose sequences keep their own logits, runs them in turn,
    // as this default does for an engine that only wraps another. Error, with every sequence unchanged, for
    // a row forward() would refuse or a sequence given twice.
    virtual void forward_batch(std::span<EngineSequence* const> sequences, std::span<const int32_t> ids);
    // Host copy of the last logits [n_vocab].
    virtual std::vector<float> last_logits(const EngineSequence& sequence) const = 0;
    // As forward(), returning every token's logits [ids.size()][n_vocab] on the host.
    virtual std::vector<float> forward_all(EngineSequence& sequence, std::span<const int32_t> ids) = 0;

    virtual EngineCounters counters() const { return {}; }

    // Threads of the CPU engine's products (threads ≤ 0: all cores, hardware_threads()); the CUDA engine ignores
    // it. Call between forwards, not during one.
    virtual void set_cpu_threads(int threads) {}
};

// A CPU engine over a model that must outlive it (tests, and callers that already hold a Model).
std::unique_ptr<Engine> make_cpu_engine(const Model& model);
// A CPU engine that owns its model.
std::unique_ptr<Engine> make_cpu_engine(std::shared_ptr<const Model> model);
// How far a load has got, as a fraction 0..1 of its work, never decreasing; called on the loading
// thread. For progress bars (cli/progress.h).
using LoadFraction = std::function<void(double fraction)>;

// A CUDA engine: uploads `model` to device 0, reporting the fraction uploaded after each layer. It keeps
// the host model only for its fingerprint (the weights stay memory-mapped, not copied). Error in a build
// without CUDA or on a machine without a GPU.
std::unique_ptr<Engine> make_cuda_engine(std::shared_ptr<const Model> model, const LoadFraction& upload_progress = {});

// Loads MODEL (GGUF file or Hugging Face folder) onto a backend: "cpu", "cuda", or "auto" (CUDA when
// this build has it and a GPU is present). Error naming the file, or naming why CUDA is unavailable.
// `progress` hears the fraction of the weight bytes handled: on the CPU, read and checked on the host
// (Model::load; it ends at exactly 1); on CUDA the host load is the first half and the upload, by layers,
// the second.
std::unique_ptr<Engine> open_engine(const std::filesystem::path& path, std::string_view backend = "auto",
                                    const LoadFraction& progress = {});

// The --backend choices, for CLI help.
inline constexpr std::string_view kBackendChoices = "cpu, cuda or auto";

}  // namespace deltabit
