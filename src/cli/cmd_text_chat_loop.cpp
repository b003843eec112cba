#include "cli/cmd_text_chat_loop.h"

#include "cli/interrupt.h"
#include "cli/progress.h"
#include "core/error.h"
#include "text/tokenizer_stream.h"
#include "text/unicode.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

namespace deltabit::cli {
namespace {

using nlohmann::ordered_json;


std::string mebibytes(int64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / double(1 << 20)); }

// What a turn reused and, when the prompt differed from the held state before its end, where: the
// token index and the text around it on both sides (special tokens spelled out), which is what to
// read when a template re-renders an earlier turn differently than the model wrote it.
ordered_json reuse_json(const ReuseReport& r, const text::Tokenizer& tokenizer) {
    ordered_json j;
    j["common_prefix"] = r.common_prefix;
    j["from"] = reuse_from_name(r.from);
    if (r.from == ReuseFrom::checkpoint) j["checkpoint_kind"] = checkpoint_kind_name(r.checkpoint_kind);
    if (r.first_divergence < 0) {
        j["first_divergence"] = nullptr;
        return j;
    }
    const text::DecodeOptions spelled{.skip_special = false};
    j["first_divergence"] = r.first_divergence;
    j["around_from"] = std::max<int64_t>(0, r.first_divergence - 4);  // plan_reuse's window: 4 tokens either side
    j["held_around"] = tokenizer.decode(r.held_around, spelled);
    j["prompt_around"] = tokenizer.decode(r.prompt_around, spelled);
    return j;
}

// Thrown from the token callback when the user pressed Ctrl-C; not an Error, so nothing but send()
// catches it.
struct ReplyInterrupted {};

double tokens_per_s(int64_t steps, double ms) { return ms > 0.0 ? 1e3 * double(steps) / ms : 0.0; }

}  // namespace

std::string_view trim_line(std::string_view s) {
    const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
    while (!s.empty() && space(s.front())) s.remove_prefix(1);
    while (!s.empty() && space(s.back())) s.remove_suffix(1);
    return s;
}

ChatLine split_chat_line(std::string_view line) {
    if (line.starts_with("//")) return {false, line.substr(1), {}};
    if (!line.starts_with("/")) return {false, line, {}};
    const size_t space = line.find_first_of(" \t");
    if (space == std::string_view::npos) return {true, line.substr(1), {}};
    return {true, line.substr(1, space - 1), trim_line(line.substr(space))};
}

void chat_note(std::string_view line) {
    fmt::print(stderr, "chat: {}\n", line);
    std::fflush(stderr);
}

std::string printable_on_terminal(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (const char ch : text) {
        const auto c = static_cast<unsigned char>(ch);
        if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) {
            const char32_t picture = c == 0x7F ? 0x2421 : 0x2400 + c;  // U+2400..U+241F, U+2421
            out += char(0xE0 | (picture >> 12));
            out += char(0x80 | ((picture >> 6) & 0x3F));
            out += char(0x80 | (picture & 0x3F));
        } else {
            out += ch;
        }
    }
    return out;
}

namespace {

constexpr std::string_view kHelp =
    "commands:\n"
    "  /thinking on|off  let the model think before it answers (the chat template's enable_thinking)\n"
    "  /preserve-thinking on|off\n"
    "                    keep earlier replies' thinking in the conversation (the template's\n"
    "                    preserve_thinking; Qwen3.5): the next turn then reuses the whole last reply\n"
    "  /save FILE        save the conversation and the model's state to FILE\n"
    "  /load FILE        continue a conversation saved by /save (same model and KV format)\n"
    "  /reset            forget the conversation (the system message stays)\n"
    "  /stats            context used, tokens reused and recomputed (and where the last turn's prompt\n"
    "                    first differed from the held state), checkpoints, decode speed\n"
    "  /help             this list\n"
    "  /quit             end the chat (Ctrl-D too)\n"
    "a line ending in \\ continues the message on the next line; "
    "a line starting with // is sent as a message starting with /\n";

}  // namespace

ChatLoop::ChatLoop(Session& session, const TextFrontEnd& text, ChatSettings settings, const std::string& system_prompt)
    : session_(session), text_(text), settings_(std::move(settings)) {
    conversation_.thinking = settings_.thinking;
    conversation_.preserve_thinking = settings_.preserve_thinking;
    if (!system_prompt.empty()) {
        warn_if_not_utf8(system_prompt, "chat: warning: --system");
        conversation_.messages.push_back({{"role", "system"}, {"content", text::utf8_repair(system_prompt)}});
    }
}

