// Shared by the Jinja interpreter tests: render a template string with JSON variables.
#pragma once

#include "text/jinja.h"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace deltabit::text::jinja::testing {

inline Dict variables(const nlohmann::ordered_json& json) {
    Dict vars;
    if (json.is_object())
        for (const auto& [key, value] : json.items()) vars.set(key, from_json(value));
    return vars;
}

inline std::string render(std::string_view source, const nlohmann::ordered_json& json = nlohmann::ordered_json::object(),
                          const RenderOptions& options = {}) {
    return Template::parse(source).render(variables(json), options);
}

}  // namespace deltabit::text::jinja::testing
