#include "convert/convert.h"

#include "core/error.h"
#include "core/file_io.h"
#include "core/quant.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "models/config_gguf.h"
#include "convert/convert_check.h"
#include "convert/convert_tokenizer.h"
#include "models/diffusion_gemma.h"
#include "models/hf_folder.h"
#include "models/model.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

namespace deltabit {

namespace {

namespace fs = std::filesystem;

// GGML_QNT_VERSION (ggml.h): the block layouts of the legacy quants as they have been since 2023.
constexpr uint32_t kQuantizationVersion = 2;

std::string default_name(const fs::path& dir) {
    fs::path p = dir;
    if (p.filename().empty()) p = p.parent_path();  // "folder/"
    return p.filename().string();
}

void quantize_into(const PlannedTensor& t, std::span<uint8_t> out) {
    const std::vector<float> values = t.values();
    const int64_t cols = t.row_length(), rows = int64_t(values.size()) / cols;
    const uint64_t row_bytes = dtype_bytes(t.type, uint64_t(cols));
    if (uint64_t(rows) * row_bytes != out.size() || rows * cols != int64_t(values.size()))
        fail("convert: tensor {}: {} values do not fill {} bytes of {}", t.name, values.size(), out.size(), dtype_name(t.type));
    for (int64_t r = 0; r < rows; ++r) quantize_row(t.type, values.data() + r * cols, out.data() + uint64_t(r) * row_bytes, cols);
}

TensorReport report_of(const PlannedTensor& t) {
    TensorReport r;
    r.name = t.name;
    r.shape = t.shape;
    r.source_dtype = std::string(dtype_name(t.source_dtype));
    r.type = t.type;
    r.type_reason = t.type_reason;
    r.fallback = t.fallback;
    r.bytes = dtype_bytes(t.type, uint64_t(t.n_elements()));
    return r;
}

// Proves one tensor of the re-read file against the plan (convert_check.h).
TensorErrorStats prove_tensor(const gguf::File& file, const PlannedTensor& t, TensorReport& r) {
    const gguf::TensorInfo& info = file.require_tensor(t.name);
    if (info.dtype != t.type || info.shape != t.shape)
        fail("convert: {}: tensor {} was written as {} {} but planned as {} {}", file.path(), t.name,
             dtype_name(info.dtype), fmt::join(info.shape, "x"), dtype_name(t.type), fmt::join(t.shape, "x"));
    const std::vector<float> source = t.values();
    const TensorErrorStats stats = check_round_trip(t.name, t.type, t.row_length(), info.span(), source);
    r.scales_checked = check_block_scales(t.name, t.type, t.row_length(), info.span(), source);
    r.lossless = stats.lossless;
    r.max_abs = stats.max_abs;
    r.rms_rel = stats.rms_rel;
    return stats;
}

// A fixed prompt that touches tokens spread over the vocabulary (7919 is prime, so the ids differ).
std::vector<int32_t> check_prompt(int64_t n_vocab, int64_t positions) {
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < positions; ++i) ids.push_back(int32_t((1 + 7919 * i) % n_vocab));
    return ids;
}

int64_t argmax(const float* v, int64_t n) { return std::max_element(v, v + n) - v; }

// The verdict on two models' logits, one row of n_vocab per entry of check.tokens: the largest logit and
// difference, top-1 agreement per row, and the tolerance of the requested type.
LogitsCheck judge_logits(LogitsCheck check, const std::vector<float>& want, const std::vector<float>& got,
                         int64_t n_vocab, DType requested, bool lossless) {
    if (got.size() != want.size())
        fail("convert: whole-model check: the GGUF gives {} logits, the HF folder {}", got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        check.max_abs_logit = std::max(check.max_abs_logit, double(std::abs(want[i])));
        const double diff = std::abs(double(got[i]) - double(want[i]));
        check.max_abs_diff = std::isnan(diff) ? INFINITY : std::max(check.max_abs_diff, diff);
    }
    for (int64_t p = 0; p < int64_t(check.tokens.size()); ++p)
        check.top1_agree += argmax(want.data() + p * n_vocab, n_vocab) == argmax(got.data() + p * n_vocab, n_vocab);
    check.tolerance = logits_tolerance(requested, lossless, check.max_abs_logit);
    check.passed = check.tolerance == 0.0 || check.max_abs_diff <= check.tolerance;
    return check;
}

LogitsCheck compare_logits(const Model& hf, const Model& gguf, DType requested, bool lossless, int64_t positions) {
    LogitsCheck check;
    check.ran = true;
    const int64_t n_vocab = hf.config().n_vocab;
    check.tokens = check_prompt(n_vocab, positions);
    SequenceState hf_state = hf.new_sequence(), gguf_state = gguf.new_sequence();
    // On the naive reference (no pool): its dot products sum in double, so a lossless file gives the same
    // logits bit for bit even where the GGUF layout permutes a product's inputs (qwen35's tiled value heads
    // reorder ssm_out's columns); the fast path's fp32 sums would differ in the last bits there.
    const Model::ForwardOptions reference{MatmulNumerics::f32, nullptr, true};
    const std::vector<float> want = hf.forward(hf_state, check.tokens, nullptr, reference);
    const std::vector<float> got = gguf.forward(gguf_state, check.tokens, nullptr, reference);
    return judge_logits(std::move(check), want, got, n_vocab, requested, lossless);
}

// Block diffusion has no left-to-right forward: the same check on what its generation loop computes —
// the prompt encoded into the cache, then a canvas denoised twice, without and with self-conditioning
// (the second step's input is the first step's logits), so every weight of both passes is exercised.
LogitsCheck compare_diffusion_logits(const Model& hf, const Model& gguf, DType requested, bool lossless,
                                     int64_t positions) {
    LogitsCheck check;
    check.ran = true;
    const ModelConfig& c = hf.config();
    const int64_t n_vocab = c.n_vocab;
    const DiffusionGemma hf_model(hf), gguf_model(gguf);
    const std::vector<int32_t> prompt = check_prompt(n_vocab, positions);
    // The canvas continues the same sequence of ids, so it differs from the prompt.
    const std::vector<int32_t> all = check_prompt(n_vocab, positions + c.canvas_length);
    const std::vector<int32_t> canvas(all.begin() + positions, all.end());
    check.tokens = canvas;
    DiffusionCache hf_cache = hf_model.new_cache(), gguf_cache = gguf_model.new_cache();
    hf_model.encode(hf_cache, prompt);
    gguf_model.encode(gguf_cache, prompt);
    const std::vector<float> first = hf_model.denoise(hf_cache, canvas);
    std::vector<float> want = first, got = gguf_model.denoise(gguf_cache, canvas);
    // Both self-condition on the folder's first logits, so the second step compares the weights alone.
    const std::vector<float> want2 = hf_model.denoise(hf_cache, canvas, first);
    const std::vector<float> got2 = gguf_model.denoise(gguf_cache, canvas, first);
    want.insert(want.end(), want2.begin(), want2.end());
    got.insert(got.end(), got2.begin(), got2.end());
    // top1_agree counts the canvas positions of both steps; tokens lists the canvas once per step.
    check.tokens.insert(check.tokens.end(), canvas.begin(), canvas.end());
    return judge_logits(std::move(check), want, got, n_vocab, requested, lossless);
}

// The fields that decide what the engine computes. For diffusion_gemma every one (its keys carry the
// whole config); for the autoregressive architectures the ones this check has always compared.
bool same_model_config(const ModelConfig& a, const ModelConfig& b) {
    if (a.arch != Arch::diffusion_gemma)
        return a.arch == b.arch && a.n_layer() == b.n_layer() && a.value_head_order == b.value_head_order &&
               a.layers == b.layers && a.tied_embeddings == b.tied_embeddings;
    return a.arch == b.arch && a.n_vocab == b.n_vocab && a.n_embd == b.n_embd && a.n_ff == b.n_ff &&
           a.rms_eps == b.rms_eps && a.tied_embeddings == b.tied_embeddings && a.n_head == b.n_head &&
           a.n_head_kv == b.n_head_kv && a.head_dim == b.head_dim && a.rope_dim == b.rope_dim &&
           a.rope_theta == b.rope_theta && a.attn_output_gate == b.attn_output_gate &&
           a.ssm_n_key_heads == b.ssm_n_key_heads && a.ssm_n_value_heads == b.ssm_n_value_heads &&
           a.ssm_key_dim == b.ssm_key_dim && a.ssm_value_dim == b.ssm_value_dim &&
           a.ssm_conv_kernel == b.ssm_conv_kernel && a.value_head_order == b.value_head_order &&
           a.n_expert == b.n_expert && a.n_expert_used == b.n_expert_used && a.expert_ff == b.expert_ff &&
           a.shared_expert_ff == b.shared_expert_ff && a.norm_topk_prob == b.norm_topk_prob && a.layers == b.layers &&
           a.layer_is_moe == b.layer_is_moe && a.layer_attention == b.layer_attention &&
           a.canvas_length == b.canvas_length && a.final_logit_softcap == b.final_logit_softcap &&
           a.pad_id == b.pad_id && a.image_token_id == b.image_token_id;
}

}  // namespace

