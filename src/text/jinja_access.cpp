// Attribute, item and slice access, membership, ordering, iteration, and the str/dict methods.
#include "text/jinja_builtins.h"

#include "text/jinja_error.h"
#include "text/jinja_pystr.h"

#include <algorithm>

namespace deltabit::text::jinja {

void fail_undefined(const Value& undefined) {
    const std::string& hint = undefined.undefined_hint();
    throw ValueError(hint.empty() ? "value is undefined" : hint);
}

namespace {

const Value* positional_or_keyword(const CallArgs& args, size_t index, std::string_view name) {
    if (index < args.positional.size()) return &args.positional[index];
    return args.keyword_arg(name);
}

std::optional<std::string> optional_string_arg(const CallArgs& args, size_t index, std::string_view name,
                                               std::string_view method) {
    const Value* v = positional_or_keyword(args, index, name);
    if (!v || v->is_none() || v->is_undefined()) return std::nullopt;
    if (!v->is_string()) value_error("{}() argument {} must be str or None, not {}", method, name, type_name(*v));
    return v->as_string();
}

int64_t int_arg(const CallArgs& args, size_t index, std::string_view name, int64_t fallback, std::string_view method) {
    const Value* v = positional_or_keyword(args, index, name);
    if (!v || v->is_undefined() || v->is_none()) return fallback;
    if (!v->is_int() && !v->is_bool()) value_error("{}() argument {} must be an integer, not {}", method, name, type_name(*v));
    return v->is_bool() ? int64_t{v->as_bool()} : v->as_int();
}

const std::string& string_arg(const CallArgs& args, size_t index, std::string_view name, std::string_view method) {
    const Value* v = positional_or_keyword(args, index, name);
    if (!v) value_error("{}() missing required argument '{}'", method, name);
    if (!v->is_string()) value_error("{}() argument must be str, not {}", method, type_name(*v));
    return v->as_string();
}

Value string_list(std::vector<std::string> parts) {
    List items;
    items.reserve(parts.size());
    for (std::string& p : parts) items.push_back(Value::string(std::move(p)));
    return Value::list(std::move(items));
}

// str.startswith / endswith: a prefix or a tuple (list) of prefixes.
bool affix_match(const std::string& s, const Value& affix, bool at_start, std::string_view method) {
    auto one = [&](const Value& a) {
        if (!a.is_string()) value_error("{} first arg must be str or a tuple of str, not {}", method, type_name(a));
        const std::string& p = a.as_string();
        if (p.size() > s.size()) return false;
        return at_start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
    };
    if (affix.is_list()) {
        for (const Value& a : affix.as_list())
            if (one(a)) return true;
        return false;
    }
    return one(affix);
}

// str.format with automatic ({}) or explicit ({0}, {name}) fields and no format specs beyond none;
// enough for the templates that build small strings with it.
std::string python_format(const std::string& fmt_string, const CallArgs& args) {
    std::string out;
    size_t auto_index = 0;
    for (size_t i = 0; i < fmt_string.size(); ++i) {
        char c = fmt_string[i];
        if (c == '{' && i + 1 < fmt_string.size() && fmt_string[i + 1] == '{') {
            out += '{';
            ++i;
        } else if (c == '}' && i + 1 < fmt_string.size() && fmt_string[i + 1] == '}') {
            out += '}';
            ++i;
        } else if (c == '{') {
            size_t close = fmt_string.find('}', i);
            if (close == std::string::npos) value_error("Single '{{' encountered in format string");
            std::string field = fmt_string.substr(i + 1, close - i - 1);
            if (field.find_first_of(":!") != std::string::npos) value_error("str.format(): format specs are not supported");
            const Value* v = nullptr;
            if (field.empty()) {
                if (auto_index >= args.positional.size()) value_error("Replacement index {} out of range", auto_index);
                v = &args.positional[auto_index++];
            } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
                size_t index = std::stoul(field);
                if (index >= args.positional.size()) value_error("Replacement index {} out of range", index);
                v = &args.positional[index];
            } else {
                v = args.keyword_arg(field);
                if (!v) value_error("KeyError: '{}'", field);
            }
            out += to_str(*v);
            i = close;
        } else if (c == '}') {
            value_error("Single '}}' encountered in format string");
        } else {
            out += c;
        }
    }
    return out;
}

Value string_method(const Value& receiver, std::string_view name) {
    const std::string s = receiver.as_string();
    auto method = [&](auto fn) {
        return Value::callable("str." + std::string(name), [s, fn](const CallArgs& args) { return fn(s, args); });
    };
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        bool left = name != "rstrip", right = name != "lstrip";
        std::string m(name);
        return method([left, right, m](const std::string& str, const CallArgs& args) {
            return Value::string(pystr::strip(str, optional_string_arg(args, 0, "chars", m), left, right));
        });
    }
    if (name == "split" || name == "rsplit") {
        bool from_right = name == "rsplit";
        std::string m(name);
        return method([from_right, m](const std::string& str, const CallArgs& args) {
            auto sep = optional_string_arg(args, 0, "sep", m);
            int64_t maxsplit = int_arg(args, 1, "maxsplit", -1, m);
            return string_list(from_right ? pystr::rsplit(str, sep, maxsplit) : pystr::split(str, sep, maxsplit));
        });
    }
    if (name == "splitlines")
        return method([](const std::string& str, const CallArgs& args) {
            const Value* keep = positional_or_keyword(args, 0, "keepends");
            return string_list(pystr::splitlines(str, keep && truthy(*keep)));
        });
    if (name == "startswith" || name == "endswith") {
        bool at_start = name == "startswith";
        std::string m(name);
        return method([at_start, m](const std::string& str, const CallArgs& args) {
            if (args.positional.empty()) value_error("{}() takes at least 1 argument (0 given)", m);
            return Value::boolean(affix_match(str, args.positional[0], at_start, m));
        });
    }
    if (name == "upper") return method([](const std::string& str, const CallArgs&) { return Value::string(pystr::upper(str)); });
    if (name == "lower") return method([](const std::string& str, const CallArgs&) { return Value::string(pystr::lower(str)); });
    if (name == "title") return method([](const std::string& str, const CallArgs&) { return Value::string(pystr::title(str)); });
    if (name == "capitalize")
        return method([](const std::string& str, const CallArgs&) { return Value::string(pystr::capitalize(str)); });
    if (name == "replace")
        return method([](const std::string& str, const CallArgs& args) {
            const std::string& old_part = string_arg(args, 0, "old", "replace");
            const std::string& new_part = string_arg(args, 1, "new", "replace");
            return Value::string(pystr::replace(str, old_part, new_part, int_arg(args, 2, "count", -1, "replace")));
        });
    if (name == "find")
        return method([](const std::string& str, const CallArgs& args) {
            return Value::integer(pystr::find(str, string_arg(args, 0, "sub", "find")));
        });
    if (name == "count")
        return method([](const std::string& str, const CallArgs& args) {
            return Value::integer(pystr::count(str, string_arg(args, 0, "sub", "count")));
        });
    if (name == "join")
        return method([](const std::string& str, const CallArgs& args) {
            if (args.positional.empty()) value_error("join() takes exactly one argument (0 given)");
            std::string out;
            bool first = true;
            for (const Value& item : iterate(args.positional[0])) {
                if (!item.is_string()) value_error("sequence item: expected str instance, {} found", type_name(item));
                if (!first) out += str;
                first = false;
                out += item.as_string();
            }
            return Value::string(std::move(out));
        });
    if (name == "format")
        return method([](const std::string& str, const CallArgs& args) { return Value::string(python_format(str, args)); });
    if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum") {
        std::string m(name);
        return method([m](const std::string& str, const CallArgs&) {
            std::u32string cps = pystr::decode(str);
            if (cps.empty()) return Value::boolean(false);
            auto ok = [&](char32_t c) {
                bool digit = c >= '0' && c <= '9';
                bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c > 0x7F;
                if (m == "isdigit") return digit;
                if (m == "isspace") return pystr::is_space(c);
                if (m == "isalpha") return alpha;
                return alpha || digit;
            };
            return Value::boolean(std::all_of(cps.begin(), cps.end(), ok));
        });
    }
    return Value::undefined("'str object' has no attribute '" + std::string(name) + "'");
}

