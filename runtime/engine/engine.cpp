#include "runtime/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <span>

#include "kernels/cpu/thread_pool.h"
#include "runtime/common/error.h"
#include "runtime/sampling/sampler.h"
#include "runtime/tokenizer/unicode.h"

namespace troupe::engine {

const char* finish_reason_name(finish_reason r) {
  switch (r) {
    case finish_reason::none: return "none";
    case finish_reason::stop: return "stop";
    case finish_reason::length: return "length";
    case finish_reason::abort: return "abort";
    case finish_reason::handoff: return "handoff";
  }
  return "?";
}

struct engine::sequence {
  std::uint64_t id = 0;
  std::string name;
  std::uint64_t arrival = 0;
  int priority = 0;
  std::vector<std::int32_t> tokens;  // prompt then output
  int prompt_len = 0;
  int num_computed = 0;
  std::vector<kv::block_id> blocks;
  sampling::sampling_params params;
  std::uint64_t seed = 0;
  tokenizer::incremental_detokenizer detok;
  std::string text;         // output text so far (stop strings cut it)
  std::size_t emitted = 0;  // bytes of text already returned
  bool prefill_only = false;
  std::shared_ptr<const std::vector<float>> import;  // KV to write in the first step
  using clock = std::chrono::steady_clock;
  clock::time_point arrived = clock::now();
  std::optional<clock::time_point> first_scheduled, first_token;

