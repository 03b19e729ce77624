// The tokenizer stored in a GGUF file's metadata (tokenizer.ggml.*), as the tokenizer.json text
// that Hugging Face's converters would write for it, so one tokenizer implementation serves
// both formats:
//   "gpt2"  byte-level BPE: tokens + merges; the pre-tokenizer regex by tokenizer.ggml.pre;
//   "llama" SentencePiece BPE: tokens + scores; merges derived from the scores the way
//           Hugging Face derives them (a merge ranks by the score of the piece it makes), with
//           "▁" for spaces and <0xNN> byte fallback.
// Control and user-defined tokens (token_type 3 and 4) become special added tokens; BOS is
// prepended when tokenizer.ggml.add_bos_token says so (default: true for llama, false for gpt2).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace troupe::tokenizer {

// Throws input_error naming `source` and the key for a missing or unsupported tokenizer.
std::string tokenizer_json_from_gguf(const nlohmann::json& metadata, const std::string& source);

}  // namespace troupe::tokenizer
