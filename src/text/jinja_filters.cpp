// Filters and tests, with jinja2's names, arguments and defaults.
#include "text/jinja_builtins.h"

#include "text/jinja_error.h"
#include "text/jinja_pystr.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <unordered_map>

namespace deltabit::text::jinja {

namespace {

const Value* arg(const CallArgs& args, size_t index, std::string_view name) {
    if (index < args.positional.size()) return &args.positional[index];
    return args.keyword_arg(name);
}

bool bool_arg(const CallArgs& args, size_t index, std::string_view name, bool fallback) {
    const Value* v = arg(args, index, name);
    return v ? truthy(*v) : fallback;
}

size_t length_of(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::String: return pystr::length(v.as_string());
        case Value::Kind::List: return v.as_list().size();
        case Value::Kind::Dict: return v.as_dict().size();
        case Value::Kind::Undefined: return 0;
        default: value_error("object of type '{}' has no len()", type_name(v));
    }
}

// "a.b.0": jinja2's make_attrgetter, item lookup per dotted part (integers index lists).
Value attribute_path(const Value& item, const std::string& path) {
    Value current = item;
    size_t start = 0;
    while (true) {
        size_t dot = path.find('.', start);
        std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        current = get_item(current, numeric ? Value::integer(std::stoll(part)) : Value::string(part));
        if (dot == std::string::npos) return current;
        if (current.is_undefined()) return current;
        start = dot + 1;
    }
}

std::optional<std::string> attribute_arg(const CallArgs& args, size_t index) {
    const Value* a = arg(args, index, "attribute");
    if (!a || a->is_none()) return std::nullopt;
    if (a->is_int()) return std::to_string(a->as_int());
    if (!a->is_string()) value_error("attribute must be a string");
    return a->as_string();
}

// jinja2 lowercases strings before comparing when case_sensitive is false (sort, dictsort, unique, min, max).
Value sort_key(const Value& v, bool case_sensitive) {
    if (!case_sensitive && v.is_string()) return Value::string(pystr::lower(v.as_string()));
    return v;
}

Value filter_abs(const Value& v, const CallArgs&) {
    if (v.is_int()) return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.is_float()) return Value::number(std::fabs(v.as_float()));
    if (v.is_bool()) return Value::integer(v.as_bool());
    value_error("bad operand type for abs(): '{}'", type_name(v));
}

Value filter_attr(const Value& v, const CallArgs& args) {
    const Value* name = arg(args, 0, "name");
    if (!name || !name->is_string()) value_error("attr() needs an attribute name");
    return get_attribute(v, name->as_string());
}

Value filter_capitalize(const Value& v, const CallArgs&) { return Value::string(pystr::capitalize(to_str(v))); }
Value filter_lower(const Value& v, const CallArgs&) { return Value::string(pystr::lower(to_str(v))); }
Value filter_upper(const Value& v, const CallArgs&) { return Value::string(pystr::upper(to_str(v))); }
Value filter_title(const Value& v, const CallArgs&) { return Value::string(pystr::title(to_str(v))); }
Value filter_length(const Value& v, const CallArgs&) { return Value::integer(static_cast<int64_t>(length_of(v))); }
Value filter_safe(const Value& v, const CallArgs&) { return v; }
Value filter_string(const Value& v, const CallArgs&) { return v.is_string() ? v : Value::string(to_str(v)); }

Value filter_default(const Value& v, const CallArgs& args) {
    const Value* fallback = arg(args, 0, "default_value");
    bool boolean = bool_arg(args, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !truthy(v))) return fallback ? *fallback : Value::string("");
    return v;
}

