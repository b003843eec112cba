#include "runtime/diffusion_record.h"

#include "core/error.h"
#include "core/file_io.h"
#include "core/little_endian.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstring>

#if DELTABIT_HAVE_XXHASH
#define XXH_INLINE_ALL
#include <xxhash.h>
#endif

namespace deltabit {

namespace {

constexpr char kMagic[8] = {'D', 'B', 'D', 'I', 'F', 'F', 0x00, 0x01};
constexpr uint32_t kMaxHeaderBytes = 1u << 20;
constexpr uint64_t kFixedHeadBytes = 16;  // magic, version, header_bytes
constexpr const char* kWhat = "record";

uint64_t step_bytes(int64_t L) { return 24 + 17 * uint64_t(L); }


void put_ids(std::string& out, const std::vector<int32_t>& ids) {
    for (int32_t id : ids) put_le(out, uint32_t(id), 4);
}

std::vector<int32_t> get_ids(const unsigned char*& p, int64_t n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) {
        id = int32_t(uint32_t(get_le(p, 4)));
        p += 4;
    }
    return ids;
}

nlohmann::ordered_json settings_json(const DiffusionGenerationConfig& g) {
    return {{"max_new_tokens", g.max_new_tokens},   {"max_denoising_steps", g.max_denoising_steps},
            {"entropy_bound", g.entropy_bound},     {"t_min", g.t_min},
            {"t_max", g.t_max},                     {"stability_threshold", g.stability_threshold},
            {"confidence_threshold", g.confidence_threshold}, {"eos_ids", g.eos_ids},
            {"pad_id", g.pad_id}};
}

DiffusionGenerationConfig settings_from(const nlohmann::json& s) {
    DiffusionGenerationConfig g;
    g.max_new_tokens = s.at("max_new_tokens").get<int64_t>();
    g.max_denoising_steps = s.at("max_denoising_steps").get<int64_t>();
    g.entropy_bound = s.at("entropy_bound").get<double>();
    g.t_min = s.at("t_min").get<double>();
    g.t_max = s.at("t_max").get<double>();
    g.stability_threshold = s.at("stability_threshold").get<int64_t>();
    g.confidence_threshold = s.at("confidence_threshold").get<double>();
    g.eos_ids = s.at("eos_ids").get<std::vector<int64_t>>();
    g.pad_id = s.at("pad_id").get<int64_t>();
    return g;
}

// The header's fields, each checked for its type and range; Error (caught by the caller, who names the
// file) for anything else. The steps are only counted here (`steps`): the file's size is checked against
// that count before anything is allocated for them.
DiffusionRecord record_from_header(const nlohmann::json& h, uint64_t& steps) {
    steps = h.at("steps").get<uint64_t>();
    DiffusionRecord r;
    r.fingerprint = h.at("fingerprint").get<std::string>();
    r.model_path = h.at("model_path").get<std::string>();
    r.backend = h.at("backend").get<std::string>();
    r.canvas_length = h.at("canvas_length").get<int64_t>();
    r.n_vocab = h.at("n_vocab").get<int64_t>();
    r.seed = h.at("seed").get<uint64_t>();
    r.prompt = h.at("prompt").get<std::vector<int32_t>>();
    r.settings = settings_from(h.at("settings"));
    r.tokens = h.at("tokens").get<std::vector<int32_t>>();
    r.steps_per_block = h.at("steps_per_block").get<std::vector<int64_t>>();
    r.finished = h.at("finished").get<bool>();
    if (r.canvas_length < 1 || r.canvas_length > (1 << 20)) fail("canvas_length {} is out of range", r.canvas_length);
    if (r.n_vocab < 1 || r.n_vocab > INT32_MAX) fail("n_vocab {} is out of range", r.n_vocab);
    return r;
}

}  // namespace

uint64_t diffusion_logits_hash(std::span<const float> logits) {
#if DELTABIT_HAVE_XXHASH
    return XXH3_64bits(logits.data(), logits.size_bytes());
#else
    (void)logits;
    fail("record: this build has no xxhash (libxxhash-dev), which records and replays need");
#endif
}

DiffusionRecordStep record_step(const DiffusionStep& s) {
    DiffusionRecordStep r;
    r.block = s.block;
    r.step = s.step;
    r.logits_xxh3 = diffusion_logits_hash(s.logits);
    r.canvas.assign(s.canvas.begin(), s.canvas.end());
    r.sampled.assign(s.sampled.begin(), s.sampled.end());
    r.noise.assign(s.noise.begin(), s.noise.end());
    r.accepted.assign(s.accepted.begin(), s.accepted.end());
    r.argmax.assign(s.argmax.begin(), s.argmax.end());
    return r;
}

