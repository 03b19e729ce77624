#include "runtime/speculative/draft.h"

#include <algorithm>
#include <filesystem>

#include "runtime/common/error.h"
#include "runtime/model/model_tokenizer.h"
#include "runtime/speculative/verify.h"

namespace troupe::speculative {

namespace {

// The weight an observation of a draft round's time gets (about the last 20 rounds count).
constexpr double round_keep = 0.95;

struct lane {  // one sequence's proposal under way
  const proposal_ask* ask = nullptr;
  std::vector<std::int32_t> out;
  int from = 0;  // first position this round computes
};

}  // namespace

draft_proposer::draft_proposer(std::shared_ptr<const model::llama_model> draft, const kv::kv_cache_config& blocks)
    : draft_(std::move(draft)),
      cache_(blocks, draft_->config().num_hidden_layers, draft_->config().num_key_value_heads, draft_->config().head_dim) {}

draft_cost draft_proposer::cost() const {
  const auto one = rounds_.seconds(1), two = rounds_.seconds(2);
  if (!one || !two) return {seconds_per_round_, 0};
  const double per_position = std::max(0.0, *two - *one);
  return {std::max(0.0, *one - per_position), per_position};
}

int draft_proposer::catch_up(std::uint64_t seq, int tokens) const {
  auto it = computed_.find(seq);
  const int from = it == computed_.end() ? 0 : std::min(it->second, tokens - 1);
  return std::max(0, tokens - 1 - from);  // round 0 computes from..tokens-1; the last is due anyway
}

void draft_proposer::rewind(std::uint64_t seq, int valid) {
  auto it = computed_.find(seq);
  if (it != computed_.end()) it->second = std::min(it->second, std::max(valid, 0));
}

std::vector<std::vector<std::int32_t>> draft_proposer::propose(std::span<const proposal_ask> asks) {
  const auto& mc = draft_->config();
  std::vector<lane> lanes;
  for (const auto& a : asks) {
    lane l{&a, {}, 0};
    auto it = computed_.find(a.seq);
    l.from = it == computed_.end() ? 0 : std::min(it->second, int(a.tokens.size()) - 1);
    lanes.push_back(std::move(l));
  }
  // Round j: each lane still proposing feeds what it has not computed yet (round 0: its tokens
  // from where its draft KV ends; later: its newest proposal) and samples its j-th proposal.
  const int positions = mc.max_position_embeddings > 0 ? mc.max_position_embeddings : 1 << 30;
  for (int round = 0;; ++round) {
    model::forward_batch b;
    std::vector<lane*> active;
    std::vector<sampling::sampling_row> rows;
    for (auto& l : lanes) {
      const int len = int(l.ask->tokens.size());
      const int k = std::min(l.ask->k, positions - len);  // the draft knows no positions past its own
      if (round >= k || int(l.out.size()) < round) continue;
      const int last = len - 1 + round;  // the position whose logits give proposal `round`
      for (int p = l.from; p <= last; ++p) {
        b.tokens.push_back(p < len ? l.ask->tokens[std::size_t(p)] : l.out[std::size_t(p - len)]);
        b.positions.push_back(p);
        b.tables.push_back(l.ask->table.data());
      }
      b.logit_rows.push_back(std::int32_t(b.tokens.size() - 1));
      l.from = last + 1;
      rows.push_back(row_after(*l.ask->row, l.out));  // the row the target uses at this position
      active.push_back(&l);
    }
    if (active.empty()) break;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<float> logits(b.logit_rows.size() * std::size_t(mc.vocab_size));
    draft_->forward(b, cache_, logits.data(), ws_);
    const auto chosen = sampling::sample_rows(logits, rows, mc.vocab_size, mc.eos_token_ids);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    seconds_per_round_ = seconds_per_round_ == 0 ? s : seconds_per_round_ * round_keep + s * (1 - round_keep);
    rounds_.observe(int(b.tokens.size()), s);
    for (std::size_t i = 0; i < active.size(); ++i) active[i]->out.push_back(chosen[i].token);
  }
  std::vector<std::vector<std::int32_t>> out;
  for (auto& l : lanes) {
    computed_[l.ask->seq] = l.from;  // every position it fed: the tokens, and all proposals but the last
    out.push_back(std::move(l.out));
  }
  return out;
}

std::unique_ptr<draft_proposer> load_draft(const std::string& draft_dir, const std::string& target_name,
                                           const model::model_config& target, const tokenizer::tokenizer* target_tok,
                                           const kv::kv_cache_config& blocks) {
  const std::string both = "draft model " + draft_dir + " cannot draft for " + target_name + ": ";
  if (!std::filesystem::exists(draft_dir)) throw input_error("draft model " + draft_dir + ": no such folder or file");
  auto draft = model::shared_shard(draft_dir, {});
  const auto& d = draft->config();
  if (d.vocab_size != target.vocab_size)
    throw input_error(both + "its vocabulary has " + std::to_string(d.vocab_size) + " tokens, the target's " +
                      std::to_string(target.vocab_size));
  if (target_tok) {
    auto tok = model::load_tokenizer(draft_dir);
    if (!tok) throw input_error(both + "it has no tokenizer to compare with the target's");
    for (std::int32_t id = 0; id < target.vocab_size; ++id)
      if (tok->token_text(id) != target_tok->token_text(id))
        throw input_error(both + "their tokenizers differ (token " + std::to_string(id) + " is \"" + tok->token_text(id).value_or("") +
                          "\" in the draft, \"" + target_tok->token_text(id).value_or("") + "\" in the target)");
  }
  return std::make_unique<draft_proposer>(std::move(draft), blocks);
}

}  // namespace troupe::speculative
