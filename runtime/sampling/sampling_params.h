// How a request wants its tokens chosen and when it wants generation to stop.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace troupe::sampling {

// What the output must be, as the client gave it: compiled where the request is decoded
// (runtime/structured/constraint.h), so only this text crosses actors and processes.
struct output_constraint {
  // tool_calls: a free answer whose Hermes-format calls are constrained (tool_grammar.h).
  enum class kind : std::uint8_t { none, json_schema, json_object, regex, choice, grammar, tool_calls };
  kind type = kind::none;
  std::string source;  // the schema's JSON text, the pattern, the choices as a JSON array, or GBNF
  // A reasoning model's answer comes after its reasoning, which the constraint leaves free: with
  // reasoning_end set, the output is free text up to the first reasoning_end, up to four bytes
  // of white space, then what the constraint asks; with reasoning_start set too, that reasoning
  // block is optional and opens with reasoning_start (after white space). Empty: the constraint
  // starts at once.
  std::string reasoning_start, reasoning_end;
  bool empty() const { return type == kind::none; }
  bool operator==(const output_constraint&) const = default;
};

struct sampling_params {
  float temperature = 1.0f;         // 0: greedy
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // over prompt and output tokens; 1: off
  float presence_penalty = 0.0f;    // over output tokens
  float frequency_penalty = 0.0f;   // over output tokens
  std::optional<std::uint64_t> seed;  // unset: the engine draws one at admission
  int max_tokens = 16;
  std::vector<std::int32_t> stop_token_ids;
  std::vector<std::string> stop;  // stop strings; the output text ends before them
  bool ignore_eos = false;
  int logprobs = -1;  // -1: none; N >= 0: the chosen token's logprob and the N most likely
  // -1: none; N >= 0: each prompt token's logprob after the tokens before it (the first has
  // none), its rank, and the N most likely there: the raw distribution, teacher-forced. Such a
  // request computes its whole prompt (no prefix-cache hits).
  int prompt_logprobs = -1;
  // Added to a token's logit before sampling ([-100, 100]; -100 all but bans, 100 all but forces).
  std::vector<std::pair<std::int32_t, float>> logit_bias;
  int min_tokens = 0;  // until this many tokens are out, EOS, stop_token_ids and stop strings cannot end it
  bool include_stop_str_in_output = false;  // the matched stop string stays in the text
  // false: special tokens' text is in the output (Mistral's [TOOL_CALLS] marker is one), and a
  // constraint's grammar sees it too. EOS and a stop_token_ids token add no text either way.
  bool skip_special_tokens = true;
  // Tokens outside the constraint's grammar are masked out before penalties and logit_bias are
  // applied; EOS is allowed only where the output so far is complete; the request stops when
  // nothing more can follow.
  output_constraint constraint;

  static constexpr int max_logprobs = 20;

  bool greedy() const { return temperature == 0.0f; }
  // Whether apply_logit_processors has anything to do at output position `num_output`.
  bool processes_logits(int num_output) const { return !logit_bias.empty() || num_output < min_tokens; }
  // The first parameter out of its allowed range, if any: the one place these ranges live (the
  // engine refuses such a request, the API answers 400 naming the field). `max_tokens_set`:
  // false while max_tokens still holds a default the caller will replace (min_tokens is then
  // not compared with it).
  struct violation {
    std::string field, rule;
  };
  std::optional<violation> check(bool max_tokens_set = true) const;
  // Throws input_error naming the field and its allowed range.
  void validate() const;
};

}  // namespace troupe::sampling
