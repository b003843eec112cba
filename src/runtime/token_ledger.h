// The token ledger of one sequence: every token its state has consumed, in order, and whether the
// model generated it (1) or it came from outside (0: prompt, chat template, tool output). The sampler's
// penalties and DRY read it (DRY fines only repeats of generated text), and a snapshot will carry it.
//
// Invariant kept by the generation loop: ledger.size() == state.position() for the state it follows.
#pragma once

#include "sampling/sampler.h"

#include <cstdint>
#include <span>
#include <vector>

namespace deltabit {

class TokenLedger {
public:
    void append_prompt(std::span<const int32_t> ids) {
        tokens_.insert(tokens_.end(), ids.begin(), ids.end());
        generated_.insert(generated_.end(), ids.size(), uint8_t{0});
    }
    void append_generated(int32_t id) {
        tokens_.push_back(id);
        generated_.push_back(1);
    }
    void clear() {
        tokens_.clear();
        generated_.clear();
    }

    int64_t size() const { return int64_t(tokens_.size()); }
    std::span<const int32_t> tokens() const { return tokens_; }
    std::span<const uint8_t> generated() const { return generated_; }
    TokenHistory history() const { return {tokens_, generated_}; }

private:
    std::vector<int32_t> tokens_;
    std::vector<uint8_t> generated_;
};

}  // namespace deltabit
