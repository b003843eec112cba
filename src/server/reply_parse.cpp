#include "server/reply_parse.h"

#include <algorithm>

namespace deltabit::server {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == '\n' || s.front() == ' ' || s.front() == '\r' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// Length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t partial_tag(std::string_view text, std::string_view tag) {
    for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
        if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
    return 0;
}

// <function=NAME> <parameter=P>VALUE</parameter>... </function>: values are JSON when they parse as
// JSON (numbers, objects), else strings — what the Qwen3.5 template writes for each kind.
bool parse_xml_call(std::string_view body, ToolCall& call) {
    constexpr std::string_view kFn = "<function=";
    if (!body.starts_with(kFn)) return false;
    const size_t name_end = body.find('>');
    if (name_end == std::string_view::npos) return false;
    call.name = std::string(trim(body.substr(kFn.size(), name_end - kFn.size())));
    if (call.name.empty()) return false;
    std::string_view rest = body.substr(name_end + 1);
    const size_t fn_close = rest.rfind("</function>");
    if (fn_close == std::string_view::npos || !trim(rest.substr(fn_close + 11)).empty()) return false;
    rest = rest.substr(0, fn_close);
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    for (;;) {
        rest = trim(rest);
        if (rest.empty()) break;
        constexpr std::string_view kParam = "<parameter=";
        if (!rest.starts_with(kParam)) return false;
        const size_t pname_end = rest.find('>');
        if (pname_end == std::string_view::npos) return false;
        const std::string pname(trim(rest.substr(kParam.size(), pname_end - kParam.size())));
        const size_t close = rest.find("</parameter>", pname_end);
        if (pname.empty() || close == std::string_view::npos) return false;
        std::string_view value = rest.substr(pname_end + 1, close - pname_end - 1);
        if (value.starts_with('\n')) value.remove_prefix(1);
        if (value.ends_with('\n')) value.remove_suffix(1);
        nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(value, nullptr, false);
        args[pname] = parsed.is_discarded() ? nlohmann::ordered_json(std::string(value)) : parsed;
        rest = rest.substr(close + 12);
    }
    call.arguments = args.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);  // model text need not be UTF-8
    return true;
}

bool parse_json_call(std::string_view body, ToolCall& call) {
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
    call.name = j["name"].get<std::string>();
    if (call.name.empty()) return false;
    nlohmann::ordered_json args = j.contains("arguments") ? j["arguments"] : nlohmann::ordered_json::object();
    if (args.is_string()) args = nlohmann::ordered_json::parse(args.get<std::string>(), nullptr, false);
    if (args.is_discarded() || !args.is_object()) return false;
    call.arguments = args.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);  // model text need not be UTF-8
    return true;
}

}  // namespace

std::vector<ToolCall> parse_tool_calls(std::string_view text, bool& malformed) {
    std::vector<ToolCall> calls;
    malformed = false;
    std::string_view rest = trim(text);
    while (!rest.empty()) {
        if (!rest.starts_with(kCallOpen)) break;
        const size_t close = rest.find(kCallClose);
        if (close == std::string_view::npos) break;
        const std::string_view body = trim(rest.substr(kCallOpen.size(), close - kCallOpen.size()));
        ToolCall call;
        if (!parse_xml_call(body, call) && !parse_json_call(body, call)) break;
        calls.push_back(std::move(call));
        rest = trim(rest.substr(close + kCallClose.size()));
    }
    if (!rest.empty() || calls.empty()) {
        malformed = true;
        calls.clear();
    }
    return calls;
}

void ReplySplitter::drain(ReplyDelta& out, bool at_end) {
    for (;;) {
        if (in_tool_calls_) {
            calls_ += pending_;
            pending_.clear();
            return;
        }
        if (in_think_) {
            const size_t at = pending_.find(kThinkClose);
            if (at != std::string::npos) {
                out.reasoning += pending_.substr(0, at);
                pending_.erase(0, at + kThinkClose.size());
                in_think_ = false;
                continue;
            }
            const size_t keep = at_end ? 0 : partial_tag(pending_, kThinkClose);
            out.reasoning += pending_.substr(0, pending_.size() - keep);
            pending_.erase(0, pending_.size() - keep);
            return;
        }
        // Content: a <think> opens reasoning (models that write the tag themselves); a <tool_call>
        // starts the calls when tools were offered.
        size_t at = pending_.find(kThinkOpen);
        size_t call = tools_ ? pending_.find(kCallOpen) : std::string::npos;
        if (call != std::string::npos && (at == std::string::npos || call < at)) {
            out.content += pending_.substr(0, call);
            pending_.erase(0, call);
            in_tool_calls_ = true;
            continue;
        }
        if (at != std::string::npos) {
            out.content += pending_.substr(0, at);
            pending_.erase(0, at + kThinkOpen.size());
            in_think_ = true;
            continue;
        }
        size_t keep = 0;
        if (!at_end) {
            keep = partial_tag(pending_, kThinkOpen);
            if (tools_) keep = std::max(keep, partial_tag(pending_, kCallOpen));
        }
        out.content += pending_.substr(0, pending_.size() - keep);
        pending_.erase(0, pending_.size() - keep);
        return;
    }
}

ReplyDelta ReplySplitter::push(std::string_view text) {
    pending_ += text;
    ReplyDelta out;
    drain(out, /*at_end=*/false);
    return out;
}

ReplyEnd ReplySplitter::finish() {
    ReplyEnd end;
    drain(end.rest, /*at_end=*/true);
    if (!calls_.empty()) {
        end.tool_calls = parse_tool_calls(calls_, end.malformed);
        if (end.malformed) end.rest.content += calls_;  // never dropped: the text as the model wrote it
    }
    return end;
}

bool prompt_opens_thinking(std::string_view rendered_prompt) {
    const size_t open = rendered_prompt.rfind(kThinkOpen);
    if (open == std::string_view::npos) return false;
    const size_t close = rendered_prompt.rfind(kThinkClose);
    return close == std::string_view::npos || close < open;
}

}  // namespace deltabit::server
