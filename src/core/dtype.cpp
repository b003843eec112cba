#include "core/dtype.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace deltabit {

namespace {

// Block sizes: ../shared/reference/llamacpp-formats-and-qwen35.md §1 and ggml-common.h.
constexpr std::array<DTypeInfo, 9> kInfo = {{
    {"f32", 0, 1, 4, false},
    {"f16", 1, 1, 2, false},
    {"bf16", 30, 1, 2, false},
    {"q8_0", 8, 32, 34, true},
    {"q4_0", 2, 32, 18, true},
    {"q1_0", 41, 128, 18, true},
    {"q2_0", 42, 128, 34, true},
    {"q2_0_g64", 42, 64, 18, true},
    {"i32", 26, 1, 4, false},
}};

}  // namespace

const DTypeInfo& dtype_info(DType t) { return kInfo[static_cast<size_t>(t)]; }

// PrismML's fork later moved its group-128 Q2_0 to id 142 (ggml.h @ 397c0876: GGML_TYPE_Q2_0_G128),
// leaving 42 to upstream's group-64 type; files written before that carry the group-128 type as 42.
constexpr uint32_t kPrismQ2_0G128Id = 142;

DTypeCandidates dtypes_for_ggml_id(uint32_t id) {
    DTypeCandidates out;
    if (id == kPrismQ2_0G128Id) {
        out.types[out.count++] = DType::Q2_0;
        return out;
    }
    for (size_t i = 0; i < kInfo.size(); ++i) {
        if (kInfo[i].ggml_id == id) out.types[out.count++] = static_cast<DType>(i);
    }
    return out;
}

std::optional<DType> parse_dtype(std::string_view name) {
    std::string lower(name);
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    for (size_t i = 0; i < kInfo.size(); ++i) {
        if (kInfo[i].name == lower) return static_cast<DType>(i);
    }
    return std::nullopt;
}

std::string_view ggml_type_name(uint32_t id) {
    // Names of ggml's type ids (ggml.h), so an unsupported type is refused by name, not just number.
    static constexpr std::array<std::string_view, 43> kNames = {
        "f32",  "f16",  "q4_0", "q4_1", "q4_2(removed)", "q4_3(removed)", "q5_0", "q5_1", "q8_0", "q8_1",
        "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q8_k", "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s",
        "iq4_nl", "iq3_s", "iq2_s", "iq4_xs", "i8", "i16", "i32", "i64", "f64", "iq1_m",
        "bf16", "q4_0_4_4(removed)", "q4_0_4_8(removed)", "q4_0_8_8(removed)", "tq1_0", "tq2_0",
        "iq4_nl_4_4(removed)", "iq4_nl_4_8(removed)", "iq4_nl_8_8(removed)", "mxfp4", "nvfp4", "q1_0", "q2_0"};
    if (id == kPrismQ2_0G128Id) return "q2_0_g128";
    return id < kNames.size() ? kNames[id] : std::string_view("unknown");
}

}  // namespace deltabit
