// Statements and whitespace control of the Jinja interpreter, on hand-written templates whose
// expected output is worked out by hand from jinja2's rules (HF settings: trim_blocks,
// lstrip_blocks, no trailing newline).
#include "test_jinja_helpers.h"

#include <gtest/gtest.h>

namespace deltabit::text::jinja {
namespace {

using json = nlohmann::ordered_json;
using testing::render;

TEST(JinjaStatements, TextAndOutput) {
    EXPECT_EQ(render("plain text"), "plain text");
    EXPECT_EQ(render("a{{ x }}b", {{"x", "X"}}), "aXb");
    EXPECT_EQ(render("{{ 1 }}{{ 'two' }}{{ 3.5 }}"), "1two3.5");
    // Python's str(): True/False/None, and lists/dicts as their repr.
    EXPECT_EQ(render("{{ true }} {{ none }} {{ x }}", {{"x", json::array({1, "a", nullptr})}}), "True None [1, 'a', None]");
    EXPECT_EQ(render("{{ d }}", {{"d", {{"k", "v"}, {"n", false}}}}), "{'k': 'v', 'n': False}");
    EXPECT_EQ(render("[{{ missing }}]"), "[]");  // undefined prints as nothing
}

TEST(JinjaStatements, IfElifElse) {
    const char* t = "{% if n > 2 %}big{% elif n == 2 %}two{% elif n %}small{% else %}zero{% endif %}";
    EXPECT_EQ(render(t, {{"n", 5}}), "big");
    EXPECT_EQ(render(t, {{"n", 2}}), "two");
    EXPECT_EQ(render(t, {{"n", 1}}), "small");
    EXPECT_EQ(render(t, {{"n", 0}}), "zero");
    // Python truthiness: empty containers and strings are false, undefined is false.
    EXPECT_EQ(render("{% if [] %}a{% endif %}{% if {} %}b{% endif %}{% if '' %}c{% endif %}{% if u %}d{% endif %}x"), "x");
}

TEST(JinjaStatements, ForLoopVariables) {
    const char* t = "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                    "{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}";
    EXPECT_EQ(render(t, {{"xs", {"a", "b", "c"}}}),
              "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|");
    EXPECT_EQ(render("{% for x in xs %}{{ loop.previtem }}>{{ x }}<{{ loop.nextitem }} {% endfor %}", {{"xs", {1, 2, 3}}}),
              ">1<2 1>2<3 2>3< ");
    EXPECT_EQ(render("{% for x in xs %}{{ loop.cycle('o', 'e') }}{% endfor %}", {{"xs", {1, 2, 3}}}), "oeo");
}

TEST(JinjaStatements, ForOverDictsStringsAndTuples) {
    EXPECT_EQ(render("{% for k in d %}{{ k }};{% endfor %}", {{"d", {{"b", 1}, {"a", 2}}}}), "b;a;");  // insertion order
    EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"b", 1}, {"a", 2}}}}), "b=1;a=2;");
    EXPECT_EQ(render("{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"x", "y"}}}}), "x=y;");
    EXPECT_EQ(render("{% for c in 'héllo' %}[{{ c }}]{% endfor %}"), "[h][é][l][l][o]");  // code points
    EXPECT_EQ(render("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }} {% endfor %}"), "3 7 ");
    EXPECT_EQ(render("{% for x in undefined_thing %}x{% endfor %}done"), "done");  // jinja2's Undefined is empty
}

TEST(JinjaStatements, ForElseAndFilter) {
    EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
    EXPECT_EQ(render("{% for x in [1] %}x{% else %}empty{% endfor %}"), "x");
    // The `if` filter drops items before the loop counts them, so loop.length and loop.last see 2.
    EXPECT_EQ(render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}/{{ loop.length }}{{ '.' if loop.last }} {% endfor %}"),
              "2/2 4/2. ");
    EXPECT_EQ(render("{% for x in [1, 3] if x is even %}x{% else %}none even{% endfor %}"), "none even");
}