double logits_tolerance(DType requested, bool lossless, double max_abs_logit) {
    // Lossless: both models hold the same numbers; only the summation order differs where value heads
    // were reordered, a few fp32 roundings (~1e-7 relative), far under 1e-5.
    if (lossless) return 1e-5 * max_abs_logit;
    // Lossy plain floats: every weight moved by at most the format's unit roundoff u (f16 2⁻¹¹,
    // bf16 2⁻⁸); a random-sign error of u per weight through a few layers moves the logits by a small
    // multiple of u relative to their scale. 4u leaves room for that while still catching any
    // convention mistake (which moves logits by O(1) relative).
    if (requested == DType::F16) return 4.0 / 2048.0 * max_abs_logit;
    if (requested == DType::BF16) return 4.0 / 256.0 * max_abs_logit;
    if (requested == DType::F32) return 1e-5 * max_abs_logit;  // F32 is lossless by construction
    return 0.0;  // lossy quantised types: reported, not enforced
}

ConvertReport convert_hf_folder(const fs::path& hf_dir, const fs::path& out, const ConvertOptions& options) {
    // Before any work: refuses a device, FIFO or folder as OUT, a missing folder, an unwritable one.
    AtomicFile output(out, "convert");

    HfFolder folder = open_hf_folder(hf_dir);
    auto files = std::make_shared<const safetensors::Set>(std::move(folder.weights));
    const Model hf_model(ModelWeights::from_hf(files, folder.config));
    ConvertPlan plan;
    try {
        plan = plan_conversion(hf_model.weights(), options.type, options.tamper);
    } catch (const Error& e) {
        fail("convert: {}: cannot be written as GGUF: {}", hf_dir.string(), e.what());
    }

    ConvertReport report;
    report.output = out;
    report.arch = plan.config.arch_name;
    report.requested = options.type;
    report.file_type = llama_file_type(options.type);
    report.dropped_nextn_layers = plan.dropped_nextn_layers;

    gguf::Writer writer;
    write_model_config_gguf(plan.config, writer);  // general.architecture first, then the hyperparameters
    writer.set_string("general.name", options.name.empty() ? default_name(hf_dir) : options.name);
    writer.set_u32("general.file_type", report.file_type);
    writer.set_u32("general.quantization_version", kQuantizationVersion);
    if (!folder.tokenizer.empty()) {
        write_tokenizer_gguf(folder.tokenizer, plan.config, writer);
        report.tokenizer_written = true;
    }

    const size_t count = plan.tensors.size();
    for (size_t i = 0; i < count; ++i) {
        const PlannedTensor& t = plan.tensors[i];
        report.tensors.push_back(report_of(t));
        report.fallbacks += t.fallback;
        writer.add_tensor_produced(t.name, t.type, t.shape, [&, i](std::span<uint8_t> bytes) {
            quantize_into(plan.tensors[i], bytes);
            if (options.on_tensor) options.on_tensor(report.tensors[i], i, count, false);
        });
    }

    try {
        writer.write_into(output);
        output.finish_writing();
        auto file = std::make_shared<const gguf::File>(gguf::File::open(output.temporary().string()));
        report.bytes = file->file_size();
        if (file->tensors().size() != count)
            fail("convert: {}: holds {} tensors but {} were written", out.string(), file->tensors().size(), count);
        double sum_err2 = 0.0, sum_x2 = 0.0;
        for (size_t i = 0; i < count; ++i) {
            TensorReport& r = report.tensors[i];
            const TensorErrorStats stats = prove_tensor(*file, plan.tensors[i], r);
            report.lossless = report.lossless && r.lossless;
            report.max_abs = std::max(report.max_abs, r.max_abs);
            sum_err2 += stats.sum_err2;
            sum_x2 += stats.sum_x2;
            if (options.on_tensor) options.on_tensor(r, i, count, true);
        }
        report.rms_rel = sum_err2 == 0.0 ? 0.0 : std::sqrt(sum_err2 / sum_x2);

        // The file must read back as the model that was planned.
        ModelConfig read = model_config_from_gguf(*file);
        if (!same_model_config(read, plan.config))
            fail("convert: {}: the metadata read back describes a different model than was written", out.string());
        if (options.check_logits) {
            const Model gguf_model(ModelWeights::from_gguf(file, std::move(read)));
            report.logits = plan.config.arch == Arch::diffusion_gemma
                                ? compare_diffusion_logits(hf_model, gguf_model, options.type, report.lossless,
                                                           options.logit_positions)
                                : compare_logits(hf_model, gguf_model, options.type, report.lossless,
                                                 options.logit_positions);
            if (!report.logits.passed)
                fail("convert: whole-model check failed: logits of {} and of the written GGUF differ by up to {:.3g} "
                     "(tolerance {:.3g} for a {} {} conversion; max |logit| {:.3g}); top-1 agrees at {}/{} positions; "
                     "{} was not written",
                     hf_dir.string(), report.logits.max_abs_diff, report.logits.tolerance,
                     report.lossless ? "lossless" : "lossy", dtype_name(options.type), report.logits.max_abs_logit,
                     report.logits.top1_agree, report.logits.tokens.size(), out.string());
        }
        output.commit();
    } catch (const Error& e) {
        // Checks of the re-read file name the temporary file; the user knows only OUT.
        throw Error(output.name_target_in(e.what()));
    }
    return report;
}

