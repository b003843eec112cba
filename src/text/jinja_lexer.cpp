#include "text/jinja_lexer.h"

#include "text/jinja_pystr.h"
#include "text/unicode.h"

#include <algorithm>

namespace deltabit::text::jinja {

namespace {

// jinja2 first rewrites every line break to \n, then drops one trailing line break.
std::string normalize_newlines(std::string_view source, bool keep_trailing_newline) {
    std::string out;
    out.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
        if (source[i] == '\r') {
            out += '\n';
            if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
        } else {
            out += source[i];
        }
    }
    if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Python's str.rstrip() / lstrip() on UTF-8: whitespace by str.isspace().
size_t rstrip_end(std::string_view s) {
    size_t end = s.size();
    while (end > 0) {
        size_t start = end - 1;
        while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        if (!pystr::is_space(utf8_decode(s, start).code_point)) break;
        end = start;
    }
    return end;
}

size_t skip_whitespace(std::string_view s, size_t pos) {
    while (pos < s.size()) {
        DecodedCodePoint d = utf8_decode(s, pos);
        if (!pystr::is_space(d.code_point)) break;
        pos += d.length;
    }
    return pos;
}

class Lexer {
public:
    Lexer(std::string_view source, const LexerOptions& options)
        : src_(normalize_newlines(source, options.keep_trailing_newline)), options_(options) {
        line_starts_.push_back(0);
        for (size_t i = 0; i < src_.size(); ++i)
            if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }

    std::vector<Token> run() {
        size_t pos = 0;
        bool line_starting = true;  // the previous token ended a line (jinja2's `line_starting`)
        while (pos < src_.size()) {
            size_t tag = find_tag(pos);
            std::string_view text(src_.data() + pos, (tag == std::string_view::npos ? src_.size() : tag) - pos);
            if (tag == std::string_view::npos) {
                emit_text(text, pos);
                break;
            }
            char kind = src_[tag + 1];
            char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
            if (sign == '-') {
                text = text.substr(0, rstrip_end(text));
            } else if (sign != '+' && options_.lstrip_blocks && kind != '{') {
                size_t line_begin = text.rfind('\n');
                line_begin = line_begin == std::string_view::npos ? 0 : line_begin + 1;
                bool at_line_start = line_begin > 0 || line_starting;
                std::string_view tail = text.substr(line_begin);
                if (at_line_start && !tail.empty() && skip_whitespace(tail, 0) == tail.size())
                    text = text.substr(0, line_begin);
            }
            emit_text(text, pos);
            size_t body = tag + 2 + (sign == '-' || sign == '+' ? 1 : 0);
            if (kind == '#')
                pos = lex_comment(tag, body);
            else if (kind == '%' && is_raw_block(body))
                pos = lex_raw(tag, body);
            else
                pos = lex_tag(tag, body, kind == '%');
            line_starting = pos > 0 && src_[pos - 1] == '\n';
        }
        tokens_.push_back(Token{Token::Kind::End, "", position(src_.size())});
        return std::move(tokens_);
    }

private:
    // Tokens are made front to back, so each position continues from the previous one: counting
    // columns from the line start every time is quadratic on a long line.
    SourcePosition position(size_t offset) const {
        offset = std::min(offset, src_.size());
        if (offset < last_offset_) {
            auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
            last_offset_ = *(it - 1);
            last_position_ = SourcePosition{static_cast<int>(it - line_starts_.begin()), 1};
        }
        for (; last_offset_ < offset; ++last_offset_) {
            char c = src_[last_offset_];
            if (c == '\n') {
                ++last_position_.line;
                last_position_.column = 1;
            } else if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) {
                ++last_position_.column;
            }
        }
        return last_position_;
    }

    [[noreturn]] void fail_at(size_t offset, const std::string& message) const {
        throw TemplateError(position(offset), message, TemplateError::Origin::Syntax);
    }

    size_t find_tag(size_t from) const {
        for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
            if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
        }
        return std::string_view::npos;
    }

    void emit_text(std::string_view text, size_t offset) {
        if (!text.empty()) tokens_.push_back(Token{Token::Kind::Text, std::string(text), position(offset)});
    }

