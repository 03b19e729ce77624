// Structured output in the engine: each constrained sequence follows its grammar token by
// token; a row's mask is what the grammar allows at that position, so the sampler (wherever the
// logits are) never picks anything else. The grammar logic itself is runtime/structured.
#include "kernels/cpu/thread_pool.h"
#include "runtime/common/error.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/engine_sequence.h"

namespace troupe::engine {


std::unique_ptr<structured::constrained_output> engine::constraint_for(const request& r) {
  const auto& c = r.params.constraint;
  if (c.empty()) return nullptr;
  if (!tok_) throw input_error("request '" + r.id + "': structured output needs the model's tokenizer, which this engine has not");
  // A request that keeps special tokens' text has grammars over a vocabulary where they have it.
  auto& grammars = r.params.skip_special_tokens ? grammars_ : special_text_grammars_;
  if (!grammars)
    grammars = std::make_unique<structured::grammar_cache>(
        structured::vocabulary_of(*tok_, mc_.vocab_size, mc_.eos_token_ids, !r.params.skip_special_tokens));
  auto out = std::make_unique<structured::constrained_output>(grammars->get(c));
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

void engine::prefetch_masks(const sched::step_plan& plan) const {
  std::vector<const structured::constrained_output*> want;
  for (const auto& sc : plan.scheduled) {
    const sequence& s = *seqs_.at(sc.id);
    if (s.constraint && !s.kv_in.expected() && s.num_computed + sc.num_new_tokens == int(s.tokens.size()))
      want.push_back(s.constraint.get());
  }
  if (want.size() < 2) return;  // one is computed where it is needed
  kernels::parallel_for(want.size(), [&](std::size_t i) { want[i]->mask(); });
}

void engine::cut_proposal(sequence& s, std::vector<std::int32_t>& proposed) const {
  // A proposed token the grammar refuses would be rejected anyway; the rows after it would need
  // the mask of a state that never exists. After an EOS nothing is verified.
  auto& c = *s.constraint;
  const std::size_t before = c.accepted();
  std::size_t keep = 0;
  for (; keep < proposed.size(); ++keep) {
    if (c.is_eos(proposed[keep])) {  // accepted where complete, and nothing is verified after it
      keep += c.complete() ? 1 : 0;
      break;
    }
    if (!c.accept(proposed[keep])) break;  // one step per token: checked and taken at once
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
