// What `troupe bench serve` learns of the server before it plans (the served model's name, its
// context, whether it tokenizes) and where its prompts' text comes from: real text (a plain
// text file, or the compiled-in default) or a ShareGPT-format file, turned into tokens by the
// server's own tokenizer through vLLM's /tokenize and /detokenize, as vLLM's benchmark does with
// the model's tokenizer.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tools/troupe/bench_serve/client.h"

namespace troupe::bench {

struct server_info {
  std::string model;       // the first model /v1/models lists ("" if it lists none)
  int max_model_len = 0;   // its context, from /v1/models; 0 when the server does not say
  int vocab_size = 0;      // its vocabulary, where /v1/models says (troupe serve does)
  bool tokenizes = false;  // POST /tokenize answers (troupe serve, vLLM and llama.cpp's server do)
  std::string tokenize_field = "prompt";  // what it takes text in (client_options::tokenize_field)
  int chat_overhead = 0;   // tokens the chat template adds around one user message
  std::string tokenize_error;  // why not, when it does not
};

// Asks GET /v1/models and POST /tokenize: vLLM's form ({"prompt"} -> {"count", "tokens"}), or
// llama.cpp's server's ({"content"} -> {"tokens"}). Throws input_error if the server cannot be
// reached.
server_info discover(const client_options& o);

// `text` as the server tokenizes it (no special tokens), sent in pieces of at most 64 KiB cut
// at line ends. Throws input_error with the server's answer when it refuses.
std::vector<std::int32_t> tokenize_text(const client_options& o, std::string_view text);
// The number of tokens of `text` as a completion's prompt (with the special tokens the server
// adds to one, a BOS).
int count_tokens(const client_options& o, const std::string& text);
// The text of `ids` as the server decodes them.
std::string detokenize(const client_options& o, const std::vector<std::int32_t>& ids);

// Public-domain prose (the default model's held-out King James text), compiled in.
std::string_view default_text();

}  // namespace troupe::bench