nlohmann::json convert_report_to_json(const ConvertReport& r) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const TensorReport& t : r.tensors) {
        nlohmann::json j = {{"name", t.name},          {"shape", t.shape},       {"source_dtype", t.source_dtype},
                            {"type", dtype_name(t.type)}, {"lossless", t.lossless}, {"max_abs_error", t.max_abs},
                            {"rms_rel_error", t.rms_rel}, {"scales_checked", t.scales_checked}, {"bytes", t.bytes},
                            {"fallback", t.fallback}};
        if (!t.type_reason.empty()) j["type_reason"] = t.type_reason;
        tensors.push_back(std::move(j));
    }
    nlohmann::json j = {{"output", r.output.string()},
                        {"architecture", r.arch},
                        {"type", dtype_name(r.requested)},
                        {"file_type", r.file_type},
                        {"lossless", r.lossless},
                        {"max_abs_error", r.max_abs},
                        {"rms_rel_error", r.rms_rel},
                        {"fallbacks", r.fallbacks},
                        {"bytes", r.bytes},
                        {"tokenizer", r.tokenizer_written},
                        {"dropped_nextn_layers", r.dropped_nextn_layers},
                        {"tensors", std::move(tensors)}};
    if (r.logits.ran)
        j["logits_check"] = {{"tokens", r.logits.tokens},
                             {"max_abs_diff", r.logits.max_abs_diff},
                             {"max_abs_logit", r.logits.max_abs_logit},
                             {"top1_agree", r.logits.top1_agree},
                             {"positions", r.logits.tokens.size()},
                             {"tolerance", r.logits.tolerance},
                             {"enforced", r.logits.tolerance > 0.0},
                             {"passed", r.logits.passed}};
    return j;
}