bool ChatLoop::handle_line(std::string_view line) {
    line = trim_line(line);
    if (line.empty()) return true;
    try {
        const ChatLine input = split_chat_line(line);
        if (!input.command) {
            send(std::string(input.text));
        } else {
            if (input.text == "quit" || input.text == "exit") return false;
            command(input.text, input.argument);
        }
    } catch (const Error& e) {
        chat_note(fmt::format("error: {}", e.what()));
        ++failed_lines_;
    } catch (const std::exception& e) {
        // Not an input error but a fault (out of memory, a library's own exception): the line failed,
        // the conversation is as it was before it (send() restores it), and the chat goes on.
        chat_note(fmt::format("error: {}", e.what()));
        ++failed_lines_;
    }
    return true;
}

void ChatLoop::command(std::string_view name, std::string_view argument) {
    if (name == "help") {
        print_help();
    } else if (name == "stats") {
        print_stats();
    } else if (name == "thinking") {
        if (argument == "on" || argument == "off") {
            conversation_.thinking = argument == "on";
            chat_note(fmt::format("thinking {}", argument));
        } else if (argument.empty()) {
            chat_note(fmt::format("thinking is {}",
                             !conversation_.thinking ? "the chat template's default" : *conversation_.thinking ? "on" : "off"));
        } else {
            fail("/thinking {:?}: expected on or off", argument);
        }
    } else if (name == "preserve-thinking") {
        if (argument == "on" || argument == "off") {
            conversation_.preserve_thinking = argument == "on";
            chat_note(fmt::format("preserve-thinking {}", argument));
        } else if (argument.empty()) {
            chat_note(fmt::format("preserve-thinking is {}", conversation_.preserve_thinking ? "on" : "off"));
        } else {
            fail("/preserve-thinking {:?}: expected on or off", argument);
        }
    } else if (name == "reset") {
        session_.reset();
        ordered_json kept = ordered_json::array();
        for (const ordered_json& m : conversation_.messages)
            if (m["role"] == "system") kept.push_back(m);
        conversation_.messages = std::move(kept);
        last_turn_.reset();
        chat_note("conversation cleared");
    } else if (name == "save" || name == "load") {
        if (argument.empty()) fail("/{} needs a file name: /{} FILE", name, name);
        const std::string file(argument);
        if (name == "save") {
            save_chat_file(file, conversation_, session_);
            chat_note(fmt::format("saved {} messages ({} tokens of state) to {}", conversation_.messages.size(),
                             session_.stats().position, file));
        } else {
            conversation_ = load_chat_file(file, session_);
            last_turn_.reset();
            chat_note(fmt::format("loaded {} messages ({} tokens of state) from {}", conversation_.messages.size(),
                             session_.stats().position, file));
        }
    } else {
        fail("unknown command /{}; /help lists the commands (start a message with // to send a leading /)", name);
    }
}

void ChatLoop::send(std::string message) {
    // Whatever happens below, a failed or refused line leaves the conversation as it was.
    const ordered_json before = conversation_.messages;
    warn_if_not_utf8(message, "chat: warning: the message");
    conversation_.messages.push_back({{"role", "user"}, {"content", text::utf8_repair(message)}});
    std::optional<RenderedPrompt> prompt;
    try {
        prompt = fit_prompt();
    } catch (...) {
        conversation_.messages = before;
        throw;
    }
    if (!prompt) {
        conversation_.messages = before;
        return;
    }

    text::StreamingDetokenizer detokenizer(*text_.tokenizer, text::DecodeOptions{.skip_special = true});
    GenerationCallbacks callbacks;
    callbacks.detokenize = [&](int32_t id) { return detokenizer.push(id); };
    callbacks.detokenize_finish = [&] { return detokenizer.finish(); };
    ProgressLine progress(fmt::format("prefill ({} tokens of conversation)", prompt->tokens.size()),
                          settings_.show_progress);
    callbacks.on_prefill_progress = [&](int64_t done, int64_t total) {
        progress.set_fraction(double(done) / double(total));
    };
    bool streamed = false;
    const InterruptScope interrupt_scope(settings_.interruptible);
    callbacks.on_token = [&](int32_t, std::string_view piece) {
        progress.finish();  // before the first byte of the reply reaches the terminal
        if (interrupt_requested()) throw ReplyInterrupted{};
        if (settings_.json || piece.empty()) return;
        const std::string shown = settings_.stdout_is_terminal ? printable_on_terminal(piece) : std::string(piece);
        std::fwrite(shown.data(), 1, shown.size(), stdout);
        std::fflush(stdout);
        streamed = true;
    };

    TurnResult turn;
    try {
        const std::vector<int64_t> turn_starts =
            prompt->turn_start > 0 ? std::vector<int64_t>{prompt->turn_start} : std::vector<int64_t>{};
        turn = session_.run_turn(prompt->tokens, settings_.generation, callbacks, turn_starts);
    } catch (const ReplyInterrupted&) {
        // The session stays consistent (session.h); the next turn re-renders without this exchange.
        progress.finish();
        fmt::print("\n");
        std::fflush(stdout);
        conversation_.messages = before;
        chat_note("interrupted: the message and its partial reply are not kept");
        return;
    } catch (...) {
        progress.finish();
        if (streamed) fmt::print("\n");
        conversation_.messages = before;
        throw;
    }
    progress.finish();
    const GenerationResult& reply = turn.generation;
    conversation_.messages.push_back({{"role", "assistant"}, {"content", reply.text}});

    if (settings_.json) {
        print_turn_json(turn);
    } else {
        fmt::print("\n");
    }
    std::fflush(stdout);

    const std::optional<int64_t>& limit = settings_.generation.max_tokens;
    if (reply.finish == FinishReason::length && (!limit || int64_t(reply.tokens.size()) < *limit))
        chat_note(fmt::format("the reply was cut at the end of the context ({} tokens); {}", session_.stats().max_positions,
                         settings_.on_full == OnContextFull::drop_oldest ? "the next message drops the oldest turns"
                                                                         : "/reset to start over"));
    decode_ms_total_ += reply.timings.decode_ms;
    decode_steps_total_ += reply.timings.decode_steps;
    last_turn_ = std::move(turn);
}

