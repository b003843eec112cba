// Expressions of the Jinja interpreter: operators with Python's semantics, precedence, member and
// item access, slicing, str/dict methods and tests. Expected values are Python's answers, worked out
// by hand (and the corners cross-checked against Python jinja2 while writing them).
#include "test_jinja_helpers.h"

#include <gtest/gtest.h>

namespace deltabit::text::jinja {
namespace {

using json = nlohmann::ordered_json;
using testing::render;

TEST(JinjaExpressions, ArithmeticFollowsPython) {
    EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }}"), "3 -4 1 2 -2");
    EXPECT_EQ(render("{{ 7 / 2 }} {{ 6 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }}"), "3.5 3.0 1024 0.5");
    EXPECT_EQ(render("{{ 1 + 2.5 }} {{ 0.1 + 0.2 }} {{ 3 * 1.0 }} {{ 1e16 }} {{ 1e-05 }} {{ 0.0001 }}"),
              "3.5 0.30000000000000004 3.0 1e+16 1e-05 0.0001");
    EXPECT_EQ(render("{{ 'ab' * 3 }}{{ [1] * 2 }}{{ 'x' + 'y' }}{{ [1] + [2] }}"), "ababab[1, 1]xy[1, 2]");
    EXPECT_EQ(render("{{ -x }} {{ +x }} {{ - - 3 }}", {{"x", 4}}), "-4 4 3");
    EXPECT_EQ(render("{{ true + 1 }}"), "2");  // bool is an int in Python
}

TEST(JinjaExpressions, ConcatenationWithTildeUsesStr) {
    EXPECT_EQ(render("{{ 'n=' ~ 3 ~ ', f=' ~ 1.0 ~ ', b=' ~ true ~ ', none=' ~ none ~ ', u=' ~ missing }}"),
              "n=3, f=1.0, b=True, none=None, u=");
}

TEST(JinjaExpressions, PrecedenceMatchesJinja2) {
    // Filters and tests bind tighter than arithmetic; `not` is looser than comparisons.
    EXPECT_EQ(render("{{ 1 + xs | length }}", {{"xs", {1, 2, 3}}}), "4");
    EXPECT_EQ(render("{{ (xs | length) - 1 }}", {{"xs", {1, 2, 3}}}), "2");
    EXPECT_EQ(render("{{ not x is defined }}"), "True");
    EXPECT_EQ(render("{{ not 1 == 2 }}"), "True");
    EXPECT_EQ(render("{{ 2 + 3 * 4 ** 2 }}"), "50");
    EXPECT_EQ(render("{{ 2 * 3 ~ 4 }}"), "64");  // * binds tighter than ~ (else it would repeat '34')
}

TEST(JinjaExpressions, ComparisonsAndMembership) {
    EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 2 == 2.0 }} {{ 1 == true }} {{ '1' == 1 }}"), "True False True True False");
    EXPECT_EQ(render("{{ 'b' > 'a' }} {{ 'Z' < 'a' }} {{ [1, 2] == [1, 2] }} {{ {'a': 1} == {'a': 1} }}"), "True True True True");
    EXPECT_EQ(render("{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in d }} {{ 'v' in d }} {{ 3 not in [1] }}",
                     {{"d", {{"k", "v"}}}}),
              "True True True False True");
    EXPECT_EQ(render("{{ 'a' in missing }}"), "False");
}

TEST(JinjaExpressions, LogicReturnsOperands) {
    EXPECT_EQ(render("{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }}|{{ none or [] }}"), "x b |[]");
    EXPECT_EQ(render("{{ 'yes' if c else 'no' }} {{ 'yes' if not c else 'no' }}", {{"c", true}}), "yes no");
    EXPECT_EQ(render("[{{ 'shown' if false }}]"), "[]");  // no else: undefined, prints nothing
}

TEST(JinjaExpressions, AttributeAndItemAccess) {
    json vars = {{"m", {{"role", "user"}, {"items", "field"}}}, {"xs", {10, 20, 30}}};
    EXPECT_EQ(render("{{ m.role }}{{ m['role'] }}{{ xs[0] }}{{ xs[-1] }}{{ xs.1 }}", vars), "useruser103020");
    // jinja2 looks up the Python attribute first for `.`, the item first for `[]`.
    EXPECT_EQ(render("{{ m['items'] }} {{ m.items is callable }}", vars), "field True");
    EXPECT_EQ(render("{{ m.nope is defined }} {{ xs[7] is defined }} {{ m.get('nope', 'dflt') }} {{ m.get('nope') }}", vars),
              "False False dflt None");
    EXPECT_EQ(render("{{ m.keys() | list }} {{ m.values() | list }}", vars), "['role', 'items'] ['user', 'field']");
}

TEST(JinjaExpressions, SlicingIsByCodePoint) {
    EXPECT_EQ(render("{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[5:] }}", {{"xs", {1, 2, 3}}}),
              "[2, 3] [1, 2] [3, 2, 1] [1, 3] []");
    // "né😀x": 4 code points (7 bytes of UTF-8 in the middle), so slices never split a character.
    EXPECT_EQ(render("{{ s[::-1] }}|{{ s[1:3] }}|{{ s[-2] }}|{{ s | length }}", {{"s", "né😀x"}}), "x😀én|é😀|😀|4");
}

