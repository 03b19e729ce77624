#include "runtime/structured/constraint.h"

#include <algorithm>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/common/json.h"
#include "runtime/structured/gbnf.h"
#include "runtime/structured/json_schema.h"
#include "runtime/structured/tool_grammar.h"
#include "runtime/structured/regex.h"
#include "runtime/tokenizer/tokenizer.h"

namespace troupe::structured {

using ckind = sampling::output_constraint::kind;

std::shared_ptr<const vocabulary> vocabulary_of(const tokenizer::tokenizer& tok, std::int32_t vocab_size,
                                                std::vector<std::int32_t> eos_ids, bool special_text) {
  // Decoded after a plain token, because a SentencePiece decoder drops the leading space of a
  // text's first token; skipped special tokens decode to nothing (no grammar allows them).
  std::vector<std::string> out(std::size_t(std::max(vocab_size, 0)));
  const auto anchor = tok.encode("a", false);
  const std::string base = anchor.size() == 1 ? tok.decode_bytes(anchor) : std::string();
  for (std::int32_t id = 0; id < vocab_size && id < tok.vocab_size(); ++id) {
    const bool skip = !special_text || std::find(eos_ids.begin(), eos_ids.end(), id) != eos_ids.end();
    if (anchor.size() == 1) {
      const std::string both = tok.decode_bytes({anchor[0], id}, skip);
      if (both.size() >= base.size() && both.compare(0, base.size(), base) == 0) {
        out[std::size_t(id)] = both.substr(base.size());
        continue;
      }
    }
    out[std::size_t(id)] = tok.decode_bytes({id}, skip);
  }
  return std::make_shared<const vocabulary>(std::move(out), std::move(eos_ids));
}

const char* constraint_kind_name(ckind k) {
  switch (k) {
    case ckind::none: return "none";
    case ckind::json_schema: return "json_schema";
    case ckind::json_object: return "json_object";
    case ckind::regex: return "regex";
    case ckind::choice: return "choice";
    case ckind::grammar: return "grammar";
    case ckind::tool_calls: return "tool_calls";
  }
  return "?";
}

namespace {

std::shared_ptr<const grammar> build(const sampling::output_constraint& c) {
  switch (c.type) {
    case ckind::none: throw std::logic_error("compile_constraint: no constraint");
    case ckind::json_schema: return compile_json_schema(c.source);
    case ckind::json_object: return json_object_grammar();
    case ckind::grammar: return parse_gbnf(c.source);
    case ckind::tool_calls: return compile_tool_grammar(c.source);
    case ckind::regex: {
      grammar_builder b;
      const std::int32_t root = b.rule("root");
      b.add(root, {grammar_builder::ref(b.add_dfa(compile_regex(c.source), "regex"))});
      return b.build(root);
    }
    case ckind::choice: {
      const nlohmann::json j = parse_json(c.source, "choice");
      if (!j.is_array() || j.empty()) throw input_error("choice: expected a non-empty array of strings");
      grammar_builder b;
      const std::int32_t root = b.rule("root");
      for (const auto& x : j) {
        if (!x.is_string() || x.get<std::string>().empty()) throw input_error("choice: expected non-empty strings");
        std::vector<grammar::element> seq;
        b.literal(seq, x.get<std::string>());
        b.add(root, seq);
      }
      return b.build(root);
    }
  }
  throw std::logic_error("compile_constraint: unknown kind");
}

// What tells two constraints' grammars apart.
std::pair<int, std::string> key_of(const sampling::output_constraint& c) {
  return {int(c.type), c.reasoning_start + '\0' + c.reasoning_end + '\0' + c.source};
}

// Any bytes up to and including the first `tag`: a DFA whose state is how much of the tag the
// text ends with (Knuth-Morris-Pratt), accepting once the whole tag is matched and going nowhere
// after it.
byte_dfa up_to_first(const std::string& tag) {
  const int m = int(tag.size());
  byte_dfa d;
  d.next.assign(std::size_t(m + 1) * 256, -1);
  d.accepting.assign(std::size_t(m + 1), false);
  d.accepting[std::size_t(m)] = true;
  for (int s = 0; s < m; ++s)
    for (int b = 0; b < 256; ++b) {
      std::string seen = tag.substr(0, std::size_t(s)) + char(b);  // the longest suffix of this that starts the tag
      int k = std::min(int(seen.size()), m);
      while (k > 0 && seen.compare(seen.size() - std::size_t(k), std::size_t(k), tag, 0, std::size_t(k)) != 0) --k;
      d.next[std::size_t(s) * 256 + std::size_t(b)] = k;
    }
  return d;
}

// The constraint's grammar after a reasoning block (sampling_params.h): [ws start] free text up
// to the first end tag, white space, then the constraint. The white space is bounded (models
// write "\n\n" there): unbounded, a weak model can spend every token on it.
std::shared_ptr<const grammar> after_reasoning(const grammar& answer, const sampling::output_constraint& c) {
  grammar_builder b;
  const std::int32_t root = b.rule("root"), block = b.fresh("reasoning");
  std::bitset<256> space;
  for (unsigned char x : {' ', '\n', '\r', '\t'}) space.set(x);
  const std::int32_t ws = b.repeat({b.bytes(space)}, 0, 4, "ws");
  std::vector<grammar::element> open;
  if (!c.reasoning_start.empty()) {
    open.push_back(grammar_builder::ref(ws));
    b.literal(open, c.reasoning_start);
  }
  open.push_back(grammar_builder::ref(b.add_dfa(up_to_first(c.reasoning_end), "thought")));
  b.add(block, open);
  const std::int32_t rest = b.import(answer, "answer-");
  b.add(root, {grammar_builder::ref(block), grammar_builder::ref(ws), grammar_builder::ref(rest)});
  if (!c.reasoning_start.empty()) b.add(root, {grammar_builder::ref(rest)});  // no reasoning at all
  return b.build(root);
}

}  // namespace

std::shared_ptr<const grammar> compile_constraint(const sampling::output_constraint& c) {
  // The last grammars compiled in this process: the API's check and the engine's compile of the
  // same request, and the requests of one application that all send one schema.
  static std::mutex mu;
  static std::list<std::pair<std::pair<int, std::string>, std::shared_ptr<const grammar>>> lru;
  const std::pair<int, std::string> key = key_of(c);
  {
    std::lock_guard lock(mu);
    for (auto it = lru.begin(); it != lru.end(); ++it)
      if (it->first == key) {
        lru.splice(lru.begin(), lru, it);
        return lru.front().second;
      }
  }
  auto g = build(c);  // outside the lock: a slow compile does not hold up the others
  if (!c.reasoning_end.empty()) g = after_reasoning(*g, c);
  std::lock_guard lock(mu);
  lru.emplace_front(key, g);
  if (lru.size() > 256) lru.pop_back();
  return g;
}

grammar_cache::grammar_cache(std::shared_ptr<const vocabulary> vocab, std::size_t max_grammars)
    : vocab_(std::move(vocab)), fragments_(std::make_shared<fragment_cache>()), max_(max_grammars) {}

grammar_cache::compiled grammar_cache::get(const sampling::output_constraint& c) {
  const key k = key_of(c);
  {
    std::lock_guard lock(mu_);
    auto it = index_.find(k);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  compiled out{compile_constraint(c), std::make_shared<masks>(vocab_, std::size_t(32) << 20, fragments_)};
  std::lock_guard lock(mu_);
  if (auto it = index_.find(k); it != index_.end()) return it->second->second;
  lru_.emplace_front(k, out);
  index_.emplace(k, lru_.begin());
  if (lru_.size() > max_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return out;
}

constrained_output::constrained_output(grammar_cache::compiled c) : c_(std::move(c)) {
  states_.push_back({grammar_matcher(c_.rules), nullptr});
}

std::shared_ptr<const token_mask> constrained_output::mask() const {
  auto& at = states_.back();
  if (!at.mask) at.mask = c_.token_masks->of(at.state);
  return at.mask;
}

bool constrained_output::is_eos(std::int32_t token) const {
  for (std::int32_t e : c_.token_masks->vocab().eos)
    if (e == token) return true;
  return false;
}

bool constrained_output::accept(std::int32_t token) {
  if (is_eos(token)) return complete();
  const auto& bytes = c_.token_masks->vocab().bytes;
  if (token < 0 || std::size_t(token) >= bytes.size() || bytes[std::size_t(token)].empty()) return false;
  auto next = states_.back().state.after(bytes[std::size_t(token)]);
  if (!next) return false;
  states_.push_back({std::move(*next), nullptr});
  // Masks held for the last few states only (what a rewind after a proposal returns to): on a
  // 150k vocabulary each is 19 KB, and the cache holds them anyway.
  if (states_.size() > 8) states_[states_.size() - 9].mask.reset();
  if (states_.size() > 64) {  // rewinds reach back a proposal's length at most
    states_.erase(states_.begin(), states_.begin() + 32);
    base_ += 32;
  }
  return true;
}

void constrained_output::rewind(std::size_t n) {
  if (n < base_ || n > accepted())
    throw std::logic_error("constrained_output::rewind to " + std::to_string(n) + " of " + std::to_string(accepted()));
  states_.erase(states_.begin() + std::ptrdiff_t(n - base_ + 1), states_.end());
}

}  // namespace troupe::structured
