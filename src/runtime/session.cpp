#include "runtime/session.h"

#include "core/error.h"
#include "models/config_summary.h"
#include "models/sequence_state.h"
#include "runtime/snapshot.h"

#include <algorithm>
#include <chrono>
#include <map>

namespace deltabit {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::vector<int32_t> around(std::span<const int32_t> ids, int64_t at) {
    const int64_t from = std::max<int64_t>(0, at - 4);
    const int64_t to = std::min<int64_t>(int64_t(ids.size()), at + 4);
    if (from >= to) return {};
    return {ids.begin() + from, ids.begin() + to};
}

// The first n tokens of `ledger`, with their flags.
TokenLedger ledger_prefix(const TokenLedger& ledger, int64_t n) {
    TokenLedger out;
    for (int64_t i = 0; i < n; ++i) {
        const int32_t id = ledger.tokens()[size_t(i)];
        if (ledger.generated()[size_t(i)]) {
            out.append_generated(id);
        } else {
            const int32_t one[1] = {id};
            out.append_prompt(one);
        }
    }
    return out;
}

// The decode loop's tokens, text, finish and decode timings, into `out`, which holds the prefill
// timings of the turn's pieces.
void take_decode_result(GenerationResult& out, DecodeLoop& decode) {
    const GenerationTimings prefill = out.timings;
    out = std::move(decode.result());
    out.timings.prefill_ms = prefill.prefill_ms;
    out.timings.prompt_tokens = prefill.prompt_tokens;
}

}  // namespace

std::string_view checkpoint_kind_name(CheckpointKind kind) {
    switch (kind) {
        case CheckpointKind::interval: return "interval";
        case CheckpointKind::end_of_prompt: return "end_of_prompt";
        case CheckpointKind::turn_start: return "turn_start";
    }
    return "?";
}

std::string_view reuse_from_name(ReuseFrom from) {
    switch (from) {
        case ReuseFrom::nothing: return "nothing";
        case ReuseFrom::held: return "held";
        case ReuseFrom::kv_cut: return "kv_cut";
        case ReuseFrom::checkpoint: return "checkpoint";
    }
    return "?";
}

ReuseReport plan_reuse(std::span<const int32_t> held, std::span<const int32_t> prompt,
                       std::span<const int64_t> checkpoint_positions, bool any_position) {
    ReuseReport r;
    r.prompt_tokens = int64_t(prompt.size());
    const auto [held_end, prompt_end] = std::mismatch(held.begin(), held.end(), prompt.begin(), prompt.end());
    r.common_prefix = int64_t(held_end - held.begin());
    if (r.common_prefix < int64_t(held.size())) {
        r.first_divergence = r.common_prefix;
        r.held_around = around(held, r.first_divergence);
        r.prompt_around = around(prompt, r.first_divergence);
    }
    // Feeding at least one token is what produces the logits the reply starts from.
    const int64_t bound = std::min(r.common_prefix, int64_t(prompt.size()) - 1);
    if (int64_t(held.size()) <= bound) {
        r.reused = int64_t(held.size());
        r.from = ReuseFrom::held;
    } else if (any_position) {
        r.reused = std::max<int64_t>(bound, 0);
        r.from = ReuseFrom::kv_cut;
    } else {
        r.reused = 0;
        for (int64_t p : checkpoint_positions)
            if (p <= bound) r.reused = std::max(r.reused, p);
        r.from = ReuseFrom::checkpoint;
    }
    if (r.reused == 0) r.from = ReuseFrom::nothing;
    r.recomputed = r.prompt_tokens - r.reused;
    return r;
}

