#include "tools/troupe/bench_serve/dataset.h"

#include <nlohmann/json.hpp>

#include "runtime/common/error.h"

namespace troupe::bench {

namespace {

using json = nlohmann::json;

// The server's error message from an error body, or the body itself.
std::string error_of(int status, const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_object())
    return "HTTP " + std::to_string(status) + ": " + j["error"].value("message", body);
  return "HTTP " + std::to_string(status) + ": " + body.substr(0, 200);
}

json post(const client_options& o, const std::string& path, const json& body) {
  auto [status, text] = http_post(o, path, body.dump());
  if (status != 200) throw input_error("POST " + path + ": " + error_of(status, text));
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw input_error("POST " + path + ": the answer is not a JSON object");
  return j;
}

json with_model(const client_options& o, json body) {
  if (!o.model.empty()) body["model"] = o.model;
  return body;
}

// A /tokenize body for `text` in the server's form (vLLM's add_special_tokens, llama.cpp's add_special).
json tokenize_body(const client_options& o, const std::string& text, bool special) {
  if (o.tokenize_field == "content") return with_model(o, {{"content", text}, {"add_special", special}});
  json body = {{"prompt", text}};
  if (!special) body["add_special_tokens"] = false;
  return with_model(o, body);
}

// The tokens a /tokenize answer counts: "count" (vLLM, troupe serve) or the "tokens" list; -1 for neither.
int token_count(const json& j) {
  if (j.contains("count") && j["count"].is_number_integer()) return j["count"].get<int>();
  if (j.contains("tokens") && j["tokens"].is_array()) return int(j["tokens"].size());
  return -1;
}

}  // namespace

server_info discover(const client_options& o) {
  server_info s;
  auto [status, body] = http_get(o, "/v1/models");
  if (status == 200) {
    auto j = json::parse(body, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
        j["data"][0].is_object()) {
      s.model = j["data"][0].value("id", "");
      const auto& card = j["data"][0];
      if (card.contains("max_model_len") && card["max_model_len"].is_number_integer()) s.max_model_len = card["max_model_len"].get<int>();
      if (card.contains("vocab_size") && card["vocab_size"].is_number_integer()) s.vocab_size = card["vocab_size"].get<int>();
    }
  }
  client_options named = o;
  if (named.model.empty()) named.model = s.model;
  try {
    json plain = post(named, "/tokenize", tokenize_body(named, "x", false));
    // llama.cpp's server reads "content" and answers a body without it with no tokens.
    if (!plain.contains("count") && token_count(plain) <= 0) {
      client_options content = named;
      content.tokenize_field = "content";
      const json other = post(content, "/tokenize", tokenize_body(content, "x", false));
      if (token_count(other) > 0) plain = other, named.tokenize_field = "content";
    }
    s.tokenize_field = named.tokenize_field;
    s.tokenizes = token_count(plain) > 0;
    if (!s.tokenizes) s.tokenize_error = "/tokenize answered neither a count nor tokens";
    if (s.max_model_len == 0 && plain.contains("max_model_len") && plain["max_model_len"].is_number_integer())
      s.max_model_len = plain["max_model_len"].get<int>();
    try {
      const json msgs = json::array({{{"role", "user"}, {"content", "x"}}});
      const json chat = post(named, "/tokenize", with_model(named, {{"messages", msgs}}));
      s.chat_overhead = std::max(0, token_count(chat) - token_count(plain));
    } catch (const input_error&) {
      // a model without a chat template (or a server that templates no messages): --chat
      // requests will be refused, and say why
    }
  } catch (const input_error& e) {
    s.tokenize_error = e.what();
  }
  return s;
}

std::vector<std::int32_t> tokenize_text(const client_options& o, std::string_view text) {
  constexpr std::size_t piece = 64 * 1024;
  std::vector<std::int32_t> out;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = std::min(text.size(), at + piece);
    if (end < text.size()) {
      const auto nl = text.rfind('\n', end);
      if (nl != std::string_view::npos && nl > at) end = nl + 1;
    }
    const json j = post(o, "/tokenize", tokenize_body(o, std::string(text.substr(at, end - at)), false));
    if (!j.contains("tokens") || !j["tokens"].is_array()) throw input_error("POST /tokenize: the answer has no tokens");
    for (const auto& t : j["tokens"]) out.push_back(t.get<std::int32_t>());
    at = end;
  }
  return out;
}

int count_tokens(const client_options& o, const std::string& text) {
  return std::max(0, token_count(post(o, "/tokenize", tokenize_body(o, text, true))));
}

std::string detokenize(const client_options& o, const std::vector<std::int32_t>& ids) {
  const json j = post(o, "/detokenize", with_model(o, {{"tokens", ids}}));
  const char* field = o.tokenize_field == "content" ? "content" : "prompt";  // llama.cpp answers {"content": ...}
  if (!j.contains(field) || !j[field].is_string()) throw input_error(std::string("POST /detokenize: the answer has no ") + field);
  return j[field].get<std::string>();
}

}  // namespace troupe::bench