std::optional<ChatLoop::RenderedPrompt> ChatLoop::fit_prompt() {
    const int64_t capacity = session_.stats().max_positions;
    int dropped_turns = 0;
    for (;;) {
        RenderedPrompt prompt = render();
        const int64_t needed = int64_t(prompt.tokens.size()) + reply_reserve();
        if (needed <= capacity) {
            if (dropped_turns > 0)
                chat_note(fmt::format("context full: dropped the oldest {} turn{} (the conversation is now {} of {} tokens)",
                                 dropped_turns, dropped_turns == 1 ? "" : "s", prompt.tokens.size(), capacity));
            return prompt;
        }
        ordered_json& messages = conversation_.messages;
        const size_t newest = messages.size() - 1;  // the message being sent
        const size_t oldest = first_droppable();
        if (oldest >= newest) {
            chat_note(fmt::format("this message does not fit: with {} tokens kept for the reply it needs {}, and the "
                             "context holds {} (--ctx); not sent",
                             reply_reserve(), needed, capacity));
            return std::nullopt;
        }
        if (settings_.on_full == OnContextFull::stop) {
            chat_note(fmt::format("context full: with {} tokens kept for the reply the conversation needs {}, and the "
                             "context holds {}; not sent (/reset starts over; --on-full drop-oldest drops old turns)",
                             reply_reserve(), needed, capacity));
            return std::nullopt;
        }
        // The oldest turn: a user message and every reply up to the next user message.
        size_t end = oldest + 1;
        while (end < newest && messages[end]["role"] != "user") ++end;
        messages.erase(messages.begin() + long(oldest), messages.begin() + long(end));
        ++dropped_turns;
    }
}

ChatLoop::RenderedPrompt ChatLoop::render() const {
    text::ChatRequest request;
    request.messages = conversation_.messages;
    request.add_generation_prompt = true;
    request.enable_thinking = conversation_.thinking;
    if (conversation_.preserve_thinking) request.preserve_thinking = true;
    RenderedPrompt out;
    out.tokens = encode_rendered(text_, text_.chat_template->render(request));
    // The turn start: how far the conversation without its generation prompt renders the same. It is
    // where a later turn may first differ from this one (a template re-renders the reply, and may drop
    // the scaffold the generation prompt opened), so the session checkpoints it (runtime/session.h).
    request.add_generation_prompt = false;
    std::vector<int32_t> without;
    try {
        without = encode_rendered(text_, text_.chat_template->render(request));
    } catch (const text::ChatTemplateError&) {
        return out;  // a template that insists on a generation prompt: no turn start, reuse stays exact
    }
    const auto [a, b] = std::mismatch(without.begin(), without.end(), out.tokens.begin(), out.tokens.end());
    out.turn_start = int64_t(b - out.tokens.begin());
    return out;
}

