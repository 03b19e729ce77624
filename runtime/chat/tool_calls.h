// Tool calls in a chat model's output, found as the text streams in: the formats models are
// trained to write calls in, one parser for all of them.
//
//   hermes       Qwen2.5/Qwen3, Hermes, models/kjv:  <tool_call>{"name": N, "arguments": A}</tool_call>
//   llama3_json  Llama 3.1+: the whole answer is {"name": N, "parameters": A} (after an optional
//                <|python_tag|>), several separated by ';'
//   mistral      [TOOL_CALLS][{"name": N, "arguments": A}, ...]
//   granite      Granite 3.x: <|tool_call|>[{"name": N, "arguments": A}, ...]
//   deepseek_v3  DeepSeek V3, R1 and V3.1: the name outside the JSON, between markers of their own
//                (runtime/chat/deepseek_calls.h)
//   pythonic     Llama 3.2/4's pythonic templates: the answer is [f(a=1), g(b="x")]
//                (runtime/chat/pythonic_calls.h)
//   json_array   [{"name": N, "parameters": A}, ...]: what a forced tool choice's grammar makes
//                every model write (runtime/api/tools.h)
//
// Contract: a tool_call_stream is fed the output text in pieces of any size and returns, per
// piece, the content text that is certainly not part of a call and the calls' deltas as OpenAI
// streams them: a call's first delta carries its index, id and name (arguments ""), the later
// ones fragments of its arguments' JSON text in order. Text that may still turn out to be a
// call is held back until it does or does not. The result depends only on the whole text, never
// on how it was split: the deltas of any split concatenate to calls(), and the content pieces
// to the same content. A call whose JSON is not a call (no name, a stray key before the name in
// llama3_json, broken JSON before the name) is content instead; once its name went out, a call
// stays one (finish() reports it as far as it got: an output cut by max_tokens). With
// parallel = false only the first call is reported and text after it is dropped.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/chat/deepseek_calls.h"
#include "runtime/chat/pythonic_calls.h"
#include "runtime/chat/tool_call_events.h"

namespace troupe::chat {

enum class tool_format { none, hermes, llama3_json, mistral, granite, deepseek_v3, pythonic, json_array };

const char* tool_format_name(tool_format f);
// none | hermes | llama3_json | mistral | granite | deepseek_v3 | pythonic | json_array; nullopt
// for anything else.
std::optional<tool_format> tool_format_named(std::string_view name);
// The formats a model writes calls in, for messages: "hermes, llama3_json, ..., none" (all but
// json_array, which is what forced choices write).
std::string model_tool_formats();
// The format a chat template renders tool calls in, read from its text (the markers it writes);
// none when it shows none.
tool_format infer_tool_format(std::string_view template_source);

class tool_call_stream {
 public:
  // Call ids are id_prefix + the call's index.
  tool_call_stream(tool_format format, std::string id_prefix, bool parallel = true);
  tool_events feed(std::string_view text);
  tool_events finish();  // the end of the output: what was held back
  const std::vector<tool_call>& calls() const {
    return format_ == tool_format::deepseek_v3 ? deepseek_.calls() : format_ == tool_format::pythonic ? pythonic_.calls() : calls_;
  }
  tool_format format() const { return format_; }

 private:
  enum class state { content, before_call, object, after_call, closing, dropping };
  void step(char c, tool_events& out);
  void content_char(char c, tool_events& out);
  void before_call_char(char c, tool_events& out);
  void object_char(char c, tool_events& out);
  void key_char(char c, tool_events& out);
  void between_members(char c, tool_events& out);
  void primitive_char(char c, tool_events& out);
  void value_char(char c, tool_events& out);
  void after_call_char(char c, tool_events& out);
  void member_done(tool_events& out);
  void begin_call();
  void start_value(char c, tool_events& out);
  void end_call(tool_events& out);
  void not_a_call(tool_events& out);
  void emit_arguments(std::string_view s, tool_events& out);

  tool_format format_;
  std::string id_prefix_;
  bool parallel_;
  state state_ = state::content;
  bool at_start_ = true;     // nothing but whitespace seen yet (llama3_json, json_array)
  bool after_a_call_ = false;  // whitespace after a call is not content
  std::string held_;         // content that may be the start of the opening marker
  std::string raw_;          // the current call's text since its marker, for not_a_call
  std::size_t closing_matched_ = 0;

  // The call object being scanned: depth 1 is between its members.
  enum class member { key, colon, value, after };
  member member_ = member::key;
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false, primitive_ = false;
  bool opened_ = false;        // the call's '{' was seen
  bool need_bracket_ = false;  // mistral, granite: the list's '[' is still to come
  std::string key_raw_, value_raw_, key_;
  std::string pending_arguments_;  // arguments seen before the name
  bool have_name_ = false, have_arguments_ = false, announced_ = false;
  std::vector<tool_call> calls_;
  deepseek_calls deepseek_;  // the deepseek_v3 format's own scanner
  pythonic_calls pythonic_;  // the pythonic format's
};

}  // namespace troupe::chat
