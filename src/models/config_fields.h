// Typed, validated access to the fields of a config.json object, shared by the Hugging Face config
// readers (config_loader.cpp, and one file per architecture that needs more than it reads). Internal to
// models/: errors name the file and the dotted field, "config.json: text_config.hidden_size: ...".
#pragma once

#include "core/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deltabit {

// Typed access to one JSON object whose fields are reported as SOURCE: PREFIXkey. transformers writes
// None as null, so null counts as absent.
class ConfigFields {
public:
    ConfigFields(const nlohmann::json& object, std::string_view source, std::string prefix)
        : object_(object), source_(source), prefix_(std::move(prefix)) {}

    std::string_view source() const { return source_; }

    std::string name(std::string_view key) const { return prefix_ + std::string(key); }

    const nlohmann::json* find(std::string_view key) const {
        const auto it = object_.find(key);
        return it == object_.end() || it->is_null() ? nullptr : &*it;
    }

    [[noreturn]] void bad(std::string_view key, std::string_view problem) const {
        fail("{}: {}: {}", source_, name(key), problem);
    }

    int64_t require_int(std::string_view key) const {
        const nlohmann::json* v = find(key);
        if (!v) fail("{}: missing required field {}", source_, name(key));
        return to_int(key, *v);
    }
    int64_t get_int(std::string_view key, int64_t fallback) const {
        const nlohmann::json* v = find(key);
        return v ? to_int(key, *v) : fallback;
    }
    double get_number(std::string_view key, double fallback) const {
        const nlohmann::json* v = find(key);
        if (!v) return fallback;
        if (!v->is_number()) bad(key, fmt::format("expected a number, found {}", v->type_name()));
        return v->get<double>();
    }
    bool get_bool(std::string_view key, bool fallback) const {
        const nlohmann::json* v = find(key);
        if (!v) return fallback;
        if (!v->is_boolean()) bad(key, fmt::format("expected true or false, found {}", v->type_name()));
        return v->get<bool>();
    }
    std::string get_string(std::string_view key, std::string fallback) const {
        const nlohmann::json* v = find(key);
        if (!v) return fallback;
        if (!v->is_string()) bad(key, fmt::format("expected a string, found {}", v->type_name()));
        return v->get<std::string>();
    }
    std::string require_string(std::string_view key) const {
        if (!find(key)) fail("{}: missing required field {}", source_, name(key));
        return get_string(key, "");
    }
    // An array of exactly `count` strings (layer_types against num_hidden_layers, named by `count_name`);
    // empty when absent. Each entry is reported as key[i].
    std::vector<std::string> get_string_list(std::string_view key, int64_t count, std::string_view count_name) const {
        const nlohmann::json* v = find(key);
        if (!v) return {};
        if (!v->is_array()) bad(key, fmt::format("expected an array, found {}", v->type_name()));
        if (int64_t(v->size()) != count)
            bad(key, fmt::format("has {} entries but {} is {}", v->size(), count_name, count));
        std::vector<std::string> out;
        for (size_t i = 0; i < v->size(); ++i) {
            if (!(*v)[i].is_string())
                bad(fmt::format("{}[{}]", key, i), fmt::format("expected a string, found {}", (*v)[i].type_name()));
            out.push_back((*v)[i].get<std::string>());
        }
        return out;
    }
    // An integer or an array of integers (eos_token_id); empty when absent.
    std::vector<int64_t> get_int_or_list(std::string_view key) const {
        const nlohmann::json* v = find(key);
        if (!v) return {};
        if (!v->is_array()) return {to_int(key, *v)};
        std::vector<int64_t> out;
        for (size_t i = 0; i < v->size(); ++i) out.push_back(int_at(key, *v, i));
        return out;
    }
    int64_t int_at(std::string_view key, const nlohmann::json& array, size_t i) const {
        return to_int(fmt::format("{}[{}]", key, i), array[i]);
    }

private:
    int64_t to_int(std::string_view key, const nlohmann::json& v) const {
        if (v.is_number_integer()) {
            if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) bad(key, "integer out of range");
            return v.get<int64_t>();
        }
        // Some exporters write integral sizes as 4096.0.
        if (v.is_number_float()) {
            const double d = v.get<double>();
            if (std::trunc(d) == d && std::fabs(d) < 9.0e15) return int64_t(d);
        }
        bad(key, fmt::format("expected an integer, found {}", v.is_number() ? v.dump() : v.type_name()));
    }

    const nlohmann::json& object_;
    std::string_view source_;
    std::string prefix_;
};

}  // namespace deltabit
