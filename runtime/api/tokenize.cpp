#include "runtime/api/tokenize.h"

#include <set>

#include "runtime/api/openai.h"
#include "runtime/api/tools.h"
#include "runtime/chat/chat_template.h"
#include "runtime/common/error.h"
#include "runtime/common/json.h"
#include "runtime/tokenizer/tokenizer.h"

namespace troupe::api {

namespace {

using json = nlohmann::json;

std::optional<bool> boolean(const json& j, const char* k) {
  auto it = j.find(k);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) bad_field(k, "expected a boolean");
  return it->get<bool>();
}

std::string model_of(const json& j) {
  auto it = j.find("model");
  if (it == j.end() || it->is_null()) return "";
  if (!it->is_string()) bad_field("model", "expected a string");
  return it->get<std::string>();
}

}  // namespace

tokenize_request parse_tokenize(const std::string& body) {
  const json j = parse_body_object(body, {"model", "prompt", "messages", "add_special_tokens", "add_generation_prompt",
                                     "chat_template_kwargs", "return_token_strs", "tools"});
  tokenize_request r;
  r.model = model_of(j);
  const bool has_prompt = j.contains("prompt") && !j["prompt"].is_null();
  const bool has_messages = j.contains("messages") && !j["messages"].is_null();
  if (has_prompt == has_messages) throw api_error(400, "give exactly one of prompt or messages", "prompt");
  if (has_prompt) {
    if (!j["prompt"].is_string()) bad_field("prompt", "expected a string");
    r.prompt = j["prompt"].get<std::string>();
  } else {
    r.messages = parse_messages(j["messages"]);
  }
  r.add_special_tokens = boolean(j, "add_special_tokens");
  r.add_generation_prompt = boolean(j, "add_generation_prompt").value_or(true);
  r.return_token_strs = boolean(j, "return_token_strs").value_or(false);
  if (j.contains("chat_template_kwargs") && !j["chat_template_kwargs"].is_null()) {
    if (!j["chat_template_kwargs"].is_object()) bad_field("chat_template_kwargs", "expected an object");
    r.template_kwargs = j["chat_template_kwargs"];
  }
  // The tools a chat request would render into its prompt (vLLM's /tokenize takes them too).
  if (j.contains("tools") && !j["tools"].is_null()) {
    if (has_prompt) bad_field("tools", "goes with messages, not with a prompt");
    const tool_request tools = parse_tools(json{{"tools", j["tools"]}});
    if (!tools.tools.empty()) r.template_kwargs["tools"] = tools.tools;
  }
  return r;
}

detokenize_request parse_detokenize(const std::string& body) {
  const json j = parse_body_object(body, {"model", "tokens"});
  detokenize_request r;
  r.model = model_of(j);
  if (!j.contains("tokens") || !j["tokens"].is_array()) bad_field("tokens", "is required (an array of token ids)");
  for (const auto& t : j["tokens"]) {
    if (!t.is_number_integer() || t.get<long long>() < INT32_MIN || t.get<long long>() > INT32_MAX)
      bad_field("tokens", "expected integer token ids");
    r.tokens.push_back(t.get<std::int32_t>());
  }
  return r;
}

json tokenize(const tokenize_request& r, const tokenizer::tokenizer* tok, const chat::chat_template* chat, int max_model_len) {
  if (!tok) throw api_error(400, "this model has no tokenizer", r.prompt ? "prompt" : "messages");
  std::vector<std::int32_t> ids;
  if (r.prompt) {
    ids = tok->encode(*r.prompt, r.add_special_tokens.value_or(true));
  } else {
    if (!chat) throw api_error(400, "this model has no chat template", "messages");
    std::string text;
    try {
      text = chat->render(r.messages, r.add_generation_prompt, r.template_kwargs);
    } catch (const input_error& e) {
      throw api_error(400, e.what(), "messages");
    }
    ids = tok->encode(text, r.add_special_tokens.value_or(false));
  }
  json out = {{"count", ids.size()}, {"max_model_len", max_model_len}, {"tokens", ids}};
  if (r.return_token_strs) {
    json strs = json::array();
    for (auto id : ids) strs.push_back(tok->token_text(id).value_or(""));
    out["token_strs"] = std::move(strs);
  }
  return out;
}

json detokenize(const detokenize_request& r, const tokenizer::tokenizer* tok, int vocab_size) {
  if (!tok) throw api_error(400, "this model has no tokenizer", "tokens");
  for (std::size_t i = 0; i < r.tokens.size(); ++i)
    if (r.tokens[i] < 0 || (vocab_size > 0 && r.tokens[i] >= vocab_size))
      bad_field("tokens", "token " + std::to_string(i) + " is " + std::to_string(r.tokens[i]) + ", outside the vocabulary [0, " +
                        std::to_string(vocab_size) + ")");
  return {{"prompt", tok->detokenize(r.tokens, true)}};
}

}  // namespace troupe::api