TEST(JinjaExpressions, StringMethods) {
    EXPECT_EQ(render("[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}]", {{"s", " \n a b \t"}}), "[a b][a b \t][ \n a b]");
    // With an argument only those characters go: Qwen3 strips '\n' and keeps the spaces.
    EXPECT_EQ(render("[{{ s.strip('\\n') }}]", {{"s", "\n  x  \n\n"}}), "[  x  ]");
    EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }}"),
              "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c']");
    EXPECT_EQ(render("{{ 'x</think>y</think>z'.split('</think>')[-1] }} {{ 'a.b.c'.rsplit('.', 1) }}"), "z ['a.b', 'c']");
    EXPECT_EQ(render("{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'Hello'.startswith('lo') }}"),
              "True True False");
    EXPECT_EQ(render("{{ 'MiXé'.upper() }} {{ 'MiXÉ'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }}"),
              "MIXÉ mixé Hello World Hello");
    EXPECT_EQ(render("{{ 'aaa'.replace('a', 'b', 2) }} {{ 'ab'.replace('', '-') }} {{ 'a-b'.find('-') }} {{ 'aXa'.count('a') }}"),
              "bba -a-b- 1 2");
    EXPECT_EQ(render("{{ '{} + {} = {total}'.format(1, 2, total=3) }} {{ '-'.join(['a', 'b']) }}"), "1 + 2 = 3 a-b");
}

TEST(JinjaExpressions, Tests) {
    json vars = {{"s", "x"}, {"n", nullptr}, {"i", 3}, {"f", 1.5}, {"l", {1}}, {"d", {{"a", 1}}}, {"b", true}};
    EXPECT_EQ(render("{{ s is string }}{{ i is string }}{{ n is none }}{{ s is not none }}{{ u is undefined }}{{ u is defined }}",
                     vars),
              "TrueFalseTrueTrueTrueFalse");
    EXPECT_EQ(render("{{ d is mapping }}{{ l is mapping }}{{ l is sequence }}{{ s is sequence }}{{ d is sequence }}{{ i is sequence }}",
                     vars),
              "TrueFalseTrueTrueTrueFalse");
    // jinja2's `iterable` is Python's iter(): dicts and strings too, numbers not.
    EXPECT_EQ(render("{{ l is iterable }}{{ d is iterable }}{{ s is iterable }}{{ i is iterable }}", vars), "TrueTrueTrueFalse");
    EXPECT_EQ(render("{{ i is number }}{{ f is number }}{{ s is number }}{{ i is integer }}{{ f is float }}{{ b is boolean }}",
                     vars),
              "TrueTrueFalseTrueTrueTrue");
    EXPECT_EQ(render("{{ b is true }}{{ b is false }}{{ 1 is true }}{{ i is odd }}{{ i is even }}{{ 9 is divisibleby 3 }}", vars),
              "TrueFalseFalseTrueFalseTrue");
    EXPECT_EQ(render("{{ i is equalto 3 }}{{ i is eq(4) }}{{ 1 is in [1, 2] }}{{ 'ab' is lower }}{{ 'aB' is upper }}", vars),
              "TrueFalseTrueTrueFalse");
    EXPECT_EQ(render("{{ range is callable }}{{ s is callable }}{{ n is sameas none }}", vars), "TrueFalseTrue");
}

TEST(JinjaExpressions, Literals) {
    EXPECT_EQ(render("{{ [1, 'two', [3]] }} {{ {'k': [1], 'j': none} }} {{ (1, 2) }} {{ (1,) }} {{ 'con' 'cat' }}"),
              "[1, 'two', [3]] {'k': [1], 'j': None} (1, 2) (1,) concat");
    EXPECT_EQ(render("{{ (1, 2) == [1, 2] }} {{ (1, 2) == (1, 2) }}"), "False True");
    EXPECT_EQ(render("{{ 'it\\'s' }} {{ \"q\\\"q\" }} {{ '\\u00e9\\x41\\t|' }}"), "it's q\"q éA\t|");
    EXPECT_EQ(render("{{ 1_000 }} {{ 2.5e3 }}"), "1000 2500.0");
    EXPECT_EQ(render("{{ True }} {{ False }} {{ None }}"), "True False None");
}

TEST(JinjaExpressions, Globals) {
    EXPECT_EQ(render("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }}"), "[0, 1, 2] [1, 3, 5] [3, 2, 1]");
    EXPECT_EQ(render("{{ dict(a=1) }}"), "{'a': 1}");
    RenderOptions pinned;
    pinned.now = [] {
        std::tm t{};
        t.tm_year = 2026 - 1900;
        t.tm_mon = 2;  // March
        t.tm_mday = 7;
        return t;
    };
    EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d') }}", json::object(), pinned), "2026-03-07");
}

}  // namespace
}  // namespace deltabit::text::jinja