Value filter_dictsort(const Value& v, const CallArgs& args) {
    if (!v.is_dict()) value_error("dictsort() needs a mapping, got {}", type_name(v));
    bool case_sensitive = bool_arg(args, 0, "case_sensitive", false);
    const Value* by = arg(args, 1, "by");
    bool by_value = by && by->is_string() && by->as_string() == "value";
    if (by && !(by->is_string() && (by->as_string() == "key" || by->as_string() == "value")))
        value_error("You can only sort by either \"key\" or \"value\"");
    bool reverse = bool_arg(args, 2, "reverse", false);
    List pairs;
    for (const auto& [key, value] : v.as_dict().entries()) pairs.push_back(Value::tuple(List{Value::string(key), value}));
    std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
        size_t i = by_value ? 1 : 0;
        int c = compare(sort_key(a.as_list()[i], case_sensitive), sort_key(b.as_list()[i], case_sensitive));
        return reverse ? c > 0 : c < 0;
    });
    return Value::list(std::move(pairs));
}

Value filter_escape(const Value& v, const CallArgs&) {
    std::string out;
    for (char c : to_str(v)) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return Value::string(std::move(out));
}

Value filter_first(const Value& v, const CallArgs&) {
    List items = iterate(v);
    if (items.empty()) return Value::undefined("No first item, sequence was empty.");
    return items.front();
}

Value filter_last(const Value& v, const CallArgs&) {
    List items = iterate(v);
    if (items.empty()) return Value::undefined("No last item, sequence was empty.");
    return items.back();
}

// Python's float(str): optional sign, digits with an optional fraction and exponent, inf/nan.
std::optional<double> parse_python_float(std::string_view s) {
    std::string t = pystr::strip(s, std::nullopt, true, true);
    t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
    if (t.empty()) return std::nullopt;
    std::string lowered = pystr::lower(t);
    std::string_view body = lowered;
    bool negative = false;
    if (body[0] == '+' || body[0] == '-') {
        negative = body[0] == '-';
        body.remove_prefix(1);
    }
    if (body == "inf" || body == "infinity") return negative ? -INFINITY : INFINITY;
    if (body == "nan") return NAN;
    double d = 0;
    auto [end, ec] = std::from_chars(t.data() + (t[0] == '+' ? 1 : 0), t.data() + t.size(), d);
    if (ec != std::errc() || end != t.data() + t.size()) return std::nullopt;
    return d;
}

Value filter_float(const Value& v, const CallArgs& args) {
    const Value* fallback = arg(args, 0, "default");
    Value dflt = fallback ? *fallback : Value::number(0.0);
    if (v.is_float()) return v;
    if (v.is_int() || v.is_bool()) return Value::number(v.as_double());
    if (v.is_string())
        if (auto d = parse_python_float(v.as_string())) return Value::number(*d);
    return dflt;
}

Value filter_int(const Value& v, const CallArgs& args) {
    const Value* fallback = arg(args, 0, "default");
    Value dflt = fallback ? *fallback : Value::integer(0);
    if (v.is_int()) return v;
    if (v.is_bool()) return Value::integer(v.as_bool());
    if (v.is_float()) {
        if (!std::isfinite(v.as_float())) return dflt;
        return Value::integer(static_cast<int64_t>(std::trunc(v.as_float())));
    }
    if (v.is_string()) {
        // jinja2: int(value) first, then int(float(value)).
        std::string t = pystr::strip(v.as_string(), std::nullopt, true, true);
        t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
        int64_t i = 0;
        const char* begin = t.data() + (!t.empty() && t[0] == '+' ? 1 : 0);
        auto [end, ec] = std::from_chars(begin, t.data() + t.size(), i);
        if (!t.empty() && ec == std::errc() && end == t.data() + t.size()) return Value::integer(i);
        if (auto d = parse_python_float(v.as_string()); d && std::isfinite(*d))
            return Value::integer(static_cast<int64_t>(std::trunc(*d)));
    }
    return dflt;
}

