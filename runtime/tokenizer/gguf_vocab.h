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
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace troupe::tokenizer {

// Throws input_error naming `source` and the key for a missing or unsupported tokenizer.
std::string tokenizer_json_from_gguf(const nlohmann::json& metadata, const std::string& source);

// The other way, for writing a GGUF file: a byte-level BPE tokenizer.json (pre-tokenizer
// ByteLevel, or a Split by the llama-bpe or qwen2 regex then ByteLevel) as tokenizer.ggml.*
// values: "model", "pre", "tokens", "token_type" (1 normal, 3 special, 4 user-defined added),
// "merges" ("a b" strings) and "add_bos_token" (whether the post-processor prepends a token).
// Throws input_error naming `source` for any other kind of tokenizer.
struct gguf_tokenizer {
  std::string model, pre;
  std::vector<std::string> tokens, merges;
  std::vector<std::int32_t> token_type;
  bool add_bos_token = false;
};
gguf_tokenizer gguf_tokenizer_from_json(const nlohmann::json& tokenizer_json, const std::string& source);

}  // namespace troupe::tokenizer
