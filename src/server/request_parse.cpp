#include "server/request_parse.h"

#include "runtime/diffusion_settings.h"
#include "sampling/sampling_params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

namespace deltabit::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

[[noreturn]] void refuse(std::string param, std::string message) {
    throw RequestError(ApiError{.status = 400, .message = std::move(message), .param = std::move(param)});
}

std::string_view type_name(const ordered_json& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_array()) return "an array";
    return "an object";
}

[[noreturn]] void wrong_type(const std::string& field, std::string_view wanted, const ordered_json& v) {
    refuse(field, fmt::format("'{}' must be {}, not {}", field, wanted, type_name(v)));
}

ordered_json parse_object(std::string_view body) {
    ordered_json root;
    try {
        root = ordered_json::parse(body);
    } catch (const json::exception& e) {
        // parse_error says where it broke; out_of_range is a number no double holds (88E8888888888),
        // which the parser reports by throwing even when asked not to.
        refuse("", fmt::format("the body is not valid JSON: {}", e.what()));
    }
    if (!root.is_object()) refuse("", fmt::format("the body must be a JSON object, not {}", type_name(root)));
    return root;
}

// Edits (insert, delete, substitute) from a to b: how close a misspelt field is to a known one.
size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diagonal = above;
        }
    }
    return row[b.size()];
}

// The known field within two edits of `key` (most likely the one meant), or "" when none is that close.
std::string_view closest_field(std::string_view key, std::initializer_list<std::span<const std::string_view>> lists) {
    std::string_view closest;
    size_t best = 3;
    for (std::span<const std::string_view> known : lists)
        for (std::string_view k : known)
            if (const size_t d = edit_distance(key, k); d < best) best = d, closest = k;
    return closest;
}

[[noreturn]] void refuse_unknown(const std::string& field, std::string_view key,
                                 std::initializer_list<std::span<const std::string_view>> lists) {
    const std::string_view meant = closest_field(key, lists);
    refuse(field, meant.empty() ? fmt::format("unknown field '{}'", field)
                                : fmt::format("unknown field '{}' (did you mean '{}'?)", field, meant));
}

void check_known(const ordered_json& object, const std::string& where, std::initializer_list<std::string_view> known) {
    for (const auto& [key, value] : object.items())
        if (std::find(known.begin(), known.end(), key) == known.end())
            refuse_unknown(where.empty() ? key : where + "." + key, key, {std::span(known.begin(), known.size())});
}

bool get_bool(const ordered_json& v, const std::string& field) {
    if (!v.is_boolean()) wrong_type(field, "a boolean", v);
    return v.get<bool>();
}

std::string get_string(const ordered_json& v, const std::string& field) {
    if (!v.is_string()) wrong_type(field, "a string", v);
    return v.get<std::string>();
}

// A sampling setting: a number (a whole one for integer settings) within the sampling table's range
// under the OpenAI API's bounds (sampling/sampling_params.h), named `field` as the request spells it.
double get_sampling(const ordered_json& v, const std::string& field, std::string_view setting) {
    const bool integer = setting == "top_k";
    if (integer ? !v.is_number_integer() && !v.is_number_unsigned() : !v.is_number())
        wrong_type(field, integer ? "an integer" : "a number", v);
    const double x = v.get<double>();
    if (const std::optional<std::string_view> range = sampling_range_error(setting, x, SamplingBounds::openai_api))
        refuse(field, fmt::format("'{}' is {}; it must be {}", field, v.dump(), *range));
    return x;
}

// The request's spelling of a sampling setting.
std::string_view request_field(std::string_view setting) {
    return setting == "repeat_penalty" ? "repetition_penalty" : setting;
}

