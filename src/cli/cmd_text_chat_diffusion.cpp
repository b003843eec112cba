#include "cli/cmd_text_chat_diffusion.h"

#include "cli/cmd_text_chat_loop.h"
#include "cli/interrupt.h"
#include "core/error.h"
#include "text/chat_template.h"
#include "text/tokenizer_stream.h"

#include <fmt/format.h>

#include <cstdio>

namespace deltabit::cli {


DiffusionChat::DiffusionChat(DiffusionRunner& runner, const TextFrontEnd& text, DiffusionChatSettings settings,
                             const std::string& system_prompt)
    : runner_(runner), text_(text), settings_(settings), system_prompt_(system_prompt) {
    reset();
}

void DiffusionChat::reset() {
    messages_ = nlohmann::ordered_json::array();
    if (!system_prompt_.empty()) messages_.push_back({{"role", "system"}, {"content", system_prompt_}});
}

bool DiffusionChat::handle_line(std::string_view line) {
    line = trim_line(line);
    if (line.empty()) return true;
    try {
        const ChatLine input = split_chat_line(line);
        if (!input.command) {
            send(std::string(input.text));
        } else {
            const std::string_view name = input.text;
            if (name == "quit" || name == "exit") return false;
            if (name == "reset") {
                reset();
                chat_note("conversation reset");
            } else if (name == "help") {
                chat_note("a block-diffusion model: /reset starts over, /quit (or /exit) ends; a line starting with // "
                     "sends the rest as a message");
            } else {
                fail("/{} is not available with a block-diffusion model (it has /reset, /help, /quit)", name);
            }
        }
    } catch (const std::exception& e) {
        chat_note(fmt::format("error: {}", e.what()));
        ++failed_lines_;
    }
    return true;
}

void DiffusionChat::send(std::string message) {
    messages_.push_back({{"role", "user"}, {"content", std::move(message)}});
    try {
        text::ChatRequest request;
        request.messages = messages_;
        request.add_generation_prompt = true;
        request.enable_thinking = settings_.thinking;
        if (settings_.preserve_thinking) request.preserve_thinking = true;
        const std::vector<int32_t> prompt = encode_rendered(text_, text_.chat_template->render(request));

        text::StreamingDetokenizer detokenizer(*text_.tokenizer, text::DecodeOptions{.skip_special = true});
        std::string reply;
        bool ended = false;
        const auto on_block = [&](std::span<const int32_t> block, int64_t) {
            if (ended) return;
            const std::span<const int32_t> visible = diffusion_visible_tokens(block, runner_.settings());
            ended = visible.size() < block.size();
            std::string piece;
            for (int32_t id : visible) piece += detokenizer.push(id);
            reply += piece;
            if (settings_.json) return;
            fmt::print("{}", settings_.stdout_is_terminal ? printable_on_terminal(piece) : piece);
            std::fflush(stdout);
        };
        const InterruptScope interrupt_scope(settings_.interruptible);
        const DiffusionRun run = runner_.generate(prompt, settings_.seed + turns_, on_block, {}, interrupt_requested);
        if (run.generation.stopped) {
            if (!settings_.json) fmt::print("\n");
            std::fflush(stdout);
            chat_note("interrupted: the message and its partial reply are not kept");
            messages_.erase(messages_.size() - 1);
            return;
        }
        const std::string rest = detokenizer.finish();
        reply += rest;
        ++turns_;
        if (settings_.json) {
            nlohmann::ordered_json out;
            out["reply"] = reply;
            out["tokens"] = run.generation.tokens;
            out["prompt_tokens"] = prompt.size();
            add_diffusion_json(out, run, runner_.settings());
            out["timings"] = {{"generate_ms", run.generate_ms}};
            fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        } else {
            fmt::print("{}\n", settings_.stdout_is_terminal ? printable_on_terminal(rest) : rest);
        }
        std::fflush(stdout);
        messages_.push_back({{"role", "assistant"}, {"content", reply}});
    } catch (...) {
        messages_.erase(messages_.size() - 1);  // the conversation is as it was before this line
        throw;
    }
}

}  // namespace deltabit::cli
