// The conversation behind `deltabit chat`: one line of input at a time, either a message or a
// /command, answered on stdout (replies, /stats) and stderr (everything else: notes, errors, help).
//
// Every turn renders the WHOLE conversation through the model's chat template and hands it to the
// Session, which reuses the longest prefix it already holds (runtime/session.h). The loop never
// feeds deltas itself, so templates that rewrite earlier turns (Qwen drops old thinking blocks),
// /thinking switches and dropped turns all stay exact. With each prompt it names the turn start: the
// end of the last message before the model's turn (the same conversation rendered without the
// generation prompt), where the session checkpoints so that the next turn reuses at least everything
// before this reply, whatever the template makes of it.
//
// Context limit. A turn needs room for its prompt plus its reply: --max-tokens tokens, or a quarter of
// the context when no limit is set (at most half the context either way). When the rendered
// conversation leaves less than that:
//   drop-oldest (default): drop the oldest turns — a user message and the replies after it, never the
//                system message — until it fits, re-render, and say so in one line on stderr;
//   stop:        refuse the message (the conversation is kept) and say so; /reset starts over.
// A single message too long for the context on its own is refused under either policy.
//
// Errors (a bad /load file, a template that refuses the conversation, a failed turn) print one line
// on stderr and leave the conversation as it was before that line; the chat goes on. A scripted chat
// (stdin not a terminal) then exits 1 at the end of its input.
// (Files named cmd_text_*: built only with the text libraries.)
#pragma once

#include "cli/cmd_text_chat_file.h"
#include "cli/cmd_text_prompt.h"
#include "runtime/generate.h"
#include "runtime/session.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace deltabit::cli {

enum class OnContextFull { drop_oldest, stop };

// Text for a terminal: C0 control characters other than newline and tab (and DEL) become their
// Unicode "control picture" (ESC → U+241B), so a model's stray escape sequence cannot take over the
// user's terminal. Pipes and files get the text unchanged.
std::string printable_on_terminal(std::string_view text);

// What both chat loops (left to right, block diffusion) share: an input line without its surrounding
// spaces, tabs and line ends; a one-line note on stderr ("chat: ...").
std::string_view trim_line(std::string_view s);
void chat_note(std::string_view line);
// A trimmed, non-empty input line: a message (a line starting with "//" sends the rest, "/" included), or
// a /command: `text` is then its name and `argument` the trimmed rest.
struct ChatLine {
    bool command = false;
    std::string_view text, argument;
};
ChatLine split_chat_line(std::string_view line);

struct ChatSettings {
    GenerationOptions generation;
    std::optional<bool> thinking;  // enable_thinking for the template; unset: the template's default
    bool preserve_thinking = false;  // the template's preserve_thinking: earlier replies keep their thinking
    OnContextFull on_full = OnContextFull::drop_oldest;
    bool json = false;           // replies and /stats as one JSON object per line (for scripts)
    bool show_progress = false;  // a progress line on stderr for prefills over a second
    bool stdout_is_terminal = false;  // replies shown with control characters made visible
    bool interruptible = false;       // Ctrl-C stops a reply instead of the program (interrupt.h)
};

class ChatLoop {
public:
    // `system_prompt` (may be empty) is the first message and is never dropped.
    ChatLoop(Session& session, const TextFrontEnd& text, ChatSettings settings, const std::string& system_prompt);

    // Handles one line of input (without its newline). Returns false once the user asked to quit.
    bool handle_line(std::string_view line);

    const ChatConversation& conversation() const { return conversation_; }
    // Lines that ended in an error (a bad /load, a refused command, a failed turn): a scripted chat
    // exits 1 when there was any, so a script notices.
    int failed_lines() const { return failed_lines_; }

private:
    struct RenderedPrompt {
        std::vector<int32_t> tokens;
        int64_t turn_start = 0;  // 0: none found (the template renders the turn's start differently)
    };
    void send(std::string message);
    void command(std::string_view name, std::string_view argument);
    // The prompt of the next turn, after the context policy; nullopt when the message is refused (the
    // caller then takes it back out of the conversation).
    std::optional<RenderedPrompt> fit_prompt();
    RenderedPrompt render() const;
    void print_turn_json(const TurnResult& turn) const;
    int64_t reply_reserve() const;
    size_t first_droppable() const;  // index of the oldest non-system message
    void print_stats() const;
    void print_help() const;

    Session& session_;
    const TextFrontEnd& text_;
    ChatSettings settings_;
    ChatConversation conversation_;

    // For /stats: the last turn, and decode figures summed over the turns of this process.
    std::optional<TurnResult> last_turn_;
    double decode_ms_total_ = 0.0;
    int64_t decode_steps_total_ = 0;
    int failed_lines_ = 0;
};

}  // namespace deltabit::cli
