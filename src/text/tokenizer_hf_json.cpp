#include "text/tokenizer_hf_json.h"

#include "core/error.h"
#include "text/bpe_byte_alphabet.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace deltabit::text {
namespace {

using nlohmann::json;

struct Reader {
    const std::string& source;

    [[noreturn]] void unsupported(const std::string& where, const json& node) const {
        fail("tokenizer: {}: {} {} is not supported", source, where, node.dump().substr(0, 200));
    }

    static std::string type_of(const json& node) {
        const auto it = node.find("type");
        return it != node.end() && it->is_string() ? it->get<std::string>() : std::string();
    }

    static bool flag(const json& node, const char* key, bool fallback = false) {
        const auto it = node.find(key);
        return it != node.end() && it->is_boolean() ? it->get<bool>() : fallback;
    }

    // Pattern objects are {"String": "..."} or {"Regex": "..."}.
    std::pair<std::string, bool> pattern(const json& node, const std::string& where) const {
        const auto& p = node.at("pattern");
        if (p.contains("String")) return {p["String"].get<std::string>(), false};
        if (p.contains("Regex")) return {p["Regex"].get<std::string>(), true};
        unsupported(where + ".pattern", p);
    }

    void normalizer(const json& node, const std::string& where, TokenizerSpec& spec) const {
        if (node.is_null()) return;
        const std::string type = type_of(node);
        NormalizerStep step;
        if (type == "Sequence") {
            const auto& list = node.at("normalizers");
            for (size_t i = 0; i < list.size(); ++i) normalizer(list[i], fmt::format("{}[{}]", where, i), spec);
            return;
        }
        if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
            step.kind = NormalizerStep::Kind::Unicode;
            step.form = type == "NFC" ? NormalForm::NFC : type == "NFD" ? NormalForm::NFD
                      : type == "NFKC" ? NormalForm::NFKC : NormalForm::NFKD;
        } else if (type == "Replace") {
            auto [text, is_regex] = pattern(node, where);
            if (is_regex) unsupported(where + " (Replace with a regex)", node);
            step.kind = NormalizerStep::Kind::Replace;
            step.pattern = text;
            step.content = node.at("content").get<std::string>();
        } else if (type == "Prepend") {
            step.kind = NormalizerStep::Kind::Prepend;
            step.content = node.at("prepend").get<std::string>();
        } else {
            unsupported(where, node);
        }
        spec.normalizer.push_back(std::move(step));
    }

    // Returns true when a ByteLevel step was seen (the vocabulary is then byte-level).
    bool pre_tokenizer(const json& node, const std::string& where, TokenizerSpec& spec) const {
        if (node.is_null()) return false;
        const std::string type = type_of(node);
        if (type == "Sequence") {
            bool byte_level = false;
            const auto& list = node.at("pretokenizers");
            for (size_t i = 0; i < list.size(); ++i) {
                byte_level |= pre_tokenizer(list[i], fmt::format("{}[{}]", where, i), spec);
            }
            return byte_level;
        }
        if (type == "Split") {
            if (flag(node, "invert")) unsupported(where + " (invert)", node);
            SplitRule rule;
            std::tie(rule.pattern, rule.is_regex) = pattern(node, where);
            const std::string behavior = node.at("behavior").get<std::string>();
            if (behavior == "Isolated") rule.behavior = SplitBehavior::Isolated;
            else if (behavior == "Removed") rule.behavior = SplitBehavior::Removed;
            else if (behavior == "MergedWithPrevious") rule.behavior = SplitBehavior::MergedWithPrevious;
            else if (behavior == "MergedWithNext") rule.behavior = SplitBehavior::MergedWithNext;
            else unsupported(where + ".behavior", node.at("behavior"));
            spec.split_rules.push_back(std::move(rule));
            return false;
        }
        if (type == "ByteLevel") {
            if (flag(node, "add_prefix_space")) {
                // Applied to each existing split; only as the first step is that the whole segment.
                if (!spec.split_rules.empty()) unsupported(where + " (add_prefix_space after a split)", node);
                spec.prefix_space = true;
            }
            if (flag(node, "use_regex", true)) {
                spec.split_rules.push_back({std::string(patterns::kGpt2), true, SplitBehavior::Isolated});
            }
            return true;
        }
        unsupported(where, node);
    }

