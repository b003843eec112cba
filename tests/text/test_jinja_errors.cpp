// Errors of the Jinja interpreter name the template line and column (1-based, columns in code
// points) of the token at fault. Positions below are counted by hand from the template text.
#include "test_jinja_helpers.h"

#include <gtest/gtest.h>

namespace deltabit::text::jinja {
namespace {

using json = nlohmann::ordered_json;
using testing::render;

struct Caught {
    std::string what;
    int line = 0;
    int column = 0;
    TemplateError::Origin origin = TemplateError::Origin::Syntax;
};

Caught error_of(std::string_view source, const json& vars = json::object()) {
    try {
        render(source, vars);
    } catch (const TemplateError& e) {
        return Caught{e.what(), e.position().line, e.position().column, e.origin()};
    }
    ADD_FAILURE() << "no error for: " << source;
    return {};
}

TEST(JinjaErrors, UnknownFilterIsRefusedAtParseTimeWithItsPosition) {
    // Line 2: "{{ x | frobnicate }}" — the filter name starts at column 8.
    Caught e = error_of("first line\n{{ x | frobnicate }}");
    EXPECT_EQ(e.what, "template line 2, column 8: unknown filter 'frobnicate'");
    EXPECT_EQ(e.origin, TemplateError::Origin::Syntax);
    // Even in a branch that never runs: jinja2 resolves filters when it compiles.
    EXPECT_EQ(error_of("{% if false %}{{ x | nope }}{% endif %}").what, "template line 1, column 22: unknown filter 'nope'");
}

TEST(JinjaErrors, SyntaxErrors) {
    EXPECT_EQ(error_of("{% if x is frob %}{% endif %}").what, "template line 1, column 12: unknown test 'frob'");
    EXPECT_EQ(error_of("{% if x %}abc").what, "template line 1, column 14: unexpected end of template, expected 'endif'");
    EXPECT_EQ(error_of("{{ x $ y }}").what, "template line 1, column 6: unexpected character '$'");
    EXPECT_EQ(error_of("{{ 'abc }}").what, "template line 1, column 4: unterminated string literal");
    EXPECT_EQ(error_of("a\n\n  {% include 'x' %}").what, "template line 3, column 6: 'include' is not supported in chat templates");
    EXPECT_EQ(error_of("{% break %}").what, "template line 1, column 4: 'break' outside of a loop");
    EXPECT_EQ(error_of("{% endfor %}").what, "template line 1, column 4: unexpected 'endfor'");
    EXPECT_EQ(error_of("{{ (1 }}").what, "template line 1, column 7: unexpected '}'");
    EXPECT_EQ(error_of("{{ }}").what, "template line 1, column 4: expected an expression, got '}}'");
    // Columns count characters, not bytes: 'é' is two bytes and one column.
    EXPECT_EQ(error_of("é{{ x | bad }}").what, "template line 1, column 9: unknown filter 'bad'");
}

TEST(JinjaErrors, RuntimeErrorsPointAtTheOperation) {
    Caught plus = error_of("{{ 1 + 'a' }}");
    EXPECT_EQ(plus.what, "template line 1, column 6: unsupported operand type(s) for +: 'int' and 'str'");
    EXPECT_EQ(plus.origin, TemplateError::Origin::Runtime);
    EXPECT_EQ(error_of("{{ 'a' + 1 }}").what, "template line 1, column 8: can only concatenate str (not \"int\") to str");
    // Using an undefined value (not just testing or printing it) is an error, as in jinja2.
    EXPECT_EQ(error_of("{{ foo.bar }}").what, "template line 1, column 8: 'foo' is undefined");
    EXPECT_EQ(error_of("{{ m.role.upper() }}", {{"m", json::object()}}).what,
              "template line 1, column 11: 'dict object' has no attribute 'role'");
    EXPECT_EQ(error_of("{{ nope() }}").what, "template line 1, column 4: 'nope' is undefined");
    EXPECT_EQ(error_of("{% for x in 5 %}{% endfor %}").what, "template line 1, column 13: 'int' object is not iterable");
    EXPECT_EQ(error_of("{{ 1 // 0 }}").what, "template line 1, column 6: integer division or modulo by zero");
    EXPECT_EQ(error_of("{{ x | tojson }}").what, "template line 1, column 8: Object of type undefined is not JSON serializable");
    EXPECT_EQ(error_of("{% set x.y = 1 %}", {{"x", 1}}).what,
              "template line 1, column 4: cannot assign attribute on non-namespace object 'x'");
}

TEST(JinjaErrors, ErrorsInsideMacrosPointIntoTheMacro) {
    Caught e = error_of("{% macro m(v) %}\n  {{ v.missing.deeper }}\n{% endmacro %}{{ m({}) }}");
    EXPECT_EQ(e.line, 2);
    EXPECT_EQ(e.column, 16);  // "  {{ v.missing.deeper": taking 'deeper' of the undefined v.missing fails
    EXPECT_EQ(e.what, "template line 2, column 16: 'dict object' has no attribute 'missing'");
}

TEST(JinjaErrors, RaiseExceptionIsAnInputRefusal) {
    Caught e = error_of("{% if messages | length == 0 %}\n  {{ raise_exception('No messages provided.') }}\n{% endif %}",
                        {{"messages", json::array()}});
    EXPECT_EQ(e.what, "template line 2, column 6: No messages provided.");
    EXPECT_EQ(e.origin, TemplateError::Origin::RaisedByTemplate);
}

TEST(JinjaErrors, DeepNestingIsRefusedNotAStackOverflow) {
    std::string deep = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
    EXPECT_NE(error_of(deep).what.find("template nests deeper than 256 levels"), std::string::npos);
    std::string minus = "{{ " + std::string(100000, '-') + "1 }}";
    EXPECT_NE(error_of(minus).what.find("template nests deeper than 256 levels"), std::string::npos);
    std::string ifs;
    for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
    EXPECT_NE(error_of(ifs).what.find("template nests deeper than 256 levels"), std::string::npos);
    // Fifty levels, more than any real template, are fine.
    EXPECT_EQ(render("{{ " + std::string(50, '(') + "7" + std::string(50, ')') + " }}"), "7");
}

TEST(JinjaErrors, IntegersPast64BitsAndHugeRepetitionsAreRefused) {
    EXPECT_EQ(error_of("{{ 9223372036854775807 + 1 }}").what,
              "template line 1, column 24: integer overflow in + (values past 64 bits are not supported)");  // 19 digits end at 22
    EXPECT_EQ(error_of("{{ 2 ** 64 }}").what, "template line 1, column 6: integer overflow in ** (values past 64 bits are not supported)");
    EXPECT_EQ(render("{{ 2 ** 62 }}"), "4611686018427387904");
    EXPECT_NE(error_of("{{ 'ab' * 100000000 }}").what.find("repetition would make"), std::string::npos);
}

TEST(JinjaErrors, RunawayRecursionAndRangeAreBounded) {
    EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").what.find("maximum macro call depth"), std::string::npos);
    RenderOptions small;
    small.max_range_length = 10;
    try {
        render("{{ range(11) | length }}", json::object(), small);
        ADD_FAILURE() << "range(11) should exceed the limit of 10";
    } catch (const TemplateError& e) {
        EXPECT_EQ(std::string(e.what()), "template line 1, column 4: range() longer than 10 items");
    }
    EXPECT_EQ(render("{{ range(10) | length }}", json::object(), small), "10");
}

}  // namespace
}  // namespace deltabit::text::jinja
