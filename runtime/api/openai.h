// The OpenAI API as Troupe speaks it: request bodies of /v1/completions and
// /v1/chat/completions parsed into what the engine takes (every field checked, errors naming
// it), and responses, stream chunks and errors in OpenAI's JSON shapes. Pure: no I/O.
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/api/api_error.h"
#include "runtime/api/tools.h"
#include "runtime/chat/reasoning.h"
#include "runtime/chat/tool_calls.h"
#include "runtime/sampling/sampler.h"
#include "runtime/sampling/sampling_params.h"

namespace troupe::tokenizer {
class tokenizer;
}

namespace troupe::api {

enum class endpoint { completions, chat, embeddings };

struct prompt_input {
  std::optional<std::string> text;  // a string prompt, or
  std::vector<std::int32_t> ids;    // a prompt of token ids
};

// `prompt` (or an embedding request's `input`): a string, a list of token ids, or a list of at
// most `most` of those. A 400 names `field`.
std::vector<prompt_input> parse_prompts(const nlohmann::json& p, const std::string& field, std::size_t most);

struct completion_request {
  endpoint kind = endpoint::completions;
  std::string model;
  std::vector<prompt_input> prompts;       // completions: one or several (a batch)
  int n = 1;        // choices per prompt
  int best_of = 1;  // completions: generated per prompt, the n most likely kept
  nlohmann::json messages;                 // chat: [{role, content}], content flattened to text
  nlohmann::json template_kwargs = nlohmann::json::object();  // chat_template_kwargs (and the tools)
  tool_request tools;                      // chat: tools, tool_choice, parallel_tool_calls
  bool add_generation_prompt = true;
  sampling::sampling_params params;
  bool max_tokens_given = false;  // else the frontend fills the rest of the context
  bool echo = false;              // completions: the prompt's text (and logprobs) come first
  bool prompt_logprobs_list = false;  // vLLM's prompt_logprobs was asked for: the choice lists them
  bool stream = false;
  bool include_usage = false;
  std::string user;  // the tenant
  int priority = 0;
  // false: no speculative decoding for this request (the output is the same; only speed differs).
  bool speculate = true;
  // False: under overload this request is refused (429) rather than answered by its model's
  // fallback ([model] fallback); the answer's `model` names whichever model answered.
  bool allow_fallback = true;
  // Fields the body carried that change nothing Troupe computes (`store`, `metadata`...: the
  // list is in docs/serving.md), for the request's debug log line.
  std::vector<std::string> no_effect_fields;
};

// Parses and checks a body; throws api_error(400) naming the offending field. Sampling fields
// the body leaves out take their value from `defaults` (the model's generation_config.json).
completion_request parse_request(const std::string& body, endpoint kind, const sampling::sampling_params& defaults = {});

// A chat request's `messages`: each an object with a known role, its content flattened to text
// (a string, or text parts). Throws api_error(400) naming the message and field.
nlohmann::json parse_messages(const nlohmann::json& messages);

struct usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
};

// One token's logprobs as the engine reports them.
struct token_logprob {
  std::int32_t id = 0;
  float logprob = 0;
  std::vector<std::int32_t> top_ids;
  std::vector<float> top_logprobs;
};

// Builds the JSON of responses for one request.
class response_writer {
 public:
  // The model named in what is written from now on (a request its model's fallback answers).
  void set_model(std::string model) { model_ = std::move(model); }
  response_writer(endpoint kind, std::string id, std::string model, std::int64_t created,
                  const tokenizer::tokenizer* tok, bool logprobs);

