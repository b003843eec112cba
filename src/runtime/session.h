// A conversation's state across turns: one engine sequence, its token ledger, and checkpoints that let
// a new turn reuse the longest common prefix with what the sequence already holds — exactly, although
// DeltaNet state cannot be rewound (it is restored from the nearest checkpoint at or before the
// divergence and the rest is re-read).
//
// Each turn is given the whole conversation as tokens (the chat template re-rendered), not a delta:
// the session finds what it can reuse, so edited history, regenerated replies and templates that
// rewrite earlier turns (Qwen drops old thinking blocks) all stay exact.
//
// How a turn reuses (plan_reuse below): with c = the common prefix of the held tokens and the prompt,
// at most min(c, prompt − 1) tokens can be kept — at least one prompt token must be fed to get the
// logits of the first reply token. If the held sequence is no longer than that, all of it is kept;
// otherwise the sequence returns to the latest checkpoint at or before that bound (or to empty), and
// every checkpoint past it is dropped. Models whose state is all KV cache in a format where cutting the
// cache back is exact (qwen3 with f32 or f16: state_checkpoint_layout() is empty) can return to any
// position, so they keep exactly min(c, prompt − 1) and store no checkpoints. The tokens kept keep
// their ledger flags (a reply the model generated stays "generated" for DRY), whatever the new prompt
// is; the ones fed are "prompt".
//
// Checkpoint policy (CheckpointPolicy), where re-rendering can diverge:
//   - turn starts: positions the caller names in run_turn's `turn_starts` — in a chat, the end of the
//     last message before the model's turn (the chat template rendered without its generation
//     prompt). Templates that re-render an earlier reply differently than the model wrote it (Qwen3.5
//     drops the `<think>` scaffold of earlier replies) diverge right after it, so a later turn reuses at
//     least everything before the previous reply;
//   - the end of each turn's prompt (a template that re-renders the reply's scaffold as it was, but not
//     its text: trimmed whitespace, a stop string, a re-encoded character);
//   - every multiple of `interval` positions (edits deep inside a long prompt).
// Prompts are fed in pieces split at turn starts and interval multiples; generation checks after each
// token. Over `max_kept` checkpoints or `max_bytes` bytes, the least useful goes first: interval ones
// (oldest first), then ends of prompts, then turn starts, then the newest end of prompt, then the
// newest turn start (ties: oldest first). Sizes, measurements and the reason for the defaults:
// docs/sessions.md and docs/notes/prefix-reuse.md.
//
// Exactness: a restored checkpoint is bit for bit the state at its position, so every logit of a reused
// turn equals that of a fresh sequence fed the same tokens in the same forward calls (the earlier
// turns' calls up to the reuse point, then this turn's; turn starts split calls like interval multiples). Whether it also equals a fresh run fed in other
// calls depends on the forward pass: on the CPU it does for attention-only models with f32/f16 caches,
// not for gated DeltaNet (prompts take the chunked form, single tokens the recurrence: other fp32
// rounding) nor for kivi4 (it quantises between calls). Because prompts are split at absolute interval
// multiples, a turn that reuses up to 0 or an interval multiple feeds exactly the calls a fresh session
// would, and so gives a fresh session's tokens bit for bit (tests/runtime/test_session.cpp).
//
// EOS: a reply that ends with EOS leaves the EOS unfed (runtime/generate.h); the next turn's prompt,
// which re-renders the reply with its end-of-turn token, feeds it, so the held sequence is always the
// conversation as the template renders it.
//
// Snapshots: save() writes the session (ledger, state image, checkpoints, KV format, model fingerprint)
// to a file in the format of DESIGN.md §5, through a temporary file and a rename; load() refuses a file
// from another model, another KV format it cannot hold, a truncated file or a bad checksum with a
// message naming what was wrong, and leaves the live session as it was. A loaded session holds the
// saved checkpoints, in their taking order, so its later turns reuse exactly what the saved session's
// would have (given the same CheckpointPolicy; a smaller max_kept evicts at load, by the policy).
//
// Context limit (docs/sessions.md): a turn whose prompt does not fit the sequence's
// capacity is refused before anything changes (Error naming the sizes); generation that reaches the
// capacity stops with finish reason "length". Dropping old turns is the caller's decision (it owns the
// messages): re-render fewer turns and run the turn again — the session then re-reads from the
// divergence, which is at the start, so no DeltaNet state ever holds dropped tokens.
#pragma once

#include "runtime/engine.h"
#include "runtime/generate.h"
#include "runtime/token_ledger.h"

#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace deltabit {

struct CheckpointPolicy {
    int64_t interval = 512;  // checkpoint at every multiple of this position (0 = only at ends of prompts)
    int max_kept = 8;        // 0 = keep none (every divergence re-reads from the start)
    int64_t max_bytes = 0;   // a memory budget for the kept checkpoints; 0 = none (max_kept alone)
};