std::string describe_convert_report(const ConvertReport& r) {
    std::string s;
    for (const TensorReport& t : r.tensors) {
        s += fmt::format("  {:<36} {:<6} -> {:<5} {:<8} max|err| {:<9.3g} rms rel {:<9.3g}{}\n", t.name, t.source_dtype,
                         dtype_name(t.type), t.lossless ? "lossless" : "lossy", t.max_abs, t.rms_rel,
                         t.type_reason.empty() ? "" : "  (" + t.type_reason + ")");
    }
    s += fmt::format("{}: {} {} (file type {}), {} tensors, {:.1f} MiB\n", r.output.string(), r.arch,
                     dtype_name(r.requested), r.file_type, r.tensors.size(), double(r.bytes) / (1 << 20));
    s += fmt::format("  conversion: {}; worst max|err| {:.3g}, rms rel {:.3g}; {} fallback(s)\n",
                     r.lossless ? "LOSSLESS (every stored value equals the source)" : "lossy", r.max_abs, r.rms_rel,
                     r.fallbacks);
    if (r.dropped_nextn_layers > 0)
        s += fmt::format("  note: {} multi-token-prediction layer(s) of the checkpoint are not written\n",
                         r.dropped_nextn_layers);
    if (r.logits.ran)
        s += fmt::format("  whole model: max |dlogit| {:.3g} over {} positions (max |logit| {:.3g}), top-1 agrees {}/{}, {}\n",
                         r.logits.max_abs_diff, r.logits.tokens.size(), r.logits.max_abs_logit, r.logits.top1_agree,
                         r.logits.tokens.size(),
                         r.logits.tolerance > 0.0 ? fmt::format("within tolerance {:.3g}", r.logits.tolerance)
                                                   : std::string("reported only (lossy quantised type)"));
    else
        s += "  whole model: not checked (--no-logits-check)\n";
    return s;
}

}  // namespace deltabit
