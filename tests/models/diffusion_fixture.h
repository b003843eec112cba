// The DiffusionGemma fixture (tests/fixtures/diffusion_gemma, made by tools/fixtures/make_diffusion_fixture.py;
// layout in tests/fixtures/README.md): its reference tensors read independently of the loader under test,
// and its forward script replayed call by call on any backend — the CPU model
// (tests/models/test_diffusion_gemma.cpp) and the GPU one (tests/cuda/test_diffusion_gemma_cuda.cpp).
#pragma once

#include "fixture.h"

#include "formats/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace deltabit::test {

inline std::filesystem::path diffusion_fixture_dir() { return fixtures_dir() / "diffusion_gemma"; }

inline bool diffusion_fixture_present() {
    return std::filesystem::exists(diffusion_fixture_dir() / "diffusion.json") &&
           std::filesystem::exists(diffusion_fixture_dir() / "reference.safetensors");
}

// The reference outputs of a fixture folder, read independently of the loader under test.
class DiffusionReference {
public:
    explicit DiffusionReference(const std::filesystem::path& dir)
        : file_(safetensors::File::open(dir / "reference.safetensors")) {
        std::ifstream in(dir / "diffusion.json");
        meta_ = nlohmann::json::parse(in);
    }
    const nlohmann::json& meta() const { return meta_; }

    std::vector<float> floats(const std::string& name) const {
        const safetensors::TensorInfo& t = require(name, "F32");
        std::vector<float> out(t.n_elements());
        std::memcpy(out.data(), t.data, out.size() * 4);
        return out;
    }
    std::vector<int32_t> ints(const std::string& name) const {
        const safetensors::TensorInfo& t = require(name, "I32");
        std::vector<int32_t> out(t.n_elements());
        std::memcpy(out.data(), t.data, out.size() * 4);
        return out;
    }

private:
    const safetensors::TensorInfo& require(const std::string& name, const std::string& dtype) const {
        const safetensors::TensorInfo* t = file_.find(name);
        if (!t) throw std::runtime_error("reference.safetensors: no tensor " + name);
        if (t->dtype_name != dtype)
            throw std::runtime_error("reference.safetensors: " + name + " is " + t->dtype_name + ", not " + dtype);
        return *t;
    }
    safetensors::File file_;
    nlohmann::json meta_;
};

inline double max_abs(const std::vector<float>& v) {
    double m = 0.0;
    for (float x : v) m = std::max(m, double(std::abs(x)));
    return m;
}

// The index of the largest value (the first of ties), and its lead over the runner-up.
struct TopOne {
    int64_t index = 0;
    double gap = 0.0;
};
inline TopOne top_one(const float* row, int64_t n) {
    TopOne t;
    for (int64_t i = 1; i < n; ++i)
        if (row[i] > row[t.index]) t.index = i;
    double second = -INFINITY;
    for (int64_t i = 0; i < n; ++i)
        if (i != t.index) second = std::max(second, double(row[i]));
    t.gap = double(row[t.index]) - second;
    return t;
}

// The forward script replayed: the worst differences, relative to the largest reference value (every
// logit; each cached K or V tensor), and where they are.
struct ScriptReplay {
    int64_t encodes = 0, decodes = 0;
    double worst_logit = 0.0;  // max |Δlogit| / max |logit|
    double worst_kv = 0.0;     // max |ΔK or ΔV| / max |K or V| of that tensor
    std::string worst_logit_at, worst_kv_at;
    int64_t argmax_checked = 0, argmax_mismatches = 0;
    std::vector<std::string> problems;  // structural: rows, sizes, positions
};