// Why a checkpoint was taken; also its eviction class (see above).
enum class CheckpointKind { interval, end_of_prompt, turn_start };
std::string_view checkpoint_kind_name(CheckpointKind kind);  // "interval", "end_of_prompt", "turn_start"

// Where a turn's reused tokens came from.
enum class ReuseFrom {
    nothing,     // reused 0: read from the start
    held,        // the prompt extends what the sequence holds: all of it kept
    kv_cut,      // a KV cache cut back (models that need no checkpoints)
    checkpoint,  // a restored checkpoint (ReuseReport::checkpoint_kind)
};
std::string_view reuse_from_name(ReuseFrom from);  // "nothing", "held", "kv_cut", "checkpoint"

struct SessionOptions {
    SequenceOptions sequence;
    CheckpointPolicy checkpoints;
};

// What a turn could reuse, reported with every turn.
struct ReuseReport {
    int64_t prompt_tokens = 0;
    int64_t common_prefix = 0;      // tokens equal at the start of the held sequence and the new prompt
    // Tokens not re-read: ≤ common_prefix and < prompt_tokens — the held length, a checkpoint's position,
    // or (models that need no checkpoints) min(common_prefix, prompt_tokens − 1).
    int64_t reused = 0;
    int64_t recomputed = 0;         // prompt_tokens − reused
    ReuseFrom from = ReuseFrom::nothing;
    CheckpointKind checkpoint_kind = CheckpointKind::interval;  // when from == checkpoint
    // Index of the first differing token (= prompt_tokens when the prompt is a strict prefix of the
    // held sequence); −1 when the prompt extends or equals the held sequence.
    int64_t first_divergence = -1;
    // The tokens at [first_divergence − 4, first_divergence + 4) of each, clipped to their lengths
    // (empty without a divergence): what a "why was this not reused?" message shows.
    std::vector<int32_t> held_around, prompt_around;
};

struct TurnResult {
    GenerationResult generation;
    ReuseReport reuse;
};

struct SessionStats {
    int64_t position = 0, max_positions = 0;
    int64_t turns = 0, tokens_reused = 0, tokens_recomputed = 0;
    int64_t checkpoints = 0, checkpoint_bytes = 0;  // kept now
    std::vector<std::pair<int64_t, CheckpointKind>> checkpoint_positions;  // kept now, by position
    int64_t checkpoints_taken = 0;                    // over the session's life
    double checkpoint_ms = 0.0;                       // time spent taking them
    KvFormat kv_format = KvFormat::f32;
};

// What one SessionTurn::step() did.
struct TurnStep {
    int64_t prompt_tokens = 0;     // prompt tokens this step read (a prefill piece); 0 in a decode step
    std::optional<int32_t> token;  // the token this step drew (and reported through on_token)
    bool finished = false;         // the turn has ended (the step's token, if any, was its last)
};

class Session;

// One turn driven a step at a time (Session::begin_turn): each step() reads one prompt piece or
// generates one token, so a caller can interleave many sessions' turns on one engine (the server's
// scheduler) and stop any of them between steps. run_turn() is this loop run to the end, so a turn
// driven step by step gives run_turn's tokens and logits bit for bit.
//
// Prompt pieces end at the checkpoint interval's multiples and the turn starts (each followed by its
// checkpoint), at multiples of `max_piece` when it is > 0 (absolute positions, no checkpoint), and at
// the end of the prompt. The step that reads the last piece also draws the first token from its
// logits and reports it (on_token); each decode step then feeds the token drawn last and draws the
// next from the logits that forward call left. A token is drawn right after its sequence's forward
// call, with no other sequence's call in between: the CUDA engine keeps only the latest call's
// logits (runtime/engine.h). The turn ends with the token that ends it (EOS, stop string, max_tokens,
// a full sequence), which is never fed. The session must outlive the turn; while a turn is open the
// session refuses other turns, reset() and load().
class SessionTurn {
public:
    ~SessionTurn();  // ends the turn if it has not finished; the session keeps what was fed (as cancel())
    SessionTurn(const SessionTurn&) = delete;
    SessionTurn& operator=(const SessionTurn&) = delete;

    // One piece or one token (above). Error after finished(). An Error from the engine or a callback
    // ends the turn and leaves the session consistent (the ledger matches the sequence).
    TurnStep step();

    // A decode step in its two halves around its forward call, for a caller that feeds many sessions'
    // tokens in one batched call: while decoding(), token_to_feed() is the token drawn last, which the
    // caller feeds to sequence(); then token_fed() records it and draws the next token from the logits
    // that call left (reporting it; the turn may end with it). Error unless decoding(). A turn
    // cancelled between the halves must not have been fed the token: it holds what it held before.
    int32_t token_to_feed() const;
    TurnStep token_fed();
    EngineSequence& sequence();  // the session's, which the drawn token is fed to
    // Ends the turn now: the session keeps what the turn fed so far (consistent, reusable by the next
    // turn); result() holds the tokens generated so far. Nothing when already finished.
    void cancel();
    bool finished() const { return finished_; }
    bool cancelled() const { return cancelled_; }
    bool decoding() const { return decode_ != nullptr && !finished_; }  // the prompt has been read, a token waits
    const ReuseReport& reuse() const { return result_.reuse; }
    // The turn's result: complete once finished() (after cancel(): the tokens so far, finish "length").
    const TurnResult& result() const { return result_; }

private:
    friend class Session;
    explicit SessionTurn(Session& session) : session_(session) {}
    TurnStep read_piece();
    TurnStep draw();     // the next token, after the prompt or a fed token
    void end_decode();  // the turn ends with the token just drawn
    void close();