    // After a closing `%}` / `#}`: trim_blocks drops one newline. After `-%}` etc. all whitespace goes.
    size_t after_close(size_t pos, bool strip) const {
        if (strip) return skip_whitespace(src_, pos);
        if (options_.trim_blocks && pos < src_.size() && src_[pos] == '\n') return pos + 1;
        return pos;
    }

    size_t lex_comment(size_t tag, size_t body) {
        size_t close = src_.find("#}", body);
        if (close == std::string::npos) fail_at(tag, "missing end of comment tag");
        bool strip = close > body && src_[close - 1] == '-';
        return after_close(close + 2, strip);
    }

    bool is_raw_block(size_t body) const {
        size_t p = skip_whitespace(src_, body);
        if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3]))) return false;
        p = skip_whitespace(src_, p + 3);
        if (p < src_.size() && src_[p] == '-') ++p;
        return src_.compare(p, 2, "%}") == 0;
    }

    size_t lex_raw(size_t tag, size_t body) {
        size_t p = skip_whitespace(src_, body) + 3;
        p = skip_whitespace(src_, p);
        bool strip_open = src_[p] == '-';
        p = after_close(p + (strip_open ? 3 : 2), strip_open);
        // Find `{%[-+]? endraw [-]?%}`.
        for (size_t at = src_.find("{%", p); at != std::string::npos; at = src_.find("{%", at + 2)) {
            size_t q = at + 2;
            bool strip_before = q < src_.size() && src_[q] == '-';
            if (strip_before || (q < src_.size() && src_[q] == '+')) ++q;
            q = skip_whitespace(src_, q);
            if (src_.compare(q, 6, "endraw") != 0) continue;
            q = skip_whitespace(src_, q + 6);
            bool strip_after = q < src_.size() && src_[q] == '-';
            if (strip_after) ++q;
            if (src_.compare(q, 2, "%}") != 0) continue;
            std::string_view data(src_.data() + p, at - p);
            if (strip_before) data = data.substr(0, rstrip_end(data));
            emit_text(data, p);
            return after_close(q + 2, strip_after);
        }
        fail_at(tag, "missing {% endraw %} for this {% raw %}");
    }

    size_t lex_tag(size_t tag, size_t body, bool is_block) {
        tokens_.push_back(Token{is_block ? Token::Kind::BlockBegin : Token::Kind::VarBegin, "", position(tag)});
        std::vector<char> balance;  // open brackets: an end tag only counts when all are closed
        size_t p = body;
        while (true) {
            p = skip_whitespace(src_, p);
            if (p >= src_.size())
                fail_at(tag, is_block ? "unexpected end of template: missing '%}'" : "unexpected end of template: missing '}}'");
            if (balance.empty()) {
                std::string_view close = is_block ? "%}" : "}}";
                bool dash = src_[p] == '-' && src_.compare(p + 1, 2, close) == 0;
                if (dash || src_.compare(p, 2, close) == 0) {
                    tokens_.push_back(Token{is_block ? Token::Kind::BlockEnd : Token::Kind::VarEnd, "", position(p)});
                    size_t after = p + (dash ? 3 : 2);
                    return is_block ? after_close(after, dash) : (dash ? skip_whitespace(src_, after) : after);
                }
            }
            p = lex_expression_token(p, balance);
        }
    }

    size_t lex_expression_token(size_t p, std::vector<char>& balance) {
        char c = src_[p];
        if (c == '\'' || c == '"') return lex_string(p);
        if (is_digit(c)) return lex_number(p);
        if (is_name_start(c)) {
            size_t end = p;
            while (end < src_.size() && is_name_char(src_[end])) ++end;
            tokens_.push_back(Token{Token::Kind::Name, src_.substr(p, end - p), position(p)});
            return end;
        }
        static constexpr std::string_view kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*",
                                                          "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=",
                                                          ".", ":", "|", ",", ";"};
        for (std::string_view op : kOperators) {
            if (src_.compare(p, op.size(), op) != 0) continue;
            if (op == "(" || op == "[" || op == "{") {
                balance.push_back(op[0]);
            } else if (op == ")" || op == "]" || op == "}") {
                char expected = op == ")" ? '(' : op == "]" ? '[' : '{';
                if (balance.empty() || balance.back() != expected)
                    fail_at(p, "unexpected '" + std::string(op) + "'");
                balance.pop_back();
            }
            tokens_.push_back(Token{Token::Kind::Operator, std::string(op), position(p)});
            return p + op.size();
        }
        fail_at(p, "unexpected character '" + std::string(1, c) + "'");
    }

    size_t lex_number(size_t p) {
        size_t start = p;
        auto digits = [&](size_t q) {  // digits with single underscores between them, as Python allows
            while (q < src_.size() && (is_digit(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() && is_digit(src_[q + 1]))))
                ++q;
            return q;
        };
        p = digits(p);
        bool is_float = false;
        // "a.0.1" is item access, not a float: jinja2 refuses a float right after a dot.
        bool after_dot = !tokens_.empty() && tokens_.back().kind == Token::Kind::Operator && tokens_.back().value == ".";
        if (!after_dot && p + 1 < src_.size() && src_[p] == '.' && is_digit(src_[p + 1])) {
            p = digits(p + 1);
            is_float = true;
        }
        if (!after_dot && p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
            size_t q = p + 1;
            if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
            if (q < src_.size() && is_digit(src_[q])) {
                p = digits(q);
                is_float = true;
            }
        }
        std::string text = src_.substr(start, p - start);
        text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
        tokens_.push_back(Token{is_float ? Token::Kind::Float : Token::Kind::Integer, text, position(start)});
        return p;
    }

    // Python string literal escapes (jinja2 decodes them with the unicode-escape codec); an unknown
    // escape keeps its backslash, as Python does.
    size_t lex_string(size_t start) {
        char quote = src_[start];
        std::string value;
        size_t p = start + 1;
        while (true) {
            if (p >= src_.size()) fail_at(start, "unterminated string literal");
            char c = src_[p];
            if (c == quote) break;
            if (c != '\\') {
                value += c;
                ++p;
                continue;
            }
            if (p + 1 >= src_.size()) fail_at(start, "unterminated string literal");
            char e = src_[p + 1];
            p += 2;
            switch (e) {
                case 'n': value += '\n'; break;
                case 't': value += '\t'; break;
                case 'r': value += '\r'; break;
                case 'b': value += '\b'; break;
                case 'f': value += '\f'; break;
                case 'v': value += '\v'; break;
                case 'a': value += '\a'; break;
                case '\\': value += '\\'; break;
                case '\'': value += '\''; break;
                case '"': value += '"'; break;
                case '\n': break;  // line continuation
                case 'x':
                case 'u':
                case 'U': {
                    size_t width = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                    if (p + width > src_.size()) fail_at(p - 2, "truncated \\" + std::string(1, e) + " escape");
                    uint32_t cp = 0;
                    for (size_t i = 0; i < width; ++i) {
                        char h = src_[p + i];
                        int digit = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
                        if (digit < 0) fail_at(p - 2, "truncated \\" + std::string(1, e) + " escape");
                        cp = cp * 16 + static_cast<uint32_t>(digit);
                    }
                    if (cp > 0x10FFFF) fail_at(p - 2, "illegal Unicode character in escape");
                    utf8_append(value, static_cast<char32_t>(cp));
                    p += width;
                    break;
                }
                default:
                    if (e >= '0' && e <= '7') {
                        uint32_t cp = static_cast<uint32_t>(e - '0');
                        for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i, ++p)
                            cp = cp * 8 + static_cast<uint32_t>(src_[p] - '0');
                        utf8_append(value, static_cast<char32_t>(cp));
                    } else {
                        value += '\\';
                        value += e;
                    }
            }
        }
        tokens_.push_back(Token{Token::Kind::String, std::move(value), position(start)});
        return p + 1;
    }

    std::string src_;
    LexerOptions options_;
    std::vector<size_t> line_starts_;
    std::vector<Token> tokens_;
    mutable size_t last_offset_ = 0;
    mutable SourcePosition last_position_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
    return Lexer(source, options).run();
}

}  // namespace deltabit::text::jinja