    void decoder(const json& node, const std::string& where, TokenizerSpec& spec) const {
        if (node.is_null()) return;
        const std::string type = type_of(node);
        if (type == "Sequence") {
            const auto& list = node.at("decoders");
            for (size_t i = 0; i < list.size(); ++i) decoder(list[i], fmt::format("{}[{}]", where, i), spec);
        } else if (type == "ByteLevel") {
            spec.decoder.byte_level = true;
        } else if (type == "ByteFallback") {
            spec.decoder.byte_fallback = true;
        } else if (type == "Fuse") {
            // Joins the decoded strings: a no-op for a byte stream.
        } else if (type == "Replace") {
            auto [text, is_regex] = pattern(node, where);
            if (is_regex) unsupported(where + " (Replace with a regex)", node);
            spec.decoder.replacements.emplace_back(text, node.at("content").get<std::string>());
        } else {
            unsupported(where, node);
        }
    }

    void post_processor(const json& node, const std::string& where, TokenizerSpec& spec) const {
        if (node.is_null()) return;
        const std::string type = type_of(node);
        if (type == "Sequence") {
            const auto& list = node.at("processors");
            for (size_t i = 0; i < list.size(); ++i) post_processor(list[i], fmt::format("{}[{}]", where, i), spec);
        } else if (type == "ByteLevel") {
            // Adjusts offsets only; ids are unchanged.
        } else if (type == "TemplateProcessing") {
            const json& specials = node.at("special_tokens");
            bool seen_sequence = false;
            for (const json& item : node.at("single")) {
                if (item.contains("Sequence")) {
                    seen_sequence = true;
                    continue;
                }
                if (!item.contains("SpecialToken")) unsupported(where + ".single", item);
                const std::string name = item["SpecialToken"].at("id").get<std::string>();
                if (!specials.contains(name)) fail("tokenizer: {}: {}: special token {} has no ids", source, where, name);
                for (const json& id : specials[name].at("ids")) {
                    (seen_sequence ? spec.suffix_ids : spec.prefix_ids).push_back(id.get<int32_t>());
                }
            }
        } else {
            unsupported(where, node);
        }
    }
};

// tokenizer_config.json names tokens either as a string or as {"content": ...}.
std::optional<std::string> config_token_name(const json& config, const char* key) {
    const auto it = config.find(key);
    if (it == config.end()) return std::nullopt;
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content")) return (*it)["content"].get<std::string>();
    return std::nullopt;
}

}  // namespace

