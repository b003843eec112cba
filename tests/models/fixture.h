// Reads the transformers reference fixtures in tests/fixtures/<name>/ (layout: tests/fixtures/README.md).
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace deltabit::test {

inline std::filesystem::path fixtures_dir() { return std::filesystem::path(DELTABIT_SOURCE_DIR) / "tests" / "fixtures"; }

struct FixtureCase {
    int64_t length = 0;
    int64_t split = 0;  // 0: no split case
    std::vector<int32_t> tokens;
    std::map<std::string, std::vector<float>> logits;  // mode → [length][vocab]
};

struct Fixture {
    std::string name;
    std::filesystem::path dir;
    nlohmann::json meta;
    int64_t vocab = 0;
    std::vector<FixtureCase> cases;
    float max_abs_logit = 0.0f;  // over every stored logit, computed here from the data
};

inline Fixture load_fixture(const std::string& name) {
    Fixture f;
    f.name = name;
    f.dir = fixtures_dir() / name;
    std::ifstream meta_in(f.dir / "meta.json");
    if (!meta_in) throw std::runtime_error("cannot open " + (f.dir / "meta.json").string());
    f.meta = nlohmann::json::parse(meta_in);
    f.vocab = f.meta.at("vocab_size").get<int64_t>();
    std::ifstream bin(f.dir / f.meta.at("logits_file").get<std::string>(), std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(bin)), std::istreambuf_iterator<char>());
    for (const auto& c : f.meta.at("cases")) {
        FixtureCase fc;
        fc.length = c.at("length").get<int64_t>();
        fc.split = c.at("split").is_null() ? 0 : c.at("split").get<int64_t>();
        fc.tokens = c.at("tokens").get<std::vector<int32_t>>();
        for (const auto& [mode, where] : c.at("modes").items()) {
            const uint64_t offset = where.at("offset").get<uint64_t>();
            const uint64_t n = uint64_t(fc.length * f.vocab);
            if (where.at("bytes").get<uint64_t>() != n * 4 || offset + n * 4 > bytes.size())
                throw std::runtime_error(name + ": bad logits offsets for mode " + mode);
            std::vector<float> logits(n);
            std::memcpy(logits.data(), bytes.data() + offset, n * 4);  // little-endian host assumed (x86, arm64)
            for (float v : logits) f.max_abs_logit = std::max(f.max_abs_logit, std::abs(v));
            fc.logits[mode] = std::move(logits);
        }
        f.cases.push_back(std::move(fc));
    }
    return f;
}

inline std::vector<std::string> fixture_names() {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(fixtures_dir()))
        if (entry.is_directory() && std::filesystem::exists(entry.path() / "meta.json"))
            names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

// Feeds a fixture case's tokens to `model` (CPU or GPU) the way `mode` names: "prompt" in one call,
// "split" as the first c.split tokens then the rest, "steps" one token per call; returns the logits of
// every position concatenated, as the fixture stores them. Throws for an unknown mode.
template <typename Model, typename State>
std::vector<float> feed_in_mode(Model& model, State& state, const std::string& mode, const FixtureCase& c) {
    const std::span<const int32_t> ids(c.tokens);
    std::vector<float> logits;
    auto append = [&](std::span<const int32_t> part) {
        const std::vector<float> out = model.forward(state, part);
        logits.insert(logits.end(), out.begin(), out.end());
    };
    if (mode == "prompt") {
        append(ids);
    } else if (mode == "split") {
        append(ids.first(size_t(c.split)));
        append(ids.subspan(size_t(c.split)));
    } else if (mode == "steps") {
        for (size_t t = 0; t < ids.size(); ++t) append(ids.subspan(t, 1));
    } else {
        throw std::runtime_error("unknown fixture mode " + mode);
    }
    return logits;
}

}  // namespace deltabit::test
