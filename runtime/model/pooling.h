// How an embedding model turns the hidden states of its input into one vector: what the
// sentence-transformers modules of its folder say (modules.json lists a Transformer, then a
// Pooling module whose config is <path>/config.json, then maybe a Normalize). The Qwen2- and
// Mistral-based embedding models (gte-Qwen2, Qwen3-Embedding, e5-mistral) pool the last token
// and normalize; others average. The hidden states pooled are the model's last ones, after its
// final norm (what Hugging Face's *Model returns as last_hidden_state).
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace troupe::model {

enum class pooling_method { last, mean, cls };

struct pooling_config {
  pooling_method method = pooling_method::last;
  bool normalize = false;  // a Normalize module follows: the vector is scaled to length 1
};

const char* pooling_method_name(pooling_method m);

// Reads `dir`/modules.json and its Pooling module's config. Nothing when the folder has no
// modules.json (a generative model). A module or pooling mode Troupe cannot compute (Dense,
// max, weighted mean, several modes concatenated, include_prompt false) is an input_error
// naming the file and the key, so an embedding is never silently computed another way.
std::optional<pooling_config> load_pooling_config(const std::string& dir);

// The prompt positions a request's embedding needs the hidden state of, of `len` tokens:
// [first, first + count).
struct pooled_positions {
  int first = 0, count = 0;
};
pooled_positions positions_to_pool(const pooling_config& c, int len);

// The embedding from the sum of the pooled positions' hidden states (`count` of them): their
// mean, normalized to length 1 when the config says (a zero vector stays zero).
std::vector<float> finish_embedding(const pooling_config& c, const std::vector<double>& sum, int count);

}  // namespace troupe::model
