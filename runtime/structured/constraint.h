// A request's output constraint, compiled and followed token by token: what the engine holds
// per constrained sequence.
//
// Contract: compile_constraint(c) turns a constraint (sampling_params.h) into its grammar or
// throws an input_error naming what is wrong (the API calls it to answer 400 before anything is
// queued); grammars are cached by (kind, source), at most 256, least recently used evicted, so
// the engine's compile of a request the API already checked costs a lookup. constrained_output
// follows one sequence: mask() is what may come next (EOS only where complete), accept(token)
// advances (false and unchanged for a token the grammar refuses), and rewind(n) returns to the
// state after the first n accepted tokens (a speculative proposal the target rejected).
// grammar_cache binds compiled grammars to one vocabulary's masks, and those masks to one
// fragment cache (fragment.h), so a new grammar starts with the strings and numbers others walked.
#pragma once
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/sampling/sampling_params.h"
#include "runtime/structured/grammar.h"
#include "runtime/structured/token_masks.h"

namespace troupe::tokenizer {
class tokenizer;
}

namespace troupe::structured {

// The vocabulary of a tokenizer as grammars see it: each id's bytes as it adds them to a text
// (ids past the tokenizer's add none), and the ids that end generation. Special tokens add none
// unless `special_text` (a request that keeps them in its text: skip_special_tokens false), and
// then EOS still adds none.
std::shared_ptr<const vocabulary> vocabulary_of(const tokenizer::tokenizer& tok, std::int32_t vocab_size,
                                                std::vector<std::int32_t> eos_ids, bool special_text = false);

const char* constraint_kind_name(sampling::output_constraint::kind k);
std::shared_ptr<const grammar> compile_constraint(const sampling::output_constraint& c);

// Grammars and their masks for one vocabulary (an engine's), by constraint.
class grammar_cache {
 public:
  explicit grammar_cache(std::shared_ptr<const vocabulary> vocab, std::size_t max_grammars = 64);
  struct compiled {
    std::shared_ptr<const grammar> rules;
    std::shared_ptr<masks> token_masks;
  };
  compiled get(const sampling::output_constraint& c);
  const vocabulary& vocab() const { return *vocab_; }
  fragment_cache::counters fragment_stats() const { return fragments_->stats(); }

 private:
  std::shared_ptr<const vocabulary> vocab_;
  std::shared_ptr<fragment_cache> fragments_;  // shared by every grammar's masks: they spell fragments alike
  std::size_t max_;
  std::mutex mu_;
  using key = std::pair<int, std::string>;
  std::list<std::pair<key, compiled>> lru_;
  std::map<key, std::list<std::pair<key, compiled>>::iterator> index_;
};

class constrained_output {
 public:
  explicit constrained_output(grammar_cache::compiled c);

  // Kept with its state: the engine asks for a sequence's mask more than once a step (computed
  // ahead for the batch, then put into its row), and each ask of the cache built the state's
  // key. Not thread-safe for one constrained_output (each is one sequence's).
  std::shared_ptr<const token_mask> mask() const;
  bool accept(std::int32_t token);
  bool is_eos(std::int32_t token) const;
  bool complete() const { return states_.back().state.complete(); }
  bool exhausted() const { return states_.back().state.exhausted(); }
  std::size_t accepted() const { return base_ + states_.size() - 1; }
  // Back to the state after the first n accepted tokens; n must be within the last 32 tokens
  // (a proposal's length is far below), else logic_error.
  void rewind(std::size_t n);

 private:
  grammar_cache::compiled c_;
  struct position {
    grammar_matcher state;
    mutable std::shared_ptr<const token_mask> mask;  // once asked for, while among the last few
  };
  std::vector<position> states_;  // after base_, base_ + 1, ... accepted tokens (EOS adds none)
  std::size_t base_ = 0;
};

}  // namespace troupe::structured
