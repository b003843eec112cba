#include "text/tokenizer_load.h"

#include "core/error.h"
#include "formats/gguf.h"
#include "text/tokenizer_gguf.h"
#include "text/tokenizer_hf_json.h"

#include <filesystem>
#include <fstream>

namespace deltabit::text {

Tokenizer load_tokenizer(const std::string& path) {
    namespace fs = std::filesystem;
    if (fs::is_directory(path)) {
        const fs::path json = fs::path(path) / "tokenizer.json";
        if (!fs::exists(json)) fail("tokenizer: {}: folder has no tokenizer.json", path);
        return Tokenizer(load_hf_tokenizer_spec(json.string()));
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("tokenizer: {}: cannot open", path);
    char magic[4] = {};
    in.read(magic, sizeof magic);
    if (in.gcount() == 4 && std::string_view(magic, 4) == "GGUF") {
        return Tokenizer(spec_from_gguf(gguf::File::open(path)));
    }
    return Tokenizer(load_hf_tokenizer_spec(path));
}

}  // namespace deltabit::text
