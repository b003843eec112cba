// Token ids typed by a user ("1,2,3", "1 2 3", "[1, 2, 3]" or one per line), shared by every command
// that takes them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deltabit::cli {

// Error "<what>: "x" is not a token id" for anything but non-negative 32-bit integers, and
// "<what>: no token ids given" for an empty list, and an empty field between commas ("1,,2", "1,"). `what` names the command and option ("run: --ids").
std::vector<int32_t> parse_token_ids(const std::string& text, std::string_view what);

}  // namespace deltabit::cli
