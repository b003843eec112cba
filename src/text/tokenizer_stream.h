// Token-by-token detokenisation for generation loops: push each new id, get the text that is final
// so far (whole UTF-8 characters only), finish() at the end of the sequence (a character cut short
// comes out as U+FFFD). The tokenizer must outlive it.
#pragma once

#include "text/tokenizer.h"
#include "text/utf8_stream.h"

namespace deltabit::text {

class StreamingDetokenizer {
public:
    explicit StreamingDetokenizer(const Tokenizer& tokenizer, DecodeOptions options = {})
        : tokenizer_(&tokenizer), options_(options) {}

    std::string push(int32_t id) {
        if (options_.skip_special && tokenizer_->is_special(id)) return {};
        return utf8_.push(tokenizer_->token_bytes(id));
    }
    std::string finish() { return utf8_.finish(); }
    size_t pending_bytes() const { return utf8_.pending_bytes(); }

private:
    const Tokenizer* tokenizer_;
    DecodeOptions options_;
    Utf8StreamDecoder utf8_;
};

}  // namespace deltabit::text
