#include "text/utf8_stream.h"

#include "text/unicode.h"

namespace deltabit::text {

std::string Utf8StreamDecoder::push(std::string_view bytes) {
    std::string buffer;
    std::string_view data = bytes;
    if (!pending_.empty()) {
        buffer = std::move(pending_);
        buffer.append(bytes);
        data = buffer;
    }
    const size_t tail = utf8_incomplete_tail(data);
    pending_.assign(data.substr(data.size() - tail));
    return utf8_repair(data.substr(0, data.size() - tail));
}

std::string Utf8StreamDecoder::finish() {
    // A pending tail is by construction a valid but incomplete prefix: exactly one maximal subpart.
    std::string out = pending_.empty() ? std::string() : std::string(kReplacementUtf8);
    pending_.clear();
    return out;
}

}  // namespace deltabit::text
