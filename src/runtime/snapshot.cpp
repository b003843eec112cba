#include "runtime/snapshot.h"

#include "core/error.h"
#include "core/file_io.h"
#include "core/little_endian.h"
#include "models/config_summary.h"
#include "models/sequence_state.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include <fcntl.h>
#include <unistd.h>

#if DELTABIT_HAVE_XXHASH
#define XXH_INLINE_ALL
#include <xxhash.h>
#endif

namespace deltabit {

#if DELTABIT_HAVE_XXHASH
namespace {

constexpr uint32_t kMaxHeaderBytes = 1u << 20;
constexpr uint32_t kMaxChunkNameBytes = 4096;
constexpr int kMaxHeaderDepth = 8;  // the writer's header is two levels deep (the "model" object)
constexpr uint64_t kFixedHeadBytes = 24;  // magic, version, header_bytes, header_xxh3

uint64_t xxh3(const void* data, size_t n) { return XXH3_64bits(data, n); }

uint64_t chunk_checksum(std::string_view name, const std::vector<std::byte>& data) {
    XXH3_state_t state;  // XXH_INLINE_ALL exposes the struct (aligned by its declaration)
    XXH3_INITSTATE(&state);
    XXH3_64bits_reset(&state);
    XXH3_64bits_update(&state, name.data(), name.size());
    if (!data.empty()) XXH3_64bits_update(&state, data.data(), data.size());
    return XXH3_64bits_digest(&state);
}

// Checkpoint i's chunks sit beside the state's under this prefix (snapshot.h).
std::string checkpoint_chunk_name(size_t index, std::string_view name) {
    return fmt::format("checkpoint.{}.{}", index, name);
}


// ---- writing ----

std::string header_json(const Snapshot& s) {
    nlohmann::ordered_json model = nlohmann::ordered_json::object();
    for (const auto& [key, value] : s.model_summary) model[key] = value;
    nlohmann::ordered_json h;
    h["fingerprint"] = s.fingerprint;
    h["kv_format"] = std::string(kv_format_name(s.state.kv_format));
    h["position"] = s.state.position;
    size_t chunks = s.state.chunks.size();
    nlohmann::ordered_json checkpoints = nlohmann::ordered_json::array();
    for (const SnapshotCheckpoint& c : s.checkpoints) {
        chunks += c.state->chunks.size();
        nlohmann::ordered_json entry = {{"position", c.state->position}, {"end_of_prompt", c.end_of_prompt}};
        if (c.turn_start) entry["turn_start"] = true;  // written only when true: files without it read as before
        checkpoints.push_back(std::move(entry));
    }
    h["chunks"] = chunks;
    h["checkpoints"] = std::move(checkpoints);
    h["model"] = std::move(model);
    h["writer"] = "deltabit";
    return h.dump();
}

std::string ledger_bytes(const TokenLedger& ledger) {
    std::string out;
    out.reserve(size_t(ledger.size()) * 5);
    for (int32_t id : ledger.tokens()) put_le(out, uint32_t(id), 4);
    for (uint8_t g : ledger.generated()) out.push_back(char(g));
    return out;
}

// ---- reading ----

// The snapshot's bytes read front to back; every read is checked against their size first, so a damaged
// length never allocates more than the file holds. Subclasses say where the bytes come from.
class Reader {
public:
    virtual ~Reader() = default;

    uint64_t offset() const { return offset_; }
    uint64_t size() const { return size_; }
    uint64_t remaining() const { return size_ - offset_; }
    const std::string& name() const { return name_; }