  // A stream chunk with new text (and its tokens' logprobs); finish_reason set on the last.
  nlohmann::json chunk(const std::string& text, const std::vector<token_logprob>& lps,
                       const std::optional<std::string>& finish_reason);
  // A chat answer whose tool calls are to be found (in `format`): stream chunks and the full
  // response then carry them apart from the content (parallel = false: the first call only).
  void expect_tool_calls(chat::tool_format format, bool parallel);
  // A chat answer whose model reasons in `format` (chat/reasoning.h), starting inside the
  // reasoning when the prompt left it open: stream chunks carry the reasoning as
  // delta.reasoning_content and the full response as message.reasoning_content (null when the
  // model did not reason); tool calls are looked for in the answer after it only.
  void expect_reasoning(const chat::reasoning_format& format, bool starts_inside);
  // The stream chunks for new text (finish_reason set on the last): with tool calls expected,
  // a content chunk (with the tokens' logprobs; also when the text is held back, so that
  // clients see every token's timing), a chunk of tool-call deltas when there are any, and at
  // the end what was held back and a chunk with the finish reason ("tool_calls" for a stop
  // after calls); without, one chunk(). With reasoning expected, a chunk of its text
  // (delta.reasoning_content, with the tokens' logprobs) comes first, then the answer's as above.
  std::vector<nlohmann::json> chunks(const std::string& text, const std::vector<token_logprob>& lps,
                                     const std::optional<std::string>& finish_reason);
  // A chat stream's chunk of tool-call deltas: a call's first names it (index, id, type, name,
  // arguments ""), the next ones carry its arguments' fragments.
  nlohmann::json tool_chunk(const std::vector<chat::tool_call_delta>& deltas) const;
  // Chat streams open with a chunk carrying the assistant role.
  nlohmann::json role_chunk() const;
  // The final usage chunk (stream_options.include_usage).
  nlohmann::json usage_chunk(const usage& u) const;
  // The choice's index in the response (several choices: n, a list of prompts).
  void set_index(int i) { index_ = i; }
  // The prompt, for `echo` (its text, and with logprobs its tokens' logprobs, go first; the
  // first token has none: null) and vLLM's `prompt_logprobs` (a choice's list: null, then per
  // prompt token {id: {logprob, rank, decoded_token}} for it and the top N). prompt_scored()
  // gives the logprobs, which arrive with the first token; the stream's next chunks() start
  // with a chunk of the prompt.
  void expect_prompt(std::vector<std::int32_t> ids, std::string text, bool echo, bool prompt_logprobs);
  void prompt_scored(std::vector<sampling::token_logprobs> lps);
  // The whole response of a non-streaming request; with tool calls expected, those in the text
  // go in message.tool_calls (content null when nothing else is left) and a "stop" finish
  // becomes "tool_calls".
  nlohmann::json full(const std::string& text, const std::vector<token_logprob>& lps, const std::string& finish_reason,
                      const usage& u) const;

 private:
  nlohmann::json logprobs_json(const std::vector<token_logprob>& lps, std::size_t text_offset) const;
  nlohmann::json echoed_logprobs(const nlohmann::json& output_logprobs) const;
  nlohmann::json prompt_logprobs_json() const;
  void add_prompt(nlohmann::json& choice) const;
  std::string token_string(std::int32_t id) const;

  endpoint kind_;
  std::string id_, model_;
  std::int64_t created_;
  const tokenizer::tokenizer* tok_;
  bool logprobs_;
  std::size_t text_so_far_ = 0;  // bytes streamed, for completions' text_offset
  int index_ = 0;
  std::optional<chat::tool_call_stream> tools_;
  std::optional<chat::reasoning_stream> reasoning_;
  std::vector<nlohmann::json> answer_chunks(const std::string& text, const std::vector<token_logprob>& lps,
                                            const std::optional<std::string>& finish_reason);
  std::vector<std::int32_t> prompt_ids_;
  std::string prompt_text_;
  bool echo_ = false, prompt_logprobs_ = false, prompt_sent_ = false;
  std::optional<std::vector<sampling::token_logprobs>> prompt_lps_;
};

// "stop" | "length" for the engine's reasons; anything else (abort, errors) has none.
std::optional<std::string> openai_finish_reason(const std::string& engine_reason);

}  // namespace troupe::api
