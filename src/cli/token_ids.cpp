#include "cli/token_ids.h"

#include "core/error.h"

namespace deltabit::cli {

std::vector<int32_t> parse_token_ids(const std::string& text, std::string_view what) {
    std::vector<int32_t> ids;
    std::string number;
    // Ids are separated by commas and/or whitespace ("1,2,3", "1 2 3", "[1, 2, 3]"); a comma with no
    // id before it ("1,,2", ",1", "[1,]") is a typo that would silently drop an id, so it is refused.
    bool id_since_comma = false;
    size_t comma_at = 0;
    auto flush = [&] {
        if (number.empty()) return;
        // At most 10 digits, so the value fits in 64 bits before the 32-bit check.
        if (number.size() > 10 || number.find_first_not_of("0123456789") != std::string::npos)
            fail("{}: {:?} is not a token id", what, number);
        const long long value = std::stoll(number);
        if (value > INT32_MAX) fail("{}: {} is not a token id", what, number);
        ids.push_back(int32_t(value));
        number.clear();
        id_since_comma = true;
    };
    auto empty_field = [&](size_t at) {
        fail("{}: no id before the comma at character {} of {:?}", what, at + 1, text);
    };
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == ',') {
            flush();
            if (!id_since_comma) empty_field(i);
            id_since_comma = false;
            comma_at = i;
        } else if (c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '[' || c == ']') {
            flush();
        } else {
            number.push_back(c);
        }
    }
    flush();
    if (ids.empty()) fail("{}: no token ids given", what);
    if (!id_since_comma) fail("{}: no id after the comma at character {} of {:?}", what, comma_at + 1, text);
    return ids;
}

}  // namespace deltabit::cli
