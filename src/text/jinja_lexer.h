// Jinja lexer: template text -> tokens, with jinja2's whitespace rules applied here so that the
// parser never sees them.
//
// Hugging Face compiles chat templates with trim_blocks=True and lstrip_blocks=True and the default
// keep_trailing_newline=False, so those are the defaults:
//   - line breaks \r\n and \r become \n, and one trailing line break of the template is dropped;
//   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag, `-%}`, `-}}`, `-#}` all after it;
//   - trim_blocks: the first \n after `%}` or `#}` is dropped;
//   - lstrip_blocks: spaces before `{%` or `{#` are dropped when only whitespace precedes the tag on
//     its line (`{%+` keeps them); `{{` is never lstripped.
// `{% raw %}...{% endraw %}` comes out as one text token.
#pragma once

#include "text/jinja_error.h"

#include <string>
#include <string_view>
#include <vector>

namespace deltabit::text::jinja {

struct Token {
    enum class Kind {
        Text,        // template data between tags
        VarBegin,    // {{
        VarEnd,      // }}
        BlockBegin,  // {%
        BlockEnd,    // %}
        Name,
        String,      // value holds the decoded string
        Integer,
        Float,
        Operator,    // value holds the operator: "+", "//", "==", "(", "|", ...
        End,
    };
    Kind kind = Kind::End;
    std::string value;
    SourcePosition position;
};

struct LexerOptions {
    bool trim_blocks = true;
    bool lstrip_blocks = true;
    bool keep_trailing_newline = false;
};

// Throws TemplateError (Origin::Syntax) with the position of the offending character.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});

}  // namespace deltabit::text::jinja
