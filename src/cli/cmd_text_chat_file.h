// `deltabit chat`'s /save and /load: one file that holds the conversation (its messages and the
// /thinking switch) and the session snapshot (runtime/session.h: ledger, state, KV format, model
// fingerprint), so a chat continues in a new process without re-reading its history.
//
// Layout, version 1:
//   deltabit-chat 1\n
//   {"messages": [{"role": .., "content": ..}, ..], "thinking": null|true|false,
//    "preserve_thinking": true|false (optional: absent is false; files from before it have none),
//    "messages_fnv1a64": "<16 hex digits>", "session_bytes": N}\n      (one line of JSON)
//   N bytes: the session snapshot, exactly as Session::save writes it (its own magic and checksums)
// The checksum covers the messages as serialised on that line, so an edited or damaged conversation
// is refused even where it still parses.
//
// load_chat_file refuses a file that is not this format, is truncated, fails a checksum, or whose
// snapshot Session::load refuses (other model, other KV format, ...), with one message naming the file
// and what was wrong — and then the session and the caller's conversation are as they were.
// (Files named cmd_text_*: built only with the text libraries.)
#pragma once

#include "runtime/session.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>

namespace deltabit::cli {

struct ChatConversation {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // {"role", "content"} objects
    std::optional<bool> thinking;                                        // unset: the template's default
    bool preserve_thinking = false;  // the template's preserve_thinking: earlier replies keep their thinking
};

// Written through AtomicFile (core/file_io.h): a temporary file renamed over FILE, so a failed save never
// leaves half a file behind, and a FILE that is a device, FIFO or folder is refused, never replaced.
void save_chat_file(const std::filesystem::path& file, const ChatConversation& conversation, const Session& session);
// Loads the snapshot into `session` and returns the conversation; on Error nothing has changed.
ChatConversation load_chat_file(const std::filesystem::path& file, Session& session);

}  // namespace deltabit::cli