TEST(JinjaStatements, BreakAndContinue) {
    EXPECT_EQ(render("{% for x in [1, 2, 3, 4] %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "12");
    EXPECT_EQ(render("{% for x in [1, 2, 3, 4] %}{% if x is odd %}{% continue %}{% endif %}{{ x }}{% endfor %}"), "24");
    // jinja2 runs the else block when no iteration reached the end of its body: so also when every
    // item continued, or when the first iteration broke out.
    EXPECT_EQ(render("{% for x in [1] %}{% continue %}{% else %}else{% endfor %}end"), "elseend");
    EXPECT_EQ(render("{% for x in [1, 2] %}{{ x }}{% break %}{% else %}else{% endfor %}end"), "1elseend");
    EXPECT_EQ(render("{% for x in [1, 2] %}{% if x == 1 %}{% continue %}{% endif %}{% else %}else{% endfor %}end"), "end");
}

TEST(JinjaStatements, SetScopingAndNamespace) {
    // A set inside a loop does not survive the iteration (jinja2 scoping) ...
    EXPECT_EQ(render("{% set n = 0 %}{% for x in [1, 2] %}{% set n = n + x %}{% endfor %}{{ n }}"), "0");
    // ... which is what namespace() is for.
    EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for x in [1, 2] %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}"), "3");
    // Each iteration starts fresh: the value set in the first is not seen by the second.
    EXPECT_EQ(render("{% for x in [1, 2] %}{{ y is defined }}{% set y = x %}{% endfor %}"), "FalseFalse");
    EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
    EXPECT_EQ(render("{% set t = 1, 2 %}{{ t | length }}"), "2");
    EXPECT_EQ(render("{% if true %}{% set z = 'in-if' %}{% endif %}{{ z }}"), "in-if");  // if makes no scope
    EXPECT_EQ(render("{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}"), "12");
}

TEST(JinjaStatements, BlockSet) {
    EXPECT_EQ(render("{% set greeting %}Hello {{ name }}{% endset %}[{{ greeting }}]", {{"name", "Ann"}}), "[Hello Ann]");
    EXPECT_EQ(render("{% set shout | upper %}hi {{ 'there' }}{% endset %}{{ shout }}"), "HI THERE");
}

TEST(JinjaStatements, Macros) {
    EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                     "{{ greet('Ann') }} {{ greet('Bob', '?') }} {{ greet(punct='.', name='Cy') }}"),
              "Hi Ann! Hi Bob? Hi Cy.");
    // A default may use an earlier parameter; a missing argument is undefined.
    EXPECT_EQ(render("{% macro m(a, b=a * 2, c=none) %}{{ a }},{{ b }},{{ c }},{{ d is defined }}{% endmacro %}{{ m(3) }}"),
              "3,6,None,False");
    EXPECT_EQ(render("{% macro m(x) %}{{ x }}{% endmacro %}{{ m() is string }}[{{ m() }}]"), "True[]");
    // Macros see the template's variables, including ones set after the definition.
    EXPECT_EQ(render("{% macro show() %}{{ v }}{% endmacro %}{% set v = 'late' %}{{ show() }}"), "late");
    // A macro result goes through filters like any string.
    EXPECT_EQ(render("{% macro pad() %}  x  {% endmacro %}[{{ pad() | trim }}]"), "[x]");
    EXPECT_EQ(render("{% macro f() %}{{ varargs | length }}{{ kwargs.k }}{% endmacro %}{{ f(1, 2, k='v') }}"), "2v");
}

TEST(JinjaStatements, CallBlock) {
    EXPECT_EQ(render("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
                     "{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}"),
              "<b>bold 2</b>");
    EXPECT_EQ(render("{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
                     "{% call(item) each([1, 2]) %}[{{ item }}]{% endcall %}"),
              "[1][2]");
}

TEST(JinjaStatements, FilterBlockAndRawAndComments) {
    EXPECT_EQ(render("{% filter upper %}abc {{ 'd' }}{% endfilter %}"), "ABC D");
    EXPECT_EQ(render("{% raw %}{{ not rendered }}{% endraw %}"), "{{ not rendered }}");
    EXPECT_EQ(render("a{# comment {{ x }} #}b"), "ab");
    EXPECT_EQ(render("{% generation %}kept{% endgeneration %}"), "kept");
}

TEST(JinjaWhitespace, DashesStripAllWhitespaceIncludingNewlines) {
    EXPECT_EQ(render("a  \n  {{- 'b' -}}  \n  c"), "abc");
    EXPECT_EQ(render("a \n {%- if true -%} \n b \n {%- endif -%} \n c"), "abc");
    EXPECT_EQ(render("a \n{#- comment -#}\n b"), "ab");
}

TEST(JinjaWhitespace, TrimBlocksDropsOneNewlineAfterABlockTag) {
    // trim_blocks removes the newline after %} (one), never after }}.
    EXPECT_EQ(render("{% if true %}\nyes\n{% endif %}\nafter"), "yes\nafter");
    EXPECT_EQ(render("{% if true %}\n\nyes{% endif %}"), "\nyes");
    EXPECT_EQ(render("{{ 'x' }}\ny"), "x\ny");
    EXPECT_EQ(render("{# c #}\nz"), "z");
}

TEST(JinjaWhitespace, LstripBlocksRemovesIndentBeforeBlockTagsOnly) {
    // Indentation before {% on its own line goes; before {{ it stays; `{%+` keeps it.
    EXPECT_EQ(render("  {% if true %}\n    x\n  {% endif %}\n"), "    x\n");
    EXPECT_EQ(render("  {{ 'v' }}"), "  v");
    EXPECT_EQ(render("  {%+ if true %}y{% endif %}"), "  y");
    // Not at the start of a line: text before the tag on the same line is kept.
    EXPECT_EQ(render("a  {% if true %}b{% endif %}"), "a  b");
}

TEST(JinjaWhitespace, TrailingNewlineAndLineEndings) {
    EXPECT_EQ(render("x\n"), "x");          // keep_trailing_newline=False drops one ...
    EXPECT_EQ(render("x\n\n"), "x\n");      // ... and only one
    EXPECT_EQ(render("a\r\nb\rc"), "a\nb\nc");  // line breaks are normalised to \n
}

TEST(JinjaWhitespace, RealTemplateIdiom) {
    // The shape of Qwen's templates: every tag is dashed, so only the quoted text is output.
    const char* t =
        "{%- for m in messages %}\n"
        "    {%- if m.role == 'user' %}\n"
        "        {{- '<|im_start|>user\\n' + m.content + '<|im_end|>\\n' }}\n"
        "    {%- endif %}\n"
        "{%- endfor %}\n";
    json vars = {{"messages", {{{"role", "user"}, {"content", "Hi"}}, {{"role", "system"}, {"content", "S"}}}}};
    EXPECT_EQ(render(t, vars), "<|im_start|>user\nHi<|im_end|>\n");
}

}  // namespace
}  // namespace deltabit::text::jinja
