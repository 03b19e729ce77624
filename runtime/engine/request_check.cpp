#include "runtime/engine/request_check.h"

namespace troupe::engine {

std::optional<std::size_t> first_outside_vocabulary(std::span<const std::int32_t> ids, int vocab_size) {
  if (vocab_size <= 0) return std::nullopt;
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab_size) return i;
  return std::nullopt;
}

namespace {

std::optional<request_problem> vocabulary_problem(const char* field, std::span<const std::int32_t> ids, int vocab_size) {
  const auto bad = first_outside_vocabulary(ids, vocab_size);
  if (!bad) return std::nullopt;
  return request_problem{field, std::string(field) + ": token " + std::to_string(*bad) + " is " + std::to_string(ids[*bad]) +
                                    ", outside the vocabulary [0, " + std::to_string(vocab_size) + ")"};
}

}  // namespace

std::optional<request_problem> check_request(std::span<const std::int32_t> prompt, std::span<const std::int32_t> generated,
                                             const sampling::sampling_params& params, int public_prefix, const request_limits& limits) {
  if (prompt.empty()) return request_problem{"prompt", "the prompt is empty"};
  if (auto p = vocabulary_problem("prompt", prompt, limits.vocab_size)) return p;
  if (auto p = vocabulary_problem("generated", generated, limits.vocab_size)) return p;
  const int len = int(prompt.size()), done = int(generated.size());
  if (auto c = check_context(len, done, 1, limits.max_model_len, false)) return request_problem{"prompt", c->message, done == 0, true};
  if (auto v = params.check()) return request_problem{v->field, "invalid sampling parameter '" + v->field + "': " + v->rule};
  if (done >= params.max_tokens)
    return request_problem{"max_tokens", "max_tokens (" + std::to_string(params.max_tokens) + ") already reached by the tokens generated before"};
  if (auto c = check_context(len, done, params.max_tokens, limits.max_model_len, limits.max_tokens_must_fit))
    return request_problem{"max_tokens", c->message, false, true};
  if (public_prefix < 0) return request_problem{"public_prefix", "public_prefix is negative"};
  return std::nullopt;
}

std::optional<request_problem> check_request(const request& r, const request_limits& limits) {
  return check_request(r.prompt, r.generated, r.params, r.public_prefix, limits);
}

std::optional<context_misfit> check_context(int prompt, int generated, int max_tokens, int max_model_len,
                                            bool max_tokens_must_fit) {
  const std::string holds = "this model's context holds " + std::to_string(max_model_len) + " tokens";
  if (prompt >= max_model_len)
    return context_misfit{"the prompt has " + std::to_string(prompt) + " tokens; " + holds +
                          " (prompt plus at least one generated token)"};
  if (prompt + generated >= max_model_len) return context_misfit{"prompt and generated tokens already fill the context; " + holds};
  if (max_tokens_must_fit && std::int64_t(prompt) + max_tokens > max_model_len)
    return context_misfit{holds + "; the prompt has " + std::to_string(prompt) + " and max_tokens asks for " +
                          std::to_string(max_tokens) + " more; lower max_tokens or shorten the prompt"};
  return std::nullopt;
}

}  // namespace troupe::engine
