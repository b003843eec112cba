#include "core/env_switch.h"

#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.h"

namespace deltabit {

bool env_switch(const char* name, bool default_value) {
    const char* raw = std::getenv(name);
    const std::string_view value = raw == nullptr ? std::string_view() : std::string_view(raw);
    if (value.empty()) return default_value;
    if (value == "0") return false;
    if (value == "1") return true;
    fail("environment: {}={:?}: expected 0 (off) or 1 (on), or leave it unset (default {})", name, value,
         default_value ? 1 : 0);
}

int env_number(const char* name, std::initializer_list<int> allowed, int default_value, const char* unset_meaning) {
    const char* raw = std::getenv(name);
    const std::string_view value = raw == nullptr ? std::string_view() : std::string_view(raw);
    if (value.empty()) return default_value;
    std::string expected;
    for (const int n : allowed) {
        if (value == std::to_string(n)) return n;
        expected += (expected.empty() ? "" : ", ") + std::to_string(n);
    }
    fail("environment: {}={:?}: expected one of {}, or leave it unset ({})", name, value, expected, unset_meaning);
}

}  // namespace deltabit