Value filter_indent(const Value& v, const CallArgs& args) {
    const Value* width = arg(args, 0, "width");
    std::string indention = width && width->is_string() ? width->as_string()
                                                        : std::string(static_cast<size_t>(width ? width->as_int() : 4), ' ');
    bool first = bool_arg(args, 1, "first", false);
    bool blank = bool_arg(args, 2, "blank", false);
    // jinja2 appends a newline before splitlines() so that a trailing newline survives.
    std::vector<std::string> lines = pystr::splitlines(to_str(v) + "\n", false);
    std::string rv;
    for (size_t i = 0; i < lines.size(); ++i) {
        if (i > 0) {
            rv += '\n';
            // The first line is indented only with first=true (below); blank lines only with blank=true.
            if (blank || !lines[i].empty()) rv += indention;
        }
        rv += lines[i];
    }
    if (first) rv = indention + rv;
    return Value::string(std::move(rv));
}

Value filter_items(const Value& v, const CallArgs&) {
    if (v.is_undefined()) return Value::list({});
    if (!v.is_dict()) value_error("Can only get item pairs from a mapping.");
    List items;
    for (const auto& [key, value] : v.as_dict().entries()) items.push_back(Value::tuple(List{Value::string(key), value}));
    return Value::list(std::move(items));
}

Value filter_join(const Value& v, const CallArgs& args) {
    const Value* sep = arg(args, 0, "d");
    std::string separator = sep ? to_str(*sep) : "";
    auto attribute = attribute_arg(args, 1);
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
        if (!first) out += separator;
        first = false;
        out += to_str(attribute ? attribute_path(item, *attribute) : item);
    }
    return Value::string(std::move(out));
}

Value filter_list(const Value& v, const CallArgs&) { return Value::list(iterate(v)); }

Value filter_map(const Value& v, const CallArgs& args) {
    List out;
    if (const Value* attribute = args.keyword_arg("attribute")) {
        std::string path = attribute->is_int() ? std::to_string(attribute->as_int()) : to_str(*attribute);
        const Value* fallback = args.keyword_arg("default");
        for (const Value& item : iterate(v)) {
            Value mapped = attribute_path(item, path);
            out.push_back(mapped.is_undefined() && fallback ? *fallback : mapped);
        }
        return Value::list(std::move(out));
    }
    if (args.positional.empty() || !args.positional[0].is_string())
        value_error("map() needs a filter name or attribute=");
    FilterFunction filter = find_filter(args.positional[0].as_string());
    if (!filter) value_error("no filter named '{}'", args.positional[0].as_string());
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    for (const Value& item : iterate(v)) out.push_back(filter(item, rest));
    return Value::list(std::move(out));
}

Value min_max(const Value& v, const CallArgs& args, bool want_max) {
    bool case_sensitive = bool_arg(args, 0, "case_sensitive", false);
    auto attribute = attribute_arg(args, 1);
    List items = iterate(v);
    if (items.empty()) return Value::undefined(want_max ? "No aggregated item, sequence was empty." : "No aggregated item, sequence was empty.");
    const Value* best = &items[0];
    auto key = [&](const Value& x) { return sort_key(attribute ? attribute_path(x, *attribute) : x, case_sensitive); };
    for (const Value& item : items) {
        int c = compare(key(item), key(*best));
        if (want_max ? c > 0 : c < 0) best = &item;
    }
    return *best;
}
Value filter_max(const Value& v, const CallArgs& args) { return min_max(v, args, true); }
Value filter_min(const Value& v, const CallArgs& args) { return min_max(v, args, false); }

// select / reject / selectattr / rejectattr share one walk.
Value select_items(const Value& v, const CallArgs& args, bool by_attribute, bool keep_matches) {
    size_t next = 0;
    std::string attribute;
    if (by_attribute) {
        if (args.positional.empty() || !args.positional[0].is_string()) value_error("selectattr/rejectattr need an attribute name");
        attribute = args.positional[0].as_string();
        next = 1;
    }
    TestFunction test = nullptr;
    CallArgs test_args;
    if (next < args.positional.size()) {
        if (!args.positional[next].is_string()) value_error("the test name must be a string");
        test = find_test(args.positional[next].as_string());
        if (!test) value_error("no test named '{}'", args.positional[next].as_string());
        test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next) + 1, args.positional.end());
        test_args.keyword = args.keyword;
    }
    List out;
    for (const Value& item : iterate(v)) {
        Value subject = by_attribute ? attribute_path(item, attribute) : item;
        bool match = test ? test(subject, test_args) : truthy(subject);
        if (match == keep_matches) out.push_back(item);
    }
    return Value::list(std::move(out));
}
Value filter_select(const Value& v, const CallArgs& a) { return select_items(v, a, false, true); }
Value filter_reject(const Value& v, const CallArgs& a) { return select_items(v, a, false, false); }
Value filter_selectattr(const Value& v, const CallArgs& a) { return select_items(v, a, true, true); }
Value filter_rejectattr(const Value& v, const CallArgs& a) { return select_items(v, a, true, false); }

