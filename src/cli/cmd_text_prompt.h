// The text side of a model, for the commands that talk to it in words (run, chat): its tokenizer and
// chat template, loaded from the same GGUF file or Hugging Face folder as the weights.
//
// Two fallbacks keep the small test models usable, each announced in `notes` (the command prints them
// on stderr), never taken silently:
//   - no tokenizer at all (no tokenizer.json, no tokenizer.ggml.*) and a vocabulary of exactly 256:
//     token b is byte b (the test fixtures' convention). Any other vocabulary without a tokenizer is
//     an error — guessing would turn ids into garbage text.
//   - no chat template: a plain layout, one "role: text" line per message, ending in "assistant: "
//     when a reply is wanted.
// A tokenizer or template that is present but broken is always an error, never a fallback.
// (Files named cmd_text_*: built only with the text libraries.)
#pragma once

#include "models/model_config.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace deltabit::cli {

struct TextFrontEnd {
    std::unique_ptr<text::Tokenizer> tokenizer;
    std::optional<text::ChatTemplate> chat_template;  // loaded only when asked for
    // Whether the tokenizer's special tokens may be used: parsed out of rendered text, added around a
    // raw prompt. False for the byte fallback, whose specials (<|bos|>...) lie outside the model's
    // 256-token vocabulary.
    bool use_specials = true;
    std::vector<std::string> notes;  // fallbacks taken, one line each
};

TextFrontEnd load_text_front_end(const std::string& model_path, const ModelConfig& config, bool need_chat_template);

// Text the chat template rendered (which writes its own special tokens) → ids.
std::vector<int32_t> encode_rendered(const TextFrontEnd& text, const std::string& rendered);
// A prompt used as is (run --raw): the tokenizer's own prefix/suffix tokens (BOS) added.
std::vector<int32_t> encode_raw(const TextFrontEnd& text, const std::string& prompt);

// The text of a prompt file (-f FILE; "-" reads stdin to its end). `what` names the flag in errors.
std::string read_prompt_file(const std::string& path, std::string_view what);

// Text that is not valid UTF-8 gets one line on stderr, "`what` is not valid UTF-8 (first bad byte at
// offset N); invalid bytes are replaced with U+FFFD" — the tokenizer and templates then see the
// repaired text. Returns whether it was valid.
bool warn_if_not_utf8(std::string_view text, std::string_view what);

}  // namespace deltabit::cli
