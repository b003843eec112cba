// Reading a tokenizer from GGUF metadata as llama.cpp's converter writes it:
//   tokenizer.ggml.model        "gpt2" (byte-level BPE with merges) or "llama" (SentencePiece BPE by score)
//   tokenizer.ggml.pre          the pre-tokeniser's name ("qwen2", "qwen35", "llama-bpe", "gpt-2", ...)
//   tokenizer.ggml.tokens       every token's spelling, added tokens included
//   tokenizer.ggml.token_type   1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
//   tokenizer.ggml.merges       "left right" per merge (gpt2)
//   tokenizer.ggml.scores       per token (llama)
//   tokenizer.ggml.{bos,eos,padding,unknown}_token_id, add_bos_token, add_eos_token, add_space_prefix
// Control tokens become special added tokens; user-defined ones ordinary added tokens (<think>).
#pragma once

#include "text/tokenizer_spec.h"

namespace deltabit::gguf {
class File;
}

namespace deltabit::text {

TokenizerSpec spec_from_gguf(const gguf::File& file);

}  // namespace deltabit::text