void write_diffusion_record(const std::filesystem::path& path, const DiffusionRecord& r,
                            const std::vector<std::pair<std::string, std::string>>& model_summary) {
    nlohmann::ordered_json model = nlohmann::ordered_json::object();
    for (const auto& [key, value] : model_summary) model[key] = value;
    nlohmann::ordered_json h;
    h["fingerprint"] = r.fingerprint;
    h["model_path"] = r.model_path;
    h["backend"] = r.backend;
    h["canvas_length"] = r.canvas_length;
    h["n_vocab"] = r.n_vocab;
    h["seed"] = r.seed;
    h["prompt"] = r.prompt;
    h["settings"] = settings_json(r.settings);
    h["steps"] = r.steps.size();
    h["tokens"] = r.tokens;
    h["steps_per_block"] = r.steps_per_block;
    h["finished"] = r.finished;
    h["model"] = model;
    h["writer"] = "deltabit";
    const std::string header = h.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (header.size() > kMaxHeaderBytes)
        fail("record {}: the header is {} bytes (a prompt of {} tokens); the format holds at most {}", path.string(),
             header.size(), r.prompt.size(), kMaxHeaderBytes);

    const size_t L = size_t(r.canvas_length);
    std::string out(kMagic, sizeof kMagic);
    put_le(out, kDiffusionRecordVersion, 4);
    put_le(out, header.size(), 4);
    out += header;
    out.reserve(out.size() + r.steps.size() * step_bytes(r.canvas_length));
    for (const DiffusionRecordStep& s : r.steps) {
        put_le(out, uint64_t(s.block), 8);
        put_le(out, uint64_t(s.step), 8);
        put_le(out, s.logits_xxh3, 8);
        for (const std::vector<int32_t>* ids : {&s.canvas, &s.sampled, &s.noise}) {
            if (ids->size() != L) fail("record: a step has {} tokens where the canvas has {}", ids->size(), L);
            put_ids(out, *ids);
        }
        if (s.accepted.size() != L || s.argmax.size() != L) fail("record: a step's acceptance is not [canvas]");
        out.append(reinterpret_cast<const char*>(s.accepted.data()), L);
        put_ids(out, s.argmax);
    }
    write_file_atomically(path, out, kWhat);
}

DiffusionRecord read_diffusion_record(const std::filesystem::path& path) {
    const std::string file = read_regular_file(path, "replay");
    const std::string name = path.string();
    const auto* bytes = reinterpret_cast<const unsigned char*>(file.data());
    if (file.size() < kFixedHeadBytes || std::memcmp(bytes, kMagic, 6) != 0)
        fail("replay: {}: not a deltabit diffusion record (it does not start with \"DBDIFF\")", name);
    if (std::memcmp(bytes, kMagic, sizeof kMagic) != 0)
        fail("replay: {}: unknown record magic variant {}.{}", name, int(bytes[6]), int(bytes[7]));
    const uint32_t version = uint32_t(get_le(bytes + 8, 4));
    if (version != kDiffusionRecordVersion)
        fail("replay: {}: record version {}; this build reads version {}", name, version, kDiffusionRecordVersion);
    const uint32_t header_bytes = uint32_t(get_le(bytes + 12, 4));
    if (header_bytes < 2 || header_bytes > kMaxHeaderBytes)
        fail("replay: {}: header of {} bytes; it must be 2 .. {}", name, header_bytes, kMaxHeaderBytes);
    if (file.size() < kFixedHeadBytes + header_bytes)
        fail("replay: {}: truncated: the header needs {} bytes, the file has {}", name,
             kFixedHeadBytes + header_bytes, file.size());

    DiffusionRecord r;
    uint64_t n_steps = 0;
    try {
        const nlohmann::json h =
            nlohmann::json::parse(file.begin() + kFixedHeadBytes, file.begin() + kFixedHeadBytes + header_bytes);
        r = record_from_header(h, n_steps);
    } catch (const nlohmann::json::exception& e) {
        fail("replay: {}: bad header: {}", name, e.what());
    } catch (const Error& e) {
        fail("replay: {}: bad header: {}", name, e.what());
    }

    const uint64_t each = step_bytes(r.canvas_length);
    const uint64_t body = file.size() - kFixedHeadBytes - header_bytes;
    // Compared by division: the header's count times the step size could wrap.
    if (n_steps > body / each)
        fail("replay: {}: truncated: {} steps of {} bytes need {} bytes after the header, the file has {} "
             "(step {} is incomplete)",
             name, n_steps, each, n_steps <= UINT64_MAX / each ? fmt::format("{}", n_steps * each) : "more than 2^64",
             body, body / each + 1);
    const uint64_t want = each * n_steps;
    if (body > want) fail("replay: {}: {} bytes after the last of {} steps", name, body - want, n_steps);
    r.steps.resize(size_t(n_steps));

    const unsigned char* p = bytes + kFixedHeadBytes + header_bytes;
    const int64_t L = r.canvas_length;
    int64_t expect_block = 0, expect_step = 1;
    for (size_t i = 0; i < r.steps.size(); ++i) {
        DiffusionRecordStep& s = r.steps[i];
        s.block = int64_t(get_le(p, 8));
        s.step = int64_t(get_le(p + 8, 8));
        s.logits_xxh3 = get_le(p + 16, 8);
        p += 24;
        // Steps count up within a block and blocks follow each other: anything else is not a run.
        if (s.step == 1 && s.block == expect_block + 1 && i > 0) expect_block = s.block, expect_step = 1;
        if (s.block != expect_block || s.step != expect_step)
            fail("replay: {}: step {} is block {} step {}; expected block {} step {} or the next block's step 1", name,
                 i + 1, s.block, s.step, expect_block, expect_step);
        ++expect_step;
        s.canvas = get_ids(p, L);
        s.sampled = get_ids(p, L);
        s.noise = get_ids(p, L);
        s.accepted.assign(p, p + L);
        p += L;
        s.argmax = get_ids(p, L);
    }
    return r;
}

}  // namespace deltabit