Session::Session(Engine& engine, const SessionOptions& options)
    : engine_(engine), options_(options), sequence_(engine.new_sequence(options.sequence)) {
    if (options.checkpoints.interval < 0)
        fail("session: checkpoint interval {} is negative (0 turns interval checkpoints off)",
             options.checkpoints.interval);
    if (options.checkpoints.max_kept < 0)
        fail("session: max_kept {} is negative (0 keeps no checkpoints)", options.checkpoints.max_kept);
    if (options.checkpoints.max_bytes < 0)
        fail("session: checkpoint max_bytes {} is negative (0 sets no byte budget)", options.checkpoints.max_bytes);
    // The chunk list does not depend on the position (only the chunks' sizes do), so an empty list at 0
    // means a KV cut alone returns to any position.
    any_position_ = state_checkpoint_layout(engine.config(), sequence_->kv_format(), 0).empty();
}

void Session::reset() {
    if (open_turn_) fail("session: a turn is in progress; finish or cancel it before resetting");
    sequence_->reset();
    ledger_.clear();
    checkpoints_.clear();
}

// Returns the sequence and ledger to their first `position` tokens: a position plan_reuse() chose, so
// either the held length (nothing to do), 0, any position (any_position_), or a kept checkpoint's.
void Session::return_to(int64_t position) {
    if (position == ledger_.size()) return;
    if (position == 0) {
        sequence_->reset();
    } else if (any_position_) {
        sequence_->restore(StateCheckpoint{position, {}});
    } else {
        const auto it = std::find_if(checkpoints_.begin(), checkpoints_.end(),
                                     [&](const KeptCheckpoint& c) { return c.state->position == position; });
        if (it == checkpoints_.end()) fail("session: internal: no checkpoint at position {}", position);
        sequence_->restore(*it->state);
    }
    ledger_ = ledger_prefix(ledger_, position);
    // Checkpoints past the position describe a history that is about to be replaced.
    while (!checkpoints_.empty() && checkpoints_.back().state->position > position) checkpoints_.pop_back();
}

void Session::keep_checkpoint(CheckpointKind kind) {
    if (any_position_ || options_.checkpoints.max_kept == 0) return;
    const Clock::time_point start = Clock::now();
    KeptCheckpoint kept{std::make_shared<const StateCheckpoint>(sequence_->checkpoint()), kind, next_serial_++};
    totals_.checkpoint_ms += ms_since(start);
    ++totals_.checkpoints_taken;

    const int64_t position = kept.state->position;
    auto at = std::lower_bound(checkpoints_.begin(), checkpoints_.end(), position,
                               [](const KeptCheckpoint& c, int64_t p) { return c.state->position < p; });
    if (at != checkpoints_.end() && at->state->position == position) {
        kept.kind = std::max(kept.kind, at->kind);  // one position, two reasons: the rarer-evicted class
        *at = std::move(kept);
    } else {
        checkpoints_.insert(at, std::move(kept));
    }
    evict_over_limit();
}

void Session::evict_over_limit() {
    // Eviction classes, least useful first (session.h): interval checkpoints; ends of prompts; turn
    // starts; the newest end of prompt; the newest turn start. A turn start serves everything its turn's
    // end of prompt serves (re-reading only the generation prompt) and more (a regenerated reply, a
    // template that drops the reply's scaffold), so it outranks it; the newest pair serves the next turn.
    const auto newest_serial = [&](CheckpointKind kind) {
        uint64_t newest = 0;
        bool any = false;
        for (const KeptCheckpoint& c : checkpoints_)
            if (c.kind == kind && (!any || c.serial > newest)) newest = c.serial, any = true;
        return newest;
    };
    const auto bytes = [&] {
        int64_t n = 0;
        for (const KeptCheckpoint& c : checkpoints_) n += int64_t(c.state->byte_size());
        return n;
    };
    const int64_t max_bytes = options_.checkpoints.max_bytes;
    while (!checkpoints_.empty() && (int64_t(checkpoints_.size()) > options_.checkpoints.max_kept ||
                                     (max_bytes > 0 && bytes() > max_bytes))) {
        const uint64_t newest_end = newest_serial(CheckpointKind::end_of_prompt);
        const uint64_t newest_start = newest_serial(CheckpointKind::turn_start);
        const auto rank = [&](const KeptCheckpoint& c) {
            switch (c.kind) {
                case CheckpointKind::interval: return 0;
                case CheckpointKind::end_of_prompt: return c.serial == newest_end ? 3 : 1;
                case CheckpointKind::turn_start: return c.serial == newest_start ? 4 : 2;
            }
            return 0;
        };
        auto victim = checkpoints_.begin();
        for (auto it = checkpoints_.begin(); it != checkpoints_.end(); ++it)
            if (std::pair(rank(*it), it->serial) < std::pair(rank(*victim), victim->serial)) victim = it;
        checkpoints_.erase(victim);
    }
}

