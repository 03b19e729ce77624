// The rules a generation request meets wherever it enters: the HTTP frontend (which answers 400
// or 413 naming the JSON field) and the engine (which refuses an add_request from any sender: a
// remote frontend, an embedding application). One function decides, so the two cannot disagree;
// each caller only says how a problem is reported. Pure.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "runtime/engine/request.h"

namespace troupe::engine {

struct request_limits {
  int vocab_size = 0;     // 0: unknown, ids not checked
  int max_model_len = 0;  // the context
  // The API's rule: prompt + max_tokens within the context. Without it generation just ends at
  // the context's end.
  bool max_tokens_must_fit = false;
};

struct request_problem {
  std::string field;    // "prompt", "generated", "max_tokens", a sampling parameter, "public_prefix"
  std::string message;  // a sentence for the client
  bool too_long = false;  // the prompt alone does not fit the context (HTTP 413)
  bool context = false;   // the problem is the context's size (prompt, or prompt + max_tokens)
};

// The index of the first id outside [0, vocab_size), if any (vocab_size 0: none is).
std::optional<std::size_t> first_outside_vocabulary(std::span<const std::int32_t> ids, int vocab_size);

// In order: an empty prompt, ids outside the vocabulary (prompt, then tokens generated before a
// migration), a prompt the context cannot take, the sampling parameters, max_tokens already
// reached, prompt + max_tokens past the context (with max_tokens_must_fit), a negative public prefix.
std::optional<request_problem> check_request(std::span<const std::int32_t> prompt, std::span<const std::int32_t> generated,
                                             const sampling::sampling_params& params, int public_prefix, const request_limits& limits);
std::optional<request_problem> check_request(const request& r, const request_limits& limits);

// Whether a request fits a context of `max_model_len` tokens: a prompt must leave room for one
// generated token; with `max_tokens_must_fit`, prompt + max_tokens must fit too.
struct context_misfit {
  std::string message;
};
std::optional<context_misfit> check_context(int prompt_tokens, int generated, int max_tokens, int max_model_len,
                                            bool max_tokens_must_fit);

}  // namespace troupe::engine
