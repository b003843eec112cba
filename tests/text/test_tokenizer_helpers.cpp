#include "text/test_tokenizer_helpers.h"

#include "text/tokenizer_sample_text.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace deltabit::text::testing {
namespace fs = std::filesystem;

namespace {

std::string base64(const std::string& bytes) {
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    size_t i = 0;
    for (; i + 2 < bytes.size(); i += 3) {
        const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
        for (int s = 18; s >= 0; s -= 6) out.push_back(kAlphabet[(v >> s) & 63]);
    }
    if (i + 1 == bytes.size()) {
        const uint32_t v = uint8_t(bytes[i]) << 16;
        out += kAlphabet[(v >> 18) & 63];
        out += kAlphabet[(v >> 12) & 63];
        out += "==";
    } else if (i + 2 == bytes.size()) {
        const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
        out += kAlphabet[(v >> 18) & 63];
        out += kAlphabet[(v >> 12) & 63];
        out += kAlphabet[(v >> 6) & 63];
        out += '=';
    }
    return out;
}

std::string utf8(char32_t cp) {
    std::string s;
    if (cp < 0x80) s += char(cp);
    else if (cp < 0x800) { s += char(0xC0 | (cp >> 6)); s += char(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) { s += char(0xE0 | (cp >> 12)); s += char(0x80 | ((cp >> 6) & 0x3F)); s += char(0x80 | (cp & 0x3F)); }
    else { s += char(0xF0 | (cp >> 18)); s += char(0x80 | ((cp >> 12) & 0x3F)); s += char(0x80 | ((cp >> 6) & 0x3F)); s += char(0x80 | (cp & 0x3F)); }
    return s;
}

}  // namespace

std::string reference_dir() { return std::string(DELTABIT_SOURCE_DIR) + "/tests/text/reference"; }

std::optional<std::string> npm_tokenizer_json(const std::string& package) {
    const fs::path p = fs::path(reference_dir()) / "node_modules" / package / "models" / "tokenizer.json";
    if (!fs::exists(p)) return std::nullopt;
    return p.string();
}

std::optional<std::string> reference_unavailable() {
    if (std::system("node --version > /dev/null 2>&1") != 0) {
        return "node is not installed (scripts/setup.sh installs it)";
    }
    if (!fs::exists(fs::path(reference_dir()) / "node_modules" / "@huggingface" / "tokenizers")) {
        return "npm references are not installed: run `npm ci` in tests/text/reference (scripts/setup.sh does)";
    }
    return std::nullopt;
}

std::vector<std::vector<int32_t>> reference_encode(const std::string& tokenizer_json,
                                                   const std::vector<ReferenceCase>& cases) {
    const fs::path dir = fs::temp_directory_path() /
                         fmt::format("deltabit-tokenizer-{}-{}", ::getpid(), std::random_device{}());
    fs::create_directories(dir);
    const fs::path corpus = dir / "corpus.b64";
    const fs::path out = dir / "ids.jsonl";
    {
        std::ofstream f(corpus, std::ios::binary);
        for (const auto& c : cases) f << (c.add_special ? "!" : "") << base64(c.text) << '\n';
    }
    const std::string command = fmt::format("node '{}/encode.mjs' '{}' '{}' '{}'", reference_dir(), tokenizer_json,
                                            corpus.string(), out.string());
    if (std::system(command.c_str()) != 0) {
        fs::remove_all(dir);
        throw std::runtime_error("reference failed: " + command);
    }
    std::vector<std::vector<int32_t>> ids;
    std::ifstream in(out);
    std::string line;
    while (std::getline(in, line)) ids.push_back(nlohmann::json::parse(line).get<std::vector<int32_t>>());
    fs::remove_all(dir);
    if (ids.size() != cases.size()) {
        throw std::runtime_error(fmt::format("reference returned {} results for {} cases", ids.size(), cases.size()));
    }
    return ids;
}

std::vector<std::string> hostile_cases() {
    std::vector<std::string> c = {
        "",
        "Hello world",
        " Hello world",
        "hello   world  ",
        // Emoji, with and without a leading space; ZWJ sequences, flags, variation selectors.
        "😀", " 😀", "a😀b", "😀😀😀", " 😀 😀", "👨‍👩‍👧‍👦 family", "🇯🇵🇫🇷", " 🏳️‍🌈", "❤️", "👍🏽",
        // Combining accents: decomposed forms that NFC composes, and ones with no composed form.
        "e\u0301", "Cafe\u0301 cre\u0300me bru\u0302le\u0301e", "A\u030A", "\u00C5", "a\u0308\u0301",
        "\u1100\u1161\u11A8", "q\u0307\u0323", "ﬁ ﬂ ㎏ ①", "\u2126 \u212B \u03A9",
        // Scripts.
        "नमस्ते दुनिया, यह एक परीक्षण है।", "你好，世界！我们在测试分词器。", "日本語のテキスト、カタカナとひらがな。",
        "สวัสดีครับ ภาษาไทยไม่มีช่องว่างระหว่างคำ", "مرحبا بالعالم، هذا اختبار ١٢٣٤", "שלום עולם",
        "Привет, мир! Ёжик.", "Γειά σου Κόσμε", "안녕하세요 세계", "ሰላም ልዑል", "Tiếng Việt có dấu",
        // Digits, numbers, dates.
        "2024-03-15", "12:30:45", "3.14159265358979", "1,000,000", "$1,234.56", "1e10 -7 +3", "v1.2.3",
        "1234567890123", "٣٤٥ ۱۲۳", "½ ² Ⅻ ↉", "０１２３", "１０ ２０ 第１０回", "x1y22z333", "phone: +1 (555) 010-9999",
        // Contractions, including the case-insensitive ones and U+017F (long s, case-folds to s).
        "don't I'LL we've She'S they'RE I'm you'D", "it'ſ", "''s", "'s's",
        // Code and markup.
        "def f(x):\n    return x**2  # square\n", "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
        "<div class=\"x\">&amp;</div>", "https://example.com/path?q=1&r=2#frag", "user@example.org",
        "if (a != b) { c += d; }\n\tint x = 0;",
        // Whitespace mixtures.
        "\t", "\t\t  x", "a\tb", " \n \n ", "\r\n", "a\r\nb\r\n\r\nc", "\n\n\nx", "x\n\n\n", "  \n  x",
        "end of line   \nnext", "\u00A0", "a\u00A0b",
        // Special-token strings inside ordinary text (matched by default, like Hugging Face).
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<think>\nreasoning\n</think>\n\nanswer",
        "text<|endoftext|>more", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
        "<bos><start_of_turn>user\nhello<end_of_turn>", "<|im_start", "<<|im_end|>>", "<|im_end|><|im_end|>",
        " <think> ", "<tool_call>{\"name\": \"f\"}</tool_call>", "<pad><eos><unk><mask>",
        // Control characters.
        std::string("nul\0byte", 8), "\x01\x02\x03", "\x7f", "\x1b[31mred\x1b[0m",
        // Invalid UTF-8: lone continuation, bad leads, overlong, surrogate, truncated, past U+10FFFF.
        "\xff", "abc\xfe\xfd", "\x80", "\xC0\x80", "\xC1\xBF", "\xED\xA0\x80", "\xF0\x9F\x98", " \xF0\x9F\x98",
        "\xF0\x9F\x98 x", "\xF4\x90\x80\x80", "\xE2\x82" "A", "\xF8\x88\x80\x80\x80", "ok\xE2\x82\xACok\xE2\x82",
    };
    // Runs of spaces 1..300 between words, alone, and before a newline.
    for (int n = 1; n <= 300; n = n < 40 ? n + 1 : n + 13) {
        const std::string spaces(n, ' ');
        c.push_back("a" + spaces + "b");
        c.push_back(spaces);
        c.push_back(spaces + "\n" + spaces + "x");
    }
    c.push_back("a" + std::string(256, ' ') + "b");
    c.push_back("a" + std::string(300, ' ') + "b");
    // Runs of newlines and tabs.
    for (int n = 1; n <= 64; n = n < 12 ? n + 1 : n * 2) {
        c.push_back(std::string(n, '\n'));
        c.push_back("x" + std::string(n, '\n') + "y");
        c.push_back(std::string(n, '\t') + "z");
        c.push_back(std::string(n, ' ') + std::string(n, '\n'));
    }
    // Every Unicode White_Space character and a few look-alikes that are not White_Space.
    for (char32_t cp : {0x0Bu, 0x0Cu, 0x85u, 0xA0u, 0x1680u, 0x2000u, 0x2003u, 0x2007u, 0x200Au, 0x2028u,
                        0x2029u, 0x202Fu, 0x205Fu, 0x3000u, 0x180Eu, 0x200Bu, 0xFEFFu, 0x2060u}) {
        const std::string w = utf8(cp);
        c.push_back("a" + w + "b");
        c.push_back("a" + w + w + "b");
        c.push_back("a " + w + " b");
        c.push_back(w + "x");
        c.push_back("x" + w);
    }
    return c;
}

std::vector<std::string> english_cases(size_t total_bytes, size_t case_bytes) {
    const std::string text = sample_english_text(total_bytes, 7);
    std::vector<std::string> cases;
    for (size_t pos = 0; pos < text.size(); pos += case_bytes) cases.push_back(text.substr(pos, case_bytes));
    return cases;
}

std::string escape_bytes(const std::string& bytes) {
    std::string out;
    for (unsigned char ch : bytes) {
        if (ch == '\n') out += "\\n";
        else if (ch == '\t') out += "\\t";
        else if (ch == '\r') out += "\\r";
        else if (ch < 0x20 || ch == 0x7F) out += fmt::format("\\x{:02x}", ch);
        else out += static_cast<char>(ch);
    }
    return out.size() > 300 ? out.substr(0, 300) + "..." : out;
}

}  // namespace deltabit::text::testing
