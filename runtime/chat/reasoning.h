// Reasoning in a chat model's output, split from its answer as the text streams in: what vLLM's
// reasoning parsers give as `reasoning_content`, for the models whose chat template has them think
// between <think> and </think> (Qwen3, QwQ, DeepSeek R1 and its distillations).
//
// Where the output starts is read from the prompt, not guessed from the output: a generation
// prompt that leaves <think> open (DeepSeek R1's, Qwen3-Thinking's) starts the output inside the
// reasoning, which runs to </think> (all of an output cut before it is reasoning); otherwise the
// output is reasoning only if it opens with <think> (after white space), as Qwen3's does unless
// `enable_thinking: false` closed an empty block in the prompt. Text after </think> is the
// answer, as the model wrote it (vLLM's parsers keep its leading newlines too); tags later in the
// answer are the answer's text.
//
// Contract: a reasoning_stream is fed the output in pieces of any size and returns, per piece,
// the reasoning and the answer text that are certain; a tag's possible beginning is held back
// until it is or is not one. The pieces concatenate to the same reasoning and answer however the
// output was split; finish() releases what was held.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace troupe::chat {

struct reasoning_format {
  std::string start = "<think>", end = "</think>";
  bool operator==(const reasoning_format&) const = default;
};

// The reasoning a chat template's model writes, read from the template (it renders both tags);
// nullopt when it shows none.
std::optional<reasoning_format> infer_reasoning_format(std::string_view template_source);
// Whether a prompt rendered by such a template leaves the output inside reasoning: its last start
// tag comes after its last end tag.
bool prompt_opens_reasoning(std::string_view prompt, const reasoning_format& f);

struct reasoning_events {
  std::string reasoning, content;
};

class reasoning_stream {
 public:
  reasoning_stream(reasoning_format f, bool starts_inside);
  reasoning_events feed(std::string_view text);
  reasoning_events finish();
  // Whether any reasoning was seen (a start tag, or an output that started inside).
  bool reasoned() const { return reasoned_; }

 private:
  enum class state { before, reasoning, answer };
  void step(reasoning_events& out);
  reasoning_format f_;
  state state_;
  bool reasoned_;
  std::string held_;
};

}  // namespace troupe::chat
