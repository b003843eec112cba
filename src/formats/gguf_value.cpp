// gguf::Value: construction, typed access and the compact array storage described in gguf.h.
#include "formats/gguf.h"

#include "core/error.h"
#include "formats/gguf_codec.h"

#include <bit>
#include <cstring>
#include <limits>

namespace deltabit::gguf {

static_assert(std::endian::native == std::endian::little, "GGUF is little-endian; so is every host we target");

std::string_view value_type_name(ValueType t) {
    switch (t) {
        case ValueType::UINT8: return "u8";
        case ValueType::INT8: return "i8";
        case ValueType::UINT16: return "u16";
        case ValueType::INT16: return "i16";
        case ValueType::UINT32: return "u32";
        case ValueType::INT32: return "i32";
        case ValueType::FLOAT32: return "f32";
        case ValueType::BOOL: return "bool";
        case ValueType::STRING: return "string";
        case ValueType::ARRAY: return "array";
        case ValueType::UINT64: return "u64";
        case ValueType::INT64: return "i64";
        case ValueType::FLOAT64: return "f64";
    }
    return "unknown type";
}

size_t value_type_size(ValueType t) {
    switch (t) {
        case ValueType::UINT8:
        case ValueType::INT8:
        case ValueType::BOOL: return 1;
        case ValueType::UINT16:
        case ValueType::INT16: return 2;
        case ValueType::UINT32:
        case ValueType::INT32:
        case ValueType::FLOAT32: return 4;
        case ValueType::UINT64:
        case ValueType::INT64:
        case ValueType::FLOAT64: return 8;
        case ValueType::STRING:
        case ValueType::ARRAY: return 0;
    }
    return 0;
}

bool is_signed_type(ValueType t) {
    return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 || t == ValueType::INT64;
}

bool is_scalar_type(ValueType t) { return value_type_size(t) != 0; }

uint64_t scalar_bits(ValueType t, const uint8_t* p) {
    switch (value_type_size(t)) {
        case 1: return is_signed_type(t) ? static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(*p))) : *p;
        case 2: {
            uint16_t v;
            std::memcpy(&v, p, 2);
            return is_signed_type(t) ? static_cast<uint64_t>(static_cast<int64_t>(static_cast<int16_t>(v))) : v;
        }
        case 4: {
            uint32_t v;
            std::memcpy(&v, p, 4);
            return is_signed_type(t) ? static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(v))) : v;
        }
        default: {
            uint64_t v;
            std::memcpy(&v, p, 8);
            return v;
        }
    }
}


Value ValueEncoder::scalar(ValueType t, uint64_t bits) {
    Value v;
    v.type_ = t;
    v.bits_ = bits;
    return v;
}

Value ValueEncoder::scalar_from_bytes(ValueType t, const uint8_t* p) { return scalar(t, scalar_bits(t, p)); }

Value ValueEncoder::scalar_array(ValueType element_type, uint64_t count, std::vector<uint8_t> raw) {
    Value v;
    v.type_ = ValueType::ARRAY;
    v.element_type_ = element_type;
    v.count_ = count;
    v.raw_ = std::move(raw);
    return v;
}

Value ValueEncoder::string_array(std::vector<std::string> strings) {
    Value v;
    v.type_ = ValueType::ARRAY;
    v.element_type_ = ValueType::STRING;
    v.count_ = strings.size();
    v.strings_ = std::move(strings);
    return v;
}

void ValueEncoder::append_string(std::string_view s, std::vector<uint8_t>& out) {
    append_le<uint64_t>(s.size(), out);
    out.insert(out.end(), s.begin(), s.end());
}

void ValueEncoder::append_payload(const Value& v, std::vector<uint8_t>& out) {
    if (v.type_ == ValueType::STRING) {
        append_string(v.string_, out);
    } else if (v.type_ == ValueType::ARRAY) {
        append_le<uint32_t>(static_cast<uint32_t>(v.element_type_), out);
        append_le<uint64_t>(v.count_, out);
        if (v.element_type_ == ValueType::STRING) {
            for (const std::string& s : v.strings_) append_string(s, out);
        } else if (v.element_type_ == ValueType::ARRAY) {
            for (const Value& item : v.items_) append_payload(item, out);
        } else {
            out.insert(out.end(), v.raw_.begin(), v.raw_.end());
        }
    } else {
        const size_t size = value_type_size(v.type_);
        const uint8_t* p = reinterpret_cast<const uint8_t*>(&v.bits_);
        out.insert(out.end(), p, p + size);  // little-endian: the low bytes come first
    }
}

