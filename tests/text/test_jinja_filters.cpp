// Filters of the Jinja interpreter, tojson above all: chat templates serialise tool definitions
// and tool-call arguments with it, and a byte of difference there changes the prompt.
// Expected strings are what Python's json.dumps / jinja2 filters produce, written out by hand.
#include "test_jinja_helpers.h"

#include <gtest/gtest.h>

namespace deltabit::text::jinja {
namespace {

using json = nlohmann::ordered_json;
using testing::render;

TEST(JinjaToJson, DefaultLayoutIsJsonDumps) {
    // json.dumps: ", " between items, ": " after keys, keys in insertion order, non-ASCII kept.
    json vars = {{"v", {{"name", "get_weather"}, {"args", {{"city", "Zürich"}, {"days", 3}, {"units", nullptr}}},
                        {"flags", {true, false}}, {"ratio", 0.25}}}};
    EXPECT_EQ(render("{{ v | tojson }}", vars),
              R"({"name": "get_weather", "args": {"city": "Zürich", "days": 3, "units": null}, "flags": [true, false], "ratio": 0.25})");
    EXPECT_EQ(render("{{ [] | tojson }}{{ {} | tojson }}{{ 'a\"b\\\\c\\n' | tojson }}"), R"([]{}"a\"b\\c\n")");
    EXPECT_EQ(render("{{ s | tojson }}", {{"s", std::string("tab\tnul\x01")}}), R"("tab\tnul\u0001")");
}

TEST(JinjaToJson, KeyOrderIsInsertionOrderEvenForNumericKeys) {
    // Python keeps dict order; a JS object would move "2" and "1" to the front.
    json vars = json::parse(R"({"v": {"b": 1, "2": 2, "1": 3}})", nullptr, true, false);
    EXPECT_EQ(render("{{ v | tojson }}", vars), R"({"b": 1, "2": 2, "1": 3})");
}

TEST(JinjaToJson, Indent) {
    json vars = {{"v", {{"a", {1, 2}}, {"b", json::object()}, {"c", json::array()}}}};
    EXPECT_EQ(render("{{ v | tojson(indent=2) }}", vars),
              "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {},\n  \"c\": []\n}");
    // indent=0 still breaks lines (json.dumps), with no spaces.
    EXPECT_EQ(render("{{ [1, 2] | tojson(indent=0) }}"), "[\n1,\n2\n]");
}

TEST(JinjaToJson, SortKeysEnsureAsciiSeparators) {
    json vars = {{"v", {{"b", 1}, {"a", "é😀"}, {"B", 2}}}};
    // Code point order: uppercase before lowercase.
    EXPECT_EQ(render("{{ v | tojson(sort_keys=true) }}", vars), R"({"B": 2, "a": "é😀", "b": 1})");
    EXPECT_EQ(render("{{ v | tojson(ensure_ascii=true) }}", vars), R"({"b": 1, "a": "\u00e9\ud83d\ude00", "B": 2})");
    EXPECT_EQ(render("{{ v | tojson(separators=(',', ':')) }}", vars), R"({"b":1,"a":"é😀","B":2})");
    // HF's tojson takes ensure_ascii as its first positional argument.
    EXPECT_EQ(render("{{ 'é' | tojson(true) }}"), R"("\u00e9")");
}

TEST(JinjaToJson, FloatsUsePythonRepr) {
    EXPECT_EQ(render("{{ [1.0, 0.1, 1e16, 1.5e-7, -0.0] | tojson }}"), "[1.0, 0.1, 1e+16, 1.5e-07, -0.0]");
}

TEST(JinjaFilters, Strings) {
    EXPECT_EQ(render("[{{ '  a b \n' | trim }}][{{ 'xxaxx' | trim('x') }}]"), "[a b][a]");
    EXPECT_EQ(render("{{ 'héllo' | length }} {{ 'héllo' | upper }} {{ 'ÀB' | lower }} {{ 'a b' | title }} {{ 'aB' | capitalize }}"),
              "5 HÉLLO àb A B Ab");
    EXPECT_EQ(render("{{ 'a-b-c' | replace('-', '+') }} {{ 'a-b-c' | replace('-', '', 1) }}"), "a+b+c ab-c");
    EXPECT_EQ(render("{{ 'abc' | reverse }} {{ 'abc' | list }} {{ 'a b  c' | wordcount }}"), "cba ['a', 'b', 'c'] 3");
    EXPECT_EQ(render("{{ '<a href=\"x\">&' | e }}"), "&lt;a href=&#34;x&#34;&gt;&amp;");
    EXPECT_EQ(render("{{ 'line1\nline2\n\nline4' | indent(2) }}"), "line1\n  line2\n\n  line4");
    EXPECT_EQ(render("{{ 'a\nb' | indent(2, true) }}"), "  a\n  b");
}

TEST(JinjaFilters, ConversionsAndDefaults) {
    EXPECT_EQ(render("{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ -3.9 | int }} {{ true | int }}"),
              "42 4 0 7 -3 1");
    EXPECT_EQ(render("{{ '2.5' | float }} {{ 3 | float }} {{ 'x' | float }}"), "2.5 3.0 0.0");
    EXPECT_EQ(render("{{ 3 | string }}{{ none | string }}{{ [1] | string }}"), "3None[1]");
    EXPECT_EQ(render("{{ missing | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ none | d('n') }}"),
              "d  d None");
    EXPECT_EQ(render("{{ -2 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 2.1 | round(0, 'ceil') }}"), "2 2.57 2.0 3.0");  // Python rounds half to even
}

TEST(JinjaFilters, Sequences) {
    json vars = {{"xs", {3, 1, 2}}, {"words", {"b", "A", "a", "C"}}};
    EXPECT_EQ(render("{{ xs | first }} {{ xs | last }} {{ xs | length }} {{ xs | count }} {{ [] | first is defined }}", vars),
              "3 2 3 3 False");
    EXPECT_EQ(render("{{ xs | sort }} {{ xs | sort(reverse=true) }} {{ xs | min }} {{ xs | max }} {{ xs | sum }}", vars),
              "[1, 2, 3] [3, 2, 1] 1 3 6");
    // Case-insensitive unless asked, and stable: 'A' stays before 'a'.
    EXPECT_EQ(render("{{ words | sort }} {{ words | sort(case_sensitive=true) }} {{ words | unique | list }}", vars),
              "['A', 'a', 'b', 'C'] ['A', 'C', 'a', 'b'] ['b', 'A', 'C']");
    EXPECT_EQ(render("{{ xs | join(', ') }} {{ xs | join }} {{ xs | reverse | list }} {{ [1, none] | join('|') }}", vars),
              "3, 1, 2 312 [2, 1, 3] 1|None");
    EXPECT_EQ(render("{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3] | reject('equalto', 2) | list }}"), "[1, 3] [1, 3]");
    EXPECT_EQ(render("{{ ['a', 'b'] | map('upper') | list }}"), "['A', 'B']");
}

TEST(JinjaFilters, AttributeFilters) {
    json vars = {{"msgs",
                  {{{"role", "system"}, {"content", "s"}},
                   {{"role", "user"}, {"content", "u1"}, {"meta", {{"id", 7}}}},
                   {{"role", "tool"}, {"content", ""}},
                   {{"role", "user"}, {"content", "u2"}}}}};
    EXPECT_EQ(render("{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}", vars),
              "['u1', 'u2']");
    EXPECT_EQ(render("{{ msgs | rejectattr('role', 'in', ['user', 'tool']) | map(attribute='role') | join(',') }}", vars), "system");
    EXPECT_EQ(render("{{ msgs | selectattr('content') | list | length }}", vars), "3");  // truthiness without a test
    EXPECT_EQ(render("{{ msgs | map(attribute='meta.id', default=0) | list }}", vars), "[0, 7, 0, 0]");
    EXPECT_EQ(render("{{ msgs | sort(attribute='content') | map(attribute='role') | first }}", vars), "tool");
}

TEST(JinjaFilters, Mappings) {
    json vars = {{"d", {{"b", 1}, {"a", 2}, {"C", 0}}}};
    EXPECT_EQ(render("{{ d | items | list }}", vars), "[('b', 1), ('a', 2), ('C', 0)]");
    EXPECT_EQ(render("{{ d | dictsort }}", vars), "[('a', 2), ('b', 1), ('C', 0)]");
    EXPECT_EQ(render("{{ d | dictsort(by='value', reverse=true) | first }}", vars), "('a', 2)");
    EXPECT_EQ(render("{{ d | length }} {{ d | list }} {{ missing | items | list }}", vars), "3 ['b', 'a', 'C'] []");
}

}  // namespace
}  // namespace deltabit::text::jinja
