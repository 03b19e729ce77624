// DeepSeek's tool calls, for tool_call_stream (runtime/chat/tool_calls.h) whose contract this
// keeps: the name stands outside the JSON, between markers that are words of the vocabulary.
//
//   V3, R1:  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//            ```json
//            ARGUMENTS
//            ```<｜tool▁call▁end｜> ... <｜tool▁calls▁end｜>
//   V3.1:    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGUMENTS<｜tool▁call▁end｜> ...
//            <｜tool▁calls▁end｜>
//
// Which of the two a call is shows after its separator: arguments open with '{', a V3 name does
// not. Text before the block is content (text that may begin its marker is held back until it
// does or does not); so is text after it. A block whose first call does not reach its name (no
// separator within 256 bytes, a marker out of place) is content too; a call whose name went out
// stays one, its arguments streamed as they come (the end marker's possible beginnings held
// back) and reported as far as they got when the output ends. With parallel = false the first
// call is the only one and what follows it is dropped.
#pragma once
#include <string>
#include <vector>

#include "runtime/chat/tool_call_events.h"

namespace troupe::chat {

class deepseek_calls {
 public:
  deepseek_calls() = default;
  deepseek_calls(std::string id_prefix, bool parallel) : id_prefix_(std::move(id_prefix)), parallel_(parallel) {}
  void feed(char c, tool_events& out);
  void finish(tool_events& out);
  const std::vector<tool_call>& calls() const { return calls_; }

 private:
  enum class state { content, between, head, after_sep, name, fence, arguments, dropping };
  void content_char(char c, tool_events& out);
  void between_char(char c, tool_events& out);
  void head_char(char c, tool_events& out);
  void after_sep_char(char c, tool_events& out);
  void name_char(char c, tool_events& out);
  void fence_char(char c, tool_events& out);
  void arguments_char(char c, tool_events& out);
  void announce(std::string name, tool_events& out);
  void emit_arguments(const std::string& s, tool_events& out);
  void not_calls(tool_events& out);  // the block so far is content

  std::string id_prefix_;
  bool parallel_ = true;
  state state_ = state::content;
  std::string held_;    // content that may begin the block's marker; the current marker or field
  std::string raw_;     // the block's text since its marker, while no call of it has a name
  std::string head_;    // what came before the current call's separator
  std::string end_;     // what ends the current call's arguments
  bool announced_ = false;  // a call of this block has its name out
  bool after_block_ = false;  // whitespace right after a block is not content
  std::vector<tool_call> calls_;
};

}  // namespace troupe::chat