void Session::feed_prompt_piece(std::span<const int32_t> piece) {
    engine_.forward(*sequence_, piece);
    ledger_.append_prompt(piece);
}

TurnResult Session::run_turn(std::span<const int32_t> prompt, const GenerationOptions& options,
                             const GenerationCallbacks& callbacks, std::span<const int64_t> turn_starts) {
    std::unique_ptr<SessionTurn> turn = begin_turn(prompt, options, callbacks, turn_starts);
    while (!turn->finished()) turn->step();
    return turn->result();
}

std::unique_ptr<SessionTurn> Session::begin_turn(std::span<const int32_t> prompt, const GenerationOptions& options,
                                                 const GenerationCallbacks& callbacks,
                                                 std::span<const int64_t> turn_starts, int64_t max_piece) {
    const ModelConfig& config = engine_.config();
    // Refusals, before anything changes.
    if (open_turn_) fail("session: a turn is in progress; finish or cancel it before starting another");
    if (max_piece < 0) fail("session: max_piece {} is negative (0 leaves prompt pieces unbounded)", max_piece);
    if (prompt.empty()) fail("session: the prompt is empty; a turn needs at least one token");
    if (int64_t(prompt.size()) > sequence_->max_positions())
        fail("session: the prompt has {} tokens, more than the sequence's capacity of {}; render fewer turns "
             "(docs/sessions.md, context limit)",
             prompt.size(), sequence_->max_positions());
    for (size_t i = 0; i < prompt.size(); ++i)
        if (prompt[i] < 0 || prompt[i] >= config.n_vocab)
            fail("session: prompt token {} (at {}) is outside the vocabulary of {} entries", prompt[i], i,
                 config.n_vocab);
    for (size_t i = 0; i < turn_starts.size(); ++i)
        if (turn_starts[i] < 1 || turn_starts[i] > int64_t(prompt.size()) || (i > 0 && turn_starts[i] <= turn_starts[i - 1]))
            fail("session: turn start {} is at {}; turn starts must ascend within 1 .. {} (the prompt's length)", i,
                 turn_starts[i], prompt.size());
    check_generation_options(config.eos_ids, options, callbacks, config.arch_name);

    std::unique_ptr<SessionTurn> turn(new SessionTurn(*this));
    turn->prompt_.assign(prompt.begin(), prompt.end());
    turn->options_ = options;
    turn->callbacks_ = callbacks;

    std::vector<int64_t> positions;
    for (const KeptCheckpoint& c : checkpoints_) positions.push_back(c.state->position);
    ReuseReport& reuse = turn->result_.reuse;
    reuse = plan_reuse(ledger_.tokens(), prompt, positions, any_position_);
    if (reuse.from == ReuseFrom::checkpoint)
        for (const KeptCheckpoint& c : checkpoints_)
            if (c.state->position == reuse.reused) reuse.checkpoint_kind = c.kind;
    return_to(reuse.reused);

    // The prompt's pieces: each ends at an interval multiple (a checkpoint), a turn start (a checkpoint
    // of that kind, which wins over an interval's at the same position), a max_piece multiple (none),
    // or the end (the end-of-prompt checkpoint, or a turn start's when one is there).
    const int64_t end = int64_t(prompt.size());
    const int64_t interval = options_.checkpoints.interval;
    const int64_t at = reuse.reused;
    std::map<int64_t, std::optional<CheckpointKind>> ends;  // in (at, end)
    if (max_piece > 0)
        for (int64_t b = (at / max_piece + 1) * max_piece; b < end; b += max_piece) ends[b] = std::nullopt;
    if (interval > 0)
        for (int64_t b = (at / interval + 1) * interval; b < end; b += interval) ends[b] = CheckpointKind::interval;
    for (int64_t b : turn_starts)
        if (b > at && b < end) ends[b] = CheckpointKind::turn_start;
    turn->pieces_.assign(ends.begin(), ends.end());
    turn->pieces_.emplace_back(end, std::nullopt);
    turn->at_ = at;
    turn->end_kind_ = !turn_starts.empty() && turn_starts.back() == end ? CheckpointKind::turn_start
                                                                        : CheckpointKind::end_of_prompt;
    // Generated tokens: a checkpoint at every interval multiple, then the caller's hook.
    turn->hooked_ = turn->callbacks_;
    turn->hooked_.after_forward = [this, interval, after = turn->callbacks_.after_forward](int64_t position) {
        if (interval > 0 && position % interval == 0) keep_checkpoint(CheckpointKind::interval);
        if (after) after(position);
    };
    open_turn_ = turn.get();
    return turn;
}

