#include "cli/token_ids.h"

#include "core/error.h"

namespace deltabit::cli {

std::vector<int32_t> parse_token_ids(const std::string& text, std::string_view what) {
    std::vector<int32_t> ids;
    std::string number;
    auto flush = [&] {
        if (number.empty()) return;
        // At most 10 digits, so the value fits in 64 bits before the 32-bit check.
        if (number.size() > 10 || number.find_first_not_of("0123456789") != std::string::npos)
            fail("{}: {:?} is not a token id", what, number);
        const long long value = std::stoll(number);
        if (value > INT32_MAX) fail("{}: {} is not a token id", what, number);
        ids.push_back(int32_t(value));
        number.clear();
    };
    for (char c : text) {
        if (c == ',' || c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '[' || c == ']') flush();
        else number.push_back(c);
    }
    flush();
    if (ids.empty()) fail("{}: no token ids given", what);
    return ids;
}

}  // namespace deltabit::cli
