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
    const json plain = post(named, "/tokenize", with_model(named, {{"prompt", "x"}, {"add_special_tokens", false}}));
    s.tokenizes = plain.contains("count") && plain["count"].is_number_integer();
    if (!s.tokenizes) s.tokenize_error = "/tokenize answered without a count";
    if (s.max_model_len == 0 && plain.contains("max_model_len") && plain["max_model_len"].is_number_integer())
      s.max_model_len = plain["max_model_len"].get<int>();
    try {
      const json msgs = json::array({{{"role", "user"}, {"content", "x"}}});
      const json chat = post(named, "/tokenize", with_model(named, {{"messages", msgs}}));
      s.chat_overhead = std::max(0, chat.value("count", 0) - plain.value("count", 0));
    } catch (const input_error&) {
      // a model without a chat template: --chat requests will be refused, and say why
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
    const json j = post(o, "/tokenize", with_model(o, {{"prompt", std::string(text.substr(at, end - at))}, {"add_special_tokens", false}}));
    if (!j.contains("tokens") || !j["tokens"].is_array()) throw input_error("POST /tokenize: the answer has no tokens");
    for (const auto& t : j["tokens"]) out.push_back(t.get<std::int32_t>());
    at = end;
  }
  return out;
}

int count_tokens(const client_options& o, const std::string& text) {
  const json j = post(o, "/tokenize", with_model(o, {{"prompt", text}}));
  return j.value("count", 0);
}

std::string detokenize(const client_options& o, const std::vector<std::int32_t>& ids) {
  const json j = post(o, "/detokenize", with_model(o, {{"tokens", ids}}));
  if (!j.contains("prompt") || !j["prompt"].is_string()) throw input_error("POST /detokenize: the answer has no prompt");
  return j["prompt"].get<std::string>();
}

}  // namespace troupe::bench
