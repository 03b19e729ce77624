// /v1/embeddings as Troupe speaks it: OpenAI's request body (`input` a string, token ids, or a
// list of either; `encoding_format` float or base64; `dimensions`), checked field by field with
// errors naming the field, and the response in OpenAI's shape. Pure: no I/O.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/api/openai.h"

namespace troupe::api {

struct embedding_request {
  std::string model;
  std::vector<prompt_input> inputs;  // each its own embedding, answered in this order
  bool base64 = false;               // encoding_format "base64": little-endian float32 bytes
  // OpenAI's shortening: only the model's own size is served (the models Troupe serves are not
  // trained to be cut); another value is a 400 naming the field.
  std::optional<int> dimensions;
  std::string user;  // the tenant, as for completions
  int priority = 0;
  std::vector<std::string> no_effect_fields;  // as completion_request's
};

// OpenAI caps a request at 2,048 inputs; so does Troupe.
inline constexpr std::size_t max_embedding_inputs = 2048;

// Parses and checks a body; throws api_error(400) naming the offending field.
embedding_request parse_embedding_request(const std::string& body);

// The 400 for a `dimensions` other than the model's `size`, if any.
void check_dimensions(const embedding_request& r, int size);

// {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": ...}], "model",
// "usage": {"prompt_tokens", "total_tokens"}}; the embeddings as numbers, or base64 strings.
nlohmann::json embedding_response(const std::vector<std::vector<float>>& vectors, bool base64, const std::string& model,
                                   int prompt_tokens);

// Standard base64 of the vector's float32 values, little-endian (what OpenAI's clients decode).
std::string base64_floats(const std::vector<float>& v);

}  // namespace troupe::api
