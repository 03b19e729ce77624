// The tokenizer stored in a GGUF file's metadata (tokenizer.ggml.*), as the tokenizer.json document
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
nlohmann::json tokenizer_json_from_gguf(const nlohmann::json& metadata, const std::string& source);

// The other way, for writing a GGUF file, as tokenizer.ggml.* values:
//   - a byte-level BPE tokenizer.json (pre-tokenizer ByteLevel, or Splits by one of llama.cpp's
//     known regexes then ByteLevel): model "gpt2", "pre" naming the regexes, "merges" ("a b");
//   - a SentencePiece-style BPE (byte_fallback, spaces replaced by "▁" with or without a "▁"
//     prepended: Llama 2's, Gemma's): model "llama", "scores" that rank the pieces in the order
//     of the merges that make them (llama.cpp merges the adjacent pair whose piece scores
//     highest), "add_space_prefix", and the unknown piece's id.
// Both give "tokens", "token_type" (1 normal, 2 unknown, 3 special, 4 user-defined added, 6 a
// byte of byte fallback) and "add_bos_token" (whether the post-processor prepends a token).
// Throws input_error naming `source` for any other kind of tokenizer.
struct gguf_tokenizer {
  std::string model, pre;
  std::vector<std::string> tokens, merges;
  std::vector<std::int32_t> token_type;
  bool add_bos_token = false;
  std::vector<float> scores;      // "llama" only
  bool add_space_prefix = false;  // "llama" only
  std::int32_t unknown_token_id = -1;
};
gguf_tokenizer gguf_tokenizer_from_json(const nlohmann::json& tokenizer_json, const std::string& source);

}  // namespace troupe::tokenizer
