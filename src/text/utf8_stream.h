// Streaming UTF-8 for detokenisation. Byte-level tokens do not respect character boundaries: a token
// can be " " plus the first three bytes of an emoji, the next token its fourth byte. The decoder
// releases only complete characters, holds an incomplete tail until the next push, and on finish()
// turns a tail that never completed into U+FFFD — the text is never silently shortened.
//
// Invariant (tested): for any split of a byte string into pushes,
//   concat(push(part)...) + finish() == utf8_repair(whole).
#pragma once

#include <string>
#include <string_view>

namespace deltabit::text {

class Utf8StreamDecoder {
public:
    // Returns the text that is final after these bytes: valid UTF-8, ill-formed parts already
    // replaced by U+FFFD, an incomplete last character held back.
    std::string push(std::string_view bytes);

    // Ends the stream: a held incomplete character becomes one U+FFFD. The decoder is then empty
    // and can start a new stream.
    std::string finish();

    // Bytes held back waiting for the rest of a character (0 to 3).
    size_t pending_bytes() const { return pending_.size(); }

private:
    std::string pending_;
};

}  // namespace deltabit::text
