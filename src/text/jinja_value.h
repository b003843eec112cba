// Values of the Jinja interpreter that renders chat templates.
//
// Hugging Face renders chat templates with Python's jinja2, so a value here behaves like the Python
// object jinja2 would hold: None, bool, int, float, str, list, dict (insertion-ordered, as Python's
// dict is since 3.7), jinja2's Undefined, a namespace() and a callable (macro, builtin, bound
// method). Strings are UTF-8 bytes; every operation that Python defines on characters (len, [i],
// slicing, strip, upper, ...) works on code points, never on bytes or UTF-16 units.
//
// Lists and dicts are immutable once built, as in HF's ImmutableSandboxedEnvironment (no append, no
// update), so copies share storage. A namespace is the one mutable container: `set ns.x = ...`
// writes through every copy of it, which is the whole point of namespace() in templates.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace deltabit::text::jinja {

class Value;
using List = std::vector<Value>;

// A dict in insertion order. Lookup is a linear scan: template dicts are messages and tool schemas
// with a handful to a few dozen keys, where a scan beats hashing and keeps the order for free.
class Dict {
public:
    using Entry = std::pair<std::string, Value>;

    const Value* find(std::string_view key) const;
    bool contains(std::string_view key) const { return find(key) != nullptr; }
    // Replaces the value in place when the key exists (Python keeps the original position).
    void set(std::string key, Value value);
    size_t size() const { return entries_.size(); }
    bool empty() const { return entries_.empty(); }
    const std::vector<Entry>& entries() const { return entries_; }

private:
    std::vector<Entry> entries_;
};

// Arguments of one call: positional first, then keyword arguments in the order written.
struct CallArgs {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> keyword;

    const Value* keyword_arg(std::string_view name) const;
};

struct Callable {
    std::string name;  // for messages: "macro 'render_content'", "str.split", "range"
    std::function<Value(const CallArgs&)> call;
};

struct Namespace {
    Dict attributes;
};

class Value {
public:
    enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };

    // Undefined with no hint.
    Value() : data_(UndefinedData{}) {}

    // `hint` names what was missing, for the message when the undefined value is used:
    // "'foo' is undefined", "'dict object' has no attribute 'role'".
    static Value undefined(std::string hint);
    static Value none();
    static Value boolean(bool b);
    static Value integer(int64_t i);
    static Value number(double d);
    static Value string(std::string s);
    static Value list(List items);
    // A tuple behaves as a list except that Python prints it as (a, b) and never equals a list.
    static Value tuple(List items);
    static Value dict(Dict entries);
    static Value make_namespace(Dict attributes);
    static Value callable(std::string name, std::function<Value(const CallArgs&)> call);

    Kind kind() const { return static_cast<Kind>(data_.index()); }
    bool is_undefined() const { return kind() == Kind::Undefined; }
    bool is_none() const { return kind() == Kind::None; }
    bool is_bool() const { return kind() == Kind::Bool; }
    bool is_int() const { return kind() == Kind::Int; }
    bool is_float() const { return kind() == Kind::Float; }
    // int, float or bool: Python's numbers.Number, which bool belongs to.
    bool is_number() const { return is_int() || is_float() || is_bool(); }
    bool is_string() const { return kind() == Kind::String; }
    bool is_list() const { return kind() == Kind::List; }
    bool is_tuple() const { return is_list() && std::get<std::shared_ptr<const ListData>>(data_)->tuple; }
    bool is_dict() const { return kind() == Kind::Dict; }
    bool is_namespace() const { return kind() == Kind::Namespace; }
    bool is_callable() const { return kind() == Kind::Callable; }

    // Accessors assume the kind was checked.
    bool as_bool() const { return std::get<bool>(data_); }
    int64_t as_int() const { return std::get<int64_t>(data_); }
    double as_float() const { return std::get<double>(data_); }
    // int, float or bool as a double.
    double as_double() const;
    const std::string& as_string() const { return std::get<std::string>(data_); }
    const List& as_list() const { return std::get<std::shared_ptr<const ListData>>(data_)->items; }
    const Dict& as_dict() const { return *std::get<std::shared_ptr<const Dict>>(data_); }
    Dict& namespace_attributes() const { return std::get<std::shared_ptr<Namespace>>(data_)->attributes; }
    const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
    const std::string& undefined_hint() const { return std::get<UndefinedData>(data_).hint; }

private:
    struct UndefinedData {
        std::string hint;
    };
    struct NoneData {};
    struct ListData {
        List items;
        bool tuple = false;
    };

    // Alternative order must match Kind.
    using Data = std::variant<UndefinedData, NoneData, bool, int64_t, double, std::string,
                              std::shared_ptr<const ListData>, std::shared_ptr<const Dict>,
                              std::shared_ptr<Namespace>, std::shared_ptr<const Callable>>;
    explicit Value(Data data) : data_(std::move(data)) {}

    Data data_;
};

// Python's truth value: empty str/list/dict, 0, 0.0, None and Undefined are false.
bool truthy(const Value& v);

// Python's str(v) as jinja2 prints it: None -> "None", True -> "True", 1.0 -> "1.0", lists and dicts
// as their repr ("['a', 1]"), Undefined -> "".
std::string to_str(const Value& v);

// Python's repr(v): strings quoted the way Python quotes them.
std::string repr(const Value& v);

// Python's float repr: the shortest digits that round-trip, "1.0", "1e+16", "1e-05", "inf", "nan".
std::string format_float(double d);

// Python's ==: numbers compare by value across int/float/bool, lists and dicts element-wise,
// different kinds are unequal; two Undefined are equal (jinja2's Undefined.__eq__).
bool equals(const Value& a, const Value& b);

// The Python type name, for messages: "str", "int", "list", "dict", "NoneType", "undefined".
std::string_view type_name(const Value& v);

// JSON in: objects keep their key order (ordered_json), integers stay int, numbers with a fraction
// or exponent become float. Nesting deeper than kMaxJsonDepth is refused (deltabit::Error).
inline constexpr int kMaxJsonDepth = 512;
Value from_json(const nlohmann::ordered_json& json);
Value from_json(const nlohmann::ordered_json& json, int depth);

// json.dumps(v, ...) with the arguments HF's tojson filter passes through.
struct JsonStyle {
    int indent = -1;             // < 0: one line; >= 0: newline + `indent` spaces per level
    bool ensure_ascii = false;   // escape every non-ASCII code point as \uXXXX (surrogate pairs above BMP)
    bool sort_keys = false;      // by code point, as Python sorts str
    std::string item_separator;  // default: ", " on one line, "," when indented (as json.dumps)
    std::string key_separator;   // default: ": "
    bool custom_separators = false;
};

// Throws ValueError (see jinja_error.h) for Undefined, namespaces and callables, which json.dumps
// cannot serialise either.
std::string to_json(const Value& v, const JsonStyle& style = {});

}  // namespace deltabit::text::jinja