    void need(uint64_t n, std::string_view what) const {
        if (n > remaining())
            fail("snapshot {}: truncated or damaged: {} at byte {} needs {} bytes, but the file ends at byte {}", name_,
                 what, offset_, n, size_);
    }
    void read(void* out, uint64_t n, std::string_view what) {
        need(n, what);
        if (n > 0) fetch(out, n, what);
        offset_ += n;
    }
    uint64_t u(int bytes, std::string_view what) {
        unsigned char buf[8];
        read(buf, uint64_t(bytes), what);
        return get_le(buf, bytes);
    }
    std::string text(uint64_t n, std::string_view what) {
        need(n, what);
        std::string s(size_t(n), '\0');
        read(s.data(), n, what);
        return s;
    }

protected:
    explicit Reader(std::string name, uint64_t size = 0) : name_(std::move(name)), size_(size) {}
    void set_size(uint64_t size) { size_ = size; }
    // Copies the n bytes at offset() to `out`; need() has checked that they exist.
    virtual void fetch(void* out, uint64_t n, std::string_view what) = 0;

private:
    std::string name_;
    uint64_t size_ = 0;
    uint64_t offset_ = 0;
};

// Streams the file rather than holding it whole: a snapshot of a long context is mostly KV cache, and
// the chunks are the only copy of it the reader keeps.
// A folder, FIFO or device is refused before it is opened (a FIFO would block, a folder fail mid-read).
const std::filesystem::path& readable(const std::filesystem::path& path) {
    check_readable_file(path, "snapshot");
    return path;
}

class FileReader final : public Reader {
public:
    explicit FileReader(const std::filesystem::path& path) : Reader(readable(path).string()), in_(path, std::ios::binary) {
        if (!in_) fail("snapshot {}: cannot open: {}", path.string(), std::strerror(errno));
        std::error_code ec;
        const uint64_t size = std::filesystem::file_size(path, ec);
        if (ec) fail("snapshot {}: cannot read its size: {}", path.string(), ec.message());
        set_size(size);
    }

private:
    void fetch(void* out, uint64_t n, std::string_view what) override {
        if (!in_.read(static_cast<char*>(out), std::streamsize(n)))
            fail("snapshot {}: read failed at byte {} ({})", name(), offset(), what);
    }

    std::ifstream in_;
};

class SpanReader final : public Reader {
public:
    SpanReader(std::span<const std::byte> bytes, std::string_view name)
        : Reader(std::string(name), bytes.size()), bytes_(bytes) {}

private:
    void fetch(void* out, uint64_t n, std::string_view) override {
        std::memcpy(out, bytes_.data() + offset(), size_t(n));
    }