Value items_of(const Dict& d) {
    List items;
    items.reserve(d.size());
    for (const auto& [key, value] : d.entries()) items.push_back(Value::tuple(List{Value::string(key), value}));
    return Value::list(std::move(items));
}

std::optional<Value> dict_method(const Value& receiver, std::string_view name) {
    if (name == "get")
        return Value::callable("dict.get", [receiver](const CallArgs& args) {
            if (args.positional.empty()) value_error("get expected at least 1 argument, got 0");
            const Value& key = args.positional[0];
            const Value* found = key.is_string() ? receiver.as_dict().find(key.as_string()) : nullptr;
            if (found) return *found;
            return args.positional.size() > 1 ? args.positional[1] : Value::none();
        });
    if (name == "items")
        return Value::callable("dict.items", [receiver](const CallArgs&) { return items_of(receiver.as_dict()); });
    if (name == "keys")
        return Value::callable("dict.keys", [receiver](const CallArgs&) {
            List keys;
            for (const auto& entry : receiver.as_dict().entries()) keys.push_back(Value::string(entry.first));
            return Value::list(std::move(keys));
        });
    if (name == "values")
        return Value::callable("dict.values", [receiver](const CallArgs&) {
            List values;
            for (const auto& entry : receiver.as_dict().entries()) values.push_back(entry.second);
            return Value::list(std::move(values));
        });
    return std::nullopt;
}

std::string object_name(const Value& v) {
    if (v.is_none()) return "'None'";
    return fmt::format("'{} object'", type_name(v));
}

}  // namespace

