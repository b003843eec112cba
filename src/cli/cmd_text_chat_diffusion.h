// `deltabit chat` with a block-diffusion model (cmd_text_diffusion.h): the same input lines as the
// left-to-right chat (cmd_text_chat_loop.h), a smaller loop behind them. Each message renders the whole
// conversation through the chat template and runs the block loop over it from an empty cache — the
// encoder has no prefix reuse yet, so a turn re-encodes the conversation (one causal pass, cheap next to
// the denoising steps). Replies stream block by block; --json prints one object per reply with the
// denoising steps per block. Reply i (0-based, counting the replies made) draws from seed + i, so a
// scripted chat repeats exactly. Ctrl-C on a terminal stops a reply after the denoising step that is
// running (on CUDA, at the device loop's next sync, a few steps on); the message and its partial reply
// are then not kept. Commands: /reset, /help, /quit (or /exit); the others, which act on the
// left-to-right session, are refused with a line saying so.
#pragma once

#include "cli/cmd_text_diffusion.h"
#include "cli/cmd_text_prompt.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace deltabit::cli {

struct DiffusionChatSettings {
    std::optional<bool> thinking;  // enable_thinking for the template; unset: the template's default
    bool preserve_thinking = false;
    bool json = false;
    uint64_t seed = 0;
    bool stdout_is_terminal = false;  // replies shown with control characters made visible
    bool interruptible = false;       // Ctrl-C stops a reply after the current denoising step (interrupt.h)
};

class DiffusionChat {
public:
    // `system_prompt` (may be empty) is the first message and is kept by /reset.
    DiffusionChat(DiffusionRunner& runner, const TextFrontEnd& text, DiffusionChatSettings settings,
                  const std::string& system_prompt);

    // One line of input (without its newline). Returns false once the user asked to quit.
    bool handle_line(std::string_view line);
    // Lines that ended in an error: a scripted chat exits 1 when there was any.
    int failed_lines() const { return failed_lines_; }

private:
    void send(std::string message);
    void reset();

    DiffusionRunner& runner_;
    const TextFrontEnd& text_;
    DiffusionChatSettings settings_;
    std::string system_prompt_;
    nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
    uint64_t turns_ = 0;
    int failed_lines_ = 0;
};

}  // namespace deltabit::cli
