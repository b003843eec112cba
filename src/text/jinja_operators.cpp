// Python's binary operators on template values.
#include "text/jinja_builtins.h"

#include "text/jinja_error.h"

#include <cmath>

namespace deltabit::text::jinja {

namespace {

int64_t int_of(const Value& v) { return v.is_bool() ? int64_t{v.as_bool()} : v.as_int(); }

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
    value_error("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
}

// A template cannot build a string or list past this many bytes / items by repetition ('x' * 10**12).
constexpr int64_t kMaxRepeatedSize = int64_t{1} << 26;

Value repeat_sequence(const Value& seq, int64_t times) {
    int64_t unit = static_cast<int64_t>(seq.is_string() ? seq.as_string().size() : seq.as_list().size());
    if (times > 0 && unit > 0 && times > kMaxRepeatedSize / unit)
        value_error("repetition would make {} x {} elements, more than {}", unit, times, kMaxRepeatedSize);
    if (seq.is_string()) {
        std::string out;
        for (int64_t i = 0; i < times; ++i) out += seq.as_string();
        return Value::string(std::move(out));
    }
    List out;
    for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
    return Value::list(std::move(out));
}

Value numeric(std::string_view op, const Value& a, const Value& b) {
    bool as_float = a.is_float() || b.is_float();
    if (op == "/") {
        double d = b.as_double();
        if (d == 0.0) value_error("division by zero");
        return Value::number(a.as_double() / d);
    }
    if (as_float) {
        double x = a.as_double(), y = b.as_double();
        if (op == "+") return Value::number(x + y);
        if (op == "-") return Value::number(x - y);
        if (op == "*") return Value::number(x * y);
        if (op == "**") return Value::number(std::pow(x, y));
        if (y == 0.0) value_error("float division by zero");
        if (op == "//") return Value::number(std::floor(x / y));
        // Python's float %: the result takes the sign of the divisor.
        double r = std::fmod(x, y);
        if (r != 0.0 && ((r < 0) != (y < 0))) r += y;
        return Value::number(r);
    }
    // Python ints never overflow; ours are 64-bit, so overflow is an error rather than a wrong number.
    int64_t x = int_of(a), y = int_of(b), r = 0;
    auto checked = [&](bool overflowed) {
        if (overflowed) value_error("integer overflow in {} (values past 64 bits are not supported)", op);
        return Value::integer(r);
    };
    if (op == "+") return checked(__builtin_add_overflow(x, y, &r));
    if (op == "-") return checked(__builtin_sub_overflow(x, y, &r));
    if (op == "*") return checked(__builtin_mul_overflow(x, y, &r));
    if (op == "**") {
        if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
        r = 1;
        for (int64_t i = 0; i < y; ++i)
            if (__builtin_mul_overflow(r, x, &r)) return checked(true);
        return Value::integer(r);
    }
    if (x == INT64_MIN && y == -1) return checked(true);
    if (y == 0) value_error("integer division or modulo by zero");
    int64_t quotient = x / y, remainder = x % y;
    if (remainder != 0 && ((remainder < 0) != (y < 0))) {  // floor toward negative infinity, as Python does
        quotient -= 1;
        remainder += y;
    }
    return Value::integer(op == "//" ? quotient : remainder);
}

}  // namespace

Value binary_operation(std::string_view op, const Value& left, const Value& right) {
    if (op == "~") return Value::string(to_str(left) + to_str(right));
    if (left.is_undefined()) fail_undefined(left);
    if (right.is_undefined()) fail_undefined(right);
    if (left.is_number() && right.is_number()) return numeric(op, left, right);
    if (op == "+") {
        if (left.is_string() && right.is_string()) return Value::string(left.as_string() + right.as_string());
        if (left.is_list() && right.is_list()) {
            List joined = left.as_list();
            joined.insert(joined.end(), right.as_list().begin(), right.as_list().end());
            return Value::list(std::move(joined));
        }
        if (left.is_string())
            value_error("can only concatenate str (not \"{}\") to str", type_name(left.is_string() ? right : left));
    }
    if (op == "*") {
        if ((left.is_string() || left.is_list()) && (right.is_int() || right.is_bool())) return repeat_sequence(left, int_of(right));
        if ((right.is_string() || right.is_list()) && (left.is_int() || left.is_bool())) return repeat_sequence(right, int_of(left));
    }
    if (op == "%" && left.is_string()) value_error("printf-style formatting with % is not supported; use ~ or format()");
    unsupported(op, left, right);
}

}  // namespace deltabit::text::jinja
