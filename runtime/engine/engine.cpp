#include "runtime/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <stdexcept>
#include <unordered_set>

#include "runtime/common/error.h"
#include "runtime/engine/cpu_executor.h"
#include "runtime/engine/engine_sequence.h"
#include "runtime/engine/request_check.h"
#include "runtime/engine/sim_executor.h"
#include "runtime/speculative/verify.h"

namespace troupe::engine {

const char* finish_reason_name(finish_reason r) {
  switch (r) {
    case finish_reason::none: return "none";
    case finish_reason::stop: return "stop";
    case finish_reason::length: return "length";
    case finish_reason::abort: return "abort";
    case finish_reason::handoff: return "handoff";
    case finish_reason::error: return "error";
    case finish_reason::transfer_failed: return "transfer_failed";
  }
  return "?";
}

namespace {

void remove_id(std::vector<std::uint64_t>& v, std::uint64_t id) { v.erase(std::remove(v.begin(), v.end(), id), v.end()); }

}  // namespace

kv::window_groups kv_window_groups(const engine_config& cfg, const model::model_config& m) {
  if (!cfg.free_windows || cfg.kv_offload) return {};
  std::vector<int> windows;
  for (int l = 0; l < m.num_hidden_layers; ++l) windows.push_back(m.window_of(l));
  return kv::window_groups_of(windows);
}

int kv_pool_blocks(const engine_config& cfg, const model::model_config& m) {
  if (cfg.num_blocks > 0) return cfg.num_blocks;
  // A page holds one block of as many layers as it has slots.
  return kv::kv_cache::blocks_in(cfg.kv_memory_bytes, cfg.sched.block_size, cfg.kv_type,
                                 kv_window_groups(cfg, m).slots(m.num_hidden_layers), m.num_key_value_heads, m.head_dim);
}

kv::kv_cache_config kv_geometry(const engine_config& cfg, const model::model_config& m) {
  const auto g = kv_window_groups(cfg, m);
  return {kv_pool_blocks(cfg, m), cfg.sched.block_size, cfg.kv_type, cfg.kv_shared_memory, g.group, g.slot};
}

kv::transfer::kv_layout kv_layout_of(const engine_config& cfg, const model::model_config& m,
                                     std::vector<std::pair<int, int>> ranks, int tensor_parallel) {
  kv::transfer::kv_layout l;
  l.type = cfg.kv_type;
  l.block_size = cfg.sched.block_size;
  l.num_layers = m.num_hidden_layers;
  l.n_kv_heads = m.num_key_value_heads;
  l.head_dim = m.head_dim;
  l.model_key = cfg.model_key;
  l.ranks = std::move(ranks);
  l.tensor_parallel = tensor_parallel;
  return l;
}

engine::engine(model::model_config shape, std::shared_ptr<const tokenizer::tokenizer> tok, engine_config cfg,
               std::unique_ptr<executor> exec, std::unique_ptr<speculative::proposer> draft)
    : mc_(std::move(shape)),
      tok_(std::move(tok)),
      cfg_(std::move(cfg)),
      exec_(std::move(exec)),
      windows_(kv_window_groups(cfg_, mc_)),
      kv_({kv_pool_blocks(cfg_, mc_), cfg_.sched.block_size, cfg_.prefix_caching, cfg_.kv_offload && cfg_.prefix_caching,
           true, windows_.count, windows_.window}),
      outputs_(tok_.get(), mc_.eos_token_ids, cfg_.max_model_len > 0 ? cfg_.max_model_len : mc_.max_position_embeddings),
      root_(kv::root_hash(cfg_.model_key)) {
  if (cfg_.max_model_len <= 0) cfg_.max_model_len = mc_.max_position_embeddings;
  cfg_.sched.pages_per_block = windows_.pages_per_block();
  // Positions past the model's own were never trained: serving them is silently wrong output.
  if (mc_.max_position_embeddings > 0 && cfg_.max_model_len > mc_.max_position_embeddings)
    throw input_error("max_model_len " + std::to_string(cfg_.max_model_len) + " is beyond the model's " +
                      std::to_string(mc_.max_position_embeddings) + " positions (max_position_embeddings)");
  if (!exec_) throw std::logic_error("engine: no executor");
  const auto& spec = cfg_.speculative;
  if (auto why = spec.invalid()) throw input_error(*why);
  if (spec.how == speculative::method::ngram) proposer_ = std::make_unique<speculative::ngram_proposer>(spec.ngram);
  if (spec.how == speculative::method::draft) {
    if (!draft) throw input_error("speculative method \"draft\": no draft model was given to this engine");
    proposer_ = std::move(draft);
  }
  layout_ = kv_layout_of(cfg_, mc_, exec_->kv_ranks(), exec_->tensor_parallel());
  for (const auto& [name, dir] : cfg_.start_adapters) load_adapter_folder(*this, name, dir);
}

engine::~engine() = default;

engine cpu_engine(std::shared_ptr<const model::llama_model> model, std::shared_ptr<const tokenizer::tokenizer> tok,
                  engine_config cfg) {
  auto exec = std::make_unique<cpu_executor>(model, kv_geometry(cfg, model->config()));
  auto draft = draft_for(cfg, *model, tok.get());
  return engine(model->config(), std::move(tok), std::move(cfg), std::move(exec), std::move(draft));
}

engine sim_engine(const model::model_config& shape, const sim::gpu_spec& gpu, engine_config cfg) {
  return engine(shape, nullptr, std::move(cfg), std::make_unique<sim_executor>(shape, gpu));
}

void engine::add_request(request r) {
  const auto& mc = mc_;
  if (by_name_.count(r.id)) throw input_error("request id '" + r.id + "' is already in use");
  if (r.model != cfg_.served_model)  // a router that placed it here got it wrong: its KV would mix models
    throw input_error("request '" + r.id + "': model: it is for \"" + r.model + "\"; this replica serves \"" + cfg_.served_model + "\"");
  if (auto p = check_request(r, {mc.vocab_size, cfg_.max_model_len, false})) throw input_error("request '" + r.id + "': " + p->message);
  auto constraint = constraint_for(r);
  auto adapter = adapter_of(r);
  const int len = int(r.prompt.size());
  const int most = std::min(len + r.params.max_tokens, cfg_.max_model_len);
  const int need = pages_for(most);
  if (need > kv_.num_blocks())
    throw input_error("request '" + r.id + "': " + std::to_string(most) + " tokens need " + std::to_string(need) +
                      " KV blocks but the pool has " + std::to_string(kv_.num_blocks()));
  // A step's score rows hold a vocabulary of logits each: bounded by the step's token budget.
  constexpr double max_score_bytes = 1024.0 * 1024 * 1024;
  if (r.params.prompt_logprobs >= 0 &&
      double(std::min(len, cfg_.sched.max_num_batched_tokens)) * mc.vocab_size * sizeof(float) > max_score_bytes)
    throw input_error("request '" + r.id + "': prompt_logprobs: a prompt of " + std::to_string(len) + " tokens would need " +
                      std::to_string(std::min(len, cfg_.sched.max_num_batched_tokens)) + " rows of " +
                      std::to_string(mc.vocab_size) + " logits in one step, over the 1 GiB this engine allows");
  if (r.embed && !mc.pooling)
    throw input_error("request '" + r.id + "': this model computes no embeddings (its folder has no sentence-transformers "
                      "Pooling module in modules.json)");
  auto s = std::make_unique<sequence>();
  s->acceptance = speculative::acceptance::starting_from(acceptance_);
  s->id = next_id_++;
  s->name = r.id;
  s->arrival = s->id;
  s->priority = r.priority;
  s->tokens = std::move(r.prompt);
  s->tokens.insert(s->tokens.end(), r.generated.begin(), r.generated.end());
  s->prompt_len = len;
  if (!r.generated.empty()) {  // migrated: its prompt logprobs went out with its first token
    s->scored = std::max(0, len - 1);
    s->prompt_lps_sent = true;
  }
  const std::size_t returned = r.text_returned < 0 ? r.generated.size() : std::min(r.generated.size(), std::size_t(r.text_returned));
  s->out.detok = tokenizer::incremental_detokenizer(returned, r.params.skip_special_tokens);
  s->prefill_only = r.prefill_only;
  s->speculate = r.speculate && !r.embed;
  s->embed = r.embed;
  s->pools_from_start = r.embed && mc.pooling->method != model::pooling_method::last;
  s->keys = {adapter ? kv::root_hash(cfg_.model_key, r.adapter) : root_, kv::salt_key(r.cache_salt), r.public_prefix};
  s->adapter = std::move(adapter);
  s->constraint = std::move(constraint);
  if (cfg_.prefix_caching) kv::extend_block_hashes(s->hashes, s->tokens, cfg_.sched.block_size, s->keys);
  if (!r.kv_from.empty() && windows_.split()) {
    // Its KV comes by whole layers, which this cache does not hold: computed here instead (the
    // same numbers), and the holder may let go of it at once.
    if (on_transfer_) on_transfer_({r.id, {}, 0});
    r.kv_from = {};
  }
  if (!r.kv_from.empty()) {
    const int positions = r.kv_from.positions;  // at least its last token is computed here
    if (positions < 1 || positions > int(s->tokens.size()) - 1)
      throw input_error("request '" + r.id + "': the KV handle holds " + std::to_string(positions) + " positions; its " +
                        std::to_string(s->tokens.size()) + " tokens take 1 to " + std::to_string(s->tokens.size() - 1));
    if (auto why = kv::transfer::layout_mismatch(r.kv_from.layout, layout_)) throw input_error("request '" + r.id + "': " + *why);
    s->num_computed = positions;  // once pulled; until then its reserved blocks sit out the steps
    s->kv_in = kv::connector::incoming(std::move(r.kv_from));
  }
  s->params = std::move(r.params);
  // A request without a seed gets one now, so recompute and migration repeat its draws.
  s->seed = s->params.seed ? *s->params.seed : std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  by_name_[s->name] = s->id;
  waiting_.push_back(s->id);
  stalled_ = false;
  seqs_.emplace(s->id, std::move(s));
}

std::size_t engine::waiting_prompt_tokens() const {
  std::size_t n = 0;
  const int bs = cfg_.sched.block_size;
  for (auto id : waiting_) {
    const sequence& s = *seqs_.at(id);
    std::size_t cached = 0;  // what its admission will find in the prefix cache is no work
    if (cfg_.prefix_caching && s.num_computed == 0 && kv_.num_blocks_of(id) == 0)
      cached = std::size_t(kv_.find_prefix(s.hashes, (int(s.tokens.size()) - 1) / bs).tokens(bs));
    n += s.tokens.size() - std::size_t(s.num_computed) - cached;
  }
  return n;
}

bool engine::release_handoff(const std::string& id) {
  auto it = held_.find(id);
  if (it == held_.end()) return false;
  kv_.free(it->second.seq);
  held_.erase(it);
  stalled_ = false;
  return true;
}

offload_batch engine::take_offloads() {
  offload_batch b;
  b.blocks = kv_.take_offloads();
  if (b.blocks.empty()) return b;
  b.from.request = "offload";
  b.from.layout = layout_;
  b.from.sources = exec_->kv_sources();
  for (const auto& o : b.blocks) b.from.blocks.push_back(o.block.value);
  b.from.positions = std::int32_t(b.blocks.size()) * cfg_.sched.block_size;
  return b;
}

void engine::offload_done(const std::vector<std::int32_t>& blocks) {
  std::vector<kv::block_id> ids;
  for (auto b : blocks) ids.push_back(kv::block_id(b));
  kv_.unpin(ids);
  stalled_ = false;
}

bool engine::has_work() const {
  if (!aborted_.empty()) return true;
  for (auto id : running_)
    if (!seqs_.at(id)->kv_in.in_flight()) return true;
  return !waiting_.empty() && !stalled_;
}

bool engine::abort(const std::string& id) {
  auto it = by_name_.find(id);
  if (it == by_name_.end()) return false;
  if (pending_) {  // its tokens may be in the step in flight: end it once the step is done
    if (std::find(deferred_aborts_.begin(), deferred_aborts_.end(), id) == deferred_aborts_.end())
      deferred_aborts_.push_back(id);
    return true;
  }
  sequence& s = *seqs_.at(it->second);
  if (s.kv_in.abort_when_pulled()) return true;  // a copy is writing its blocks: it ends when the pull does
  request_output o;
  o.id = s.name;
  finish(s, finish_reason::abort, o);
  aborted_.push_back(std::move(o));
  stalled_ = false;
  return true;
}

std::vector<request_output> engine::hand_off_all() {
  if (pending_) throw std::logic_error("engine::hand_off_all: a step is in flight");
  std::vector<request_output> out = std::move(aborted_);
  aborted_.clear();
  std::vector<std::uint64_t> ids = running_;
  ids.insert(ids.end(), waiting_.begin(), waiting_.end());
  for (auto id : ids) {
    sequence& s = *seqs_.at(id);
    if (s.kv_in.in_flight()) continue;  // its KV is still arriving: handed off once it is here
    request_output o;
    o.id = s.name;
    finish(s, finish_reason::handoff, o);
    out.push_back(std::move(o));
  }
  return out;
}

void engine::finish(sequence& s, finish_reason why, request_output& o) {
  // A request handed off with KV computed keeps its blocks until the receiver pulled them; one
  // that computed nothing here (still waiting) goes without a handle, or with the one it came
  // with if it was still waiting to pull it.
  if (why == finish_reason::handoff && s.num_computed > 0 && !s.kv_in.expected() && !windows_.split()) {
    o.kv.request = s.name;
    o.kv.layout = layout_;
    o.kv.sources = exec_->kv_sources();
    o.kv.blocks = kv_.raw_table(s.id);
    o.kv.positions = s.num_computed;
    held_[s.name] = {s.id, s.num_computed};
  } else {
    kv_.free(s.id);
    // Handed on before its pull began: the next replica pulls from the same holder.
    if (why == finish_reason::handoff) o.kv = s.kv_in.pass_on();
  }
  o.finished = true;
  o.reason = why;
  o.num_prompt_tokens = s.prompt_len;
  o.cached_tokens = std::max(s.cached_tokens, 0);
  o.num_output_tokens = s.num_output();
  using secs = std::chrono::duration<double>;
  const auto now = sequence::clock::now();
  const auto sched = s.first_scheduled.value_or(now), first = s.first_token.value_or(now);
  o.queue_seconds = secs(sched - s.arrived).count();
  o.prefill_seconds = secs(first - sched).count();
  o.decode_seconds = secs(now - first).count();
  o.transfer_seconds = s.transfer_seconds;
  o.draft_tokens = s.draft_tokens;
  o.accepted_tokens = s.accepted_tokens;
  if (proposer_) proposer_->forget(s.id);
  remove_id(running_, s.id);
  remove_id(waiting_, s.id);
  by_name_.erase(s.name);
  seqs_.erase(s.id);  // s is gone after this line
}

sampling::sampling_row engine::sampling_row_of(const sequence& s) const {
  sampling::sampling_row r;
  r.params = s.params;
  r.seed = s.seed;
  r.num_output = s.num_output();
  r.prompt_len = s.prompt_len;
  if (sampling::needs_history(s.params)) r.history = s.tokens;
  return r;
}

sched::step_plan engine::plan_admissions(kv::prefix_lookup& look) {
  const int bs = cfg_.sched.block_size;
  std::vector<sched::seq_snapshot> run, wait;
  for (auto id : running_) {
    sequence& s = *seqs_.at(id);
    if (s.kv_in.in_flight()) continue;  // its blocks are reserved for the pull: not scheduled, not preempted
    sched::seq_snapshot snap{id, int(s.tokens.size()), s.num_computed, kv_.num_blocks_of(id), s.priority, s.arrival};
    if (cfg_.prefix_caching || windows_.split()) snap.exclusive_blocks = kv_.num_exclusive(id);  // else: all of them
    run.push_back(snap);
    if (cfg_.prefix_caching && s.num_computed < s.prompt_len) {  // a prefill: what it computes, others wait for
      kv::extend_block_hashes(s.hashes, std::span(s.tokens.data(), std::size_t(s.prompt_len)), bs, s.keys);
      look.computing(s.hashes, s.num_computed / bs);
    }
  }
  for (auto id : waiting_) {
    sequence& s = *seqs_.at(id);
    sched::seq_snapshot snap{id, int(s.tokens.size()), s.num_computed, kv_.num_blocks_of(id), s.priority, s.arrival};
    if (cfg_.prefix_caching && snap.num_blocks == 0 && !s.kv_in.expected()) {
      if (s.num_computed == 0 && !s.wants_scores() && !s.pools_from_start && look.can_look()) {
        kv::extend_block_hashes(s.hashes, s.tokens, bs, s.keys);
        const auto a = look.fresh(id, s.hashes, int(s.tokens.size()), s.prompt_len);
        if (a.wait) {
          ++stats_.prefix_waits;
          continue;  // not a candidate this step; it is admitted once that block is cached
        }
        if (a.looked) {
          snap.num_computed = a.tokens;
          snap.num_blocks = a.blocks;
          snap.cached_free_blocks = a.evictable;
        }
      }
    } else if (cfg_.prefix_caching && snap.num_blocks == 0 && look.can_look()) {  // KV to pull: what is cached here is not pulled again
      kv::extend_block_hashes(s.hashes, s.tokens, bs, s.keys);
      const auto a = look.to_pull(id, s.hashes, s.kv_in.positions());
      snap.num_blocks = a.blocks;
      snap.cached_free_blocks = a.evictable;
    }
    wait.push_back(snap);
  }
  return sched::plan_step(cfg_.sched, run, wait, kv_.num_free());
}

void engine::apply_plan(const sched::step_plan& plan, const kv::prefix_lookup& look) {
  for (auto id : plan.preempted) {
    sequence& s = *seqs_.at(id);
    kv_.free(id);
    s.num_computed = 0;
    forget_proposals(id, 0);
    remove_id(running_, id);
    waiting_.push_back(id);
    ++stats_.preemptions;
  }
  for (auto id : plan.admitted) {
    remove_id(waiting_, id);
    running_.push_back(id);
    forget_proposals(id, 0);  // a new table: a draft's KV in it is computed afresh
    sequence& s = *seqs_.at(id);
    const auto a = look.attach(kv_, id, int(s.tokens.size()));  // hits first: allocations may evict
    if (s.cached_tokens < 0) s.cached_tokens = a.found ? a.tokens : 0;
    if (!a.found) continue;
    if (!s.kv_in.expected())
      s.num_computed = a.tokens;
    else if (s.kv_in.trim(a.blocks, a.tokens) && on_transfer_)  // the pull brings only the blocks after the cached ones
      on_transfer_({s.name, {}, 0});                             // all of it was here: the holder may free it
  }
  for (const auto& sc : plan.scheduled)
    if (!kv_.allocate(sc.id, sc.new_blocks)) throw std::logic_error("scheduler planned more blocks than are free");
}

forward_plan engine::begin_step() {
  pending_ = std::make_unique<pending>();
  pending& p = *pending_;
  p.out = std::move(aborted_);
  aborted_.clear();
  kv::prefix_lookup look(kv_, cfg_.sched.max_num_seqs);
  const sched::step_plan plan = plan_admissions(look);
  apply_plan(plan, look);
  auto proposals = propose(plan);  // their blocks allocated
  prefetch_masks(plan);
  forward_plan fp;
  std::vector<std::uint64_t> to_pull;
  for (const auto& sc : plan.scheduled) {
    sequence& s = *seqs_.at(sc.id);
    if (!s.first_scheduled) s.first_scheduled = sequence::clock::now();
    if (s.kv_in.expected()) {  // just admitted: its blocks are reserved, its KV comes first
      to_pull.push_back(sc.id);
      continue;
    }
    const std::size_t i = p.ids.size();
    p.ids.push_back(sc.id);
    p.logit_row.push_back(-1);
    auto prop = proposals.find(sc.id);
    p.proposed.push_back(prop == proposals.end() ? std::vector<std::int32_t>{} : std::move(prop->second));
    if (s.constraint) cut_proposal(s, p.proposed.back());
    const auto& proposed = p.proposed.back();
    p.new_tokens.push_back(sc.num_new_tokens + int(proposed.size()));
    fp.tables.push_back(kv_.raw_table(sc.id));
    kv_.append_group_tables(sc.id, fp.group_tables);
    const std::size_t first_row = fp.tokens.size();
    for (int j = 0; j < p.new_tokens[i]; ++j) {  // its tokens, then the ones it verifies
      const int pos = s.num_computed + j;
      fp.tokens.push_back(pos < int(s.tokens.size()) ? s.tokens[std::size_t(pos)] : proposed[std::size_t(pos) - s.tokens.size()]);
      fp.positions.push_back(pos);
      fp.seq_of_token.push_back(std::int32_t(i));
    }
    add_adapter_rows(s, first_row, fp);
    add_score_rows(s, sc.num_new_tokens, fp, p);
    add_pool_rows(s, sc.num_new_tokens, fp, p);
    if (!s.embed && s.num_computed + sc.num_new_tokens == int(s.tokens.size())) {  // one row per position from its last token on
      p.logit_row[i] = int(fp.logit_rows.size());
      for (std::size_t j = 0; j <= proposed.size(); ++j)
        fp.logit_rows.push_back(std::int32_t(fp.tokens.size() - 1 - proposed.size() + j));
      if (proposed.empty()) {
        fp.sampling.push_back(sampling_row_of(s));
        constrain(s, fp.sampling.back());
      } else {
        auto rows = speculative::verify_rows(sampling_row_of(s), proposed);
        constrain(s, proposed, rows);
        fp.sampling.insert(fp.sampling.end(), std::make_move_iterator(rows.begin()), std::make_move_iterator(rows.end()));
      }
    }
  }
  p.logit_rows = fp.logit_rows.size();
  p.pools = fp.pools.size();
  p.rows = fp.tokens.size();
  p.computes = !fp.empty();
  stalled_ = fp.empty() && plan.admitted.empty() && p.out.empty();
  for (auto id : to_pull) start_pull(*seqs_.at(id));
  return fp;
}

std::vector<request_output> engine::finish_step(std::optional<step_result> result) {
  std::unique_ptr<pending> held = std::move(pending_);
  pending& p = *held;
  if (!result) {  // the executor lost the step and its KV
    aborted_.insert(aborted_.begin(), std::make_move_iterator(p.out.begin()), std::make_move_iterator(p.out.end()));
    lose_kv();
    return {};
  }
  std::vector<request_output> out = std::move(p.out);
  if (result->pooled.size() != p.pools)
    throw std::logic_error("finish_step: " + std::to_string(result->pooled.size()) + " pooled vectors, the plan wants " +
                           std::to_string(p.pools));
  if (result->tokens.size() != p.logit_rows)
    throw std::logic_error("finish_step: " + std::to_string(result->tokens.size()) + " tokens, the plan wants " +
                           std::to_string(p.logit_rows));
  auto& routed = stats_.expert_tokens;
  routed.resize(std::max(routed.size(), result->expert_tokens.size()));
  for (std::size_t e = 0; e < result->expert_tokens.size(); ++e) routed[e] += result->expert_tokens[e];
  if (p.computes) {
    stats_.last_forward_seconds = result->seconds;
    stats_.forward_seconds += result->seconds;
    ++stats_.steps;
    // The policy's cost line is of decode steps only: a prefill chunk's hundreds of rows would
    // pull it toward the compute-bound slope, while a proposal's row lands where the batch's
    // decode rows are (on a CPU a 1b model's step costs about the same for 1 to 4 rows, then
    // grows by the row: the local slope is the one that matters).
    if (proposer_ && p.rows == p.logit_rows) {
      int proposed = 0;
      for (const auto& v : p.proposed) proposed += int(v.size());
      step_cost_.observe(int(p.rows) - proposed, int(p.rows), result->seconds, proposed > 0);
    }
  }
  const int bs = cfg_.sched.block_size;
  for (std::size_t i = 0; i < p.ids.size(); ++i) {
    sequence& s = *seqs_.at(p.ids[i]);
    const int prompt_part = std::max(0, std::min(s.prompt_len, s.num_computed + p.new_tokens[i]) - s.num_computed);
    stats_.prompt_tokens_computed += std::uint64_t(prompt_part);
    for (int k = 0; k < p.score_count[i]; ++k) s.prompt_lps.push_back(std::move(result->tokens[std::size_t(p.score_row[i] + k)].logprobs));
    s.scored += p.score_count[i];
    take_pooled(s, *result, p, i);
    if (p.logit_row[i] < 0) {  // a prefill chunk (or an embedding's prompt)
      s.num_computed += p.new_tokens[i];
      cache_computed(s);
      if (s.embed && s.num_computed == s.prompt_len) {
        request_output o = embedding_output(s);
        finish(s, finish_reason::stop, o);  // s is gone
        out.push_back(std::move(o));
      }
      continue;
    }
    // Its rows: the token it decoded, then one per proposed token; the target's choices at them
    // are what it keeps (one token at least), each judged for the end of the request in turn.
    const auto& proposed = p.proposed[i];
    const auto chosen = std::span(result->tokens).subspan(std::size_t(p.logit_row[i]), proposed.size() + 1);
    request_output o;
    o.id = s.name;
    finish_reason why = keep_verified(s, proposed, chosen, o);
    // Every position before its newest token now has its KV; a rejected proposal's does not
    // count, and the blocks only it filled go back (never cached, never handed on).
    s.num_computed = int(s.tokens.size()) - 1;
    cache_computed(s);
    // (A sequence given blocks for proposals its proposer then did not make gives them back too.)
    kv_.truncate(s.id, kv::blocks_for(int(s.tokens.size()), bs));
    if (proposer_ && (!proposed.empty() || s.constraint)) proposer_->rewind(s.id, s.num_computed);  // (a cut proposal too)
    if (!s.first_token) s.first_token = sequence::clock::now();
    o.num_prompt_tokens = s.prompt_len;
    o.cached_tokens = std::max(s.cached_tokens, 0);
    if (s.params.prompt_logprobs >= 0 && !s.prompt_lps_sent) {
      o.prompt_logprobs = std::move(s.prompt_lps);
      s.prompt_lps_sent = true;
    }
    o.num_output_tokens = s.num_output();
    o.text_tokens = int(s.out.detok.returned());
    if (why == finish_reason::none && s.prefill_only) why = finish_reason::handoff;
    if (why != finish_reason::none) finish(s, why, o);
    out.push_back(std::move(o));
  }
  apply_deferred_aborts();
  return out;
}

// Rows scoring the prompt positions this step computes (a request asking for prompt
// logprobs), ahead of its sampling rows; positions scored before a preemption are not again.
void engine::add_score_rows(const sequence& s, int new_tokens, forward_plan& fp, pending& p) const {
  const std::size_t i = p.score_row.size();
  p.score_row.push_back(int(fp.logit_rows.size()));
  int count = 0;
  if (s.params.prompt_logprobs >= 0) {
    const int first = int(fp.tokens.size()) - p.new_tokens[i];  // fp's row of position num_computed
    sampling::sampling_row row;
    row.params.prompt_logprobs = s.params.prompt_logprobs;
    for (int pos = std::max(s.num_computed, s.scored); pos < std::min(s.num_computed + new_tokens, s.prompt_len - 1); ++pos) {
      fp.logit_rows.push_back(std::int32_t(first + pos - s.num_computed));
      row.score = s.tokens[std::size_t(pos) + 1];
      fp.sampling.push_back(row);
      ++count;
    }
  }
  p.score_count.push_back(count);
}

int engine::pages_for(int tokens) const {
  const int bs = cfg_.sched.block_size, blocks = kv::blocks_for(tokens, bs);
  if (!windows_.split()) return blocks;
  const int in_window = kv::blocks_for(windows_.window + cfg_.sched.max_num_batched_tokens, bs) + 2;
  return blocks + windows_.count * std::min(blocks, in_window);
}

void engine::cache_computed(sequence& s) {
  kv_.slide(s.id, s.num_computed);   // the window pages of blocks behind its window go back
  if (!cfg_.prefix_caching) return;  // its blocks computed in full are findable from now on
  const int bs = cfg_.sched.block_size;
  kv::extend_block_hashes(s.hashes, std::span(s.tokens.data(), std::size_t(s.num_computed)), bs, s.keys);
  kv_.cache_blocks(s.id, s.hashes, s.tokens, s.num_computed / bs);
}

void engine::step(emit_fn emit) {
  if (pending_) throw std::logic_error("engine::step: the previous step is not finished");
  forward_plan plan = begin_step();
  if (plan.empty()) return emit(finish_step(step_result{}));
  exec_->execute(std::move(plan), [this, emit = std::move(emit)](std::optional<step_result> r) {
    emit(finish_step(std::move(r)));
  });
}

std::vector<request_output> engine::step() {
  std::optional<std::vector<request_output>> out;
  step([&](std::vector<request_output> o) { out = std::move(o); });
  if (!out) throw std::logic_error("engine::step(): the executor did not complete the step at once");
  return std::move(*out);
}

void engine::lose_kv() {
  if (pending_) {
    // Blocks the lost step allocated stay with their sequences and are released below.
    aborted_.insert(aborted_.begin(), std::make_move_iterator(pending_->out.begin()),
                    std::make_move_iterator(pending_->out.end()));
    pending_.reset();
  }
  // Back to waiting, ahead of the never-started ones and in their running order, so they are
  // readmitted first; their tokens so far are kept and recomputed, as after a preemption.
  std::vector<std::uint64_t> back, still_pulling;
  for (auto id : running_) {
    sequence& s = *seqs_.at(id);
    if (s.kv_in.lose()) {  // its copy may still write its blocks: they go when it ends
      still_pulling.push_back(id);
      continue;
    }
    kv_.free(id);
    s.num_computed = 0;
    forget_proposals(id, 0);
    back.push_back(id);
  }
  running_ = std::move(still_pulling);
  stalled_ = false;
  waiting_.insert(waiting_.begin(), back.begin(), back.end());
  kv_.clear_cache();  // the tensors behind every cached block are gone
  stats_.recomputed_after_loss += back.size();
  ++stats_.kv_losses;
  apply_deferred_aborts();
}

void engine::start_pull(sequence& s) {
  const std::uint64_t id = s.id, epoch = ++pull_epoch_;
  s.kv_in.start(epoch);
  const auto t0 = sequence::clock::now();
  // The table as of now: the pull fills the leading blocks, the step after it writes the rest.
  std::vector<std::int32_t> table = kv_.raw_table(id);
  table.erase(table.begin(), table.begin() + s.kv_in.skip());  // blocks found in this replica's cache
  exec_->pull_kv(s.kv_in.handle(), layout_, std::move(table), cfg_.transfer_backend, t0 + cfg_.transfer_timeout,
                 [this, id, epoch, t0](pull_outcome out) {
                   auto it = seqs_.find(id);
                   if (it != seqs_.end()) it->second->transfer_seconds += std::chrono::duration<double>(sequence::clock::now() - t0).count();
                   pulled(id, epoch, std::move(out));
                 });
}

void engine::pulled(std::uint64_t id, std::uint64_t epoch, pull_outcome out) {
  using kv::connector::after_pull;
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  sequence& s = *it->second;
  transfer_record rec{s.name, std::move(out), s.transfer_seconds};
  const after_pull next = s.kv_in.end(epoch, rec.outcome.error, cfg_.on_transfer_failure);
  if (next == after_pull::stale) return;
  stalled_ = false;
  if (rec.outcome.error.empty()) {
    ++stats_.kv_pulls;
    stats_.kv_pull_bytes += rec.outcome.bytes;
    stats_.kv_pull_seconds += rec.seconds;
  } else {
    ++stats_.kv_pull_failures;
  }
  if (next == after_pull::abort) {
    request_output o;
    o.id = s.name;
    finish(s, finish_reason::abort, o);
    aborted_.push_back(std::move(o));
  } else if (next != after_pull::compute_on) {  // the reserved blocks go back; the policy said what comes next
    kv_.free(id);
    s.num_computed = 0;
    forget_proposals(id, 0);
    if (next == after_pull::retry_elsewhere) {
      request_output o;
      o.id = s.name;
      finish(s, finish_reason::transfer_failed, o);
      aborted_.push_back(std::move(o));
    } else {  // computed here from its tokens, first in line
      remove_id(running_, id);
      waiting_.insert(waiting_.begin(), id);
    }
  }
  if (on_transfer_) on_transfer_(rec);
}

void engine::apply_deferred_aborts() {
  auto ids = std::move(deferred_aborts_);
  deferred_aborts_.clear();
  for (const auto& id : ids) abort(id);
}

std::vector<std::vector<std::int32_t>> generate_all(engine& e, const std::vector<request>& requests) {
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    index[requests[i].id] = i;
    e.add_request(requests[i]);
  }
  std::vector<std::vector<std::int32_t>> tokens(requests.size());
  while (e.has_unfinished())
    for (auto& o : e.step()) {
      auto& t = tokens[index.at(o.id)];
      t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
    }
  return tokens;
}

}  // namespace troupe::engine
