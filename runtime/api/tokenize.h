// vLLM's /tokenize and /detokenize, which load generators and clients use to learn what a
// server's model reads (token counts, the context, the chat template's overhead). Pure: the
// request bodies parsed and checked, and the answers computed from a tokenizer and template.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace troupe::tokenizer {
class tokenizer;
}
namespace troupe::chat {
class chat_template;
}

namespace troupe::api {

// POST /tokenize: {"prompt": text} or {"messages": [...]} (rendered by the chat template), with
// "model", "add_special_tokens" (default: true for a prompt, false for messages, whose template
// writes them), "add_generation_prompt" (messages; default true), "chat_template_kwargs" and
// "return_token_strs". Any other field is refused by name.
struct tokenize_request {
  std::string model;
  std::optional<std::string> prompt;
  nlohmann::json messages;  // parsed as a chat request's, when no prompt
  nlohmann::json template_kwargs = nlohmann::json::object();
  bool add_generation_prompt = true;
  std::optional<bool> add_special_tokens;
  bool return_token_strs = false;
};

// POST /detokenize: {"tokens": [ids], "model"?}.
struct detokenize_request {
  std::string model;
  std::vector<std::int32_t> tokens;
};

// Throw api_error(400) naming the field for anything malformed.
tokenize_request parse_tokenize(const std::string& body);
detokenize_request parse_detokenize(const std::string& body);

// {"count", "max_model_len", "tokens"[, "token_strs"]}. Throws api_error(400) when the model has
// no tokenizer, or messages come without a chat template or fail to render.
nlohmann::json tokenize(const tokenize_request& r, const tokenizer::tokenizer* tok, const chat::chat_template* chat,
                        int max_model_len);

// {"prompt": text}. Throws api_error(400) naming the first id outside [0, vocab_size).
nlohmann::json detokenize(const detokenize_request& r, const tokenizer::tokenizer* tok, int vocab_size);

}  // namespace troupe::api
