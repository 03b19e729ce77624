// The engine's side of speculative decoding: which scheduled decodes propose how many tokens
// this step (the policy in runtime/speculative decides, the proposer suggests), and what a verify
// step's rows leave of them. Kept apart from engine.cpp's step, which only carries proposals
// through the plan.
#include <algorithm>
#include <chrono>

#include "runtime/engine/engine.h"
#include "runtime/engine/engine_sequence.h"
#include "runtime/speculative/draft.h"
#include "runtime/speculative/verify.h"

namespace troupe::engine {

struct engine::candidate {
  sequence* s = nullptr;
  int cap = 0;  // tokens it may propose: k, the tokens max_tokens leaves, the room the context leaves
  // A proposer with a model of its own (not cheap) samples as the target does, in the blocks the
  // sequence has: filled only for it (the history copy and the table are per step).
  sampling::sampling_row row;
  std::vector<std::int32_t> table;
};

std::unique_ptr<speculative::proposer> draft_for(const engine_config& cfg, const model::llama_model& target,
                                                 const tokenizer::tokenizer* tok) {
  if (cfg.speculative.how != speculative::method::draft || cfg.speculative.draft_model.empty()) return nullptr;
  kv::kv_cache_config blocks = kv_geometry(cfg, target.config());
  blocks.shared = false;  // the draft's KV never leaves the replica
  blocks.layer_group.clear();  // nor is split: it is indexed by the target's global pages
  blocks.layer_slot.clear();
  return speculative::load_draft(cfg.speculative.draft_model, target.dir(), target.config(), tok, blocks);
}

void engine::forget_proposals(std::uint64_t id, int valid) {
  if (proposer_) proposer_->rewind(id, valid);
}

std::map<std::uint64_t, std::vector<std::int32_t>> engine::propose(const sched::step_plan& plan) {
  std::map<std::uint64_t, std::vector<std::int32_t>> out;
  const auto& sc = cfg_.speculative;
  if (!proposer_ || (sc.max_running > 0 && int(running_.size()) > sc.max_running)) return out;
  const int bs = cfg_.sched.block_size;
  std::vector<candidate> cands;
  int base_tokens = 0;  // tokens the step yields without speculation
  for (const auto& x : plan.scheduled) {
    sequence& s = *seqs_.at(x.id);
    if (s.kv_in.expected()) continue;
    const bool ends = s.num_computed + x.num_new_tokens == int(s.tokens.size());
    base_tokens += ends ? 1 : 0;
    if (!ends || x.num_new_tokens != 1 || s.prefill_only || !s.speculate) continue;
    int cap = std::min({sc.k, s.params.max_tokens - s.num_output() - 1, cfg_.max_model_len - int(s.tokens.size())});
    if (cap <= 0) continue;
    if (sc.adaptive && s.acceptance.rate() < sc.min_acceptance) {  // proposes now and then, to see whether that changed
      if (++s.probe_wait < sc.probe_every) continue;
      s.probe_wait = 0;
      cap = 1;
    }
    cands.push_back({&s, cap, {}, {}});
  }
  if (cands.empty()) return out;
  auto ask = [&](const std::vector<int>& k) {
    std::vector<speculative::proposal_ask> asks;
    for (std::size_t i = 0; i < cands.size(); ++i) {
      auto& c = cands[i];
      if (k[i] <= 0) continue;
      if (!proposer_->cheap()) c.row = sampling_row_of(*c.s), c.table = kv_.raw_table(c.s->id);
      asks.push_back({c.s->id, c.s->tokens, k[i], &c.row, c.table});
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto got = proposer_->propose(asks);
    stats_.spec_propose_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<std::vector<std::int32_t>> all(cands.size());
    for (std::size_t i = 0, a = 0; i < cands.size(); ++i)
      if (k[i] > 0) all[i] = std::move(got.at(a++));
    return all;
  };
  std::vector<int> caps;
  for (const auto& c : cands) caps.push_back(c.cap);
  std::vector<std::vector<std::int32_t>> got;
  if (proposer_->cheap()) {  // ask first: most sequences have nothing to propose
    got = ask(caps);
    for (std::size_t i = 0; i < cands.size(); ++i) caps[i] = std::min(caps[i], int(got[i].size()));
  }
  std::vector<double> acceptance;
  std::vector<int> catch_up;
  for (const auto& c : cands) {
    acceptance.push_back(c.s->acceptance.rate());
    catch_up.push_back(proposer_->catch_up(c.s->id, int(c.s->tokens.size())));
  }
  speculative::plan_inputs in{plan.num_tokens, base_tokens, acceptance, sc.k, caps, proposer_->cost(), catch_up, false};
  if (base_tokens > 0) in.decode_seconds = step_cost_.at(base_tokens).seconds(base_tokens);
  in.explore = ++explore_wait_ >= speculative::explore_interval(step_cost_.local(plan.num_tokens), plan.num_tokens,
                                                                sc.probe_every, speculative::exploration_seconds(in));
  std::vector<int> len = sc.adaptive ? speculative::plan_lengths(in, step_cost_.at(plan.num_tokens)) : caps;
  if (std::any_of(len.begin(), len.end(), [](int x) { return x > 0; })) explore_wait_ = 0;
  // Within the step's token budget, and in blocks that are free now (a proposal never preempts).
  int budget = cfg_.sched.max_num_batched_tokens - plan.num_tokens;
  for (std::size_t i = 0; i < cands.size(); ++i) {
    len[i] = std::clamp(len[i], 0, std::max(budget, 0));
    if (len[i] == 0) continue;
    const std::uint64_t id = cands[i].s->id;
    const int tokens = int(cands[i].s->tokens.size());
    const int have = kv_.num_blocks_of(id);
    const int need = kv::blocks_for(tokens + len[i], bs) - have;  // positions up to tokens - 1 + len
    if (need > 0 && !kv_.allocate(id, need)) len[i] = std::max(0, have * bs - tokens);
    budget -= len[i];
  }
  if (!proposer_->cheap()) got = ask(len);
  for (std::size_t i = 0; i < cands.size(); ++i) {
    auto& g = got[i];
    if (len[i] <= 0 || g.empty()) continue;
    if (int(g.size()) > len[i]) g.resize(std::size_t(len[i]));
    out.emplace(cands[i].s->id, std::move(g));
  }
  return out;
}

finish_reason engine::keep_verified(sequence& s, const std::vector<std::int32_t>& proposed,
                                    std::span<sampling::sampled_token> chosen, request_output& o) {
  speculative::verdict v = speculative::judge(proposed, chosen);
  finish_reason why = finish_reason::none;
  std::string delta;
  for (auto& t : v.tokens) {
    s.tokens.push_back(t.token);
    ++stats_.generated_tokens;
    o.new_tokens.push_back(t.token);
    if (s.params.logprobs >= 0) o.logprobs.push_back(std::move(t.logprobs));
    why = outputs_.on_token(s.out, s.tokens, s.prompt_len, s.params, delta, constraint_ends(s, t.token));
    o.text_delta += delta;
    if (why != finish_reason::none) break;  // what followed its end is dropped
  }
  if (proposed.empty()) return why;
  const int accepted = int(o.new_tokens.size()) - 1;  // kept by the output, not only by the target
  s.acceptance.observe(int(proposed.size()), v.accepted);
  acceptance_.observe(int(proposed.size()), v.accepted);
  s.draft_tokens += int(proposed.size());
  s.accepted_tokens += accepted;
  ++stats_.spec_drafts;
  stats_.spec_draft_tokens += proposed.size();
  stats_.spec_accepted_tokens += std::uint64_t(accepted);
  auto& per_pos = stats_.spec_accepted_per_pos;
  if (per_pos.size() < proposed.size()) per_pos.resize(proposed.size());
  for (int j = 0; j < accepted; ++j) ++per_pos[std::size_t(j)];
  return why;
}

}  // namespace troupe::engine