void ChatLoop::print_turn_json(const TurnResult& turn) const {
    const GenerationResult& reply = turn.generation;
    ordered_json out;
    out["reply"] = reply.text;
    out["tokens"] = reply.tokens;
    out["finish_reason"] = finish_reason_name(reply.finish);
    out["prompt_tokens"] = turn.reuse.prompt_tokens;
    out["reused"] = turn.reuse.reused;
    out["recomputed"] = turn.reuse.recomputed;
    out["reuse"] = reuse_json(turn.reuse, *text_.tokenizer);
    fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

int64_t ChatLoop::reply_reserve() const {
    const int64_t capacity = session_.stats().max_positions;
    const std::optional<int64_t>& limit = settings_.generation.max_tokens;
    return limit ? std::min(*limit, capacity / 2) : capacity / 4;
}

size_t ChatLoop::first_droppable() const {
    const ordered_json& messages = conversation_.messages;
    size_t i = 0;
    while (i < messages.size() && messages[i]["role"] == "system") ++i;
    return i;
}

void ChatLoop::print_stats() const {
    const SessionStats s = session_.stats();
    const Engine& engine = session_.engine();
    if (settings_.json) {
        ordered_json out;
        out["position"] = s.position;
        out["capacity"] = s.max_positions;
        out["backend"] = engine.backend_name();
        out["kv_format"] = kv_format_name(s.kv_format);
        out["seed"] = settings_.generation.sampling.seed;
        if (last_turn_) {
            const ReuseReport& r = last_turn_->reuse;
            out["last_turn"] = {{"prompt_tokens", r.prompt_tokens},
                                {"reused", r.reused},
                                {"recomputed", r.recomputed},
                                {"reuse", reuse_json(r, *text_.tokenizer)},
                                {"generated", last_turn_->generation.tokens.size()},
                                {"decode_tokens_per_s", last_turn_->generation.timings.decode_tokens_per_s()}};
        } else {
            out["last_turn"] = nullptr;
        }
        out["total"] = {{"turns", s.turns},
                        {"reused", s.tokens_reused},
                        {"recomputed", s.tokens_recomputed},
                        {"decode_tokens_per_s", tokens_per_s(decode_steps_total_, decode_ms_total_)}};
        out["checkpoints"] = s.checkpoints;
        out["checkpoint_bytes"] = s.checkpoint_bytes;
        ordered_json kept = ordered_json::array();
        for (const auto& [position, kind] : s.checkpoint_positions)
            kept.push_back({{"position", position}, {"kind", checkpoint_kind_name(kind)}});
        out["checkpoint_list"] = std::move(kept);
        out["preserve_thinking"] = conversation_.preserve_thinking;
        fmt::print("{}\n", ordered_json{{"stats", out}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        std::fflush(stdout);
        return;
    }
    fmt::print("context      {} of {} tokens (kv {})\n", s.position, s.max_positions, kv_format_name(s.kv_format));
    fmt::print("backend      {}\n", engine.description());
    fmt::print("seed         {} (--seed repeats the draws)\n", settings_.generation.sampling.seed);
    if (last_turn_) {
        const ReuseReport& r = last_turn_->reuse;
        const GenerationResult& g = last_turn_->generation;
        fmt::print("last turn    {} prompt tokens: {} reused, {} recomputed; {} generated at {:.1f} tok/s\n",
                   r.prompt_tokens, r.reused, r.recomputed, g.tokens.size(), g.timings.decode_tokens_per_s());
        const ordered_json reuse = reuse_json(r, *text_.tokenizer);
        const auto quoted = [](const ordered_json& text) {
            return text.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        };
        std::string from(reuse_from_name(r.from));
        if (r.from == ReuseFrom::checkpoint) from = fmt::format("checkpoint ({})", checkpoint_kind_name(r.checkpoint_kind));
        fmt::print("reused from  {}; common prefix {} tokens\n", from, r.common_prefix);
        if (r.first_divergence >= 0)
            fmt::print("divergence   at token {}: held {} | prompt {} (from token {})\n", r.first_divergence,
                       quoted(reuse["held_around"]), quoted(reuse["prompt_around"]), reuse["around_from"].get<int64_t>());
    } else {
        fmt::print("last turn    none yet\n");
    }
    fmt::print("all turns    {} turn{}: {} reused, {} recomputed; decode {:.1f} tok/s\n", s.turns,
               s.turns == 1 ? "" : "s", s.tokens_reused, s.tokens_recomputed,
               tokens_per_s(decode_steps_total_, decode_ms_total_));
    std::string where;
    for (const auto& [position, kind] : s.checkpoint_positions)
        where += fmt::format("{}{} {}", where.empty() ? "" : ", ", position, checkpoint_kind_name(kind));
    fmt::print("checkpoints  {} ({}){}{}\n", s.checkpoints, mebibytes(s.checkpoint_bytes), where.empty() ? "" : ": ", where);
    std::fflush(stdout);
}

void ChatLoop::print_help() const { fmt::print(stderr, "{}", kHelp); }

}  // namespace deltabit::cli