Value Value::u8(uint8_t v) { return ValueEncoder::scalar(ValueType::UINT8, v); }
Value Value::i8(int8_t v) { return ValueEncoder::scalar(ValueType::INT8, static_cast<uint64_t>(static_cast<int64_t>(v))); }
Value Value::u16(uint16_t v) { return ValueEncoder::scalar(ValueType::UINT16, v); }
Value Value::i16(int16_t v) { return ValueEncoder::scalar(ValueType::INT16, static_cast<uint64_t>(static_cast<int64_t>(v))); }
Value Value::u32(uint32_t v) { return ValueEncoder::scalar(ValueType::UINT32, v); }
Value Value::i32(int32_t v) { return ValueEncoder::scalar(ValueType::INT32, static_cast<uint64_t>(static_cast<int64_t>(v))); }
Value Value::u64(uint64_t v) { return ValueEncoder::scalar(ValueType::UINT64, v); }
Value Value::i64(int64_t v) { return ValueEncoder::scalar(ValueType::INT64, static_cast<uint64_t>(v)); }
Value Value::f32(float v) { return ValueEncoder::scalar(ValueType::FLOAT32, std::bit_cast<uint32_t>(v)); }
Value Value::f64(double v) { return ValueEncoder::scalar(ValueType::FLOAT64, std::bit_cast<uint64_t>(v)); }
Value Value::boolean(bool v) { return ValueEncoder::scalar(ValueType::BOOL, v ? 1 : 0); }

Value Value::string(std::string v) {
    Value out;
    out.type_ = ValueType::STRING;
    out.string_ = std::move(v);
    return out;
}

Value Value::array(ValueType element_type, std::vector<Value> elements) {
    Value out;
    out.type_ = ValueType::ARRAY;
    out.element_type_ = element_type;
    out.count_ = elements.size();
    for (size_t i = 0; i < elements.size(); ++i) {
        if (elements[i].type_ != element_type) {
            fail("gguf: array of {}: element {} is a {}", value_type_name(element_type), i,
                 value_type_name(elements[i].type_));
        }
    }
    if (element_type == ValueType::STRING) {
        out.strings_.reserve(elements.size());
        for (Value& e : elements) out.strings_.push_back(std::move(e.string_));
    } else if (element_type == ValueType::ARRAY) {
        out.items_ = std::move(elements);
        for (Value& e : out.items_) e.key_.clear();
    } else if (is_scalar_type(element_type)) {
        const size_t size = value_type_size(element_type);
        out.raw_.resize(elements.size() * size);
        for (size_t i = 0; i < elements.size(); ++i) std::memcpy(out.raw_.data() + i * size, &elements[i].bits_, size);
    } else {
        fail("gguf: array of unknown element type {}", static_cast<uint32_t>(element_type));
    }
    return out;
}

Value Value::string_array(const std::vector<std::string>& v) {
    Value out;
    out.type_ = ValueType::ARRAY;
    out.element_type_ = ValueType::STRING;
    out.count_ = v.size();
    out.strings_ = v;
    return out;
}

Value Value::i32_array(const std::vector<int32_t>& v) {
    Value out;
    out.type_ = ValueType::ARRAY;
    out.element_type_ = ValueType::INT32;
    out.count_ = v.size();
    out.raw_.resize(v.size() * 4);
    if (!v.empty()) std::memcpy(out.raw_.data(), v.data(), out.raw_.size());
    return out;
}

Value Value::f32_array(const std::vector<float>& v) {
    Value out;
    out.type_ = ValueType::ARRAY;
    out.element_type_ = ValueType::FLOAT32;
    out.count_ = v.size();
    out.raw_.resize(v.size() * 4);
    if (!v.empty()) std::memcpy(out.raw_.data(), v.data(), out.raw_.size());
    return out;
}

bool Value::is_integer() const {
    switch (type_) {
        case ValueType::UINT8:
        case ValueType::INT8:
        case ValueType::UINT16:
        case ValueType::INT16:
        case ValueType::UINT32:
        case ValueType::INT32:
        case ValueType::UINT64:
        case ValueType::INT64: return true;
        default: return false;
    }
}

void Value::mismatch(std::string_view wanted) const {
    const std::string_view key = key_.empty() ? std::string_view("(array element)") : std::string_view(key_);
    if (type_ == ValueType::ARRAY) {
        fail("gguf: key {}: expected {}, found array of {}", key, wanted, value_type_name(element_type_));
    }
    fail("gguf: key {}: expected {}, found {}", key, wanted, value_type_name(type_));
}