Value filter_replace(const Value& v, const CallArgs& args) {
    const Value* old_part = arg(args, 0, "old");
    const Value* new_part = arg(args, 1, "new");
    if (!old_part || !new_part) value_error("replace() needs the old and the new string");
    const Value* count = arg(args, 2, "count");
    int64_t n = count && count->is_int() ? count->as_int() : -1;
    return Value::string(pystr::replace(to_str(v), to_str(*old_part), to_str(*new_part), n));
}

Value filter_reverse(const Value& v, const CallArgs&) {
    if (v.is_string()) {
        std::u32string cps = pystr::decode(v.as_string());
        std::reverse(cps.begin(), cps.end());
        return Value::string(pystr::encode(cps));
    }
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
}

Value filter_round(const Value& v, const CallArgs& args) {
    const Value* precision = arg(args, 0, "precision");
    const Value* method = arg(args, 1, "method");
    int64_t digits = precision && precision->is_int() ? precision->as_int() : 0;
    std::string how = method && method->is_string() ? method->as_string() : "common";
    double scale = std::pow(10.0, static_cast<double>(digits));
    double x = v.as_double() * scale;
    // 'common' is Python's round(): ties go to the even neighbour, which nearbyint does in the
    // default rounding mode.
    double r = how == "ceil" ? std::ceil(x) : how == "floor" ? std::floor(x) : std::nearbyint(x);
    if (how != "common" && how != "ceil" && how != "floor") value_error("method must be common, ceil or floor");
    return Value::number(r / scale);
}

Value filter_sort(const Value& v, const CallArgs& args) {
    bool reverse = bool_arg(args, 0, "reverse", false);
    bool case_sensitive = bool_arg(args, 1, "case_sensitive", false);
    auto attribute = attribute_arg(args, 2);
    List items = iterate(v);
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
        Value ka = sort_key(attribute ? attribute_path(a, *attribute) : a, case_sensitive);
        Value kb = sort_key(attribute ? attribute_path(b, *attribute) : b, case_sensitive);
        int c = compare(ka, kb);
        return reverse ? c > 0 : c < 0;
    });
    return Value::list(std::move(items));
}

Value filter_sum(const Value& v, const CallArgs& args) {
    auto attribute = attribute_arg(args, 0);
    const Value* start = arg(args, 1, "start");
    bool any_float = start && start->is_float();
    double total_f = start ? start->as_double() : 0.0;
    int64_t total_i = start && !start->is_float() ? (start->is_bool() ? start->as_bool() : start->as_int()) : 0;
    for (const Value& item : iterate(v)) {
        Value x = attribute ? attribute_path(item, *attribute) : item;
        if (!x.is_number()) value_error("unsupported operand type(s) for +: 'int' and '{}'", type_name(x));
        any_float = any_float || x.is_float();
        total_f += x.as_double();
        if (!x.is_float()) total_i += x.is_bool() ? x.as_bool() : x.as_int();
    }
    return any_float ? Value::number(total_f) : Value::integer(total_i);
}

