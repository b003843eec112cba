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

void check_request(const Model& model, std::span<const int64_t> eos_ids, const SequenceState& state,
                   const TokenLedger& ledger, std::span<const int32_t> prompt, const GenerationOptions& options,
                   const GenerationCallbacks& callbacks) {
    if (prompt.empty()) fail("generate: the prompt is empty; at least one token is needed to predict the next");
    if (options.max_tokens && *options.max_tokens < 1)
        fail("generate: max_tokens is {}; it must be at least 1", *options.max_tokens);
    if (eos_ids.empty() && !options.max_tokens)
        fail("generate: {}: the model's metadata declares no EOS token, so generation would never end on its "
             "own; give max_tokens",
             model.weights().source());
    if (!options.stop.empty() && !callbacks.detokenize)
        fail("generate: stop strings are matched on text, but no detokenizer was given (token ids only)");
    if (ledger.size() != state.position())
        fail("generate: the token ledger holds {} tokens but the state is at position {}", ledger.size(),
             state.position());
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

GenerationResult generate(const Model& model, SequenceState& state, TokenLedger& ledger,
                          std::span<const int32_t> prompt, const GenerationOptions& options,
                          const GenerationCallbacks& callbacks) {
    return generate_with_eos(model, model.config().eos_ids, state, ledger, prompt, options, callbacks);
}

GenerationResult generate_with_eos(const Model& model, std::span<const int64_t> eos_ids, SequenceState& state,
                                   TokenLedger& ledger, std::span<const int32_t> prompt,
                                   const GenerationOptions& options, const GenerationCallbacks& callbacks) {
    check_request(model, eos_ids, state, ledger, prompt, options, callbacks);
    const size_t n_vocab = size_t(model.config().n_vocab);
    GenerationResult result;
    result.timings.prompt_tokens = int64_t(prompt.size());

    const Clock::time_point prefill_start = Clock::now();
    std::vector<float> logits = model.forward(state, prompt);
    ledger.append_prompt(prompt);
    result.timings.prefill_ms = ms_since(prefill_start);

    const Clock::time_point decode_start = Clock::now();
    Sampler sampler(options.sampling);
    StopStringMatcher stops(options.stop);
    const bool has_text = bool(callbacks.detokenize);
    std::span<const float> next_logits = std::span<const float>(logits).subspan((prompt.size() - 1) * n_vocab, n_vocab);

    for (;;) {
        const int32_t token = sampler.sample(next_logits, ledger.history());
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
        const bool last = is_eos || stopped || at_limit;
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
        logits = model.forward(state, fed);
        ledger.append_generated(token);
        ++result.timings.decode_steps;
        next_logits = logits;
    }
    result.timings.decode_ms = ms_since(decode_start);
    return result;
}

}  // namespace deltabit
