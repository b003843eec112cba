#include "core/env_switch.h"

#include <cstdlib>
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

}  // namespace deltabit