// HF's tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False), with
// its arguments in that order (jinja2's own tojson, which HF replaces, takes indent first).
Value filter_tojson(const Value& v, const CallArgs& args) {
    JsonStyle style;
    if (const Value* a = arg(args, 0, "ensure_ascii")) style.ensure_ascii = truthy(*a);
    if (const Value* a = arg(args, 1, "indent"); a && !a->is_none()) {
        if (!a->is_int()) value_error("tojson indent must be an integer");
        style.indent = static_cast<int>(a->as_int());
    }
    if (const Value* a = arg(args, 2, "separators"); a && !a->is_none()) {
        if (!a->is_list() || a->as_list().size() != 2 || !a->as_list()[0].is_string() || !a->as_list()[1].is_string())
            value_error("tojson separators must be a pair of strings");
        style.item_separator = a->as_list()[0].as_string();
        style.key_separator = a->as_list()[1].as_string();
        style.custom_separators = true;
    }
    if (const Value* a = arg(args, 3, "sort_keys")) style.sort_keys = truthy(*a);
    return Value::string(to_json(v, style));
}

Value filter_trim(const Value& v, const CallArgs& args) {
    const Value* chars = arg(args, 0, "chars");
    std::optional<std::string> set;
    if (chars && !chars->is_none()) set = to_str(*chars);
    return Value::string(pystr::strip(to_str(v), set, true, true));
}

Value filter_unique(const Value& v, const CallArgs& args) {
    bool case_sensitive = bool_arg(args, 0, "case_sensitive", false);
    auto attribute = attribute_arg(args, 1);
    List out, seen;
    for (const Value& item : iterate(v)) {
        Value key = sort_key(attribute ? attribute_path(item, *attribute) : item, case_sensitive);
        if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) continue;
        seen.push_back(key);
        out.push_back(item);
    }
    return Value::list(std::move(out));
}

Value filter_wordcount(const Value& v, const CallArgs&) {
    return Value::integer(static_cast<int64_t>(pystr::split(to_str(v), std::nullopt, -1).size()));
}

const std::unordered_map<std::string_view, FilterFunction>& filters() {
    static const std::unordered_map<std::string_view, FilterFunction> table = {
        {"abs", filter_abs},           {"attr", filter_attr},
        {"capitalize", filter_capitalize}, {"count", filter_length},
        {"d", filter_default},         {"default", filter_default},
        {"dictsort", filter_dictsort}, {"e", filter_escape},
        {"escape", filter_escape},     {"first", filter_first},
        {"float", filter_float},       {"indent", filter_indent},
        {"int", filter_int},           {"items", filter_items},
        {"join", filter_join},         {"last", filter_last},
        {"length", filter_length},     {"list", filter_list},
        {"lower", filter_lower},       {"map", filter_map},
        {"max", filter_max},           {"min", filter_min},
        {"reject", filter_reject},     {"rejectattr", filter_rejectattr},
        {"replace", filter_replace},   {"reverse", filter_reverse},
        {"round", filter_round},       {"safe", filter_safe},
        {"select", filter_select},     {"selectattr", filter_selectattr},
        {"sort", filter_sort},         {"string", filter_string},
        {"sum", filter_sum},           {"title", filter_title},
        {"tojson", filter_tojson},     {"trim", filter_trim},
        {"unique", filter_unique},     {"upper", filter_upper},
        {"wordcount", filter_wordcount},
    };
    return table;
}

// ---- tests ----

const Value& test_operand(const CallArgs& args, std::string_view test) {
    if (args.positional.empty()) value_error("test '{}' needs an argument", test);
    return args.positional[0];
}

