// A Hugging Face tokenizer.json: added/special tokens, normalizer, pre-tokenizer, BPE model
// (byte-level as in GPT-2 / Llama 3 / Qwen2, or SentencePiece-style with byte fallback as in
// Llama 2), post-processor and decoder.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace troupe::tokenizer {

class tokenizer {
 public:
  // Reads a tokenizer.json file, and of the tokenizer_config.json beside it (if there is one)
  // clean_up_tokenization_spaces. Throws input_error naming the file and the unsupported or
  // malformed component.
  static std::unique_ptr<tokenizer> load(const std::string& path);
  static std::unique_ptr<tokenizer> from_json(const std::string& text, const std::string& source);
  // The same from a parsed document (a GGUF vocabulary's, built in memory: no text between).
  static std::unique_ptr<tokenizer> from_document(const nlohmann::json& doc, const std::string& source);
  ~tokenizer();

  // Token ids for `text`; add_special_tokens applies the post-processor's template (e.g. BOS).
  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  // The bytes the ids stand for. May end inside a UTF-8 character (a byte-fallback or
  // byte-level token can split one); see utf8_sanitize and incremental_detokenizer.
  std::string decode_bytes(const std::vector<std::int32_t>& ids, bool skip_special_tokens = true) const;
  // decode_bytes with invalid UTF-8 replaced by U+FFFD.
  std::string decode(const std::vector<std::int32_t>& ids, bool skip_special_tokens = true) const;
  // What Hugging Face's decode gives (transformers' and @huggingface/tokenizers'): decode, then,
  // where tokenizer_config.json sets clean_up_tokenization_spaces, the space before . ? ! , and
  // the English contractions removed. Generated text streams without it, as vLLM's does.
  std::string detokenize(const std::vector<std::int32_t>& ids, bool skip_special_tokens = true) const;

  std::optional<std::int32_t> token_id(std::string_view token) const;
  std::optional<std::string> token_text(std::int32_t id) const;
  bool is_special(std::int32_t id) const;
  // One past the largest id the tokenizer knows.
  std::int32_t vocab_size() const;

  struct impl;

 private:
  explicit tokenizer(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

// Turns a growing list of generated ids into text deltas that never split a UTF-8 character:
// each call returns the text that the new ids completed (possibly empty).
class incremental_detokenizer {
 public:
  incremental_detokenizer() = default;
  // Starts after `already` ids whose text was returned elsewhere; a few of them are kept as
  // context, since how a token decodes can depend on the one before it. `skip_special_tokens`
  // as in decode_bytes.
  explicit incremental_detokenizer(std::size_t already, bool skip_special_tokens = true)
      : prefix_(already > 5 ? already - 5 : 0), read_(already), skip_special_(skip_special_tokens) {}

  // `ids` is the whole output so far (it only grows between calls).
  std::string next(const tokenizer& tok, std::span<const std::int32_t> ids);
  // Ids whose text was returned so far (a replica that continues the output starts after them).
  std::size_t returned() const { return read_; }
  // Everything not yet returned, invalid bytes replaced; call once at the end.
  std::string flush(const tokenizer& tok, std::span<const std::int32_t> ids);

 private:
  std::pair<std::string, std::string> window_texts(const tokenizer& tok, std::span<const std::int32_t> ids) const;
  std::size_t prefix_ = 0, read_ = 0;
  bool skip_special_ = true;
};

}  // namespace troupe::tokenizer
