// A check for options that take a whole number of at least some floor (eval --bytes, train --max-steps).
// CLI::Range words its refusal differently from one CLI11 release to the next (Debian 12's "not in
// range 1 to 9223372036854775807", Ubuntu 24.04's "not in range [1 - 9223372036854775807]") and states
// the type's maximum, which no user asked about; this says the same short thing everywhere:
//   deltabit: error: --bytes: 0 is less than 1 (see deltabit eval --help)
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace deltabit::cli {

inline CLI::Validator whole_number_at_least(int64_t least) {
    return CLI::Validator(
        [least](std::string& text) -> std::string {
            int64_t value = 0;
            if (!CLI::detail::lexical_cast(text, value)) return fmt::format("{:?} is not a whole number", text);
            if (value < least) return fmt::format("{} is less than {}", value, least);
            return {};
        },
        fmt::format("INT >= {}", least));
}

}  // namespace deltabit::cli