int64_t get_integer(const ordered_json& v, const std::string& field, int64_t low, int64_t high) {
    if (!v.is_number_integer() && !v.is_number_unsigned()) wrong_type(field, "an integer", v);
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
        refuse(field, fmt::format("'{}' is {}; it must be in [{}, {}]", field, v.dump(), low, high));
    const int64_t x = v.get<int64_t>();
    if (x < low || x > high) refuse(field, fmt::format("'{}' is {}; it must be in [{}, {}]", field, x, low, high));
    return x;
}

// The server's sampling defaults are OpenAI's (temperature 1, top_p 1, nothing else), not the CLI's.
SamplingParams server_sampling_defaults() {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 0;
    return p;
}

// One of the fields both endpoints share; false when `key` is not one of them.
// The top-level fields each parser below reads (for naming the one a misspelt field meant; the
// RequestParse.EveryDocumentedFieldIsKnown checks that every one listed is read).
constexpr std::string_view kGenerationFields[] = {
    "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "seed",
    "max_tokens", "max_completion_tokens", "stop", "stream", "stream_options", "user", "n"};
constexpr std::string_view kChatFields[] = {"model", "messages", "tools", "tool_choice", "chat_template_kwargs",
                                            "parallel_tool_calls", "logprobs", "top_logprobs"};
constexpr std::string_view kCompletionFields[] = {"model", "prompt", "echo", "logprobs"};

bool parse_generation_field(const std::string& key, const ordered_json& v, GenerationRequest& g,
                            const RequestLimits& limits, bool& seed_given) {
    if (key == "temperature") g.sampling.temperature = float(get_sampling(v, key, "temperature"));
    else if (key == "top_p") g.sampling.top_p = float(get_sampling(v, key, "top_p"));
    else if (key == "top_k") g.sampling.top_k = int(get_sampling(v, key, "top_k"));
    else if (key == "min_p") g.sampling.min_p = float(get_sampling(v, key, "min_p"));
    else if (key == "presence_penalty") g.sampling.presence_penalty = float(get_sampling(v, key, "presence_penalty"));
    else if (key == "frequency_penalty") g.sampling.frequency_penalty = float(get_sampling(v, key, "frequency_penalty"));
    else if (key == "repetition_penalty") g.sampling.repeat_penalty = float(get_sampling(v, key, "repeat_penalty"));
    else if (key == "seed") {
        if (!v.is_number_integer() && !v.is_number_unsigned()) wrong_type("seed", "an integer", v);
        g.sampling.seed = v.is_number_unsigned() ? v.get<uint64_t>() : uint64_t(v.get<int64_t>());
        seed_given = true;
    } else if (key == "max_tokens" || key == "max_completion_tokens") {
        if (v.is_null()) return true;
        g.max_tokens = get_integer(v, key, 0, limits.max_tokens);
    } else if (key == "stop") {
        if (v.is_null()) return true;
        if (v.is_string()) {
            g.stop = {v.get<std::string>()};
        } else if (v.is_array()) {
            if (int64_t(v.size()) > limits.max_stop_strings)
                refuse("stop", fmt::format("'stop' has {} strings; at most {} are allowed", v.size(), limits.max_stop_strings));
            g.stop.clear();
            for (size_t i = 0; i < v.size(); ++i) g.stop.push_back(get_string(v[i], fmt::format("stop[{}]", i)));
        } else {
            wrong_type("stop", "a string or an array of strings", v);
        }
        for (const std::string& s : g.stop)
            if (s.empty()) refuse("stop", "'stop' strings must not be empty");
    } else if (key == "stream") {
        g.stream = get_bool(v, "stream");
    } else if (key == "stream_options") {
        if (v.is_null()) return true;
        if (!v.is_object()) wrong_type("stream_options", "an object", v);
        check_known(v, "stream_options", {"include_usage"});
        if (v.contains("include_usage")) g.include_usage = get_bool(v["include_usage"], "stream_options.include_usage");
    } else if (key == "user") {
        get_string(v, "user");
    } else if (key == "n") {
        get_integer(v, "n", 1, 1);
    } else {
        return false;
    }
    return true;
}