// Replays the script of the fixture folder `dir` on `backend`, a model loaded from that folder, which offers
//   Cache new_cache();  void encode(Cache&, std::span<const int32_t>);  int64_t length(const Cache&);
//   int64_t rows(const Cache&, l);  std::vector<float> k(const Cache&, l), v(const Cache&, l);
//   std::vector<float> denoise(const Cache&, std::span<const int32_t> canvas, std::span<const float> sc).
// Argmaxes are compared at the positions where the reference's top-1 leads its runner-up by more than
// `decisive_gap` (absolute; a negative gap: everywhere).
template <class Backend>
ScriptReplay replay_forward_script(const std::filesystem::path& dir, Backend& backend, int64_t n_layer,
                                   int64_t n_vocab, double decisive_gap = -1.0) {
    const DiffusionReference ref(dir);
    const double max_logit = ref.meta().at("max_abs_logit").get<double>();
    ScriptReplay r;
    auto cache = backend.new_cache();
    for (const nlohmann::json& op : ref.meta().at("forward")) {
        const std::string kind = op.at("op");
        const std::string where = kind + " " + std::to_string(kind == "encode" ? r.encodes : r.decodes);
        if (backend.length(cache) != op.at("position").get<int64_t>()) {
            r.problems.push_back(where + ": cache at " + std::to_string(backend.length(cache)) + ", the fixture at " +
                                 op.at("position").dump());
            return r;
        }
        if (kind == "encode") {
            backend.encode(cache, ref.ints(op.at("ids")));
            const auto& kv = op.at("kv");
            if (int64_t(kv.size()) != n_layer) {
                r.problems.push_back(where + ": " + std::to_string(kv.size()) + " cached layers in the fixture");
                return r;
            }
            for (int64_t l = 0; l < n_layer; ++l) {
                const std::string at = where + " layer " + std::to_string(l);
                if (backend.rows(cache, l) != kv[size_t(l)].at("rows").get<int64_t>()) {
                    r.problems.push_back(at + ": " + std::to_string(backend.rows(cache, l)) + " cached rows, the fixture " +
                                         kv[size_t(l)].at("rows").dump());
                    continue;
                }
                for (const char* part : {"k", "v"}) {
                    const std::vector<float> want = ref.floats(kv[size_t(l)].at(part));
                    const std::vector<float> have = part[0] == 'k' ? backend.k(cache, l) : backend.v(cache, l);
                    if (have.size() != want.size()) {
                        r.problems.push_back(at + " " + part + ": " + std::to_string(have.size()) + " values, the fixture " +
                                             std::to_string(want.size()));
                        continue;
                    }
                    const double scale = std::max(max_abs(want), 1e-30);
                    for (size_t i = 0; i < want.size(); ++i) {
                        const double d = std::abs(double(have[i]) - want[i]) / scale;
                        if (d > r.worst_kv) {
                            r.worst_kv = d;
                            r.worst_kv_at = at + " " + part;
                        }
                    }
                }
            }
            ++r.encodes;
        } else {
            const std::vector<int32_t> canvas = ref.ints(op.at("canvas"));
            const std::vector<float> sc =
                op.at("self_conditioning").is_null() ? std::vector<float>{} : ref.floats(op.at("self_conditioning"));
            const std::vector<float> want = ref.floats(op.at("logits"));
            const std::vector<float> got = backend.denoise(cache, canvas, sc);
            if (got.size() != want.size()) {
                r.problems.push_back(where + ": " + std::to_string(got.size()) + " logits, the fixture " +
                                     std::to_string(want.size()));
                return r;
            }
            const int64_t V = n_vocab;
            for (size_t t = 0; t < canvas.size(); ++t) {
                for (int64_t i = 0; i < V; ++i) {
                    const double d = std::abs(double(got[t * V + i]) - want[t * V + i]) / max_logit;
                    if (d > r.worst_logit) {
                        r.worst_logit = d;
                        r.worst_logit_at = where + " position " + std::to_string(t) + (sc.empty() ? " (step 1)" : " (self-conditioned)");
                    }
                }
                const TopOne reference = top_one(want.data() + t * V, V);
                if (reference.gap <= decisive_gap) continue;
                ++r.argmax_checked;
                r.argmax_mismatches += top_one(got.data() + t * V, V).index != reference.index;
            }
            ++r.decodes;
        }
    }
    return r;
}

}  // namespace deltabit::test
