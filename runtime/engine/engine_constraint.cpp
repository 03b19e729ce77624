// Structured output in the engine: each constrained sequence follows its grammar token by
// token; a row's mask is what the grammar allows at that position, so the sampler (wherever the
// logits are) never picks anything else. The grammar logic itself is runtime/structured.
#include "runtime/common/error.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/engine_sequence.h"

namespace troupe::engine {

namespace {

// What each token adds to a decoded text. Decoded after a plain token, because a SentencePiece
// decoder drops the leading space of a text's first token; special tokens add nothing (no
// grammar allows them; EOS is the grammar's to allow in complete states).
std::vector<std::string> token_bytes(const tokenizer::tokenizer& tok, std::int32_t vocab) {
  std::vector<std::string> out(std::size_t(std::max(vocab, 0)));
  const auto anchor = tok.encode("a", false);
  const std::string base = anchor.size() == 1 ? tok.decode_bytes(anchor) : std::string();
  for (std::int32_t id = 0; id < vocab && id < tok.vocab_size(); ++id) {
    if (anchor.size() == 1) {
      const std::string both = tok.decode_bytes({anchor[0], id});
      if (both.size() >= base.size() && both.compare(0, base.size(), base) == 0) {
        out[std::size_t(id)] = both.substr(base.size());
        continue;
      }
    }
    out[std::size_t(id)] = tok.decode_bytes({id});
  }
  return out;
}

}  // namespace

std::unique_ptr<structured::constrained_output> engine::constraint_for(const request& r) {
  const auto& c = r.params.constraint;
  if (c.empty()) return nullptr;
  if (!tok_) throw input_error("request '" + r.id + "': structured output needs the model's tokenizer, which this engine has not");
  if (!grammars_)
    grammars_ = std::make_unique<structured::grammar_cache>(
        std::make_shared<structured::vocabulary>(token_bytes(*tok_, mc_.vocab_size), mc_.eos_token_ids));
  auto out = std::make_unique<structured::constrained_output>(grammars_->get(c));
  for (std::size_t i = 0; i < r.generated.size(); ++i)  // a migrated request: where it was
    if (!out->accept(r.generated[i]))
      throw input_error("request '" + r.id + "': generated token " + std::to_string(i) + " does not follow its " +
                        structured::constraint_kind_name(c.type) + " constraint");
  return out;
}

void engine::constrain(sequence& s, sampling::sampling_row& row) const {
  if (!s.constraint) return;
  row.allowed = s.constraint->mask()->words();
}

void engine::cut_proposal(sequence& s, std::vector<std::int32_t>& proposed) const {
  // A proposed token the grammar refuses would be rejected anyway; the rows after it would need
  // the mask of a state that never exists. After an EOS nothing is verified.
  auto& c = *s.constraint;
  const std::size_t before = c.accepted();
  std::size_t keep = 0;
  for (; keep < proposed.size(); ++keep) {
    if (!c.allows(proposed[keep])) break;
    if (c.is_eos(proposed[keep])) {
      ++keep;
      break;
    }
    c.accept(proposed[keep]);
  }
  proposed.resize(keep);
  c.rewind(before);
}

void engine::constrain(sequence& s, const std::vector<std::int32_t>& proposed, std::vector<sampling::sampling_row>& rows) const {
  if (!s.constraint) return;
  auto& c = *s.constraint;
  const std::size_t before = c.accepted();
  for (std::size_t j = 0; j < rows.size(); ++j) {
    rows[j].allowed = c.mask()->words();
    if (j < proposed.size() && !c.is_eos(proposed[j])) c.accept(proposed[j]);
  }
  c.rewind(before);
}

bool engine::constraint_ends(sequence& s, std::int32_t token) const {
  if (!s.constraint) return false;
  // The sampler chose from the grammar's mask, so the token is allowed; a refusal here would be
  // a bug in the mask, and ends the output rather than letting it leave the grammar.
  if (!s.constraint->accept(token)) return true;
  return s.constraint->exhausted();
}

}  // namespace troupe::engine