void finish_generation(GenerationRequest& g, bool seed_given, const ordered_json& root) {
    // The settings as the sampler will hold them: a number in range as given can leave it as a float
    // (1e-50 for top_p becomes 0).
    if (const std::optional<SamplingRangeViolation> bad = check_sampling_params(g.sampling, SamplingBounds::openai_api)) {
        const std::string field(request_field(bad->field));
        refuse(field, fmt::format("'{}' is {} as a 32-bit float; it must be {}", field, bad->value, bad->range));
    }
    if (root.contains("stream_options") && !root["stream_options"].is_null() && !g.stream)
        refuse("stream_options", "'stream_options' is only allowed with \"stream\": true");
    g.seed_given = seed_given;
}

// A block-diffusion model: the first field given that its block loop has no use for, refused with the
// reason (a field left out, null, false, or an empty list asks for nothing and passes).
void refuse_for_block_diffusion(const ordered_json& root) {
    struct Field {
        std::string_view field, setting;
    };
    static constexpr Field kFields[] = {
        {"temperature", "temperature"}, {"top_p", "top_p"}, {"top_k", "top_k"}, {"min_p", "min_p"},
        {"presence_penalty", "presence_penalty"}, {"frequency_penalty", "frequency_penalty"},
        {"repetition_penalty", "repeat_penalty"}, {"stop", "stop"}, {"logprobs", "logprobs"},
        {"top_logprobs", "logprobs"}, {"tools", "tools"}, {"tool_choice", "tools"}, {"echo", "echo"}};
    for (const Field& f : kFields) {
        const auto it = root.find(std::string(f.field));
        if (it == root.end() || it->is_null() || (it->is_boolean() && !it->get<bool>())) continue;
        if ((it->is_array() || it->is_string()) && it->empty()) continue;
        if (f.field == "tool_choice" && *it == "none") continue;
        if (f.field == "top_logprobs" && *it == 0) continue;
        throw RequestError(ApiError{
            .status = 400,
            .message = fmt::format("'{}' does not apply to a block-diffusion model: {}", f.field,
                                   diffusion_inapplicable_reason(f.setting)),
            .param = std::string(f.field),
            .code = "unsupported_parameter"});
    }
}

