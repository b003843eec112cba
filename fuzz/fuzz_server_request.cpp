// libFuzzer target for the server's request parser (server/request_parse.h) and reply splitter
// (server/reply_parse.h): any byte string, as a chat or a completions body, must parse into a request
// or raise RequestError naming a field — never crash, hang or raise anything else; and any byte string
// as a model's reply must split into reasoning, content and tool calls without crashing, losing no
// byte of a malformed call.
#include "server/reply_parse.h"
#include "server/request_parse.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace deltabit::server;
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const RequestLimits limits;
    // As a block-diffusion model's server parses them too (the odd sizes), which refuses more fields.
    const bool block_diffusion = size % 2 == 1;
    try {
        const ChatCompletionRequest r = parse_chat_request(text, limits, block_diffusion);
        if (r.messages.empty()) std::abort();  // the parser promises at least one message
    } catch (const RequestError& e) {
        if (e.error().status != 400) std::abort();
    }
    try {
        const CompletionRequest r = parse_completion_request(text, limits, block_diffusion);
        if (!r.prompt_text && r.prompt_ids.empty()) std::abort();  // a prompt was required
    } catch (const RequestError& e) {
        if (e.error().status != 400) std::abort();
    }
    // The same bytes as a reply, split at an arbitrary point, with thinking and tools on.
    ReplySplitter splitter(size % 2 == 1, /*tools=*/true);
    const size_t cut = size / 3;
    std::string out;
    ReplyDelta a = splitter.push(text.substr(0, cut));
    ReplyDelta b = splitter.push(text.substr(cut));
    ReplyEnd end = splitter.finish();
    const size_t released = a.reasoning.size() + a.content.size() + b.reasoning.size() + b.content.size() +
                            end.rest.reasoning.size() + end.rest.content.size();
    // Only tags (<think>, </think>) and parsed calls may be dropped from the text.
    if (end.tool_calls.empty() && released > size) std::abort();
    return 0;
}
