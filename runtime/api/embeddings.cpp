#include "runtime/api/embeddings.h"

#include <bit>
#include <algorithm>
#include <cstring>


namespace troupe::api {

namespace {

using json = nlohmann::json;

const json* embedding_field(const json& j, const char* k) {
  auto it = j.find(k);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace

embedding_request parse_embedding_request(const std::string& body) {
  // The fields of OpenAI's embeddings request, vLLM's priority, and those that change nothing.
  const json j = parse_body_object(body, {"model", "input", "encoding_format", "dimensions", "user", "priority", "metadata",
                                          "store", "service_tier"});
  embedding_request r;
  if (const json* m = embedding_field(j, "model")) {
    if (!m->is_string()) bad_field("model", "expected a string");
    r.model = m->get<std::string>();
  }
  const json* in = embedding_field(j, "input");
  if (!in) bad_field("input", "is required");
  r.inputs = parse_prompts(*in, "input", max_embedding_inputs);
  if (const json* f = embedding_field(j, "encoding_format")) {
    if (!f->is_string() || (*f != "float" && *f != "base64")) bad_field("encoding_format", "expected \"float\" or \"base64\"");
    r.base64 = *f == "base64";
  }
  if (const json* d = embedding_field(j, "dimensions")) {
    if (!d->is_number_integer() || d->get<long long>() < 1 || d->get<long long>() > 1 << 20)
      bad_field("dimensions", "expected a positive integer");
    r.dimensions = d->get<int>();
  }
  if (const json* u = embedding_field(j, "user")) {
    if (!u->is_string()) bad_field("user", "expected a string");
    r.user = u->get<std::string>();
  }
  if (const json* p = embedding_field(j, "priority")) {
    if (!p->is_number_integer() || p->get<long long>() < -1000000 || p->get<long long>() > 1000000)
      bad_field("priority", "expected an integer in [-1000000, 1000000]");
    r.priority = p->get<int>();
  }
  if (const json* m = embedding_field(j, "metadata")) {
    if (!m->is_object()) bad_field("metadata", "expected an object");
    if (m->size() > 16) bad_field("metadata", "at most 16 keys");
    r.no_effect_fields.push_back("metadata");
  }
  if (const json* s = embedding_field(j, "store")) {
    if (!s->is_boolean()) bad_field("store", "expected a boolean");
    r.no_effect_fields.push_back("store");
  }
  if (const json* s = embedding_field(j, "service_tier")) {
    if (!s->is_string()) bad_field("service_tier", "expected a string");
    r.no_effect_fields.push_back("service_tier");
  }
  return r;
}

void check_dimensions(const embedding_request& r, int size) {
  if (r.dimensions && *r.dimensions != size)
    bad_field("dimensions", "this model's embeddings have " + std::to_string(size) +
                                " dimensions and it is not trained to be shortened; leave dimensions out or send " +
                                std::to_string(size));
}

std::string base64_floats(const std::vector<float>& v) {
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * 4, '\0');
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::uint32_t u = std::bit_cast<std::uint32_t>(v[i]);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + std::size_t(b)] = char((u >> (8 * b)) & 0xff);  // little-endian
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    std::uint32_t w = 0;
    for (std::size_t k = 0; k < 3; ++k) w = w << 8 | (k < n ? std::uint8_t(bytes[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k) out += k <= n ? digits[(w >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

json embedding_response(const std::vector<std::vector<float>>& vectors, bool base64, const std::string& model, int prompt_tokens) {
  json data = json::array();
  for (std::size_t i = 0; i < vectors.size(); ++i)
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", base64 ? json(base64_floats(vectors[i])) : json(vectors[i])}});
  return {{"object", "list"}, {"data", std::move(data)}, {"model", model},
          {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

}  // namespace troupe::api
