#include "sampling/sampling_params.h"

#include "core/error.h"

#include <array>
#include <charconv>
#include <cmath>
#include <random>

namespace deltabit {
namespace {

// The ranges follow what each stage can mean (sampler.cpp): a temperature below 0 or a top-p of 0
// has no reading; a repeat penalty of 0 divides by zero; min-p 1 would keep only logits ≥ the max
// (an undocumented greedy) and is refused in favour of temperature 0. The API ranges narrow three of
// them to OpenAI's documented bounds; the fields OpenAI does not have keep the engine's.
constexpr std::array<SamplingField, 12> kFields = {{
    {"temperature", "at least 0 (0 = greedy)", "in [0, 2] (0 = greedy)", false},
    {"top_k", "at least 0 (0 = off) and at most 2147483647", "at least 0 (0 = off) and at most 2147483647", true},
    {"top_p", "in (0, 1] (1 = off)", "in (0, 1] (1 = off)", false},
    {"min_p", "in [0, 1) (0 = off)", "in [0, 1) (0 = off)", false},
    {"repeat_penalty", "greater than 0 (1 = off)", "greater than 0 (1 = off)", false},
    {"presence_penalty", "a finite number (0 = off)", "in [-2, 2] (0 = off)", false},
    {"frequency_penalty", "a finite number (0 = off)", "in [-2, 2] (0 = off)", false},
    {"penalty_last_n", "at least -1 (0 = off, -1 = the whole history) and at most 2147483647",
     "at least -1 (0 = off, -1 = the whole history) and at most 2147483647", true},
    {"dry_multiplier", "at least 0 (0 = off)", "at least 0 (0 = off)", false},
    {"dry_base", "at least 1", "at least 1", false},
    {"dry_allowed_length", "at least 1 and at most 2147483647", "at least 1 and at most 2147483647", true},
    {"dry_window", "at least 0 (0 = the whole history) and at most 2147483647",
     "at least 0 (0 = the whole history) and at most 2147483647", true},
}};

bool in_engine_range(std::string_view name, double v) {
    if (name == "temperature" || name == "top_k" || name == "dry_multiplier" || name == "dry_window") return v >= 0;
    if (name == "top_p") return v > 0 && v <= 1;
    if (name == "min_p") return v >= 0 && v < 1;
    if (name == "repeat_penalty") return v > 0;
    if (name == "presence_penalty" || name == "frequency_penalty") return true;
    if (name == "penalty_last_n") return v >= -1;
    if (name == "dry_base" || name == "dry_allowed_length") return v >= 1;
    fail("sampling: no setting named {:?}", name);
}

bool in_api_range(std::string_view name, double v) {
    if (!in_engine_range(name, v)) return false;
    if (name == "temperature") return v <= 2;
    if (name == "presence_penalty" || name == "frequency_penalty") return v >= -2 && v <= 2;
    return true;
}

}  // namespace

uint64_t random_seed() {
    std::random_device entropy;
    return uint64_t(entropy());  // 32 bits (random_device::result_type is unsigned int)
}

std::span<const SamplingField> sampling_fields() { return kFields; }

std::optional<std::string_view> sampling_range_error(std::string_view field, double value, SamplingBounds bounds) {
    for (const SamplingField& f : kFields) {
        if (f.name != field) continue;
        const bool api = bounds == SamplingBounds::openai_api;
        const bool whole = !f.integer || (value == std::floor(value) && std::abs(value) <= 2147483647.0);
        if (std::isfinite(value) && whole && (api ? in_api_range(f.name, value) : in_engine_range(f.name, value)))
            return std::nullopt;
        return api ? f.api_range : f.range;
    }
    fail("sampling: no setting named {:?}", field);
}

std::optional<SamplingRangeViolation> check_sampling_params(const SamplingParams& p, SamplingBounds bounds) {
    const std::array<std::pair<std::string_view, double>, 12> values = {{
        {"temperature", p.temperature},
        {"top_k", p.top_k},
        {"top_p", p.top_p},
        {"min_p", p.min_p},
        {"repeat_penalty", p.repeat_penalty},
        {"presence_penalty", p.presence_penalty},
        {"frequency_penalty", p.frequency_penalty},
        {"penalty_last_n", p.penalty_last_n},
        {"dry_multiplier", p.dry_multiplier},
        {"dry_base", p.dry_base},
        {"dry_allowed_length", p.dry_allowed_length},
        {"dry_window", p.dry_window},
    }};
    for (const auto& [name, value] : values)
        if (const std::optional<std::string_view> range = sampling_range_error(name, value, bounds))
            return SamplingRangeViolation{name, value, *range};
    return std::nullopt;
}

std::optional<uint64_t> parse_seed(std::string_view text) {
    uint64_t value = 0;
    const char* end = text.data() + text.size();
    if (text.empty() || text.front() == '-' || text.front() == '+') return std::nullopt;
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (ec != std::errc{} || ptr != end) return std::nullopt;
    return value;
}

}  // namespace deltabit
