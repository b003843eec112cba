#include "convert/convert_plan.h"

#include "core/error.h"
#include "formats/gguf.h"
#include "models/config_gguf.h"
#include "models/fused_layouts.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace deltabit {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// torch's squeeze(): every dimension of size 1 goes (a [1, D] gate becomes {D}); a scalar keeps {1}.
std::vector<int64_t> squeezed(const std::vector<int64_t>& shape) {
    std::vector<int64_t> out;
    for (int64_t d : shape)
        if (d != 1) out.push_back(d);
    if (out.empty()) out.push_back(1);
    return out;
}

// Tensors llama.cpp stores F32 whatever the requested type (see convert_plan.h).
const char* kept_f32_reason(std::string_view name, size_t n_dims) {
    if (ends_with(name, "_norm.weight")) return "norm kept F32";
    if (n_dims <= 1) return "vector kept F32";
    if (contains(name, "ffn_gate_inp")) return "router kept F32";
    if (contains(name, "ssm_conv1d")) return "conv kept F32";
    if (!ends_with(name, ".weight")) return "non-weight kept F32";
    return nullptr;
}

// The type a row of `row_length` values falls back to when the requested type's block does not divide it.
DType fallback_type(DType requested, int64_t row_length) {
    const auto fits = [&](DType t) { return row_fits_blocks(t, uint64_t(row_length)); };
    switch (requested) {
        case DType::Q1_0: return fits(DType::Q8_0) ? DType::Q8_0 : DType::F16;
        case DType::Q2_0:
        case DType::Q2_0_G64: return fits(DType::Q4_0) ? DType::Q4_0 : DType::F16;
        default: return DType::F16;
    }
}

}  // namespace

void choose_storage_type(PlannedTensor& t, DType requested) {
    if (const char* reason = kept_f32_reason(t.name, t.shape.size())) {
        t.type = DType::F32;
        if (requested != DType::F32) t.type_reason = reason;
        return;
    }
    t.type = requested;
    if (!row_fits_blocks(requested, uint64_t(t.row_length()))) {
        t.type = fallback_type(requested, t.row_length());
        t.fallback = true;
        t.type_reason = fmt::format("row of {} is not a multiple of {}'s block of {}; fell back to {}", t.row_length(),
                                    dtype_name(requested), dtype_info(requested).block_elems, dtype_name(t.type));
    }
}

namespace {

// Layer index of "blk.N.…", or −1.
int64_t layer_of(std::string_view name) {
    if (name.substr(0, 4) != "blk.") return -1;
    return std::strtoll(std::string(name.substr(4)).c_str(), nullptr, 10);
}

// llama.cpp's order: token_embd, the layers in order, then output_norm and output.
bool write_order(const PlannedTensor& a, const PlannedTensor& b) {
    auto rank = [](const PlannedTensor& t) -> std::pair<int64_t, int64_t> {
        if (t.name.rfind("token_embd", 0) == 0) return {-1, 0};
        const int64_t layer = layer_of(t.name);
        if (layer >= 0) return {layer, 0};
        return {INT64_MAX, t.name.rfind("output_norm", 0) == 0 ? 0 : 1};
    };
    const auto ra = rank(a), rb = rank(b);
    return ra != rb ? ra < rb : a.name < b.name;
}

std::vector<float> to_floats(const WeightTensor& t) {
    std::vector<float> v(size_t(t.n_elements()));
    plain_to_f32(t.dtype, t.data, t.n_elements(), v.data(), t.origin);
    return v;
}

// Rows [first + h·head_rows, …) of every value head h' take the rows of HF head order[h'].
void reorder_head_rows(std::vector<float>& v, int64_t cols, int64_t first, int64_t head_rows,
                       const std::vector<int64_t>& order) {
    const std::vector<float> old = v;
    const int64_t block = head_rows * cols;
    for (size_t h = 0; h < order.size(); ++h)
        std::copy_n(old.begin() + (first * cols + order[h] * block), block, v.begin() + (first * cols + int64_t(h) * block));
}

// The same for columns: in every row, column block h' (head_cols wide) takes HF block order[h'].
void reorder_head_columns(std::vector<float>& v, int64_t cols, int64_t head_cols, const std::vector<int64_t>& order) {
    const int64_t rows = int64_t(v.size()) / cols;
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        float* data = v.data() + r * cols;
        std::copy_n(data, cols, row.begin());
        for (size_t h = 0; h < order.size(); ++h)
            std::copy_n(row.begin() + order[h] * head_cols, head_cols, data + int64_t(h) * head_cols);
    }
}

// The grouped → tiled reorder a tensor needs in a qwen35/qwen35moe file; null when it needs none.
std::function<void(std::vector<float>&)> tiled_reorder(std::string_view name, const std::vector<int64_t>& shape,
                                                       const ModelConfig& c) {
    const std::vector<int64_t> order = tiled_value_head_order(c.ssm_n_key_heads, c.ssm_n_value_heads);
    const int64_t cols = shape[0];
    const int64_t dv = c.ssm_value_dim, key_dim = c.ssm_n_key_heads * c.ssm_key_dim;
    auto rows = [=](int64_t first, int64_t head_rows, int64_t row_cols) {
        return [=](std::vector<float>& v) { reorder_head_rows(v, row_cols, first, head_rows, order); };
    };
    if (ends_with(name, ".attn_qkv.weight")) return rows(2 * key_dim, dv, cols);
    if (ends_with(name, ".attn_gate.weight")) return rows(0, dv, cols);
    if (ends_with(name, ".ssm_beta.weight") || ends_with(name, ".ssm_alpha.weight")) return rows(0, 1, cols);
    if (ends_with(name, ".ssm_a") || ends_with(name, ".ssm_dt.bias")) return rows(0, 1, 1);
    if (ends_with(name, ".ssm_conv1d.weight")) return rows(2 * key_dim, dv, cols);  // {K, C}: a row per channel
    if (ends_with(name, ".ssm_out.weight"))
        return [=](std::vector<float>& v) { reorder_head_columns(v, cols, dv, order); };
    return nullptr;
}

}  // namespace