SessionTurn::~SessionTurn() { close(); }

void SessionTurn::close() {
    finished_ = true;
    if (session_.open_turn_ == this) session_.open_turn_ = nullptr;
}

void SessionTurn::cancel() {
    if (finished_) return;
    cancelled_ = true;
    if (decode_) take_decode_result(result_.generation, *decode_);
    close();
}

TurnStep SessionTurn::step() {
    if (finished_) fail("session: internal: a step after the turn finished");
    if (!decode_) {
        try {
            return read_piece();
        } catch (...) {
            close();
            throw;
        }
    }
    try {
        const int32_t ids[1] = {*to_feed_};
        session_.engine_.forward(*session_.sequence_, ids);
    } catch (...) {
        cancel();
        throw;
    }
    return token_fed();
}

int32_t SessionTurn::token_to_feed() const {
    if (!decoding()) fail("session: internal: no token to feed (the prompt is unread or the turn has finished)");
    return *to_feed_;
}

TurnStep SessionTurn::token_fed() {
    if (!decoding()) fail("session: internal: token_fed() without a token to feed");
    try {
        decode_->fed();
        to_feed_.reset();
    } catch (...) {
        cancel();
        throw;
    }
    return draw();
}

// Draws the next token (the loop's first half); the turn ends with it or waits for it to be fed.
TurnStep SessionTurn::draw() {
    TurnStep out;
    try {
        to_feed_ = decode_->draw();
    } catch (...) {
        cancel();
        throw;
    }
    out.token = decode_->result().tokens.back();
    if (!to_feed_) {
        end_decode();
        out.finished = true;
    }
    return out;
}

EngineSequence& SessionTurn::sequence() { return *session_.sequence_; }

void SessionTurn::end_decode() {
    take_decode_result(result_.generation, *decode_);
    SessionStats& totals = session_.totals_;
    ++totals.turns;
    totals.tokens_reused += result_.reuse.reused;
    totals.tokens_recomputed += result_.reuse.recomputed;
    close();
}

