// The generation loop of one sequence: prefill the prompt, then sample one token at a time until the
// model's EOS, a stop string, max_tokens, or a full sequence.
//
//   prompt ids ──forward──▶ logits ──Sampler──▶ token ──┬─▶ EOS?           → finish "eos"
//                 ▲                                     ├─▶ detokenize → stop string? → "stop"
//                 │                                     ├─▶ count = max?    → "length"
//                 └──────────── forward(token) ◀────────┴─▶ sequence full?  → "length"
//
// The state consumes the prompt and every generated token except the last: the last one is never
// needed to sample anything, so its forward step is skipped. The ledger follows the state
// (ledger.size() == state.position() before and after), which lets a chat continue the same state
// on the next turn by feeding the last token first.
//
// It runs on an Engine's sequence (runtime/engine.h): any backend, the logits stay where they were
// computed and only chosen ids reach the loop. A caller holding a Model wraps it in make_cpu_engine().
//
// Capacity: a generated token that the sequence has no room to consume ends the generation with finish
// reason "length" (it is still returned: it was sampled from valid logits). So after a prompt of P
// tokens on an empty sequence of capacity C, at most C − P + 1 tokens come back, and the sequence then
// holds C.
//
// EOS ids must be the model's own (ModelConfig::eos_ids from its metadata): a model without them
// generates only with max_tokens, never with an EOS borrowed from another model.
#pragma once

#include "runtime/engine.h"
#include "runtime/token_ledger.h"
#include "sampling/sampling_params.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace deltabit {

enum class FinishReason { eos, stop, length };
std::string_view finish_reason_name(FinishReason reason);  // "eos", "stop", "length"

struct GenerationOptions {
    SamplingParams sampling = default_sampling_params();  // temperature 0 = greedy
    std::optional<int64_t> max_tokens;                     // ≥ 1; required when the model has no EOS
    std::vector<std::string> stop;                         // matched on decoded text; needs `detokenize`
};

struct GenerationCallbacks {
    // Token → the text that became final with it (whole UTF-8 characters only; a streaming
    // detokenizer's push) and the end of the stream (its finish). Without them there is no text:
    // stop strings are refused and the result's text stays empty.
    std::function<std::string(int32_t)> detokenize;
    std::function<std::string()> detokenize_finish;
    // Called once per generated token, in order, with the text released with it (possibly empty:
    // an incomplete character, or text held back because it may start a stop string). The EOS
    // token is reported with empty text; text held at the end comes with the last token.
    std::function<void(int32_t token, std::string_view text)> on_token;
    // Called after every forward call (the prompt's, then each generated token's) with the sequence's
    // new position, the ledger already updated: where a session takes its checkpoints.
    std::function<void(int64_t position)> after_forward;
    // Progress through the prompt for a progress bar: tokens read so far and the total to read.
    // generate() reports once, when its prompt's forward call returns; a session reads long prompts in
    // pieces (its checkpoint interval) and reports after each (runtime/session.h).
    std::function<void(int64_t done, int64_t total)> on_prefill_progress;
};

struct GenerationTimings {
    double prefill_ms = 0.0;    // the prompt's forward calls
    double decode_ms = 0.0;     // the forward calls of generated tokens plus all sampling
    int64_t prompt_tokens = 0;  // tokens the prompt's forward calls consumed (a session: those not reused)
    int64_t decode_steps = 0;  // forward calls after the prefill (generated tokens − 1)
    double decode_tokens_per_s() const { return decode_ms > 0.0 ? 1e3 * double(decode_steps) / decode_ms : 0.0; }
};

struct GenerationResult {
    std::vector<int32_t> tokens;  // generated ids, including the EOS that ended it
    std::string text;             // decoded text without EOS or stop string (empty without detokenize)
    FinishReason finish = FinishReason::length;
    GenerationTimings timings;
};

class Sampler;
class StopStringMatcher;

// The loop after the prompt, one token per step(): draw a token from the sequence's last logits,
// report it (on_token), and, unless it ends the generation, feed it (then after_forward). generate()
// is this loop run to the end; a session's turn (runtime/session.h) and the server's scheduler drive it
// step by step. The caller has fed the prompt; engine, sequence, ledger and callbacks must outlive it.
//
// A step is two halves around its one forward call, so that a caller can feed many sequences' tokens
// in one batched call: draw() chooses and reports the token and returns it when it must be fed;
// the caller feeds it to the sequence; fed() records it. step() is draw, forward, fed.
class DecodeLoop {
public:
    // Constructing it changes nothing; the options were checked by the caller (check_generation_options).
    DecodeLoop(Engine& engine, EngineSequence& sequence, TokenLedger& ledger, const GenerationOptions& options,
               const GenerationCallbacks& callbacks);
    ~DecodeLoop();
    DecodeLoop(const DecodeLoop&) = delete;
    DecodeLoop& operator=(const DecodeLoop&) = delete;

    // One token (above); returns it. Error after finished().
    int32_t step();

    // The first half: draws and reports the next token. Returns it when the generation goes on (the
    // caller must feed exactly this token to the sequence, then call fed()); nullopt when it was the
    // last (finished(), the token is result().tokens.back()). Error after finished() or while a drawn
    // token waits to be fed.
    std::optional<int32_t> draw();
    // The second half: the token draw() returned has been fed to the sequence.
    void fed();

    bool finished() const { return finished_; }
    // The tokens, text and finish reason so far (complete once finished()); timings.decode_ms counts
    // from each draw() to its fed() (a caller that runs other sequences in between counts their time
    // too), decode_steps the tokens fed.
    GenerationResult& result() { return result_; }

private:
    Engine& engine_;
    EngineSequence& sequence_;
    TokenLedger& ledger_;
    const GenerationOptions& options_;
    const GenerationCallbacks& callbacks_;
    std::unique_ptr<Sampler> sampler_;
    std::unique_ptr<StopStringMatcher> stops_;
    GenerationResult result_;
    std::optional<int32_t> to_feed_;       // drawn, not yet fed
    std::chrono::steady_clock::time_point drawn_at_;
    bool finished_ = false;
};

// Generates after `prompt` on an engine's sequence, continuing it and its `ledger` (which must agree in
// length), with the EOS ids of engine.config(). Error, before any forward call, for an empty prompt,
// what check_generation_options() refuses (no EOS ids and no max_tokens, max_tokens < 1, stop strings
// without `detokenize`), a ledger out of step with the sequence, and a prompt that does not fit the
// sequence's capacity after what it holds.
GenerationResult generate(Engine& engine, EngineSequence& sequence, TokenLedger& ledger,
                          std::span<const int32_t> prompt, const GenerationOptions& options,
                          const GenerationCallbacks& callbacks = {});

// The option checks every generate() makes before its first forward call, for callers that must refuse
// before they change anything of their own (sessions). `model` names the model in messages.
void check_generation_options(std::span<const int64_t> eos_ids, const GenerationOptions& options,
                              const GenerationCallbacks& callbacks, std::string_view model);

}  // namespace deltabit