    Session& session_;
    std::vector<int32_t> prompt_;
    GenerationOptions options_;
    GenerationCallbacks callbacks_;  // the caller's
    GenerationCallbacks hooked_;     // the caller's plus the session's checkpoints
    std::vector<std::pair<int64_t, std::optional<CheckpointKind>>> pieces_;  // piece ends, ascending
    size_t next_piece_ = 0;
    int64_t at_ = 0;
    CheckpointKind end_kind_ = CheckpointKind::end_of_prompt;
    std::unique_ptr<DecodeLoop> decode_;
    std::optional<int32_t> to_feed_;  // drawn, not yet fed
    TurnResult result_;
    bool finished_ = false, cancelled_ = false;
};

// The reuse decision of run_turn() for held tokens `held`, a new `prompt` and checkpoints at
// `checkpoint_positions`; `any_position`: the sequence can return to any position (see above).
// Pure, so its arithmetic can be checked by hand.
ReuseReport plan_reuse(std::span<const int32_t> held, std::span<const int32_t> prompt,
                       std::span<const int64_t> checkpoint_positions, bool any_position);

class Session {
public:
    // Error for a policy with a negative interval, max_kept or max_bytes, and as Engine::new_sequence.
    Session(Engine& engine, const SessionOptions& options);

    // Runs one turn on the whole conversation `prompt` (see above). `turn_starts`: positions in
    // 1 .. prompt.size(), ascending, where a model's turn begins (the caller's template knows them; a
    // chat passes the end of the last message before the generation prompt); each past the reused
    // prefix gets a checkpoint. Error before any change for an empty prompt, one that does not fit, a
    // token outside the vocabulary, turn starts out of order or range, or options generate() refuses.
    // An error from the engine or a callback during the turn leaves the session consistent (the
    // ledger matches the sequence; the turn's tokens fed so far stay).
    TurnResult run_turn(std::span<const int32_t> prompt, const GenerationOptions& options,
                        const GenerationCallbacks& callbacks = {}, std::span<const int64_t> turn_starts = {});
    // The same turn, to be driven step by step (SessionTurn): the same refusals, before any change; the
    // reuse decision and return to the reused position happen here. `max_piece` > 0 bounds the prompt
    // pieces (above); run_turn() uses 0. The turn keeps its own copies of the arguments.
    std::unique_ptr<SessionTurn> begin_turn(std::span<const int32_t> prompt, const GenerationOptions& options,
                                            const GenerationCallbacks& callbacks = {},
                                            std::span<const int64_t> turn_starts = {}, int64_t max_piece = 0);
    bool in_turn() const { return open_turn_ != nullptr; }

    void reset();  // empty sequence, no checkpoints
    // Snapshots (runtime/snapshot.h). load() verifies the whole file first and installs it only then;
    // on Error the session is as it was. After a load the checkpoints are the file's (over max_kept:
    // evicted as the policy evicts); a version 1 file has none, and gets one at the loaded position.
    void save(const std::filesystem::path& file) const;
    void load(const std::filesystem::path& file);

    const TokenLedger& ledger() const { return ledger_; }
    SessionStats stats() const;
    Engine& engine() const { return engine_; }
    // The sequence the turns run on: during a turn's on_token callback its last logits are the ones the
    // token was drawn from (the server's logprobs read them there).
    const EngineSequence& sequence() const { return *sequence_; }

private:
    friend class SessionTurn;
    struct KeptCheckpoint {
        std::shared_ptr<const StateCheckpoint> state;  // shared with snapshots being written, never changed
        CheckpointKind kind = CheckpointKind::interval;
        uint64_t serial = 0;  // taking order: "oldest" for eviction
    };
    void return_to(int64_t position);
    void keep_checkpoint(CheckpointKind kind);
    void evict_over_limit();
    void feed_prompt_piece(std::span<const int32_t> piece);

    Engine& engine_;
    SessionOptions options_;
    std::unique_ptr<EngineSequence> sequence_;
    TokenLedger ledger_;
    std::deque<KeptCheckpoint> checkpoints_;  // by position, at most one per position
    bool any_position_ = false;               // nothing a KV cut cannot recover: no checkpoints needed
    uint64_t next_serial_ = 0;
    SessionStats totals_;
    SessionTurn* open_turn_ = nullptr;
};

}  // namespace deltabit
