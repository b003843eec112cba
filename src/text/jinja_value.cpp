#include "text/jinja_value.h"

#include "text/jinja_error.h"
#include "text/jinja_pystr.h"
#include "text/unicode.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace deltabit::text::jinja {

const Value* Dict::find(std::string_view key) const {
    for (const Entry& e : entries_)
        if (e.first == key) return &e.second;
    return nullptr;
}

void Dict::set(std::string key, Value value) {
    for (Entry& e : entries_) {
        if (e.first == key) {
            e.second = std::move(value);
            return;
        }
    }
    entries_.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::keyword_arg(std::string_view name) const {
    for (const auto& [key, value] : keyword)
        if (key == name) return &value;
    return nullptr;
}

Value Value::undefined(std::string hint) { return Value(Data(UndefinedData{std::move(hint)})); }
Value Value::none() { return Value(Data(NoneData{})); }
Value Value::boolean(bool b) { return Value(Data(b)); }
Value Value::integer(int64_t i) { return Value(Data(i)); }
Value Value::number(double d) { return Value(Data(d)); }
Value Value::string(std::string s) { return Value(Data(std::move(s))); }
Value Value::list(List items) { return Value(Data(std::make_shared<const ListData>(ListData{std::move(items), false}))); }
Value Value::tuple(List items) { return Value(Data(std::make_shared<const ListData>(ListData{std::move(items), true}))); }
Value Value::dict(Dict entries) { return Value(Data(std::make_shared<const Dict>(std::move(entries)))); }
Value Value::make_namespace(Dict attributes) {
    return Value(Data(std::make_shared<Namespace>(Namespace{std::move(attributes)})));
}
Value Value::callable(std::string name, std::function<Value(const CallArgs&)> call) {
    return Value(Data(std::make_shared<const Callable>(Callable{std::move(name), std::move(call)})));
}

double Value::as_double() const {
    switch (kind()) {
        case Kind::Int: return static_cast<double>(as_int());
        case Kind::Float: return as_float();
        case Kind::Bool: return as_bool() ? 1.0 : 0.0;
        default: value_error("expected a number, got {}", type_name(*this));
    }
}

bool truthy(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::Undefined:
        case Value::Kind::None: return false;
        case Value::Kind::Bool: return v.as_bool();
        case Value::Kind::Int: return v.as_int() != 0;
        case Value::Kind::Float: return v.as_float() != 0.0;
        case Value::Kind::String: return !v.as_string().empty();
        case Value::Kind::List: return !v.as_list().empty();
        case Value::Kind::Dict: return !v.as_dict().empty();
        case Value::Kind::Namespace:
        case Value::Kind::Callable: return true;
    }
    return false;
}

std::string format_float(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
    // Shortest round-trip digits, then CPython's repr layout (float_repr_style 'short'): positional
    // when the decimal exponent is in [-4, 16), scientific with a signed two-digit exponent otherwise.
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string sci(buf, end);  // "-1.2345e+06"
    bool negative = sci[0] == '-';
    if (negative) sci.erase(0, 1);
    size_t e_pos = sci.find('e');
    std::string digits = sci.substr(0, e_pos);
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    int exponent = std::stoi(sci.substr(e_pos + 1));
    int decimal_point = exponent + 1;  // digits before the point
    std::string out = negative ? "-" : "";
    if (exponent >= -4 && exponent < 16) {
        if (decimal_point <= 0) {
            out += "0." + std::string(static_cast<size_t>(-decimal_point), '0') + digits;
        } else if (static_cast<size_t>(decimal_point) >= digits.size()) {
            out += digits + std::string(static_cast<size_t>(decimal_point) - digits.size(), '0') + ".0";
        } else {
            out += digits.substr(0, static_cast<size_t>(decimal_point)) + "." +
                   digits.substr(static_cast<size_t>(decimal_point));
        }
        return out;
    }
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += exponent < 0 ? "e-" : "e+";
    std::string exp_digits = std::to_string(std::abs(exponent));
    if (exp_digits.size() < 2) exp_digits = "0" + exp_digits;
    return out + exp_digits;
}

