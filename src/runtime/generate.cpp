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

void check_request(const Engine& engine, const EngineSequence& sequence, const TokenLedger& ledger,
                   std::span<const int32_t> prompt, const GenerationOptions& options,
                   const GenerationCallbacks& callbacks) {
    if (prompt.empty()) fail("generate: the prompt is empty; at least one token is needed to predict the next");
    check_generation_options(engine.config().eos_ids, options, callbacks, engine.config().arch_name);
    if (ledger.size() != sequence.position())
        fail("generate: the token ledger holds {} tokens but the state is at position {}", ledger.size(),
             sequence.position());
    if (int64_t(prompt.size()) > sequence.max_positions() - sequence.position())
        fail("generate: the prompt's {} tokens do not fit after the {} the sequence holds (capacity {})",
             prompt.size(), sequence.position(), sequence.max_positions());
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

DecodeLoop::DecodeLoop(Engine& engine, EngineSequence& sequence, TokenLedger& ledger,
                       const GenerationOptions& options, const GenerationCallbacks& callbacks)
    : engine_(engine), sequence_(sequence), ledger_(ledger), options_(options), callbacks_(callbacks),
      sampler_(std::make_unique<Sampler>(options.sampling)), stops_(std::make_unique<StopStringMatcher>(options.stop)) {}

DecodeLoop::~DecodeLoop() = default;

int32_t DecodeLoop::step() {
    const std::optional<int32_t> token = draw();
    if (!token) return result_.tokens.back();
    const int32_t ids[1] = {*token};
    engine_.forward(sequence_, ids);
    fed();
    return *token;
}

std::optional<int32_t> DecodeLoop::draw() {
    if (finished_) fail("generate: internal: a step after the generation finished");
    if (to_feed_) fail("generate: internal: a token is drawn before the last one was fed");
    drawn_at_ = Clock::now();
    const std::span<const int64_t> eos_ids = engine_.config().eos_ids;
    const bool has_text = bool(callbacks_.detokenize);

    const int32_t token = engine_.next_token(sequence_, *sampler_, ledger_.history());
    result_.tokens.push_back(token);
    const bool is_eos = std::find(eos_ids.begin(), eos_ids.end(), int64_t(token)) != eos_ids.end();

    // The EOS token ends the text; it is not part of it.
    std::string text;
    bool stopped = false;
    if (has_text && !is_eos) {
        StopStringMatcher::Step step = stops_->push(callbacks_.detokenize(token));
        text = std::move(step.released);
        stopped = step.stopped;
    }
    const bool at_limit = options_.max_tokens && int64_t(result_.tokens.size()) >= *options_.max_tokens;
    const bool full = sequence_.position() >= sequence_.max_positions();  // no room to consume this token
    const bool last = is_eos || stopped || at_limit || full;
    if (last && !stopped && has_text) {
        // A character cut short becomes U+FFFD here, and that could still complete a stop string.
        StopStringMatcher::Step step =
            stops_->push(callbacks_.detokenize_finish ? callbacks_.detokenize_finish() : std::string());
        text += step.released;
        stopped = step.stopped;
        if (!stopped) text += stops_->finish();
    }
    result_.text += text;
    if (last) {
        // Finished before on_token, so a callback that throws leaves a loop that refuses another step.
        result_.finish = stopped ? FinishReason::stop : is_eos ? FinishReason::eos : FinishReason::length;
        finished_ = true;
    }
    if (callbacks_.on_token) callbacks_.on_token(token, text);
    if (last) {
        result_.timings.decode_ms += ms_since(drawn_at_);
        return std::nullopt;
    }
    to_feed_ = token;
    return token;
}

void DecodeLoop::fed() {
    if (!to_feed_) fail("generate: internal: fed() without a drawn token");
    ledger_.append_generated(*to_feed_);
    to_feed_.reset();
    ++result_.timings.decode_steps;
    if (callbacks_.after_forward) callbacks_.after_forward(sequence_.position());
    result_.timings.decode_ms += ms_since(drawn_at_);
}

GenerationResult generate(Engine& engine, EngineSequence& sequence, TokenLedger& ledger,
                          std::span<const int32_t> prompt, const GenerationOptions& options,
                          const GenerationCallbacks& callbacks) {
    check_request(engine, sequence, ledger, prompt, options, callbacks);
    const Clock::time_point prefill_start = Clock::now();
    engine.forward(sequence, prompt);
    ledger.append_prompt(prompt);
    if (callbacks.after_forward) callbacks.after_forward(sequence.position());
    if (callbacks.on_prefill_progress) callbacks.on_prefill_progress(int64_t(prompt.size()), int64_t(prompt.size()));
    const double prefill_ms = ms_since(prefill_start);

    DecodeLoop loop(engine, sequence, ledger, options, callbacks);
    while (!loop.finished()) loop.step();
    GenerationResult result = std::move(loop.result());
    result.timings.prompt_tokens = int64_t(prompt.size());
    result.timings.prefill_ms = prefill_ms;
    return result;
}

}  // namespace deltabit
