// Pre-tokenisation: cutting normalised text into pieces that BPE then encodes one by one.
//
// A Hugging Face pre-tokeniser is a sequence of split rules, each applied to every piece the rules
// before it produced. The patterns were written for Oniguruma (what the Rust `tokenizers` crate
// compiles them with); deltabit runs them on PCRE2 with JIT, UTF and UCP after translating the few
// constructs whose meaning differs (see translate_oniguruma_pattern).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace deltabit::text {

// What happens to the text a pattern matches (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior {
    Isolated,            // the match is a piece of its own
    Removed,             // the match is dropped
    MergedWithPrevious,  // the match ends the piece before it
    MergedWithNext,      // the match starts the piece after it
};

struct SplitRule {
    std::string pattern;   // an Oniguruma regex, or a literal string when !is_regex
    bool is_regex = true;
    SplitBehavior behavior = SplitBehavior::Isolated;
};

// Well-known rule sets, by the name llama.cpp stores in GGUF `tokenizer.ggml.pre`.
namespace patterns {
// GPT-2 (ByteLevel with use_regex): letters and numbers take one optional leading space.
inline constexpr std::string_view kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama-3 (and cl100k): numbers in chunks of up to three digits.
inline constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2 / Qwen3: one digit per piece.
inline constexpr std::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen3.5: as Qwen2, but combining marks (\p{M}) stay inside words.
inline constexpr std::string_view kQwen35 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}  // namespace patterns

// Rewrites an Oniguruma pattern for PCRE2. The one difference that matters for tokenizer patterns:
// Oniguruma's \s is Unicode White_Space (which includes U+0085 and excludes U+180E), PCRE2's UCP \s
// is a different set; \s and \S are spelled out as the White_Space list. Constructs that mean
// something else in PCRE2 (\h, \H, \S inside a class) are refused with an error naming them.
std::string translate_oniguruma_pattern(std::string_view pattern);

class CompiledSplitRule;

class Pretokenizer {
public:
    explicit Pretokenizer(std::vector<SplitRule> rules);
    ~Pretokenizer();
    Pretokenizer(Pretokenizer&&) noexcept;
    Pretokenizer& operator=(Pretokenizer&&) noexcept;

    // Calls on_piece(view into `text`) for each piece of `text` (valid UTF-8), in order, as the
    // rules find them — nothing is collected, so a long text costs no memory here. Empty pieces are
    // never produced. With no rules the whole text is one piece.
    template <typename OnPiece>
    void for_each_piece(std::string_view text, OnPiece&& on_piece) const {
        if (text.empty()) return;
        split_from(0, text, PieceSink{&on_piece, [](void* f, std::string_view piece) {
                                          (*static_cast<std::remove_reference_t<OnPiece>*>(f))(piece);
                                      }});
    }

    // Appends the pieces to `pieces` (tests and tools; encode streams with for_each_piece).
    void split(std::string_view text, std::vector<std::string_view>& pieces) const {
        for_each_piece(text, [&](std::string_view piece) { pieces.push_back(piece); });
    }

    bool empty() const { return rules_.empty(); }

private:
    // A non-owning callable, so rules can be chained without templates leaking into the .cpp.
    struct PieceSink {
        void* callable;
        void (*call)(void*, std::string_view);
        void operator()(std::string_view piece) const { call(callable, piece); }
    };
    // Applies rules [rule, end) to `text`; each piece of the last rule goes to `sink`.
    void split_from(size_t rule, std::string_view text, const PieceSink& sink) const;

    std::vector<std::unique_ptr<CompiledSplitRule>> rules_;
};

}  // namespace deltabit::text