bool test_defined(const Value& v, const CallArgs&) { return !v.is_undefined(); }
bool test_undefined(const Value& v, const CallArgs&) { return v.is_undefined(); }
bool test_none(const Value& v, const CallArgs&) { return v.is_none(); }
bool test_boolean(const Value& v, const CallArgs&) { return v.is_bool(); }
bool test_true(const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); }
bool test_false(const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool test_integer(const Value& v, const CallArgs&) { return v.is_int(); }
bool test_float(const Value& v, const CallArgs&) { return v.is_float(); }
bool test_number(const Value& v, const CallArgs&) { return v.is_number(); }
bool test_string(const Value& v, const CallArgs&) { return v.is_string(); }
bool test_mapping(const Value& v, const CallArgs&) { return v.is_dict(); }
bool test_callable(const Value& v, const CallArgs&) { return v.is_callable(); }
// jinja2: anything iter() accepts, which includes dicts and its Undefined.
bool test_iterable(const Value& v, const CallArgs&) { return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined(); }
bool test_sequence(const Value& v, const CallArgs&) { return v.is_string() || v.is_list() || v.is_dict(); }
bool test_lower(const Value& v, const CallArgs&) { return v.is_string() && pystr::lower(v.as_string()) == v.as_string(); }
bool test_upper(const Value& v, const CallArgs&) { return v.is_string() && pystr::upper(v.as_string()) == v.as_string(); }

int64_t integer_of(const Value& v, std::string_view test) {
    if (v.is_int()) return v.as_int();
    if (v.is_bool()) return v.as_bool();
    value_error("test '{}' needs an integer, got {}", test, type_name(v));
}
bool test_odd(const Value& v, const CallArgs&) { return integer_of(v, "odd") % 2 != 0; }
bool test_even(const Value& v, const CallArgs&) { return integer_of(v, "even") % 2 == 0; }
bool test_divisibleby(const Value& v, const CallArgs& args) {
    int64_t d = integer_of(test_operand(args, "divisibleby"), "divisibleby");
    if (d == 0) value_error("integer division or modulo by zero");
    return integer_of(v, "divisibleby") % d == 0;
}
bool test_eq(const Value& v, const CallArgs& args) { return equals(v, test_operand(args, "eq")); }
bool test_ne(const Value& v, const CallArgs& args) { return !equals(v, test_operand(args, "ne")); }
bool test_lt(const Value& v, const CallArgs& args) { return compare(v, test_operand(args, "lt")) < 0; }
bool test_le(const Value& v, const CallArgs& args) { return compare(v, test_operand(args, "le")) <= 0; }
bool test_gt(const Value& v, const CallArgs& args) { return compare(v, test_operand(args, "gt")) > 0; }
bool test_ge(const Value& v, const CallArgs& args) { return compare(v, test_operand(args, "ge")) >= 0; }
bool test_in(const Value& v, const CallArgs& args) { return contains(test_operand(args, "in"), v); }
// Python's `is`: None, True and False are singletons; other values compare as equal-and-same-kind,
// which is what identity means for the immutable values a template holds.
bool test_sameas(const Value& v, const CallArgs& args) {
    const Value& other = test_operand(args, "sameas");
    return v.kind() == other.kind() && equals(v, other);
}

const std::unordered_map<std::string_view, TestFunction>& tests() {
    static const std::unordered_map<std::string_view, TestFunction> table = {
        {"defined", test_defined},   {"undefined", test_undefined}, {"none", test_none},
        {"boolean", test_boolean},   {"true", test_true},           {"false", test_false},
        {"integer", test_integer},   {"float", test_float},         {"number", test_number},
        {"string", test_string},     {"mapping", test_mapping},     {"callable", test_callable},
        {"iterable", test_iterable}, {"sequence", test_sequence},   {"lower", test_lower},
        {"upper", test_upper},       {"odd", test_odd},             {"even", test_even},
        {"divisibleby", test_divisibleby},
        {"eq", test_eq},             {"equalto", test_eq},          {"==", test_eq},
        {"ne", test_ne},             {"!=", test_ne},
        {"lt", test_lt},             {"lessthan", test_lt},         {"<", test_lt},
        {"le", test_le},             {"<=", test_le},
        {"gt", test_gt},             {"greaterthan", test_gt},      {">", test_gt},
        {"ge", test_ge},             {">=", test_ge},
        {"in", test_in},             {"sameas", test_sameas},
    };
    return table;
}

}  // namespace

FilterFunction find_filter(std::string_view name) {
    auto it = filters().find(name);
    return it == filters().end() ? nullptr : it->second;
}

TestFunction find_test(std::string_view name) {
    auto it = tests().find(name);
    return it == tests().end() ? nullptr : it->second;
}

}  // namespace deltabit::text::jinja