Value get_attribute(const Value& object, std::string_view name) {
    switch (object.kind()) {
        case Value::Kind::Undefined: fail_undefined(object);
        case Value::Kind::String: return string_method(object, name);
        case Value::Kind::Dict: {
            if (auto m = dict_method(object, name)) return *m;
            if (const Value* v = object.as_dict().find(name)) return *v;
            break;
        }
        case Value::Kind::Namespace:
            if (const Value* v = object.namespace_attributes().find(name)) return *v;
            break;
        default: break;
    }
    return Value::undefined(object_name(object) + " has no attribute '" + std::string(name) + "'");
}

Value get_item(const Value& object, const Value& key) {
    switch (object.kind()) {
        case Value::Kind::Undefined: fail_undefined(object);
        case Value::Kind::Dict:
            if (key.is_string()) {
                if (const Value* v = object.as_dict().find(key.as_string())) return *v;
                if (auto m = dict_method(object, key.as_string())) return *m;
                return Value::undefined(object_name(object) + " has no attribute '" + key.as_string() + "'");
            }
            break;
        case Value::Kind::List:
        case Value::Kind::String:
            if (key.is_int() || key.is_bool()) {
                int64_t index = key.is_bool() ? int64_t{key.as_bool()} : key.as_int();
                if (object.is_list()) {
                    if (auto i = pystr::normalize_index(index, object.as_list().size())) return object.as_list()[*i];
                } else {
                    std::u32string cps = pystr::decode(object.as_string());
                    if (auto i = pystr::normalize_index(index, cps.size()))
                        return Value::string(pystr::encode(std::u32string_view(cps).substr(*i, 1)));
                }
                return Value::undefined(object_name(object) + " has no element " + std::to_string(index));
            }
            if (key.is_string()) return get_attribute(object, key.as_string());
            break;
        case Value::Kind::Namespace:
            if (key.is_string()) return get_attribute(object, key.as_string());
            break;
        default: break;
    }
    return Value::undefined(object_name(object) + " has no element " + repr(key));
}

Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step) {
    auto bound = [](const Value& v, std::string_view what) -> std::optional<int64_t> {
        if (v.is_undefined() || v.is_none()) return std::nullopt;
        if (v.is_int()) return v.as_int();
        if (v.is_bool()) return int64_t{v.as_bool()};
        value_error("slice {} must be an integer or None, not {}", what, type_name(v));
    };
    auto b = bound(start, "start"), e = bound(stop, "stop"), s = bound(step, "step");
    if (object.is_list()) {
        const List& items = object.as_list();
        List out;
        for (int64_t i : pystr::slice_positions(static_cast<int64_t>(items.size()), b, e, s))
            out.push_back(items[static_cast<size_t>(i)]);
        return Value::list(std::move(out));
    }
    if (object.is_string()) {
        std::u32string cps = pystr::decode(object.as_string());
        std::u32string out;
        for (int64_t i : pystr::slice_positions(static_cast<int64_t>(cps.size()), b, e, s))
            out.push_back(cps[static_cast<size_t>(i)]);
        return Value::string(pystr::encode(out));
    }
    if (object.is_undefined()) fail_undefined(object);
    value_error("'{}' object is not subscriptable", type_name(object));
}

bool contains(const Value& container, const Value& item) {
    switch (container.kind()) {
        case Value::Kind::String:
            if (!item.is_string())
                value_error("'in <string>' requires string as left operand, not {}", type_name(item));
            return container.as_string().find(item.as_string()) != std::string::npos;
        case Value::Kind::List:
            return std::any_of(container.as_list().begin(), container.as_list().end(),
                               [&](const Value& v) { return equals(v, item); });
        case Value::Kind::Dict: return item.is_string() && container.as_dict().contains(item.as_string());
        case Value::Kind::Undefined: return false;  // jinja2's Undefined iterates as empty
        default: value_error("argument of type '{}' is not iterable", type_name(container));
    }
}

int compare(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) {
            double x = a.as_double(), y = b.as_double();
            return x < y ? -1 : x > y ? 1 : 0;
        }
        int64_t x = a.is_bool() ? int64_t{a.as_bool()} : a.as_int();
        int64_t y = b.is_bool() ? int64_t{b.as_bool()} : b.as_int();
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.is_string() && b.is_string()) {
        int c = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
        return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    if (a.is_list() && b.is_list()) {
        const List& x = a.as_list();
        const List& y = b.as_list();
        for (size_t i = 0; i < x.size() && i < y.size(); ++i)
            if (int c = compare(x[i], y[i]); c != 0) return c;
        return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
    }
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    value_error("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
}

List iterate(const Value& value) {
    switch (value.kind()) {
        case Value::Kind::List: return value.as_list();
        case Value::Kind::Dict: {
            List keys;
            for (const auto& entry : value.as_dict().entries()) keys.push_back(Value::string(entry.first));
            return keys;
        }
        case Value::Kind::String: {
            List chars;
            for (char32_t c : pystr::decode(value.as_string())) chars.push_back(Value::string(pystr::encode(std::u32string(1, c))));
            return chars;
        }
        case Value::Kind::Undefined: return {};
        default: value_error("'{}' object is not iterable", type_name(value));
    }
}

}  // namespace deltabit::text::jinja
