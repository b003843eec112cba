// The library a template can call: filters (`x | trim`), tests (`x is string`), attribute and item
// access with jinja2's rules (`d.get`, `s.strip()`, `xs[-1]`, `s[::-1]`), and the str and dict
// methods real chat templates use. Everything follows what Python jinja2 does in HF's
// ImmutableSandboxedEnvironment; functions report problems by throwing ValueError, and the
// interpreter adds the template position.
#pragma once

#include "text/jinja_value.h"

#include <optional>
#include <string_view>

namespace deltabit::text::jinja {

using FilterFunction = Value (*)(const Value& operand, const CallArgs& args);
using TestFunction = bool (*)(const Value& operand, const CallArgs& args);

// Null when jinja2 has no such filter / test (or this interpreter does not provide it).
FilterFunction find_filter(std::string_view name);
TestFunction find_test(std::string_view name);

// `object.name`: jinja2 tries the Python attribute first (so `d.items` is the method even when the
// dict has a key "items"), then the item. Missing -> Undefined with jinja2's message as hint.
Value get_attribute(const Value& object, std::string_view name);

// `object[key]`: item first, then (for string keys) the attribute. Python indexing for lists and
// strings (negative indices count from the end); out of range -> Undefined, as jinja2 returns.
Value get_item(const Value& object, const Value& key);

// `object[start:stop:step]` on a list or a string (code points); absent parts are None/Undefined.
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step);

// `item in container`: substring, list membership by ==, dict key.
bool contains(const Value& container, const Value& item);

// Python's < on two values (numbers, strings by code point, lists lexicographically); a ValueError
// for kinds Python refuses to order. Returns -1, 0 or 1.
int compare(const Value& a, const Value& b);

// Items a `for` loop or a filter walks: list items, dict keys, string characters, nothing for
// Undefined; ValueError for the rest ("'int' object is not iterable").
List iterate(const Value& value);

// Python's arithmetic and concatenation: op is "+", "-", "*", "/", "//", "%", "**" or "~". Numbers
// follow Python (int stays int, / is true division, // and % floor toward negative infinity); "+"
// joins strs and lists, "*" repeats them; mixing kinds is a ValueError as it is a TypeError in Python.
Value binary_operation(std::string_view op, const Value& left, const Value& right);

// Undefined used as a value (attribute of it, arithmetic on it, iteration of a non-iterable): the
// ValueError jinja2 raises, "'foo' is undefined".
[[noreturn]] void fail_undefined(const Value& undefined);

}  // namespace deltabit::text::jinja
