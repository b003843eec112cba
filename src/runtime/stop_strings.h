// Stop strings matched on decoded text as it streams. Text that could still turn out to be the start
// of a stop string is held back, so a caller that streams what push() releases never shows any part
// of a stop string, and the text before a match is released whole.
//
// Held text is always the longest tail of the stream that is a proper prefix of some stop string. As
// the stop strings and the stream are valid UTF-8, that tail starts where a stop string starts, i.e.
// on a character boundary: released text never ends inside a character.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace deltabit {

class StopStringMatcher {
public:
    // Error for an empty stop string (it would match before any text).
    explicit StopStringMatcher(std::vector<std::string> stops);

    struct Step {
        std::string released;  // text now known not to belong to a stop string
        bool stopped = false;  // a stop string matched; `released` is everything before it
    };
    // Appends `text` to the stream. After a match the matcher is done; further pushes release nothing.
    Step push(std::string_view text);
    // The end of the stream: whatever is held was not a stop string after all.
    std::string finish();

    bool empty() const { return stops_.empty(); }
    size_t held_bytes() const { return held_.size(); }

private:
    std::vector<std::string> stops_;
    std::string held_;
    bool stopped_ = false;
};

}  // namespace deltabit
