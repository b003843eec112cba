#include "server/responses.h"

namespace deltabit::server {

std::string dump_json(const ordered_json& value) {
    return value.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

std::string error_body(const ApiError& error) {
    ordered_json e = {{"message", error.message}, {"type", error.type},
                      {"param", error.param.empty() ? ordered_json(nullptr) : ordered_json(error.param)},
                      {"code", error.code.empty() ? ordered_json(nullptr) : ordered_json(error.code)}};
    return dump_json({{"error", e}});
}

ordered_json usage_json(const JobEvent& done) {
    return {{"prompt_tokens", done.prompt_tokens},
            {"completion_tokens", done.completion_tokens},
            {"total_tokens", done.prompt_tokens + done.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", done.cached_tokens}}}};
}

namespace {

ordered_json bytes_of(std::string_view s) {
    ordered_json b = ordered_json::array();
    for (unsigned char c : s) b.push_back(int(c));
    return b;
}

}  // namespace

ordered_json chat_logprob_json(const TokenLogprob& lp, const text::Tokenizer& tokenizer) {
    auto entry = [&](int32_t token, float logprob) {
        const std::string_view text = tokenizer.token_bytes(token);
        return ordered_json{{"token", std::string(text)}, {"logprob", logprob}, {"bytes", bytes_of(text)}};
    };
    ordered_json out = entry(lp.token, lp.logprob);
    ordered_json top = ordered_json::array();
    for (const auto& [token, logprob] : lp.top) top.push_back(entry(token, logprob));
    out["top_logprobs"] = top;
    return out;
}

ordered_json tool_calls_json(const std::vector<ToolCall>& calls, const std::string& id_prefix, bool with_index) {
    ordered_json out = ordered_json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        ordered_json c;
        if (with_index) c["index"] = i;
        c["id"] = id_prefix + "-" + std::to_string(i);
        c["type"] = "function";
        c["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
        out.push_back(c);
    }
    return out;
}

void CompletionLogprobs::add(int32_t token, const TokenLogprob* lp, const text::Tokenizer& tokenizer, bool with_top) {
    const std::string text(tokenizer.token_bytes(token));
    tokens.push_back(text);
    token_logprobs.push_back(lp ? ordered_json(lp->logprob) : ordered_json(nullptr));
    if (with_top) {
        if (!lp) {
            top_logprobs.push_back(nullptr);
        } else {
            ordered_json top = ordered_json::object();
            for (const auto& [id, logprob] : lp->top) top[std::string(tokenizer.token_bytes(id))] = logprob;
            top_logprobs.push_back(top);
        }
    }
    text_offset.push_back(offset);
    offset += text.size();
}

ordered_json CompletionLogprobs::json() const {
    return {{"tokens", tokens}, {"token_logprobs", token_logprobs},
            {"top_logprobs", top_logprobs.empty() ? ordered_json(nullptr) : top_logprobs}, {"text_offset", text_offset}};
}

}  // namespace deltabit::server
