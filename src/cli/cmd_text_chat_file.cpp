#include "cli/cmd_text_chat_file.h"

#include "core/error.h"
#include "core/file_io.h"

#include <fmt/format.h>

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>

namespace deltabit::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

constexpr std::string_view kMagicLine = "deltabit-chat 1\n";
// A conversation line longer than this is not a chat file of ours (the context holds far less text).
constexpr size_t kMaxHeaderBytes = size_t(64) << 20;

// FNV-1a, 64-bit: enough to catch damage and hand edits (not an adversary), and needs no library.
uint64_t fnv1a64(std::string_view bytes) {
    uint64_t hash = 0xcbf29ce484222325ull;
    for (unsigned char c : bytes) {
        hash ^= c;
        hash *= 0x100000001b3ull;
    }
    return hash;
}

std::string messages_checksum(const ordered_json& messages) {
    return fmt::format("{:016x}", fnv1a64(messages.dump()));
}

// Removes a temporary file when the scope ends, whatever happened.
struct TemporaryFile {
    fs::path path;
    ~TemporaryFile() {
        std::error_code ignored;
        fs::remove(path, ignored);
    }
};

fs::path unique_temporary_path() {
    static std::atomic<int> counter{0};
    return fs::temp_directory_path() / fmt::format("deltabit-chat-{}-{}.session", getpid(), counter++);
}

void check_messages(const ordered_json& messages, const fs::path& file) {
    if (!messages.is_array()) fail("load: {}: \"messages\" is not a list", file.string());
    for (size_t i = 0; i < messages.size(); ++i) {
        const ordered_json& m = messages[i];
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
            !m["content"].is_string())
            fail("load: {}: messages[{}] is not {{\"role\": text, \"content\": text}}", file.string(), i);
    }
}

}  // namespace

void save_chat_file(const fs::path& file, const ChatConversation& conversation, const Session& session) {
    // Refused before the snapshot is taken: a device, FIFO or folder is never replaced (core/file_io.h).
    AtomicFile out(file, "save");
    const TemporaryFile session_file{unique_temporary_path()};
    session.save(session_file.path);
    const std::string session_bytes = read_regular_file(session_file.path, "save");

    ordered_json header;
    header["messages"] = conversation.messages;
    header["thinking"] = conversation.thinking ? ordered_json(*conversation.thinking) : ordered_json(nullptr);
    header["preserve_thinking"] = conversation.preserve_thinking;
    header["messages_fnv1a64"] = messages_checksum(conversation.messages);
    header["session_bytes"] = session_bytes.size();

    std::string bytes(kMagicLine);
    bytes += header.dump();  // one line: dump() without indentation escapes every newline
    bytes += '\n';
    bytes += session_bytes;
    out.write(bytes);
    out.commit();
}

ChatConversation load_chat_file(const fs::path& file, Session& session) {
    const std::string bytes = read_regular_file(file, "load", "/save FILE writes one");
    if (!std::string_view(bytes).starts_with(kMagicLine))
        fail("load: {}: not a deltabit chat file (it should start with \"deltabit-chat 1\"; "
             "files written by /save do)",
             file.string());
    const size_t header_start = kMagicLine.size();
    const size_t header_end = bytes.find('\n', header_start);
    if (header_end == std::string::npos || header_end - header_start > kMaxHeaderBytes)
        fail("load: {}: the conversation line after byte {} never ends: the file is truncated", file.string(),
             header_start);

    const ordered_json header =
        ordered_json::parse(bytes.begin() + long(header_start), bytes.begin() + long(header_end), nullptr, false);
    if (header.is_discarded() || !header.is_object())
        fail("load: {}: the conversation at byte {} is not valid JSON", file.string(), header_start);
    for (const char* key : {"messages", "thinking", "messages_fnv1a64", "session_bytes"})
        if (!header.contains(key)) fail("load: {}: the conversation has no \"{}\"", file.string(), key);

    ChatConversation conversation;
    conversation.messages = header["messages"];
    check_messages(conversation.messages, file);
    if (!header["messages_fnv1a64"].is_string() ||
        header["messages_fnv1a64"].get<std::string>() != messages_checksum(conversation.messages))
        fail("load: {}: the conversation's checksum does not match: the file was damaged or edited", file.string());
    if (header["thinking"].is_boolean()) conversation.thinking = header["thinking"].get<bool>();
    else if (!header["thinking"].is_null()) fail("load: {}: \"thinking\" must be true, false or null", file.string());
    if (header.contains("preserve_thinking")) {
        if (!header["preserve_thinking"].is_boolean())
            fail("load: {}: \"preserve_thinking\" must be true or false", file.string());
        conversation.preserve_thinking = header["preserve_thinking"].get<bool>();
    }

    const size_t session_start = header_end + 1;
    const size_t session_size = bytes.size() - session_start;
    if (!header["session_bytes"].is_number_unsigned() || header["session_bytes"].get<uint64_t>() != session_size)
        fail("load: {}: the session snapshot at byte {} should be {} bytes, the file holds {}: truncated or damaged",
             file.string(), session_start, header["session_bytes"].dump(), session_size);

    // Session::load reads a file; hand it the snapshot through a private temporary one.
    const TemporaryFile session_file{unique_temporary_path()};
    write_file_atomically(session_file.path, std::string_view(bytes).substr(session_start), "load");
    try {
        session.load(session_file.path);
    } catch (const Error& e) {
        // The session's message names the temporary file and offsets inside the snapshot; name the
        // user's file and where the snapshot starts in it instead.
        std::string reason = e.what();
        const std::string temporary = session_file.path.string();
        for (size_t at = reason.find(temporary); at != std::string::npos; at = reason.find(temporary, at)) {
            const bool after_space = at > 0 && reason[at - 1] == ' ';
            reason.erase(after_space ? at - 1 : at, temporary.size() + (after_space ? 1 : 0));
        }
        fail("load: {}: the session snapshot at byte {} is refused: {}", file.string(), session_start, reason);
    }
    return conversation;
}

}  // namespace deltabit::cli