namespace {

std::string repr_string(const std::string& s) {
    // Python picks single quotes unless the text has a single quote and no double quote.
    bool has_single = s.find('\'') != std::string::npos;
    bool has_double = s.find('"') != std::string::npos;
    char quote = has_single && !has_double ? '"' : '\'';
    std::string out(1, quote);
    for (size_t pos = 0; pos < s.size();) {
        DecodedCodePoint d = utf8_decode(s, pos);
        char32_t c = d.code_point;
        pos += d.length;
        if (c == static_cast<char32_t>(quote) || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7F) {
            out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
        } else {
            utf8_append(out, c);
        }
    }
    out += quote;
    return out;
}

}  // namespace

std::string repr(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::String: return repr_string(v.as_string());
        case Value::Kind::List: {
            bool tuple = v.is_tuple();
            std::string out = tuple ? "(" : "[";
            bool first = true;
            for (const Value& item : v.as_list()) {
                if (!first) out += ", ";
                first = false;
                out += repr(item);
            }
            if (tuple && v.as_list().size() == 1) out += ",";
            return out + (tuple ? ")" : "]");
        }
        case Value::Kind::Dict: {
            std::string out = "{";
            bool first = true;
            for (const auto& [key, item] : v.as_dict().entries()) {
                if (!first) out += ", ";
                first = false;
                out += repr_string(key) + ": " + repr(item);
            }
            return out + "}";
        }
        case Value::Kind::Undefined: return "Undefined";
        default: return to_str(v);
    }
}

std::string to_str(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::Undefined: return "";
        case Value::Kind::None: return "None";
        case Value::Kind::Bool: return v.as_bool() ? "True" : "False";
        case Value::Kind::Int: return std::to_string(v.as_int());
        case Value::Kind::Float: return format_float(v.as_float());
        case Value::Kind::String: return v.as_string();
        case Value::Kind::List:
        case Value::Kind::Dict: return repr(v);
        case Value::Kind::Namespace: {
            std::string out = "<Namespace {";
            bool first = true;
            for (const auto& [key, item] : v.namespace_attributes().entries()) {
                if (!first) out += ", ";
                first = false;
                out += repr_string(key) + ": " + repr(item);
            }
            return out + "}>";
        }
        case Value::Kind::Callable: return "<function " + v.as_callable().name + ">";
    }
    return "";
}

bool equals(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
        auto as_integer = [](const Value& x) { return x.is_bool() ? int64_t{x.as_bool()} : x.as_int(); };
        return as_integer(a) == as_integer(b);
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case Value::Kind::Undefined:
        case Value::Kind::None: return true;
        case Value::Kind::String: return a.as_string() == b.as_string();
        case Value::Kind::List: {
            if (a.is_tuple() != b.is_tuple()) return false;
            const List& x = a.as_list();
            const List& y = b.as_list();
            if (x.size() != y.size()) return false;
            for (size_t i = 0; i < x.size(); ++i)
                if (!equals(x[i], y[i])) return false;
            return true;
        }
        case Value::Kind::Dict: {
            // Python dict equality ignores order.
            const Dict& x = a.as_dict();
            const Dict& y = b.as_dict();
            if (x.size() != y.size()) return false;
            for (const auto& [key, item] : x.entries()) {
                const Value* other = y.find(key);
                if (!other || !equals(item, *other)) return false;
            }
            return true;
        }
        case Value::Kind::Namespace: return &a.namespace_attributes() == &b.namespace_attributes();
        case Value::Kind::Callable: return &a.as_callable() == &b.as_callable();
        default: return false;
    }
}

std::string_view type_name(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::Undefined: return "undefined";
        case Value::Kind::None: return "NoneType";
        case Value::Kind::Bool: return "bool";
        case Value::Kind::Int: return "int";
        case Value::Kind::Float: return "float";
        case Value::Kind::String: return "str";
        case Value::Kind::List: return v.is_tuple() ? "tuple" : "list";
        case Value::Kind::Dict: return "dict";
        case Value::Kind::Namespace: return "Namespace";
        case Value::Kind::Callable: return "function";
    }
    return "?";
}

Value from_json(const nlohmann::ordered_json& json) { return from_json(json, 0); }

