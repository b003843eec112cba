#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/pretokenize.h"

#include "core/error.h"

#include <pcre2.h>

#include <utility>

namespace deltabit::text {
namespace {

// Unicode White_Space (PropList.txt), the set Oniguruma's \s matches on Unicode strings.
constexpr std::string_view kWhiteSpaceRanges =
    R"(\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string pcre2_error_text(int code) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(code, buffer, sizeof buffer);
    return reinterpret_cast<const char*>(buffer);
}

// Per-thread match state: encode() is const and may run on many threads at once.
struct MatchScratch {
    pcre2_match_data* data = nullptr;
    pcre2_match_context* context = nullptr;
    pcre2_jit_stack* jit_stack = nullptr;

    MatchScratch() {
        data = pcre2_match_data_create(1, nullptr);
        context = pcre2_match_context_create(nullptr);
        // The default 32 KiB JIT stack is enough for these patterns on ordinary text; 1 MiB keeps
        // pathological inputs (a megabyte without a break) from failing with a stack-limit error.
        jit_stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
        if (!data || !context || !jit_stack) fail("pretokenize: out of memory creating PCRE2 match state");
        pcre2_jit_stack_assign(context, nullptr, jit_stack);
    }
    ~MatchScratch() {
        pcre2_jit_stack_free(jit_stack);
        pcre2_match_context_free(context);
        pcre2_match_data_free(data);
    }
};

MatchScratch& match_scratch() {
    thread_local MatchScratch scratch;
    return scratch;
}

}  // namespace

std::string translate_oniguruma_pattern(std::string_view pattern) {
    std::string out;
    out.reserve(pattern.size() + 64);
    bool in_class = false;
    for (size_t i = 0; i < pattern.size(); ++i) {
        const char c = pattern[i];
        if (c == '\\') {
            if (i + 1 >= pattern.size()) fail("pretokenize: pattern ends with a lone backslash: {}", pattern);
            const char e = pattern[++i];
            switch (e) {
                case 's':
                    if (in_class) out.append(kWhiteSpaceRanges);
                    else out.append("[").append(kWhiteSpaceRanges).append("]");
                    break;
                case 'S':
                    if (in_class) fail("pretokenize: \\S inside a character class is not supported: {}", pattern);
                    out.append("[^").append(kWhiteSpaceRanges).append("]");
                    break;
                case 'h':
                case 'H':
                    // Oniguruma: hex digit; PCRE2: horizontal space. Refuse rather than guess.
                    fail("pretokenize: \\{} means different things in Oniguruma and PCRE2: {}", e, pattern);
                default:
                    out.push_back('\\');
                    out.push_back(e);
            }
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            out.push_back(c);
            // A ']' right after '[' or '[^' is a literal in both engines.
            if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
            if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
            continue;
        }
        if (c == '[' && in_class) {
            fail("pretokenize: nested character classes are not supported: {}", pattern);
        }
        if (c == ']' && in_class) in_class = false;
        out.push_back(c);
    }
    return out;
}

class CompiledSplitRule {
public:
    explicit CompiledSplitRule(const SplitRule& rule) : behavior_(rule.behavior), literal_(rule.pattern) {
        if (!rule.is_regex) {
            if (literal_.empty()) fail("pretokenize: empty split string");
            return;
        }
        const std::string translated = translate_oniguruma_pattern(rule.pattern);
        int error = 0;
        PCRE2_SIZE offset = 0;
        pcre2_compile_context* ctx = pcre2_compile_context_create(nullptr);
        pcre2_set_newline(ctx, PCRE2_NEWLINE_LF);  // Oniguruma: '.', '^', '$' know only '\n'
        code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, ctx);
        pcre2_compile_context_free(ctx);
        if (!code_) {
            fail("pretokenize: pattern {} does not compile (as {}) at offset {}: {}", rule.pattern,
                 translated, offset, pcre2_error_text(error));
        }
        // JIT is the fast path; its absence (a PCRE2 built without it) is slower, not wrong.
        jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
    }
    ~CompiledSplitRule() { pcre2_code_free(code_); }
    CompiledSplitRule(const CompiledSplitRule&) = delete;
    CompiledSplitRule& operator=(const CompiledSplitRule&) = delete;

    // Calls on_piece(begin, end) for each piece of text[begin, end) in order.
    template <typename OnPiece>
    void split(std::string_view text, OnPiece&& on_piece) const {
        size_t piece_start = 0;  // start of the text not yet handed out
        size_t search = 0;
        while (search < text.size()) {
            const auto [match_begin, match_end] = find(text, search);
            if (match_begin == std::string_view::npos) break;
            if (match_end == match_begin) {  // empty match: splits nothing, step one character
                search = next_char(text, match_begin);
                continue;
            }
            switch (behavior_) {
                case SplitBehavior::Isolated:
                    if (match_begin > piece_start) on_piece(piece_start, match_begin);
                    on_piece(match_begin, match_end);
                    piece_start = match_end;
                    break;
                case SplitBehavior::Removed:
                    if (match_begin > piece_start) on_piece(piece_start, match_begin);
                    piece_start = match_end;
                    break;
                case SplitBehavior::MergedWithPrevious:
                    on_piece(piece_start, match_end);
                    piece_start = match_end;
                    break;
                case SplitBehavior::MergedWithNext:
                    if (match_begin > piece_start) on_piece(piece_start, match_begin);
                    piece_start = match_begin;
                    break;
            }
            search = match_end;
        }
        if (text.size() > piece_start) on_piece(piece_start, text.size());
    }

private:
    static size_t next_char(std::string_view text, size_t pos) {
        ++pos;
        while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
        return pos;
    }

    std::pair<size_t, size_t> find(std::string_view text, size_t from) const {
        if (!code_) {
            const size_t at = text.find(literal_, from);
            if (at == std::string_view::npos) return {at, at};
            return {at, at + literal_.size()};
        }
        MatchScratch& scratch = match_scratch();
        const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
        // Input was validated (repaired) before it got here, so PCRE2 need not check it again.
        const int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), from, PCRE2_NO_UTF_CHECK,
                                              scratch.data, scratch.context)
                            : pcre2_match(code_, subject, text.size(), from, PCRE2_NO_UTF_CHECK,
                                          scratch.data, scratch.context);
        if (rc == PCRE2_ERROR_NOMATCH) return {std::string_view::npos, std::string_view::npos};
        if (rc < 0) fail("pretokenize: matching at byte {}: {}", from, pcre2_error_text(rc));
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.data);
        return {ovector[0], ovector[1]};
    }

    SplitBehavior behavior_;
    std::string literal_;
    pcre2_code* code_ = nullptr;
    bool jit_ = false;
};

Pretokenizer::Pretokenizer(std::vector<SplitRule> rules) {
    for (const SplitRule& rule : rules) rules_.push_back(std::make_unique<CompiledSplitRule>(rule));
}
Pretokenizer::~Pretokenizer() = default;
Pretokenizer::Pretokenizer(Pretokenizer&&) noexcept = default;
Pretokenizer& Pretokenizer::operator=(Pretokenizer&&) noexcept = default;

void Pretokenizer::split_from(size_t rule, std::string_view text, const PieceSink& sink) const {
    if (rule == rules_.size()) {
        sink(text);
        return;
    }
    rules_[rule]->split(text, [&](size_t b, size_t e) { split_from(rule + 1, text.substr(b, e - b), sink); });
}

}  // namespace deltabit::text