    std::span<const std::byte> bytes_;
};

struct HeaderCheckpoint {
    int64_t position = 0;
    bool end_of_prompt = false;
    bool turn_start = false;
};

struct Header {
    std::string fingerprint;
    KvFormat kv_format = KvFormat::f32;
    int64_t position = 0;
    uint64_t chunks = 0;
    std::vector<HeaderCheckpoint> checkpoints;  // version 2 on; oldest first
    std::vector<std::pair<std::string, std::string>> model_summary;
};

std::string summary_line(const std::vector<std::pair<std::string, std::string>>& summary) {
    std::string line;
    for (const auto& [key, value] : summary) {
        if (key != "architecture" && key != "layers" && key != "hidden" && key != "vocab") continue;
        if (!line.empty()) line += ", ";
        line += key + " " + value;
    }
    return line.empty() ? "unknown model" : line;
}

// "checkpoints" (version 2 on): a list of {"position", "end_of_prompt"} at distinct positions within the
// state's. Their chunks are checked against the model's layout later, once the model is known to match.
std::vector<HeaderCheckpoint> parse_checkpoints(const std::string& file, const nlohmann::ordered_json& list,
                                                int64_t position, uint64_t at) {
    if (!list.is_array())
        fail("snapshot {}: header (byte {}): \"checkpoints\" is {}, not a list", file, at, list.dump());
    if (list.size() > kMaxSnapshotCheckpoints)
        fail("snapshot {}: header (byte {}) lists {} checkpoints, more than the {} a snapshot may hold: the file is "
             "damaged",
             file, at, list.size(), kMaxSnapshotCheckpoints);
    std::vector<HeaderCheckpoint> out;
    std::set<int64_t> positions;
    for (size_t i = 0; i < list.size(); ++i) {
        const nlohmann::ordered_json& c = list[i];
        if (!c.is_object() || !c.contains("position") || !c.contains("end_of_prompt") ||
            !c.at("position").is_number_integer() || !c.at("end_of_prompt").is_boolean())
            fail("snapshot {}: header (byte {}): checkpoint {} is {}, not {{\"position\": tokens, \"end_of_prompt\": "
                 "true or false}}",
                 file, at, i, c.dump());
        const int64_t p = c.at("position").get<int64_t>();
        if (p < 0 || p > position)
            fail("snapshot {}: header (byte {}): checkpoint {} is at position {}, outside the state's 0 .. {}", file,
                 at, i, p, position);
        if (!positions.insert(p).second)
            fail("snapshot {}: header (byte {}): checkpoint {} is at position {}, like an earlier one", file, at, i, p);
        if (c.contains("turn_start") && !c.at("turn_start").is_boolean())
            fail("snapshot {}: header (byte {}): checkpoint {} has \"turn_start\": {}, not true or false", file, at, i,
                 c.at("turn_start").dump());
        out.push_back({p, c.at("end_of_prompt").get<bool>(), c.contains("turn_start") && c.at("turn_start").get<bool>()});
    }
    return out;
}

Header parse_header(const std::string& file, const std::string& text, uint64_t at, uint64_t version) {
    nlohmann::ordered_json j;  // keeps the model summary in the writer's order, for messages
    // Nesting is refused while parsing: ordered_json copies (when its object storage grows) and dumps
    // values recursively, so the half a million levels a 1 MiB header can hold would exhaust the stack.
    auto shallow = [&](int depth, nlohmann::ordered_json::parse_event_t, nlohmann::ordered_json&) {
        if (depth > kMaxHeaderDepth)
            fail("snapshot {}: header (byte {}) nests deeper than {} levels: the file is damaged", file, at,
                 kMaxHeaderDepth);
        return true;
    };
    try {
        j = nlohmann::ordered_json::parse(text, shallow);
    } catch (const nlohmann::json::exception& e) {
        fail("snapshot {}: header (byte {}) is not valid JSON: {}", file, at, e.what());
    }
    auto field = [&](const char* key) -> const nlohmann::ordered_json& {
        if (!j.is_object() || !j.contains(key)) fail("snapshot {}: header (byte {}) has no \"{}\"", file, at, key);
        return j.at(key);
    };
    Header h;
    const nlohmann::ordered_json& fp = field("fingerprint");
    const nlohmann::ordered_json& kv = field("kv_format");
    const nlohmann::ordered_json& position = field("position");
    const nlohmann::ordered_json& chunks = field("chunks");
    if (!fp.is_string()) fail("snapshot {}: header (byte {}): \"fingerprint\" is not a string", file, at);
    if (!kv.is_string() || !parse_kv_format(kv.get<std::string>()))
        fail("snapshot {}: header (byte {}): \"kv_format\" is {}, not one of f32, f16, kivi4", file, at, kv.dump());
    if (!position.is_number_integer() || position.get<int64_t>() < 0 || position.get<int64_t>() > kMaxStatePosition)
        fail("snapshot {}: header (byte {}): \"position\" is {}, not a token count in 0 .. {}", file, at,
             position.dump(), kMaxStatePosition);
    if (!chunks.is_number_unsigned())
        fail("snapshot {}: header (byte {}): \"chunks\" is {}, not a count", file, at, chunks.dump());
    h.fingerprint = fp.get<std::string>();
    h.kv_format = *parse_kv_format(kv.get<std::string>());
    h.position = position.get<int64_t>();
    h.chunks = chunks.get<uint64_t>();
    // Version 1 had no checkpoints; a "checkpoints" field in such a file is not ours to read.
    if (version >= kFirstSnapshotVersionWithCheckpoints)
        h.checkpoints = parse_checkpoints(file, field("checkpoints"), h.position, at);
    if (j.contains("model") && j.at("model").is_object())
        for (const auto& [key, value] : j.at("model").items())
            h.model_summary.emplace_back(key, value.is_string() ? value.get<std::string>() : value.dump());
    return h;
}

}  // namespace

bool snapshots_available() { return true; }

void write_snapshot(const std::filesystem::path& file, const Snapshot& s) {
    if (s.ledger.size() != s.state.position)
        fail("snapshot {}: the ledger holds {} tokens but the state is at position {}", file.string(),
             s.ledger.size(), s.state.position);
    if (s.checkpoints.size() > kMaxSnapshotCheckpoints)
        fail("snapshot {}: {} checkpoints, more than the {} a snapshot holds; keep fewer (CheckpointPolicy::max_kept)",
             file.string(), s.checkpoints.size(), kMaxSnapshotCheckpoints);
    std::set<int64_t> positions;
    for (const SnapshotCheckpoint& c : s.checkpoints)
        if (c.state->position < 0 || c.state->position > s.state.position ||
            !positions.insert(c.state->position).second)
            fail("snapshot {}: a checkpoint at position {} is a repeat or outside the state's 0 .. {}", file.string(),
                 c.state->position, s.state.position);
    const std::string header = header_json(s);
    const std::string ledger = ledger_bytes(s.ledger);
    std::string head(kSnapshotMagic.begin(), kSnapshotMagic.end());
    put_le(head, kSnapshotVersion, 4);
    put_le(head, header.size(), 4);
    put_le(head, xxh3(header.data(), header.size()), 8);
    head += header;
    put_le(head, xxh3(ledger.data(), ledger.size()), 8);

    AtomicFile out(file, "snapshot");
    out.write(head);
    out.write(ledger);
    auto write_chunk = [&](std::string_view name, const std::vector<std::byte>& bytes) {
        std::string frame;
        put_le(frame, name.size(), 4);
        frame += name;
        put_le(frame, bytes.size(), 8);
        put_le(frame, chunk_checksum(name, bytes), 8);
        out.write(frame);
        out.write(bytes.data(), bytes.size());
    };
    for (const StateChunk& c : s.state.chunks) write_chunk(c.name, c.bytes);
    for (size_t i = 0; i < s.checkpoints.size(); ++i)
        for (const StateChunk& c : s.checkpoints[i].state->chunks)
            write_chunk(checkpoint_chunk_name(i, c.name), c.bytes);
    out.commit();
}

namespace {

Snapshot read_from(Reader& in, const SnapshotExpectation& expect) {
    const std::string& name = in.name();

    std::array<char, 8> magic{};
    in.read(magic.data(), magic.size(), "the magic");
    if (magic != kSnapshotMagic) fail("snapshot {}: not a deltabit snapshot (no magic \"DBSNAP\" at byte 0)", name);
    const uint64_t version_at = in.offset();
    const uint64_t version = in.u(4, "the format version");
    if (version < kOldestSnapshotVersion || version > kSnapshotVersion)
        fail("snapshot {}: format version {} (byte {}); this build reads versions {} .. {}", name, version,
             version_at, kOldestSnapshotVersion, kSnapshotVersion);
    const uint64_t header_bytes_at = in.offset();
    const uint64_t header_bytes = in.u(4, "the header length");
    if (header_bytes == 0 || header_bytes > kMaxHeaderBytes)
        fail("snapshot {}: header length {} (byte {}) is not in 1 .. {}", name, header_bytes, header_bytes_at,
             kMaxHeaderBytes);
    const uint64_t header_sum = in.u(8, "the header checksum");
    const uint64_t header_at = in.offset();
    const std::string header_text = in.text(header_bytes, "the header");
    if (const uint64_t got = xxh3(header_text.data(), header_text.size()); got != header_sum)
        fail("snapshot {}: header (bytes {} .. {}) fails its checksum (stored {:016x}, computed {:016x}): the file "
             "is damaged",
             name, header_at, header_at + header_bytes, header_sum, got);
    const Header h = parse_header(name, header_text, header_at, version);

    if (h.fingerprint != expect.fingerprint)
        fail("snapshot {}: made with another model ({}; fingerprint {}, header at byte {}), but this engine runs "
             "{} (fingerprint {})",
             name, summary_line(h.model_summary), h.fingerprint, header_at,
             summary_line(model_config_summary(*expect.config)), expect.fingerprint);
    if (h.kv_format != expect.kv_format)
        fail("snapshot {}: its KV cache is {} (header at byte {}), but this session stores {}; open the session with "
             "KV format {} to load it",
             name, kv_format_name(h.kv_format), header_at, kv_format_name(expect.kv_format),
             kv_format_name(h.kv_format));
    if (version < 3 && h.kv_format == KvFormat::kivi4 &&
        layer_kv_format(*expect.config, KvFormat::kivi4, 0) != KvFormat::kivi4)
        fail("snapshot {}: format version {} (byte {}) stored layer 0 of this model as kivi4, but since version 3 "
             "kivi4 keeps that layer in {} (docs/kv_cache.md); this build cannot load its KV cache",
             name, version, version_at, kv_format_name(layer_kv_format(*expect.config, KvFormat::kivi4, 0)));
    if (h.position > expect.max_positions)
        fail("snapshot {}: holds {} tokens (header at byte {}), more than this session's capacity of {}", name,
             h.position, header_at, expect.max_positions);
    // A state that a KV cut returns to any position exactly has nothing to checkpoint, and its sessions
    // keep none (session.h); a list here was not written by one.
    if (!h.checkpoints.empty() && state_checkpoint_layout(*expect.config, h.kv_format, 0).empty())
        fail("snapshot {}: the header (byte {}) lists checkpoints, but a {} state of this model needs none "
             "(cutting its KV cache back is exact): the file is damaged",
             name, header_at, kv_format_name(h.kv_format));

    Snapshot s;
    s.version = uint32_t(version);
    s.fingerprint = h.fingerprint;
    s.model_summary = h.model_summary;
    s.state.position = h.position;
    s.state.kv_format = h.kv_format;

    // Ledger.
    const uint64_t ledger_sum = in.u(8, "the ledger checksum");
    const uint64_t ledger_at = in.offset();
    const uint64_t n = uint64_t(h.position);
    const std::string ledger = in.text(n * 5, "the token ledger");
    if (const uint64_t got = xxh3(ledger.data(), ledger.size()); got != ledger_sum)
        fail("snapshot {}: token ledger (bytes {} .. {}) fails its checksum (stored {:016x}, computed {:016x}): the "
             "file is damaged",
             name, ledger_at, ledger_at + n * 5, ledger_sum, got);
    const auto* bytes = reinterpret_cast<const unsigned char*>(ledger.data());
    for (uint64_t i = 0; i < n; ++i) {
        const int64_t id = int32_t(uint32_t(get_le(bytes + 4 * i, 4)));
        const uint8_t generated = bytes[4 * n + i];
        if (id < 0 || id >= expect.config->n_vocab)
            fail("snapshot {}: ledger token {} (byte {}) is {}, outside this model's vocabulary of {}", name, i,
                 ledger_at + 4 * i, id, expect.config->n_vocab);
        if (generated > 1)
            fail("snapshot {}: ledger flag {} (byte {}) is {}, not 0 or 1", name, i, ledger_at + 4 * n + i, generated);
        if (generated) {
            s.ledger.append_generated(int32_t(id));
        } else {
            const int32_t one[1] = {int32_t(id)};
            s.ledger.append_prompt(one);
        }
    }

    // Chunks: each must be one the layouts name, once, with the layout's size. `owner` is the checkpoint
    // a chunk belongs to (its index), or −1 for the state's own.
    struct ExpectedChunk {
        size_t bytes = 0;
        int64_t owner = -1;
        std::string name;  // within its owner
    };
    std::map<std::string, ExpectedChunk, std::less<>> expected;
    for (StateChunkSpec& spec : state_image_layout(*expect.config, h.kv_format, h.position))
        expected.emplace(spec.name, ExpectedChunk{spec.bytes, -1, spec.name});
    s.checkpoints.resize(h.checkpoints.size());
    std::vector<std::shared_ptr<StateCheckpoint>> checkpoints;
    for (size_t i = 0; i < h.checkpoints.size(); ++i) {
        const HeaderCheckpoint& c = h.checkpoints[i];
        checkpoints.push_back(std::make_shared<StateCheckpoint>(StateCheckpoint{c.position, {}}));
        s.checkpoints[i].end_of_prompt = c.end_of_prompt;
        s.checkpoints[i].turn_start = c.turn_start;
        for (StateChunkSpec& spec : state_checkpoint_layout(*expect.config, h.kv_format, c.position))
            expected.emplace(checkpoint_chunk_name(i, spec.name), ExpectedChunk{spec.bytes, int64_t(i), spec.name});
    }
    if (h.chunks != expected.size())
        fail("snapshot {}: the header (byte {}) announces {} chunks, but a {} state of this model at position {}{} has "
             "{}",
             name, header_at, h.chunks, kv_format_name(h.kv_format), h.position,
             h.checkpoints.empty() ? "" : fmt::format(" with {} checkpoints", h.checkpoints.size()), expected.size());
    std::set<std::string, std::less<>> seen;
    for (uint64_t i = 0; i < h.chunks; ++i) {
        const uint64_t at = in.offset();
        const std::string what = fmt::format("chunk {} of {}", i, h.chunks);
        const uint64_t name_bytes = in.u(4, what + " (name length)");
        if (name_bytes == 0 || name_bytes > kMaxChunkNameBytes)
            fail("snapshot {}: {} (byte {}): name length {} is not in 1 .. {}: the file is damaged", name, what, at,
                 name_bytes, kMaxChunkNameBytes);
        std::string chunk_name = in.text(name_bytes, what + " (name)");
        const uint64_t data_bytes = in.u(8, what + " (data length)");
        const uint64_t sum = in.u(8, what + " (checksum)");
        const uint64_t data_at = in.offset();
        in.need(data_bytes, fmt::format("{} '{}' (data)", what, chunk_name));
        std::vector<std::byte> data(static_cast<size_t>(data_bytes));
        in.read(data.data(), data_bytes, what);
        if (const uint64_t got = chunk_checksum(chunk_name, data); got != sum)
            fail("snapshot {}: {} '{}' (bytes {} .. {}) fails its checksum (stored {:016x}, computed {:016x}): the "
                 "file is damaged",
                 name, what, chunk_name, at, data_at + data_bytes, sum, got);
        const auto spec = expected.find(chunk_name);
        if (spec == expected.end())
            fail("snapshot {}: {} (byte {}) is '{}', which is not part of this model's {} state{}", name, what, at,
                 chunk_name, kv_format_name(h.kv_format),
                 h.checkpoints.empty() ? "" : " nor of the checkpoints the header lists");
        if (!seen.insert(chunk_name).second)
            fail("snapshot {}: {} (byte {}): '{}' appears twice", name, what, at, chunk_name);
        const ExpectedChunk& want = spec->second;
        if (data_bytes != want.bytes)
            fail("snapshot {}: {} '{}' (byte {}) holds {} bytes, but this model's {} at position {} needs {}", name,
                 what, chunk_name, at, data_bytes, want.owner < 0 ? "state" : "checkpoint",
                 want.owner < 0 ? h.position : h.checkpoints[size_t(want.owner)].position, want.bytes);
        if (want.owner < 0) s.state.chunks.push_back({std::move(chunk_name), std::move(data)});
        else checkpoints[size_t(want.owner)]->chunks.push_back({want.name, std::move(data)});
    }
    for (size_t i = 0; i < checkpoints.size(); ++i) s.checkpoints[i].state = std::move(checkpoints[i]);
    // Every chunk was known and none repeated, and there were as many as expected: none is missing.
    if (in.remaining() != 0)
        fail("snapshot {}: {} unexpected bytes after the last chunk (from byte {})", name, in.remaining(),
             in.offset());
    return s;
}

}  // namespace

Snapshot read_snapshot(const std::filesystem::path& file, const SnapshotExpectation& expect) {
    FileReader in(file);
    return read_from(in, expect);
}

Snapshot parse_snapshot(std::span<const std::byte> bytes, const SnapshotExpectation& expect, std::string_view name) {
    SpanReader in(bytes, name);
    return read_from(in, expect);
}

#else

bool snapshots_available() { return false; }

namespace {
[[noreturn]] void no_snapshots(const std::filesystem::path& file) {
    fail("snapshot {}: this build has no snapshots: it was built without xxhash.h (install libxxhash-dev, or "
         "copy xxhash.h to .carry/include/, and rebuild)",
         file.string());
}
}  // namespace

void write_snapshot(const std::filesystem::path& file, const Snapshot&) { no_snapshots(file); }
Snapshot read_snapshot(const std::filesystem::path& file, const SnapshotExpectation&) { no_snapshots(file); }
Snapshot parse_snapshot(std::span<const std::byte>, const SnapshotExpectation&, std::string_view name) {
    no_snapshots(name);
}

#endif

}  // namespace deltabit