TokenizerSpec spec_from_hf_json(const json& root, const json* config, const std::string& source) {
    Reader r{source};
    TokenizerSpec spec;
    spec.source = source;

    const json& model = root.at("model");
    if (Reader::type_of(model) != "BPE" && !(Reader::type_of(model).empty() && model.contains("merges"))) {
        r.unsupported("model.type", model.value("type", json()));
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        const auto it = model.find(key);
        if (it != model.end() && it->is_string() && !it->get<std::string>().empty()) {
            r.unsupported(std::string("model.") + key, *it);
        }
    }
    if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0) {
        r.unsupported("model.dropout", model["dropout"]);
    }

    r.normalizer(root.value("normalizer", json()), "normalizer", spec);
    const bool byte_level = r.pre_tokenizer(root.value("pre_tokenizer", json()), "pre_tokenizer", spec);
    r.decoder(root.value("decoder", json()), "decoder", spec);
    r.post_processor(root.value("post_processor", json()), "post_processor", spec);

    BpeModelSpec& bpe = spec.model;
    bpe.units = byte_level ? BpeUnits::Bytes : BpeUnits::Chars;
    const json& vocab = model.at("vocab");
    size_t size = 0;
    for (const auto& [token, id] : vocab.items()) size = std::max(size, id.get<size_t>() + 1);
    spec.token_strings.resize(size);
    bpe.keys.resize(size);
    // In a byte-level vocabulary every reachable token is spelled in the GPT-2 alphabet; a spelling
    // with other characters can never come out of BPE over byte-level input, so it gets no key.
    auto key_of = [&](const std::string& s) -> std::string {
        if (!byte_level) return s;
        const std::string bytes = byte_level_to_bytes(s);
        return bytes_to_byte_level(bytes) == s ? bytes : std::string();
    };
    for (const auto& [token, id] : vocab.items()) {
        const auto i = id.get<size_t>();
        spec.token_strings[i] = token;
        bpe.keys[i] = key_of(token);
    }
    const json& merges = model.at("merges");
    bpe.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
        const json& m = merges[i];
        std::string left, right;
        if (m.is_string()) {
            const std::string s = m.get<std::string>();
            const size_t space = s.find(' ');
            if (space == std::string::npos) fail("tokenizer: {}: model.merges[{}] {:?} has no space", source, i, s);
            left = s.substr(0, space);
            right = s.substr(space + 1);
        } else if (m.is_array() && m.size() == 2) {
            left = m[0].get<std::string>();
            right = m[1].get<std::string>();
        } else {
            r.unsupported(fmt::format("model.merges[{}]", i), m);
        }
        bpe.merges.emplace_back(key_of(left), key_of(right));
    }
    bpe.byte_fallback = Reader::flag(model, "byte_fallback");
    bpe.fuse_unk = Reader::flag(model, "fuse_unk");
    bpe.ignore_merges = Reader::flag(model, "ignore_merges");
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
        const std::string unk = model["unk_token"].get<std::string>();
        if (!vocab.contains(unk)) fail("tokenizer: {}: model.unk_token {:?} is not in the vocabulary", source, unk);
        bpe.unk_id = vocab[unk].get<int32_t>();
    }

    for (const json& t : root.value("added_tokens", json::array())) {
        AddedTokenSpec a;
        a.id = t.at("id").get<int32_t>();
        a.content = t.at("content").get<std::string>();
        a.special = Reader::flag(t, "special");
        a.normalized = Reader::flag(t, "normalized");
        a.lstrip = Reader::flag(t, "lstrip");
        a.rstrip = Reader::flag(t, "rstrip");
        spec.added_tokens.push_back(std::move(a));
    }

    auto id_of = [&](const std::string& name) -> std::optional<int32_t> {
        for (const auto& a : spec.added_tokens) {
            if (a.content == name) return a.id;
        }
        if (vocab.contains(name)) return vocab[name].get<int32_t>();
        return std::nullopt;
    };
    if (config) {
        auto resolve = [&](const char* key) -> std::optional<int32_t> {
            const auto name = config_token_name(*config, key);
            if (!name) return std::nullopt;
            const auto id = id_of(*name);
            if (!id) fail("tokenizer: {}: tokenizer_config.json {} {:?} is not a token", source, key, *name);
            return id;
        };
        spec.bos_id = resolve("bos_token");
        spec.eos_id = resolve("eos_token");
        spec.pad_id = resolve("pad_token");
    }
    if (!spec.bos_id && spec.prefix_ids.size() == 1) spec.bos_id = spec.prefix_ids[0];
    return spec;
}

TokenizerSpec load_hf_tokenizer_spec(const std::string& path) {
    auto read_json = [](const std::filesystem::path& p) {
        std::ifstream in(p, std::ios::binary);
        if (!in) fail("tokenizer: {}: cannot open", p.string());
        std::ostringstream buffer;
        buffer << in.rdbuf();
        try {
            return json::parse(buffer.str());
        } catch (const json::exception& e) {
            fail("tokenizer: {}: not valid JSON: {}", p.string(), e.what());
        }
    };
    const json tokenizer = read_json(path);
    const auto config_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
    std::optional<json> config;
    if (std::filesystem::exists(config_path)) config = read_json(config_path);
    try {
        return spec_from_hf_json(tokenizer, config ? &*config : nullptr, path);
    } catch (const json::exception& e) {
        fail("tokenizer: {}: unexpected structure: {}", path, e.what());
    }
}

}  // namespace deltabit::text
