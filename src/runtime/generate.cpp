#include "runtime/generate.h"

#include "core/error.h"
#include "runtime/stop_strings.h"
#include "sampling/sampler.h"

#include <algorithm>
#include <chrono>

namespace deltabit {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The loop's view of an engine sequence.
class Stepper {
public:
    Stepper(Engine& engine, EngineSequence& sequence) : engine_(engine), sequence_(sequence) {}
    void feed(std::span<const int32_t> ids) { engine_.forward(sequence_, ids); }
    int32_t choose(Sampler& sampler, const TokenHistory& history) {
        return engine_.next_token(sequence_, sampler, history);
    }
    int64_t position() const { return sequence_.position(); }
    int64_t capacity() const { return sequence_.max_positions(); }

private:
    Engine& engine_;
    EngineSequence& sequence_;
};

void check_request(std::span<const int64_t> eos_ids, Stepper& stepper, const TokenLedger& ledger,
                   std::span<const int32_t> prompt, const GenerationOptions& options,
                   const GenerationCallbacks& callbacks, std::string_view model) {
    if (prompt.empty()) fail("generate: the prompt is empty; at least one token is needed to predict the next");
    check_generation_options(eos_ids, options, callbacks, model);
    if (ledger.size() != stepper.position())
        fail("generate: the token ledger holds {} tokens but the state is at position {}", ledger.size(),
             stepper.position());
    if (int64_t(prompt.size()) > stepper.capacity() - stepper.position())
        fail("generate: the prompt's {} tokens do not fit after the {} the sequence holds (capacity {})",
             prompt.size(), stepper.position(), stepper.capacity());
}

GenerationResult run_loop(Stepper& stepper, std::span<const int64_t> eos_ids, TokenLedger& ledger,
                          std::span<const int32_t> prompt, const GenerationOptions& options,
                          const GenerationCallbacks& callbacks) {
    GenerationResult result;
    result.timings.prompt_tokens = int64_t(prompt.size());

    const Clock::time_point prefill_start = Clock::now();
    stepper.feed(prompt);
    ledger.append_prompt(prompt);
    if (callbacks.after_forward) callbacks.after_forward(stepper.position());
    if (callbacks.on_prefill_progress) callbacks.on_prefill_progress(int64_t(prompt.size()), int64_t(prompt.size()));
    result.timings.prefill_ms = ms_since(prefill_start);

    const Clock::time_point decode_start = Clock::now();
    Sampler sampler(options.sampling);
    StopStringMatcher stops(options.stop);
    const bool has_text = bool(callbacks.detokenize);

    for (;;) {
        const int32_t token = stepper.choose(sampler, ledger.history());
        result.tokens.push_back(token);
        const bool is_eos = std::find(eos_ids.begin(), eos_ids.end(), int64_t(token)) != eos_ids.end();

        // The EOS token ends the text; it is not part of it.
        std::string text;
        bool stopped = false;
        if (has_text && !is_eos) {
            StopStringMatcher::Step step = stops.push(callbacks.detokenize(token));
            text = std::move(step.released);
            stopped = step.stopped;
        }
        const bool at_limit = options.max_tokens && int64_t(result.tokens.size()) >= *options.max_tokens;
        const bool full = stepper.position() >= stepper.capacity();  // no room to consume this token
        const bool last = is_eos || stopped || at_limit || full;
        if (last && !stopped && has_text) {
            // A character cut short becomes U+FFFD here, and that could still complete a stop string.
            StopStringMatcher::Step step =
                stops.push(callbacks.detokenize_finish ? callbacks.detokenize_finish() : std::string());
            text += step.released;
            stopped = step.stopped;
            if (!stopped) text += stops.finish();
        }
        result.text += text;
        if (callbacks.on_token) callbacks.on_token(token, text);

        if (last) {
            result.finish = stopped ? FinishReason::stop : is_eos ? FinishReason::eos : FinishReason::length;
            break;
        }
        const int32_t fed[1] = {token};
        stepper.feed(fed);
        ledger.append_generated(token);
        ++result.timings.decode_steps;
        if (callbacks.after_forward) callbacks.after_forward(stepper.position());
    }
    result.timings.decode_ms = ms_since(decode_start);
    return result;
}

}  // namespace

std::string_view finish_reason_name(FinishReason reason) {
    switch (reason) {
        case FinishReason::eos: return "eos";
        case FinishReason::stop: return "stop";
        case FinishReason::length: return "length";
    }
    return "?";
}

void check_generation_options(std::span<const int64_t> eos_ids, const GenerationOptions& options,
                              const GenerationCallbacks& callbacks, std::string_view model) {
    if (options.max_tokens && *options.max_tokens < 1)
        fail("generate: max_tokens is {}; it must be at least 1", *options.max_tokens);
    if (eos_ids.empty() && !options.max_tokens)
        fail("generate: {}: the model's metadata declares no EOS token, so generation would never end on its "
             "own; give max_tokens",
             model);
    if (!options.stop.empty() && !callbacks.detokenize)
        fail("generate: stop strings are matched on text, but no detokenizer was given (token ids only)");
}

GenerationResult generate(Engine& engine, EngineSequence& sequence, TokenLedger& ledger,
                          std::span<const int32_t> prompt, const GenerationOptions& options,
                          const GenerationCallbacks& callbacks) {
    Stepper stepper(engine, sequence);
    const std::span<const int64_t> eos_ids = engine.config().eos_ids;
    check_request(eos_ids, stepper, ledger, prompt, options, callbacks, engine.config().arch_name);
    return run_loop(stepper, eos_ids, ledger, prompt, options, callbacks);
}

}  // namespace deltabit
