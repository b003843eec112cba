// One entry point for every place a tokenizer comes from. PATH may be a tokenizer.json, a Hugging Face
// folder that holds one, or a .gguf (recognised by its magic, not its name).
#pragma once

#include "text/tokenizer.h"

#include <string>

namespace deltabit::text {

Tokenizer load_tokenizer(const std::string& path);

}  // namespace deltabit::text