ordered_json parse_message(const ordered_json& m, size_t i) {
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) wrong_type(where, "an object", m);
    check_known(m, where, {"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content"});
    if (!m.contains("role")) refuse(where + ".role", fmt::format("'{}.role' is missing", where));
    const std::string role = get_string(m["role"], where + ".role");
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer")
        refuse(where + ".role", fmt::format("'{}.role' is '{}'; it must be system, user, assistant or tool", where, role));
    ordered_json out = ordered_json::object();
    out["role"] = role == "developer" ? "system" : role;
    // content: a string, null (assistant with tool calls), or an array of text parts.
    if (m.contains("content") && !m["content"].is_null()) {
        const ordered_json& c = m["content"];
        if (c.is_string()) {
            out["content"] = c;
        } else if (c.is_array()) {
            std::string text;
            for (size_t k = 0; k < c.size(); ++k) {
                const std::string part = fmt::format("{}.content[{}]", where, k);
                if (!c[k].is_object()) wrong_type(part, "an object", c[k]);
                check_known(c[k], part, {"type", "text"});
                if (!c[k].contains("type") || get_string(c[k]["type"], part + ".type") != "text")
                    refuse(part + ".type", fmt::format("'{}.type' must be \"text\" (this server reads text only)", part));
                if (!c[k].contains("text")) refuse(part + ".text", fmt::format("'{}.text' is missing", part));
                text += get_string(c[k]["text"], part + ".text");
            }
            out["content"] = text;
        } else {
            wrong_type(where + ".content", "a string, an array of text parts or null", c);
        }
    } else if (role != "assistant") {
        refuse(where + ".content", fmt::format("'{}.content' is missing", where));
    } else {
        out["content"] = "";
    }
    if (m.contains("name")) out["name"] = get_string(m["name"], where + ".name");
    if (m.contains("reasoning_content") && !m["reasoning_content"].is_null()) {
        if (role != "assistant") refuse(where + ".reasoning_content", "'reasoning_content' is for assistant messages");
        out["reasoning_content"] = get_string(m["reasoning_content"], where + ".reasoning_content");
    }
    if (m.contains("tool_call_id")) {
        if (role != "tool") refuse(where + ".tool_call_id", "'tool_call_id' is for tool messages");
        out["tool_call_id"] = get_string(m["tool_call_id"], where + ".tool_call_id");
    }
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
        if (role != "assistant") refuse(where + ".tool_calls", "'tool_calls' is for assistant messages");
        const ordered_json& calls = m["tool_calls"];
        if (!calls.is_array()) wrong_type(where + ".tool_calls", "an array", calls);
        ordered_json rendered = ordered_json::array();
        for (size_t k = 0; k < calls.size(); ++k) {
            const std::string w = fmt::format("{}.tool_calls[{}]", where, k);
            const ordered_json& call = calls[k];
            if (!call.is_object()) wrong_type(w, "an object", call);
            check_known(call, w, {"id", "type", "function"});
            if (call.contains("type") && get_string(call["type"], w + ".type") != "function")
                refuse(w + ".type", fmt::format("'{}.type' must be \"function\"", w));
            if (!call.contains("function") || !call["function"].is_object())
                refuse(w + ".function", fmt::format("'{}.function' must be an object", w));
            const ordered_json& f = call["function"];
            check_known(f, w + ".function", {"name", "arguments"});
            if (!f.contains("name")) refuse(w + ".function.name", fmt::format("'{}.function.name' is missing", w));
            ordered_json fn = {{"name", get_string(f["name"], w + ".function.name")}};
            // OpenAI sends arguments as a JSON string; templates iterate them as a mapping, as
            // transformers' apply_chat_template expects.
            ordered_json args = ordered_json::object();
            if (f.contains("arguments")) {
                const ordered_json& a = f["arguments"];
                if (a.is_string()) {
                    args = ordered_json::parse(a.get<std::string>(), nullptr, false);
                    if (args.is_discarded() || !args.is_object())
                        refuse(w + ".function.arguments", fmt::format("'{}.function.arguments' must be a JSON object encoded as a string", w));
                } else if (a.is_object()) {
                    args = a;
                } else {
                    wrong_type(w + ".function.arguments", "a string", a);
                }
            }
            fn["arguments"] = args;
            ordered_json entry = {{"type", "function"}, {"function", fn}};
            if (call.contains("id")) entry["id"] = get_string(call["id"], w + ".id");
            rendered.push_back(entry);
        }
        out["tool_calls"] = rendered;
    }
    return out;
}

ordered_json parse_tools(const ordered_json& tools) {
    if (tools.is_null()) return nullptr;
    if (!tools.is_array()) wrong_type("tools", "an array", tools);
    ordered_json out = ordered_json::array();
    for (size_t i = 0; i < tools.size(); ++i) {
        const std::string w = fmt::format("tools[{}]", i);
        const ordered_json& t = tools[i];
        if (!t.is_object()) wrong_type(w, "an object", t);
        check_known(t, w, {"type", "function"});
        if (!t.contains("type") || get_string(t["type"], w + ".type") != "function")
            refuse(w + ".type", fmt::format("'{}.type' must be \"function\"", w));
        if (!t.contains("function") || !t["function"].is_object())
            refuse(w + ".function", fmt::format("'{}.function' must be an object", w));
        const ordered_json& f = t["function"];
        check_known(f, w + ".function", {"name", "description", "parameters", "strict"});
        if (!f.contains("name")) refuse(w + ".function.name", fmt::format("'{}.function.name' is missing", w));
        const std::string name = get_string(f["name"], w + ".function.name");
        if (name.empty()) refuse(w + ".function.name", fmt::format("'{}.function.name' is empty", w));
        if (f.contains("description")) get_string(f["description"], w + ".function.description");
        if (f.contains("parameters") && !f["parameters"].is_object())
            wrong_type(w + ".function.parameters", "an object (a JSON Schema)", f["parameters"]);
        if (f.contains("strict")) get_bool(f["strict"], w + ".function.strict");
        out.push_back(t);
    }
    return out;
}

