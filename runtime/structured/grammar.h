// A context-free grammar over bytes, and the pushdown matcher that constrained decoding steps.
// Every constrained format lands here: a GBNF grammar is parsed into one (gbnf.h), a JSON Schema
// compiled into one (json_schema.h), a regular expression's DFA becomes right-linear rules
// (add_dfa), a choice list is alternatives of literals. One engine means one set of guarantees
// (budgets, EOS only in accepting states, rollback) instead of one per format.
//
// The matcher is llama.cpp's grammar design, written afresh: a state is a set of stacks of
// grammar positions, each stack's top a byte class still to match; a byte pops the tops it
// matches and expands rule references until every top is a byte class again (a reference in
// tail position replaces its frame, so right recursion does not grow the stack). Left
// recursion (which would expand forever) is refused when the grammar is checked.
//
// Contract: a grammar is built with grammar_builder and frozen by build(), which checks that
// every referenced rule has alternatives, that no rule can reach itself without consuming a
// byte, and the budget (elements, rules); violations are input_errors naming the rule.
// A matcher is a value: copy it to branch. accept(bytes) advances or returns false leaving it
// unchanged; complete() is true where the bytes so far are a whole sentence of the grammar.
#pragma once
#include <bitset>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/structured/regex.h"

namespace troupe::structured {

struct grammar_budget {
  int max_elements = 500'000;  // byte classes and references over all rules (4 MB)
  int max_rules = 200'000;
  int max_stacks = 256;          // live stacks in one matcher state (ambiguity)
  int max_stack_depth = 1024;    // nesting (a recursive schema's output depth)
};

class grammar {
 public:
  enum class kind : std::uint8_t { bytes, rule, end };
  struct element {
    kind k = kind::end;
    std::int32_t arg = 0;  // bytes: index into sets(); rule: rule id
  };

  std::int32_t root() const { return root_; }
  const std::vector<element>& elements() const { return elements_; }
  const std::bitset<256>& set(std::int32_t i) const { return sets_[std::size_t(i)]; }
  // The element index of each alternative's first element (an alternative ends at kind::end).
  const std::vector<std::int32_t>& alternatives(std::int32_t rule) const { return alts_[std::size_t(rule)]; }
  const std::string& rule_name(std::int32_t rule) const { return names_[std::size_t(rule)]; }
  // The fewest bytes a rule matches; 255 stands for 255 or more (0: the rule is nullable).
  int min_bytes(std::int32_t rule) const { return min_bytes_[std::size_t(rule)]; }
  std::size_t rules() const { return alts_.size(); }
  const grammar_budget& budget() const { return budget_; }

 private:
  friend class grammar_builder;
  std::vector<element> elements_;
  std::vector<std::bitset<256>> sets_;
  std::vector<std::vector<std::int32_t>> alts_;
  std::vector<std::string> names_;
  std::vector<std::uint8_t> min_bytes_;  // by rule, from build()
  std::int32_t root_ = 0;
  grammar_budget budget_;
};

class grammar_builder {
 public:
  using element = grammar::element;
  explicit grammar_builder(grammar_budget budget = {});

  // The rule of this name, declared on first use (a forward reference is fine).
  std::int32_t rule(const std::string& name);
  // A new rule with a name of its own (helpers: repetitions, groups).
  std::int32_t fresh(const std::string& hint);
  void add(std::int32_t rule, std::vector<element> alternative);
  bool has_alternatives(std::int32_t rule) const;

  element bytes(const std::bitset<256>& set);
  element byte(unsigned char b);
  static element ref(std::int32_t rule) { return {grammar::kind::rule, rule}; }
  // The bytes of `text` in order, appended to `seq`.
  void literal(std::vector<element>& seq, std::string_view text);
  // A rule for x{min,max} (max < 0: unbounded) of the sequence `x`.
  std::int32_t repeat(const std::vector<element>& x, int min, int max, const std::string& hint);
  // A rule that matches exactly what `dfa` accepts (one rule per DFA state). `escape_json`:
  // the DFA is over a JSON string's decoded bytes, so '"', '\\' and control bytes are matched in
  // their escaped spellings.
  std::int32_t add_dfa(const byte_dfa& dfa, const std::string& hint, bool escape_json = false);
  // A rule matching one character (its UTF-8 bytes) of the code point ranges, or of their
  // complement within Unicode's scalar values when `negated`. Surrogates are never matched.
  using code_range = std::pair<std::uint32_t, std::uint32_t>;
  std::int32_t char_class(std::vector<code_range> ranges, bool negated, const std::string& hint);

  // Every rule of a built grammar copied in under fresh names (`hint` before each): its root's id
  // here. What composes a grammar after another (a reasoning block before a constraint).
  std::int32_t import(const grammar& g, const std::string& hint);

  std::shared_ptr<const grammar> build(std::int32_t root);

 private:
  void count(std::size_t elements);
  grammar g_;
  std::unordered_map<std::string, std::int32_t> by_name_;
  std::unordered_map<std::string, std::int32_t> set_ids_;
  std::size_t element_count_ = 0;
  int fresh_ = 0;
};

// A position in a grammar: the set of stacks still alive after the bytes accepted so far.
class grammar_matcher {
 public:
  explicit grammar_matcher(std::shared_ptr<const grammar> g);

  bool accept(unsigned char b);
  bool accept(std::string_view bytes);  // all or nothing
  // The matcher after `bytes`, or nothing where they are refused; this one as it was. What a
  // copy then accept(bytes) gives, without copying the stacks that the first byte replaces.
  std::optional<grammar_matcher> after(std::string_view bytes) const;
  bool complete() const;                // the bytes so far form a sentence of the grammar
  bool dead() const { return stacks_.empty(); }
  // Whether no byte can follow (complete and nothing more to match): generation must end.
  bool exhausted() const;
  const grammar& rules() const { return *g_; }

  // The state, as the token-mask cache keys it: equal keys accept the same byte strings.
  std::string key() const;

  // The stacks, bottom first; each top is a kind::bytes element. An empty stack is a completed
  // parse. Exposed for the mask walk (token_mask.h) and tests.
  using stack = std::vector<std::int32_t>;
  const std::vector<stack>& stacks() const { return stacks_; }

  // One step of the walk: the stacks after byte b from `from`, into `to` (cleared first);
  // false if none survives. Allocation-light for the token trie's inner loop.
  static bool step(const grammar& g, const std::vector<stack>& from, unsigned char b, std::vector<stack>& to);

 private:
  grammar_matcher(std::shared_ptr<const grammar> g, std::vector<stack> stacks) : g_(std::move(g)), stacks_(std::move(stacks)) {}
  std::shared_ptr<const grammar> g_;
  std::vector<stack> stacks_;
};

}  // namespace troupe::structured