uint32_t llama_file_type(DType requested) {
    switch (requested) {
        case DType::F32: return 0;
        case DType::F16: return 1;
        case DType::Q4_0: return 2;
        case DType::Q8_0: return 7;
        case DType::BF16: return 32;
        case DType::Q1_0: return 40;
        case DType::Q2_0:
        case DType::Q2_0_G64: return 41;
        case DType::I32: break;
    }
    fail("convert: no llama.cpp file type for {}", dtype_name(requested));
}

std::string_view convertible_types() { return "f32, f16, bf16, q8_0, q4_0, q1_0, q2_0, q2_0_g64"; }

DType parse_convert_type(std::string_view name) {
    const std::optional<DType> t = parse_dtype(name);
    if (!t || *t == DType::I32)
        fail("convert: --type {:?} is not a type deltabit writes (choose one of {})", name, convertible_types());
    return *t;
}

int64_t PlannedTensor::n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::vector<int64_t> tiled_value_head_order(int64_t n_key_heads, int64_t n_value_heads) {
    const int64_t r = n_value_heads / n_key_heads;
    std::vector<int64_t> order(static_cast<size_t>(n_value_heads));
    for (int64_t h = 0; h < n_value_heads; ++h) order[size_t(h)] = (h % n_key_heads) * r + h / n_key_heads;
    return order;
}

ConvertPlan plan_conversion(const ModelWeights& weights, DType requested, TensorTamper tamper) {
    ConvertPlan plan;
    plan.config = weights.config();
    ModelConfig& c = plan.config;
    // The loader never reads MTP weights (mtp.*), so the file cannot announce those layers.
    plan.dropped_nextn_layers = c.n_nextn_layers;
    c.n_nextn_layers = 0;
    const bool tiled = c.arch == Arch::qwen35 || c.arch == Arch::qwen35moe;
    if (tiled) c.value_head_order = ValueHeadOrder::tiled;
    {
        gguf::Writer scratch;  // refuses what a GGUF cannot express before any tensor is converted
        write_model_config_gguf(c, scratch);
    }

    for (const auto& [name, t] : weights.tensors()) {
        if (c.arch == Arch::qwen3next && (ends_with(name, ".ssm_beta.weight") || ends_with(name, ".ssm_alpha.weight")))
            continue;  // fused into ssm_ba below
        PlannedTensor p;
        p.name = name;
        p.shape = squeezed(t.shape);
        p.origin = t.origin;
        p.source_dtype = t.dtype;
        const WeightTensor* source = &t;
        std::function<void(std::vector<float>&)> reorder = tiled ? tiled_reorder(name, t.shape, c) : nullptr;
        p.values = [source, reorder, tamper, name] {
            std::vector<float> v = to_floats(*source);
            if (reorder) reorder(v);
            if (tamper) tamper(name, v);
            return v;
        };
        plan.tensors.push_back(std::move(p));
    }

    if (c.arch == Arch::qwen3next) {
        const RowSplit ba = ba_rows(c.ssm_n_key_heads, c.ssm_n_value_heads);
        for (int64_t l = 0; l < c.n_layer(); ++l) {
            const std::string blk = fmt::format("blk.{}.", l);
            const WeightTensor* beta = weights.find(blk + "ssm_beta.weight");
            const WeightTensor* alpha = weights.find(blk + "ssm_alpha.weight");
            if (!beta && !alpha) continue;
            if (!beta || !alpha) fail("{}: layer {} has only one of ssm_beta and ssm_alpha", weights.source(), l);
            const int64_t cols = beta->shape[0];
            PlannedTensor p;
            p.name = blk + "ssm_ba.weight";
            p.shape = {cols, int64_t(ba.first.size() + ba.second.size())};
            p.origin = beta->origin + " and ssm_alpha";
            p.source_dtype = beta->dtype;
            p.values = [beta, alpha, ba, cols, tamper, name = p.name] {
                const std::vector<float> b = to_floats(*beta), a = to_floats(*alpha);
                std::vector<float> v(b.size() + a.size());
                for (size_t i = 0; i < ba.first.size(); ++i)
                    std::copy_n(b.begin() + int64_t(i) * cols, cols, v.begin() + ba.first[i] * cols);
                for (size_t i = 0; i < ba.second.size(); ++i)
                    std::copy_n(a.begin() + int64_t(i) * cols, cols, v.begin() + ba.second[i] * cols);
                if (tamper) tamper(name, v);
                return v;
            };
            plan.tensors.push_back(std::move(p));
        }
    }

    for (PlannedTensor& p : plan.tensors) choose_storage_type(p, requested);
    std::sort(plan.tensors.begin(), plan.tensors.end(), write_order);
    return plan;
}

}  // namespace deltabit