ToolChoice parse_tool_choice(const ordered_json& v, const ordered_json& tools) {
    ToolChoice choice;
    if (v.is_string()) {
        const std::string s = v.get<std::string>();
        if (s == "none") choice.mode = ToolChoiceMode::none;
        else if (s == "auto") choice.mode = ToolChoiceMode::auto_;
        else if (s == "required") choice.mode = ToolChoiceMode::required;
        else refuse("tool_choice", fmt::format("'tool_choice' is '{}'; it must be none, auto, required or a function", s));
    } else if (v.is_object()) {
        check_known(v, "tool_choice", {"type", "function"});
        if (!v.contains("type") || get_string(v["type"], "tool_choice.type") != "function")
            refuse("tool_choice.type", "'tool_choice.type' must be \"function\"");
        if (!v.contains("function") || !v["function"].is_object())
            refuse("tool_choice.function", "'tool_choice.function' must be an object");
        check_known(v["function"], "tool_choice.function", {"name"});
        if (!v["function"].contains("name")) refuse("tool_choice.function.name", "'tool_choice.function.name' is missing");
        choice.mode = ToolChoiceMode::named;
        choice.name = get_string(v["function"]["name"], "tool_choice.function.name");
    } else {
        wrong_type("tool_choice", "a string or an object", v);
    }
    if (choice.mode == ToolChoiceMode::required || choice.mode == ToolChoiceMode::named) {
        if (!tools.is_array() || tools.empty())
            refuse("tool_choice", "'tool_choice' requires a tool call, but 'tools' is empty");
        if (choice.mode == ToolChoiceMode::named) {
            const bool found = std::any_of(tools.begin(), tools.end(), [&](const ordered_json& t) {
                return t["function"]["name"] == choice.name;
            });
            if (!found) refuse("tool_choice.function.name", fmt::format("'tool_choice' names '{}', which is not in 'tools'", choice.name));
        }
    }
    return choice;
}

}  // namespace

ChatCompletionRequest parse_chat_request(std::string_view body, const RequestLimits& limits, bool block_diffusion) {
    const ordered_json root = parse_object(body);
    ChatCompletionRequest r;
    r.generation.sampling = server_sampling_defaults();
    bool seed_given = false;
    for (const auto& [key, v] : root.items()) {
        if (parse_generation_field(key, v, r.generation, limits, seed_given)) continue;
        if (key == "model") r.model = get_string(v, "model");
        else if (key == "messages") {
            if (!v.is_array()) wrong_type("messages", "an array", v);
            if (int64_t(v.size()) > limits.max_messages)
                refuse("messages", fmt::format("'messages' has {} entries; at most {} are allowed", v.size(), limits.max_messages));
            for (size_t i = 0; i < v.size(); ++i) r.messages.push_back(parse_message(v[i], i));
        } else if (key == "tools") r.tools = parse_tools(v);
        else if (key == "tool_choice" || key == "chat_template_kwargs" || key == "parallel_tool_calls") {
            // read below, once tools are known
        } else if (key == "logprobs") {
            if (!v.is_null()) r.generation.logprobs = get_bool(v, "logprobs");
        } else if (key == "top_logprobs") {
            if (!v.is_null()) r.generation.top_logprobs = int(get_integer(v, "top_logprobs", 0, kMaxTopLogprobs));
        } else {
            refuse_unknown(key, key, {kGenerationFields, kChatFields});
        }
    }
    if (!root.contains("messages")) refuse("messages", "'messages' is missing");
    if (r.messages.empty()) refuse("messages", "'messages' is empty");
    if (root.contains("parallel_tool_calls")) get_bool(root["parallel_tool_calls"], "parallel_tool_calls");
    if (root.contains("tool_choice") && !root["tool_choice"].is_null())
        r.tool_choice = parse_tool_choice(root["tool_choice"], r.tools);
    if (r.generation.top_logprobs > 0 && !r.generation.logprobs)
        refuse("top_logprobs", "'top_logprobs' needs \"logprobs\": true");
    if (root.contains("chat_template_kwargs") && !root["chat_template_kwargs"].is_null()) {
        const ordered_json& k = root["chat_template_kwargs"];
        if (!k.is_object()) wrong_type("chat_template_kwargs", "an object", k);
        for (const auto& [name, value] : k.items()) {
            if (name == "enable_thinking") r.enable_thinking = get_bool(value, "chat_template_kwargs.enable_thinking");
            else if (name == "messages" || name == "tools" || name == "add_generation_prompt")
                refuse("chat_template_kwargs." + name, fmt::format("'chat_template_kwargs.{}' would replace the request's own", name));
            else r.template_kwargs[name] = value;
        }
    }
    finish_generation(r.generation, seed_given, root);
    if (block_diffusion) refuse_for_block_diffusion(root);
    return r;
}