uint64_t Value::as_u64() const {
    if (!is_integer()) mismatch("an integer");
    if (is_signed_type(type_) && static_cast<int64_t>(bits_) < 0) {
        fail("gguf: key {}: expected a non-negative integer, found {}", key_, static_cast<int64_t>(bits_));
    }
    return bits_;
}

int64_t Value::as_i64() const {
    if (!is_integer()) mismatch("an integer");
    if (type_ == ValueType::UINT64 && bits_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail("gguf: key {}: {} does not fit in i64", key_, bits_);
    }
    return static_cast<int64_t>(bits_);
}

uint32_t Value::as_u32() const {
    const uint64_t v = as_u64();
    if (v > std::numeric_limits<uint32_t>::max()) fail("gguf: key {}: {} does not fit in u32", key_, v);
    return static_cast<uint32_t>(v);
}

int32_t Value::as_i32() const {
    const int64_t v = as_i64();
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
        fail("gguf: key {}: {} does not fit in i32", key_, v);
    }
    return static_cast<int32_t>(v);
}

double Value::as_f64() const {
    if (type_ == ValueType::FLOAT32) return std::bit_cast<float>(static_cast<uint32_t>(bits_));
    if (type_ == ValueType::FLOAT64) return std::bit_cast<double>(bits_);
    if (is_integer()) {
        return is_signed_type(type_) ? static_cast<double>(static_cast<int64_t>(bits_)) : static_cast<double>(bits_);
    }
    mismatch("a number");
}

bool Value::as_bool() const {
    if (type_ != ValueType::BOOL) mismatch("bool");
    return bits_ != 0;
}

const std::string& Value::as_string() const {
    if (type_ != ValueType::STRING) mismatch("string");
    return string_;
}

ValueType Value::element_type() const {
    if (type_ != ValueType::ARRAY) mismatch("array");
    return element_type_;
}

size_t Value::size() const {
    if (type_ != ValueType::ARRAY) mismatch("array");
    return count_;
}

Value Value::at(size_t i) const {
    if (type_ != ValueType::ARRAY) mismatch("array");
    if (i >= count_) fail("gguf: key {}: index {} out of range (array of {})", key_, i, count_);
    if (element_type_ == ValueType::STRING) return Value::string(strings_[i]);
    if (element_type_ == ValueType::ARRAY) return items_[i];
    return ValueEncoder::scalar_from_bytes(element_type_, raw_.data() + i * value_type_size(element_type_));
}

const std::vector<std::string>& Value::string_elements() const {
    if (type_ != ValueType::ARRAY || element_type_ != ValueType::STRING) mismatch("array of string");
    return strings_;
}

std::vector<std::string> Value::as_string_array() const { return string_elements(); }

std::vector<int64_t> Value::as_i64_array() const {
    if (type_ != ValueType::ARRAY || !is_scalar_type(element_type_) || element_type_ == ValueType::BOOL ||
        element_type_ == ValueType::FLOAT32 || element_type_ == ValueType::FLOAT64) {
        mismatch("array of integers");
    }
    const size_t size = value_type_size(element_type_);
    std::vector<int64_t> out(count_);
    for (size_t i = 0; i < count_; ++i) {
        const uint64_t bits = scalar_bits(element_type_, raw_.data() + i * size);
        if (element_type_ == ValueType::UINT64 && bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            fail("gguf: key {}: element {} = {} does not fit in i64", key_, i, bits);
        }
        out[i] = static_cast<int64_t>(bits);
    }
    return out;
}

std::vector<float> Value::as_f32_array() const {
    if (type_ != ValueType::ARRAY || !is_scalar_type(element_type_) || element_type_ == ValueType::BOOL) {
        mismatch("array of numbers");
    }
    const size_t size = value_type_size(element_type_);
    std::vector<float> out(count_);
    for (size_t i = 0; i < count_; ++i) {
        out[i] = ValueEncoder::scalar_from_bytes(element_type_, raw_.data() + i * size).as_f32();
    }
    return out;
}

bool Value::operator==(const Value& other) const {
    return type_ == other.type_ && bits_ == other.bits_ && string_ == other.string_ &&
           (type_ != ValueType::ARRAY || (element_type_ == other.element_type_ && count_ == other.count_ &&
                                          raw_ == other.raw_ && strings_ == other.strings_ && items_ == other.items_));
}

}  // namespace deltabit::gguf
