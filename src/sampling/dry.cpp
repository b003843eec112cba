#include "sampling/dry.h"

#include <algorithm>
#include <unordered_map>

namespace deltabit {

std::vector<DryMatch> dry_find_repeats(std::span<const int32_t> tokens, std::span<const uint8_t> generated,
                                       int window, int min_length) {
    const int64_t length = int64_t(tokens.size());
    const int64_t begin = window > 0 ? std::max<int64_t>(0, length - window) : 0;
    std::unordered_map<int32_t, int> longest;
    // Naive O(window²) scan: the window is small (256) and this is the reference behaviour.
    for (int64_t j = begin; j < length; ++j) {
        // Repeat length n: the n tokens before j equal the last n tokens; j itself is the candidate.
        int n = 0;
        bool has_generated = generated[size_t(j)] != 0;
        while (j - 1 - n >= begin && length - 1 - n > j - 1 - n &&
               tokens[size_t(j - 1 - n)] == tokens[size_t(length - 1 - n)]) {
            has_generated = has_generated || generated[size_t(j - 1 - n)] != 0;
            ++n;
        }
        if (n < min_length || !has_generated) continue;
        int& best = longest[tokens[size_t(j)]];
        best = std::max(best, n);
    }
    std::vector<DryMatch> matches;
    matches.reserve(longest.size());
    for (const auto& [token, n] : longest) matches.push_back({token, n});
    std::sort(matches.begin(), matches.end(), [](const DryMatch& a, const DryMatch& b) { return a.token < b.token; });
    return matches;
}

}  // namespace deltabit