CompletionRequest parse_completion_request(std::string_view body, const RequestLimits& limits, bool block_diffusion) {
    const ordered_json root = parse_object(body);
    CompletionRequest r;
    r.generation.sampling = server_sampling_defaults();
    r.generation.max_tokens = std::min<int64_t>(16, limits.max_tokens);  // OpenAI's default for completions
    bool seed_given = false;
    bool has_prompt = false;
    for (const auto& [key, v] : root.items()) {
        if (parse_generation_field(key, v, r.generation, limits, seed_given)) continue;
        if (key == "model") r.model = get_string(v, "model");
        else if (key == "prompt") {
            has_prompt = true;
            // A string, an array of ids, or a one-element array of either (lm-evaluation-harness
            // sends batches of one).
            const ordered_json* p = &v;
            if (v.is_array() && v.size() == 1 && (v[0].is_string() || v[0].is_array())) p = &v[0];
            if (p->is_string()) {
                r.prompt_text = p->get<std::string>();
            } else if (p->is_array()) {
                if (p->empty()) refuse("prompt", "'prompt' is empty");
                for (size_t i = 0; i < p->size(); ++i)
                    r.prompt_ids.push_back(int32_t(get_integer((*p)[i], fmt::format("prompt[{}]", i), 0,
                                                               std::numeric_limits<int32_t>::max())));
            } else {
                wrong_type("prompt", "a string or an array of token ids", v);
            }
        } else if (key == "echo") {
            r.echo = get_bool(v, "echo");
        } else if (key == "logprobs") {
            if (v.is_null()) continue;
            r.generation.logprobs = true;
            r.generation.top_logprobs = int(get_integer(v, "logprobs", 0, kMaxTopLogprobs));
        } else {
            refuse_unknown(key, key, {kGenerationFields, kCompletionFields});
        }
    }
    if (!has_prompt) refuse("prompt", "'prompt' is missing");
    if (r.prompt_text && r.prompt_text->empty()) refuse("prompt", "'prompt' is empty");
    if (r.generation.max_tokens && *r.generation.max_tokens == 0 && !r.echo)
        refuse("max_tokens", "'max_tokens' is 0; that is allowed only with \"echo\": true (scoring a prompt)");
    if (r.generation.stream && r.generation.max_tokens == 0)
        refuse("stream", "'stream' with 'max_tokens' 0 has nothing to stream");
    finish_generation(r.generation, seed_given, root);
    if (block_diffusion) refuse_for_block_diffusion(root);
    return r;
}

}  // namespace deltabit::server