  int num_output() const { return int(tokens.size()) - prompt_len; }
  sched::seq_snapshot snapshot() const {
    return {id, int(tokens.size()), num_computed, int(blocks.size()), priority, arrival};
  }
};

namespace {

int pool_blocks(const engine_config& cfg, const model::model_config& m) {
  if (cfg.num_blocks > 0) return cfg.num_blocks;
  return kv::kv_cache::blocks_in(cfg.kv_memory_bytes, cfg.sched.block_size, cfg.kv_type, m.num_hidden_layers,
                                 m.num_key_value_heads, m.head_dim);
}

void remove_id(std::vector<std::uint64_t>& v, std::uint64_t id) { v.erase(std::remove(v.begin(), v.end(), id), v.end()); }

}  // namespace

engine::engine(std::shared_ptr<const model::llama_model> model, std::shared_ptr<const tokenizer::tokenizer> tok,
               engine_config cfg)
    : model_(std::move(model)), mc_(model_->config()), tok_(std::move(tok)), cfg_(cfg), pool_(pool_blocks(cfg, mc_)) {
  cache_ = std::make_unique<kv::kv_cache>(kv::kv_cache_config{pool_.num_blocks(), cfg.sched.block_size, cfg.kv_type},
                                          mc_.num_hidden_layers, mc_.num_key_value_heads, mc_.head_dim);
  if (cfg_.max_model_len <= 0) cfg_.max_model_len = mc_.max_position_embeddings;
}

engine::engine(const model::model_config& shape, std::shared_ptr<const tokenizer::tokenizer> tok, engine_config cfg)
    : mc_(shape), tok_(std::move(tok)), cfg_(cfg), pool_(pool_blocks(cfg, mc_)) {
  if (cfg_.max_model_len <= 0) cfg_.max_model_len = mc_.max_position_embeddings;
}

engine::engine(const model::model_config& shape, const sim::gpu_spec& gpu, engine_config cfg)
    : mc_(shape), sim_(gpu), cfg_(cfg), pool_(pool_blocks(cfg, mc_)) {
  if (cfg_.max_model_len <= 0) cfg_.max_model_len = mc_.max_position_embeddings;
}

engine::~engine() = default;

void engine::add_request(request r) {
  const auto& mc = mc_;
  if (by_name_.count(r.id)) throw input_error("request id '" + r.id + "' is already in use");
  if (r.prompt.empty()) throw input_error("request '" + r.id + "': the prompt is empty");
  for (std::size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= mc.vocab_size)
      throw input_error("request '" + r.id + "': prompt token " + std::to_string(i) + " is " + std::to_string(r.prompt[i]) +
                        ", outside the vocabulary [0, " + std::to_string(mc.vocab_size) + ")");
  for (std::size_t i = 0; i < r.generated.size(); ++i)
    if (r.generated[i] < 0 || r.generated[i] >= mc.vocab_size)
      throw input_error("request '" + r.id + "': generated token " + std::to_string(i) + " is outside the vocabulary");
  r.params.validate();
  if (int(r.generated.size()) >= r.params.max_tokens)
    throw input_error("request '" + r.id + "': max_tokens (" + std::to_string(r.params.max_tokens) +
                      ") already reached by the tokens generated before");
  const int len = int(r.prompt.size());
  if (len >= cfg_.max_model_len)
    throw input_error("request '" + r.id + "': the prompt has " + std::to_string(len) + " tokens; the context holds " +
                      std::to_string(cfg_.max_model_len) + " (prompt + at least one generated token)");
  if (len + int(r.generated.size()) >= cfg_.max_model_len)
    throw input_error("request '" + r.id + "': prompt and generated tokens already fill the context");
  const int most = std::min(len + r.params.max_tokens, cfg_.max_model_len);
  const int need = kv::blocks_for(most, cfg_.sched.block_size);
  if (need > pool_.num_blocks())
    throw input_error("request '" + r.id + "': " + std::to_string(most) + " tokens need " + std::to_string(need) +
                      " KV blocks but the pool has " + std::to_string(pool_.num_blocks()));
  auto s = std::make_unique<sequence>();
  s->id = next_id_++;
  s->name = r.id;
  s->arrival = s->id;
  s->priority = r.priority;
  s->tokens = std::move(r.prompt);
  s->tokens.insert(s->tokens.end(), r.generated.begin(), r.generated.end());
  s->prompt_len = len;
  s->detok = tokenizer::incremental_detokenizer(r.generated.size());
  s->prefill_only = r.prefill_only;
  if (r.kv) {
    const int positions = int(s->tokens.size()) - 1;
    if (r.generated.empty()) throw input_error("request '" + r.id + "': imported KV needs the token generated with it");
    const std::size_t want = std::size_t(mc.num_hidden_layers) * positions * 2 * mc.kv_dim();
    if (!sim_ && r.kv->size() != want)
      throw input_error("request '" + r.id + "': imported KV has " + std::to_string(r.kv->size()) + " values; " +
                        std::to_string(positions) + " positions of this model need " + std::to_string(want));
    s->num_computed = positions;
    s->import = std::move(r.kv);
  }
  s->params = std::move(r.params);
  // A request without a seed gets one now, so recompute and migration repeat its draws.
  s->seed = s->params.seed ? *s->params.seed : std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  by_name_[s->name] = s->id;
  waiting_.push_back(s->id);
  seqs_.emplace(s->id, std::move(s));
}

std::size_t engine::waiting_prompt_tokens() const {
  std::size_t n = 0;
  for (auto id : waiting_) {
    const sequence& s = *seqs_.at(id);
    n += s.tokens.size() - std::size_t(s.num_computed);
  }
  return n;
}

void engine::release_held(const std::string& id) {
  auto it = held_.find(id);
  if (it == held_.end()) return;
  pool_.release(it->second);
  held_.erase(it);
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
  request_output o;
  o.id = s.name;
  finish(s, finish_reason::abort, o);
  aborted_.push_back(std::move(o));
  return true;
}

void engine::finish(sequence& s, finish_reason why, request_output& o) {
  if (why == finish_reason::handoff) {  // held until the workers exported the KV
    o.held_blocks.assign(s.blocks.begin(), s.blocks.end());
    o.kv_positions = s.num_computed;
    held_[s.name] = std::move(s.blocks);
  } else {
    pool_.release(s.blocks);
  }
  s.blocks.clear();
  o.finished = true;
  o.reason = why;
  o.num_prompt_tokens = s.prompt_len;
  o.num_output_tokens = s.num_output();
  using secs = std::chrono::duration<double>;
  const auto now = sequence::clock::now();
  const auto sched = s.first_scheduled.value_or(now), first = s.first_token.value_or(now);
  o.queue_seconds = secs(sched - s.arrived).count();
  o.prefill_seconds = secs(first - sched).count();
  o.decode_seconds = secs(now - first).count();
  remove_id(running_, s.id);
  remove_id(waiting_, s.id);
  by_name_.erase(s.name);
  seqs_.erase(s.id);  // s is gone after this line
}

// Updates the text with the newest token and decides whether the sequence ends here. On
// return, `delta` holds the text that may be streamed now.
finish_reason engine::check_stop(sequence& s, std::string& delta) {
  const std::int32_t tok = s.tokens.back();
  finish_reason why = finish_reason::none;
  const auto& eos = mc_.eos_token_ids;
  const bool may_stop = s.num_output() >= s.params.min_tokens;
  if (may_stop && !s.params.ignore_eos && std::find(eos.begin(), eos.end(), tok) != eos.end()) why = finish_reason::stop;
  const auto& stops = s.params.stop_token_ids;
  if (may_stop && std::find(stops.begin(), stops.end(), tok) != stops.end()) why = finish_reason::stop;
  if (why == finish_reason::none && (s.num_output() >= s.params.max_tokens || int(s.tokens.size()) >= cfg_.max_model_len))
    why = finish_reason::length;
  std::size_t hold = 0;  // bytes kept back so a stop string is never streamed in part
  if (tok_) {
    // Only the detokenizer's small window is decoded; the output is not copied per token.
    const std::span<const std::int32_t> output(s.tokens.data() + s.prompt_len, std::size_t(s.num_output()));
    const std::size_t before = s.text.size();
    s.text += s.detok.next(*tok_, output);
    std::size_t longest = 0;
    bool cut = false;
    for (const auto& stop : s.params.stop) {
      longest = std::max(longest, stop.size());
      if (!may_stop) continue;
      std::size_t from = before >= stop.size() ? before - stop.size() + 1 : 0;
      std::size_t at = s.text.find(stop, from);
      if (at != std::string::npos && at < s.text.size()) {
        if (s.params.include_stop_str_in_output) at += stop.size();
        s.text.resize(std::max(at, s.emitted));
        why = finish_reason::stop;
        cut = true;
      }
    }
    if (why != finish_reason::none && !cut) s.text += s.detok.flush(*tok_, output);
    if (why == finish_reason::none && longest > 1) hold = longest - 1;
  }
  std::size_t end = s.text.size() > hold ? s.text.size() - hold : 0;
  end = std::max(end, s.emitted);  // never below what was already streamed
  end = s.emitted + tokenizer::utf8_complete_prefix(std::string_view(s.text).substr(s.emitted, end - s.emitted));
  delta = s.text.substr(s.emitted, end - s.emitted);
  s.emitted = end;
  return why;
}

std::int32_t engine::sample(const sequence& s, const float* row, std::vector<float>& scratch) const {
  std::span<const float> logits(row, std::size_t(mc_.vocab_size));
  const auto& p = s.params;
  const bool penalties = p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  const bool processors = p.processes_logits(s.num_output());
  if (penalties || processors) {
    scratch.assign(logits.begin(), logits.end());
    if (penalties)
      sampling::apply_penalties(scratch, p, std::span(s.tokens.data(), std::size_t(s.prompt_len)),
                                std::span(s.tokens.data() + s.prompt_len, std::size_t(s.num_output())));
    if (processors) sampling::apply_logit_processors(scratch, p, s.num_output(), mc_.eos_token_ids);
    logits = scratch;
  }
  return sampling::choose_token(logits, p, s.seed, s.num_output());
}

std::int32_t engine::sim_token(const sequence& s) const {
  const double u = sampling::position_uniform(s.seed, s.num_output());
  std::int32_t t = std::int32_t(u * mc_.vocab_size);
  const auto& eos = mc_.eos_token_ids;
  while (std::find(eos.begin(), eos.end(), t) != eos.end()) t = (t + 1) % mc_.vocab_size;
  return t;
}

forward_plan engine::begin_step() {
  if (pending_) throw std::logic_error("begin_step: the previous step is not finished");
  pending_.emplace();
  pending& p = *pending_;
  p.out = std::move(aborted_);
  aborted_.clear();
  std::vector<sched::seq_snapshot> run, wait;
  for (auto id : running_) run.push_back(seqs_.at(id)->snapshot());
  for (auto id : waiting_) wait.push_back(seqs_.at(id)->snapshot());
  const sched::step_plan plan = sched::plan_step(cfg_.sched, run, wait, pool_.num_free());
  for (auto id : plan.preempted) {
    sequence& s = *seqs_.at(id);
    pool_.release(s.blocks);
    s.blocks.clear();
    s.num_computed = 0;
    s.import.reset();
    remove_id(running_, id);
    waiting_.push_back(id);
    ++stats_.preemptions;
  }
  for (auto id : plan.admitted) {
    remove_id(waiting_, id);
    running_.push_back(id);
  }
  for (const auto& sc : plan.scheduled) {
    sequence& s = *seqs_.at(sc.id);
    auto fresh = pool_.allocate(sc.new_blocks);
    if (int(fresh.size()) != sc.new_blocks) throw std::logic_error("scheduler planned more blocks than are free");
    s.blocks.insert(s.blocks.end(), fresh.begin(), fresh.end());
  }
  forward_plan fp;
  p.logit_row.assign(plan.scheduled.size(), -1);
  for (std::size_t i = 0; i < plan.scheduled.size(); ++i) {
    const auto& sc = plan.scheduled[i];
    const sequence& s = *seqs_.at(sc.id);
    p.ids.push_back(sc.id);
    if (sequence& sq = *seqs_.at(sc.id); sq.import) {  // its first step: the imported KV goes in first
      if (!sim_) fp.imports.push_back({std::int32_t(i), sq.num_computed, *sq.import});
      sq.import.reset();
    }
    if (!seqs_.at(sc.id)->first_scheduled) seqs_.at(sc.id)->first_scheduled = sequence::clock::now();
    p.new_tokens.push_back(sc.num_new_tokens);
    fp.tables.emplace_back(s.blocks.begin(), s.blocks.end());
    for (int j = 0; j < sc.num_new_tokens; ++j) {
      const int pos = s.num_computed + j;
      fp.tokens.push_back(s.tokens[std::size_t(pos)]);
      fp.positions.push_back(pos);
      fp.seq_of_token.push_back(std::int32_t(i));
    }
    if (s.num_computed + sc.num_new_tokens == int(s.tokens.size())) {
      p.logit_row[i] = int(fp.logit_rows.size());
      fp.logit_rows.push_back(std::int32_t(fp.tokens.size() - 1));
    }
  }
  p.logit_rows = fp.logit_rows.size();
  p.computes = !fp.empty();
  return fp;
}

std::vector<request_output> engine::finish_step(std::span<const float> logits, double forward_seconds) {
  if (!pending_) throw std::logic_error("finish_step without begin_step");
  pending p = std::move(*pending_);
  pending_.reset();
  std::vector<request_output> out = std::move(p.out);
  const std::size_t vocab = std::size_t(mc_.vocab_size);
  if (!sim_ && logits.size() != p.logit_rows * vocab)
    throw std::logic_error("finish_step: logits for " + std::to_string(logits.size() / std::max<std::size_t>(vocab, 1)) +
                           " rows, the plan wants " + std::to_string(p.logit_rows));
  if (p.computes) {
    stats_.last_forward_seconds = forward_seconds;
    stats_.forward_seconds += forward_seconds;
    ++stats_.steps;
  }

  // Choosing each row's token is independent of the others: spread it over the threads (a
  // vocabulary-wide pass per row is most of the step's time outside the forward at batch 64).
  std::vector<std::int32_t> chosen(p.ids.size(), -1);
  std::vector<sampling::token_logprobs> lps(p.ids.size());
  kernels::parallel_for(p.ids.size(), [&](std::size_t i) {
    if (p.logit_row[i] < 0) return;
    const sequence& s = *seqs_.at(p.ids[i]);
    if (sim_) {
      chosen[i] = sim_token(s);  // no distribution: logprob 0, no alternatives
      return;
    }
    const std::span<const float> row(logits.data() + std::size_t(p.logit_row[i]) * vocab, vocab);
    std::vector<float> scratch;
    chosen[i] = sample(s, row.data(), scratch);
    if (s.params.logprobs >= 0) lps[i] = sampling::logprobs_of(row, chosen[i], s.params.logprobs);
  });
  for (std::size_t i = 0; i < p.ids.size(); ++i) {
    sequence& s = *seqs_.at(p.ids[i]);
    const int prompt_part = std::max(0, std::min(s.prompt_len, s.num_computed + p.new_tokens[i]) - s.num_computed);
    stats_.prompt_tokens_computed += std::uint64_t(prompt_part);
    s.num_computed += p.new_tokens[i];
    if (p.logit_row[i] < 0) continue;
    const std::int32_t tok = chosen[i];
    s.tokens.push_back(tok);
    ++stats_.generated_tokens;
    request_output o;
    o.id = s.name;
    o.new_tokens.push_back(tok);
    if (s.params.logprobs >= 0) o.logprobs.push_back(std::move(lps[i]));
    if (!s.first_token) s.first_token = sequence::clock::now();
    o.num_prompt_tokens = s.prompt_len;
    o.num_output_tokens = s.num_output();
    finish_reason why = check_stop(s, o.text_delta);
    if (why == finish_reason::none && s.prefill_only) why = finish_reason::handoff;
    if (why != finish_reason::none) finish(s, why, o);
    out.push_back(std::move(o));
  }
  apply_deferred_aborts();
  return out;
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
  std::vector<std::uint64_t> back;
  for (auto id : running_) {
    sequence& s = *seqs_.at(id);
    pool_.release(s.blocks);
    s.blocks.clear();
    s.num_computed = 0;
    s.import.reset();
    back.push_back(id);
  }
  running_.clear();
  waiting_.insert(waiting_.begin(), back.begin(), back.end());
  stats_.recomputed_after_loss += back.size();
  ++stats_.kv_losses;
  apply_deferred_aborts();
}

void engine::apply_deferred_aborts() {
  auto ids = std::move(deferred_aborts_);
  deferred_aborts_.clear();
  for (const auto& id : ids) abort(id);
}

std::vector<request_output> engine::step() {
  if (!model_ && !sim_) throw std::logic_error("step: this engine's forward runs on workers; use begin_step/finish_step");
  const forward_plan plan = begin_step();
  if (plan.empty()) return finish_step({}, 0);
  if (sim_) {
    sim::step_shape shape{std::int64_t(plan.tokens.size()), 0, std::int64_t(plan.logit_rows.size())};
    for (auto pos : plan.positions) shape.context_reads += pos + 1;
    return finish_step({}, sim::step_seconds(mc_, *sim_, shape));
  }
  const std::size_t vocab = std::size_t(mc_.vocab_size);
  logits_.resize(plan.logit_rows.size() * vocab);
  const auto f0 = std::chrono::steady_clock::now();
  for (const auto& imp : plan.imports) cache_->import_kv(plan.tables[std::size_t(imp.seq)].data(), imp.positions, imp.data.data());
  model_->forward(view(plan), *cache_, logits_.data(), workspace_);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - f0).count();
  return finish_step(logits_, secs);
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