// One prompt piece, its checkpoint and progress report; the last one also ends the prompt (the
// end-of-prompt checkpoint, after_forward), starts the decode loop and draws the first token.
TurnStep SessionTurn::read_piece() {
    const Clock::time_point start = Clock::now();
    const auto [piece_end, kind] = pieces_[next_piece_++];
    const std::span<const int32_t> piece = std::span(prompt_).subspan(size_t(at_), size_t(piece_end - at_));
    session_.feed_prompt_piece(piece);
    at_ = piece_end;
    const bool last = next_piece_ == pieces_.size();
    const int64_t reused = result_.reuse.reused, to_read = int64_t(prompt_.size()) - reused;
    if (last) {
        session_.keep_checkpoint(end_kind_);
        if (callbacks_.after_forward) callbacks_.after_forward(at_);
    } else if (kind) {
        session_.keep_checkpoint(*kind);
    }
    if (callbacks_.on_prefill_progress) callbacks_.on_prefill_progress(at_ - reused, to_read);
    result_.generation.timings.prefill_ms += ms_since(start);
    result_.generation.timings.prompt_tokens += int64_t(piece.size());
    if (!last) {
        TurnStep out;
        out.prompt_tokens = int64_t(piece.size());
        return out;
    }
    // The first token, from the logits this piece left, before any other sequence runs.
    decode_ = std::make_unique<DecodeLoop>(session_.engine_, *session_.sequence_, session_.ledger_, options_, hooked_);
    TurnStep out = draw();
    out.prompt_tokens = int64_t(piece.size());
    return out;
}

SessionStats Session::stats() const {
    SessionStats s = totals_;
    s.position = sequence_->position();
    s.max_positions = sequence_->max_positions();
    s.kv_format = sequence_->kv_format();
    s.checkpoints = int64_t(checkpoints_.size());
    s.checkpoint_bytes = 0;
    for (const KeptCheckpoint& c : checkpoints_) {
        s.checkpoint_bytes += int64_t(c.state->byte_size());
        s.checkpoint_positions.emplace_back(c.state->position, c.kind);
    }
    return s;
}

void Session::save(const std::filesystem::path& file) const {
    Snapshot s;
    s.fingerprint = engine_.fingerprint();
    s.model_summary = model_config_summary(engine_.config());
    s.ledger = ledger_;
    s.state = sequence_->save();
    // In taking order, so that a loaded session evicts in the same order as this one.
    std::vector<const KeptCheckpoint*> by_age;
    for (const KeptCheckpoint& c : checkpoints_) by_age.push_back(&c);
    std::sort(by_age.begin(), by_age.end(), [](auto* a, auto* b) { return a->serial < b->serial; });
    for (const KeptCheckpoint* c : by_age)
        s.checkpoints.push_back(
            {c->state, c->kind == CheckpointKind::end_of_prompt, c->kind == CheckpointKind::turn_start});
    write_snapshot(file, s);
}

void Session::load(const std::filesystem::path& file) {
    if (open_turn_) fail("session: a turn is in progress; finish or cancel it before loading a snapshot");
    SnapshotExpectation expect;
    expect.fingerprint = engine_.fingerprint();
    expect.kv_format = sequence_->kv_format();
    expect.config = &engine_.config();
    expect.max_positions = sequence_->max_positions();
    Snapshot s = read_snapshot(file, expect);
    // The file's checkpoints, by position as kept; serials continue this session's count in the file's
    // taking order, so eviction compares them as the saving session did.
    std::deque<KeptCheckpoint> loaded;
    uint64_t serial = next_serial_;
    for (SnapshotCheckpoint& c : s.checkpoints) {
        const CheckpointKind kind = c.turn_start      ? CheckpointKind::turn_start
                                    : c.end_of_prompt ? CheckpointKind::end_of_prompt
                                                      : CheckpointKind::interval;
        loaded.push_back({std::move(c.state), kind, serial++});
    }
    std::sort(loaded.begin(), loaded.end(),
              [](const KeptCheckpoint& a, const KeptCheckpoint& b) { return a.state->position < b.state->position; });
    try {
        sequence_->load(s.state);  // validates again, then changes: the session is untouched on Error
    } catch (const Error& e) {
        fail("snapshot {}: {}", file.string(), e.what());
    }
    next_serial_ = serial;
    ledger_ = std::move(s.ledger);
    checkpoints_ = std::move(loaded);
    // A version 1 file holds no checkpoints: the loaded position is then the one place to return to.
    if (s.version < kFirstSnapshotVersionWithCheckpoints) keep_checkpoint(CheckpointKind::end_of_prompt);
    else evict_over_limit();
}

}  // namespace deltabit