Value from_json(const nlohmann::ordered_json& json, int depth) {
    // Conversations come from clients: a value nested without end must not exhaust the stack of
    // this conversion or of the recursive printers (repr, tojson) after it.
    if (depth > kMaxJsonDepth) fail("JSON value nests deeper than {} levels", kMaxJsonDepth);
    switch (json.type()) {
        case nlohmann::ordered_json::value_t::null: return Value::none();
        case nlohmann::ordered_json::value_t::boolean: return Value::boolean(json.get<bool>());
        case nlohmann::ordered_json::value_t::number_integer: return Value::integer(json.get<int64_t>());
        case nlohmann::ordered_json::value_t::number_unsigned: {
            uint64_t u = json.get<uint64_t>();
            // Python ints are unbounded; past int64 the closest we hold is a float.
            if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
            return Value::integer(static_cast<int64_t>(u));
        }
        case nlohmann::ordered_json::value_t::number_float: return Value::number(json.get<double>());
        case nlohmann::ordered_json::value_t::string: return Value::string(json.get<std::string>());
        case nlohmann::ordered_json::value_t::array: {
            List items;
            items.reserve(json.size());
            for (const auto& item : json) items.push_back(from_json(item, depth + 1));
            return Value::list(std::move(items));
        }
        case nlohmann::ordered_json::value_t::object: {
            Dict entries;
            for (const auto& [key, item] : json.items()) entries.set(key, from_json(item, depth + 1));
            return Value::dict(std::move(entries));
        }
        default: return Value::none();
    }
}

namespace {

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
    out += '"';
    for (size_t pos = 0; pos < s.size();) {
        DecodedCodePoint d = utf8_decode(s, pos);
        char32_t c = d.code_point;
        pos += d.length;
        switch (c) {
            case '"': out += "\\\""; continue;
            case '\\': out += "\\\\"; continue;
            case '\n': out += "\\n"; continue;
            case '\r': out += "\\r"; continue;
            case '\t': out += "\\t"; continue;
            case '\b': out += "\\b"; continue;
            case '\f': out += "\\f"; continue;
            default: break;
        }
        if (c < 0x20) {
            out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else if (ensure_ascii && c > 0x7F) {
            if (c > 0xFFFF) {
                char32_t v = c - 0x10000;
                out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            } else {
                out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
            }
        } else {
            utf8_append(out, c);
        }
    }
    out += '"';
}

void append_json(std::string& out, const Value& v, const JsonStyle& style, int depth) {
    const std::string& item_sep = style.item_separator;
    const std::string& key_sep = style.key_separator;
    auto newline = [&](int level) {
        out += '\n';
        out.append(static_cast<size_t>(style.indent) * static_cast<size_t>(level), ' ');
    };
    switch (v.kind()) {
        case Value::Kind::None: out += "null"; return;
        case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
        case Value::Kind::Int: out += std::to_string(v.as_int()); return;
        case Value::Kind::Float: {
            double d = v.as_float();
            // json.dumps writes Python's float repr, and these three spellings for the non-finite.
            if (std::isnan(d)) out += "NaN";
            else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
            else out += format_float(d);
            return;
        }
        case Value::Kind::String: append_json_string(out, v.as_string(), style.ensure_ascii); return;
        case Value::Kind::List: {
            const List& items = v.as_list();
            if (items.empty()) {
                out += "[]";
                return;
            }
            out += '[';
            for (size_t i = 0; i < items.size(); ++i) {
                if (i > 0) out += item_sep;
                if (style.indent >= 0) newline(depth + 1);
                append_json(out, items[i], style, depth + 1);
            }
            if (style.indent >= 0) newline(depth);
            out += ']';
            return;
        }
        case Value::Kind::Dict: {
            std::vector<const Dict::Entry*> entries;
            for (const Dict::Entry& e : v.as_dict().entries()) entries.push_back(&e);
            if (entries.empty()) {
                out += "{}";
                return;
            }
            // UTF-8 byte order is code point order, which is how Python sorts str keys.
            if (style.sort_keys)
                std::stable_sort(entries.begin(), entries.end(),
                                 [](const Dict::Entry* a, const Dict::Entry* b) { return a->first < b->first; });
            out += '{';
            for (size_t i = 0; i < entries.size(); ++i) {
                if (i > 0) out += item_sep;
                if (style.indent >= 0) newline(depth + 1);
                append_json_string(out, entries[i]->first, style.ensure_ascii);
                out += key_sep;
                append_json(out, entries[i]->second, style, depth + 1);
            }
            if (style.indent >= 0) newline(depth);
            out += '}';
            return;
        }
        default: value_error("Object of type {} is not JSON serializable", type_name(v));
    }
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
    JsonStyle resolved = style;
    if (!resolved.custom_separators) {
        resolved.item_separator = resolved.indent >= 0 ? "," : ", ";
        resolved.key_separator = ": ";
    }
    std::string out;
    append_json(out, v, resolved, 0);
    return out;
}

}  // namespace deltabit::text::jinja
