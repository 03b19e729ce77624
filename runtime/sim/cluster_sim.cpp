#include "runtime/sim/cluster_sim.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>
#include <set>
#include <unordered_map>

#include "runtime/admin/cluster_status.h"
#include "runtime/admission/admission.h"
#include "runtime/admission/pool_latencies.h"
#include "runtime/autoscale/signals.h"
#include "runtime/common/error.h"
#include "runtime/common/splitmix.h"
#include "runtime/kv/kv_cache_manager.h"
#include "runtime/routing/kv_aware_cost.h"
#include "runtime/routing/placement.h"

namespace troupe::sim {

namespace {

struct sim_seq {
  std::size_t req = 0;
  int num_tokens = 0;    // prompt and generated so far
  int num_computed = 0;  // positions whose KV is in place
  int generated = 0;
  bool admitted_once = false;
  double first_s = -1, last_s = 0;
  int cached = 0, preemptions = 0;
  bool kv_arrived = false;  // its prompt's KV came from a prefill replica: admitted computed
};

struct sim_replica {
  explicit sim_replica(const sim_config& c) : kv({c.kv_blocks, c.sched.block_size, c.prefix_caching, false, false}) {}
  kv::kv_cache_manager kv;
  std::vector<std::uint64_t> running;
  // In arrival order (a request's index is its arrival's rank): plan_step admits from the front
  // and stops at the first that cannot run, so a step needs only the first few.
  std::set<std::uint64_t> waiting;
  std::int64_t waiting_tokens = 0;  // what the router sees: the waiting sequences' tokens
  std::vector<sched::scheduled_seq> step;  // the step being computed
  bool busy = false;
  bool in_turn = false;  // waiting in its device's turns
  bool provisioned = true, draining = false;  // the autoscaler's: started (or starting), leaving
  double ready_at = 0;                        // when a replica it started serves
  bool has_work() const { return !running.empty() || !waiting.empty(); }
};

// Replicas sharing a device: whether one is computing a step, and who waits for a turn.
struct sim_device {
  bool busy = false;
  std::deque<std::uint32_t> turns;
};

// A replica's step ends, or a request's KV reaches the decode pool.
struct sim_event {
  static constexpr std::uint64_t no_handoff = ~std::uint64_t(0);
  double at = 0;
  std::uint64_t order = 0;  // ties in time come in the order they were made
  std::uint32_t replica = 0;
  std::uint64_t handoff = no_handoff;  // the request whose KV arrives
  bool tick = false;                   // the autoscaler looks
  bool operator>(const sim_event& o) const { return at != o.at ? at > o.at : order > o.order; }
};

admission::clock::time_point virtual_time(double s) {
  return admission::clock::time_point(std::chrono::duration_cast<admission::clock::duration>(std::chrono::duration<double>(s)));
}

void sim_erase(std::vector<std::uint64_t>& v, std::uint64_t id) { v.erase(std::find(v.begin(), v.end(), id)); }

class sim_cluster {
 public:
  sim_cluster(const sim_config& c, const step_profile& p, std::span<const sim_request> reqs)
      : cfg_(c), profile_(p), reqs_(reqs), policy_(routing::registry::global().get(c.policy)), seqs_(reqs.size()) {
    if (c.replicas < 1) throw input_error("simulation: at least one replica");
    if (c.kv_blocks < 1) throw input_error("simulation: kv_blocks must be positive");
    if (c.autoscale.enabled && c.prefill_replicas > 0) throw input_error("simulation: the autoscaler scales an aggregated pool only");
    if (c.autoscale.enabled && (c.autoscale_min < 1 || c.autoscale_min > c.replicas || (c.autoscale_max > 0 && c.autoscale_max < c.replicas)))
      throw input_error("simulation: autoscale_min <= replicas <= autoscale_max, and autoscale_min >= 1");
    if (c.prefill_replicas < 0 || c.prefill_replicas >= c.replicas)
      throw input_error("simulation: prefill_replicas must leave at least one of the " + std::to_string(c.replicas) +
                        " replicas to decode");
    if (c.report_interval_s < 0) throw input_error("simulation: report_interval_s must not be negative");
    admission_.max_queued = c.max_queued;
    const int slots = c.autoscale.enabled ? std::max(c.replicas, c.autoscale_max) : c.replicas;
    replicas_.reserve(std::size_t(slots));
    for (int i = 0; i < slots; ++i) replicas_.emplace_back(c);
    for (int i = c.replicas; i < slots; ++i) replicas_[std::size_t(i)].provisioned = false;
    if (c.autoscale.enabled) events_.push({interval_s(), order_++, 0, sim_event::no_handoff, true});
    reported_.resize(replicas_.size());
    if (!c.device.empty() && c.device.size() != replicas_.size())
      throw input_error("simulation: a device for each of the " + std::to_string(replicas_.size()) + " replicas, not " +
                        std::to_string(c.device.size()));
    std::uint32_t devices = 0;
    for (auto d : c.device) devices = std::max(devices, d + 1);
    devices_.resize(devices);
    result_.requests.resize(reqs.size());
  }

  sim_result run() {
    std::size_t next = 0;
    while (next < reqs_.size() || !events_.empty()) {
      // Arrivals at the same time as a step's end come first: the step's next plan sees them.
      if (next < reqs_.size() && (events_.empty() || reqs_[next].arrival_s <= events_.top().at)) {
        arrive(next, reqs_[next].arrival_s);
        ++next;
        continue;
      }
      const sim_event e = events_.top();
      events_.pop();
      if (e.tick)
        look(e.at, next < reqs_.size());
      else if (e.handoff != sim_event::no_handoff)
        hand_off(e.handoff, e.at);
      else
        finish_step(e.replica, e.at);
    }
    if (!cfg_.autoscale.enabled) result_.replica_seconds = double(replicas_.size()) * (result_.end_s - (reqs_.empty() ? 0 : reqs_.front().arrival_s));
    return std::move(result_);
  }

 private:
  int bs() const { return cfg_.sched.block_size; }

  // The entry pool: every replica (the autoscaler's slots included), or the prefill ones.
  std::uint32_t entry_count() const { return std::uint32_t(cfg_.prefill_replicas > 0 ? std::size_t(cfg_.prefill_replicas) : replicas_.size()); }

  double interval_s() const { return std::chrono::duration<double>(cfg_.autoscale.interval).count(); }

  // The autoscaler looks: the pool's signals from its replicas and recent latencies, its
  // decision, and the replicas started or drained for it; it looks again while work is left.
  void look(double now, bool arrivals_left) {
    int provisioned = 0;
    std::vector<admin::replica_status> status(replicas_.size());
    for (std::size_t r = 0; r < replicas_.size(); ++r) {
      const sim_replica& rep = replicas_[r];
      provisioned += rep.provisioned;
      admin::replica_status& s = status[r];
      s.id = std::uint32_t(r);
      s.name = "main-" + std::to_string(r);
      s.pool = "main";
      s.role = "both";
      s.registered = s.alive = rep.provisioned && now >= rep.ready_at;
      s.starting = rep.provisioned && now < rep.ready_at;
      s.stopped = !rep.provisioned;
      s.draining = rep.draining;
      s.has_load = s.alive;
      s.load.running = int(rep.running.size());
      s.load.waiting = int(rep.waiting.size());
      s.load.total_blocks = rep.kv.num_blocks();
      s.load.used_blocks = rep.kv.num_blocks() - rep.kv.num_free();
    }
    result_.replica_seconds += provisioned * (now - last_look_);
    last_look_ = now;
    const int top = cfg_.autoscale_max > 0 ? cfg_.autoscale_max : cfg_.replicas;
    const admin::pool_bounds bounds{"main", cfg_.autoscale_min, top, cfg_.sched.max_num_seqs, 0};
    const auto t = virtual_time(now);
    const auto fresh = std::max(cfg_.autoscale.up_for, cfg_.autoscale.down_for);  // as the autoscaler actor asks
    const autoscale::pool_signals sig = autoscale::signals_of(status, {bounds}, latencies_.at(t), fresh).at("main");
    const autoscale::decision d = autoscale::decide(cfg_.autoscale, sig, autoscale_memory_, t);
    if (d.target != sig.serving) scale(now, d.target, d.reason);
    bool work = arrivals_left;
    for (const auto& rep : replicas_) work = work || rep.has_work() || rep.busy;
    if (work) events_.push({now + interval_s(), order_++, 0, sim_event::no_handoff, true});
  }

  // The pool is to have `to` replicas, those starting counted (as the admin actor's scale sets a
  // pool's size, not a number to add): up, drained replicas serve again, then stopped slots
  // start; down, the last serving drain.
  void scale(double now, int to, const std::string& why) {
    int from = 0;
    for (const auto& rep : replicas_) from += rep.provisioned && !rep.draining;
    if (from == to) return;
    result_.scaling.push_back({now, from, to, why});
    for (std::size_t r = 0; r < replicas_.size() && from < to; ++r)
      if (replicas_[r].provisioned && replicas_[r].draining) {
        replicas_[r].draining = false;
        ++from;
      }
    for (std::size_t r = 0; r < replicas_.size() && from < to; ++r)
      if (!replicas_[r].provisioned) {
        replicas_[r].provisioned = true;
        replicas_[r].ready_at = now + cfg_.replica_start_s;
        ++from;
      }
    for (std::size_t r = replicas_.size(); r-- > 0 && from > to;)
      if (replicas_[r].provisioned && !replicas_[r].draining && now >= replicas_[r].ready_at) {
        replicas_[r].draining = true;
        stop_if_drained(std::uint32_t(r));
        --from;
      }
  }

  // A drained replica stops, its cache with it: started again, it starts empty.
  void stop_if_drained(std::uint32_t r) {
    sim_replica& rep = replicas_[r];
    if (!rep.draining || rep.has_work() || rep.busy) return;
    rep = sim_replica(cfg_);
    rep.provisioned = false;
  }

  void arrive(std::size_t i, double now) {
    const admission::clock::time_point t = virtual_time(now);
    if (!entry_queue_.admit(admission_, 0, t).admitted) {
      result_.requests[i].refused = true;
      ++result_.refused;
      return;
    }
    entry_queue_.accepted();
    sim_seq& s = seqs_[i];
    s.req = i;
    s.num_tokens = reqs_[i].prompt_tokens;
    const std::uint32_t r = route(i, 0, entry_count(), now);
    wait(replicas_[r], i);
    result_.requests[i].replica = r;
    start_step(r, now);
  }

  // Request i's KV reached the decode pool: the router places it on a decode replica.
  void hand_off(std::uint64_t i, double now) {
    const std::uint32_t r = route(i, entry_count(), std::uint32_t(cfg_.replicas) - entry_count(), now);
    seqs_[i].kv_arrived = true;
    wait(replicas_[r], i);
    start_step(r, now);
  }

  // What the replicas last reported (all of them, every report_interval_s; at every decision
  // when 0), which the router's own placements since then add to.
  void report_loads(double now) {
    if (cfg_.report_interval_s > 0 && now < next_report_) return;
    if (cfg_.report_interval_s > 0) next_report_ = (std::floor(now / cfg_.report_interval_s) + 1) * cfg_.report_interval_s;
    for (std::size_t r = 0; r < replicas_.size(); ++r) {
      const sim_replica& rep = replicas_[r];
      routing::replica_load& l = reported_[r];
      l.replica = replica_id{std::uint32_t(r)};
      l.alive = rep.provisioned && !rep.draining && now >= rep.ready_at;
      l.running_seqs = int(rep.running.size());
      l.waiting_prompt_tokens = int(std::min<std::int64_t>(rep.waiting_tokens, std::numeric_limits<int>::max()));
      l.free_blocks = rep.kv.num_free();
      l.total_blocks = rep.kv.num_blocks();
    }
  }

  // Only replicas that cached a chain starting with request i's first block can hold any of its
  // prefix (a replica that evicted it since is dropped). What a replica holds of a chain is a
  // prefix of it: a block is freed only after every block that extends it (a sequence holds a
  // whole chain and frees it tail first), and the cache evicts the least recently freed first.
  // So its length is found by bisection, the whole prompt tried first: most replicas hold all of
  // a shared system prompt, and one lookup tells.
  void look_up_prefix(std::size_t i, std::uint32_t first, std::uint32_t count, const routing::route_request& rq) {
    const auto found = first_block_holders_.find(reqs_[i].blocks.front());
    if (found == first_block_holders_.end()) return;
    auto& holders = found->second;
    candidates_.clear();
    for (auto r : holders)
      if (r >= first && r < first + count) candidates_.push_back({0.0, r});
    if (cfg_.bound_prefix_lookups)
      bound_candidates(i, first, count, rq);  // leaves the ones it asked
    else
      for (const auto& c : candidates_) loads_[c.second - first].cached_blocks = held_blocks(replicas_[c.second].kv, reqs_[i].blocks);
    for (const auto& c : candidates_)
      if (loads_[c.second - first].cached_blocks == 0) holders.erase(std::find(holders.begin(), holders.end(), c.second));  // evicted since
  }

  // Keeps the candidates that could beat the best cost known exactly (a replica holding none of
  // the prompt) even if they held all of it, in order of that best case, asking each as it
  // goes: a candidate whose best case is worse than a cost already found cannot be chosen, and
  // one whose best case only ties it loses the tie when its id is higher (kv_aware's rule).
  void bound_candidates(std::size_t i, std::uint32_t first, std::uint32_t count, const routing::route_request& rq) {
    const auto& w = kv_weights_;
    for (auto& c : candidates_) {
      routing::replica_load all = loads_[c.second - first];
      all.cached_blocks = int(reqs_[i].blocks.size());
      c.first = w.cost(rq, all);
      loads_[c.second - first].cached_blocks = -1;  // marks a candidate
    }
    std::pair<double, std::uint32_t> best{std::numeric_limits<double>::infinity(), 0};
    for (std::uint32_t k = 0; k < count; ++k)
      if (loads_[k].alive && loads_[k].cached_blocks == 0) best = std::min(best, {w.cost(rq, loads_[k]), first + k});
    for (auto& c : candidates_) loads_[c.second - first].cached_blocks = 0;
    const auto later = std::greater<std::pair<double, std::uint32_t>>();  // a heap of the cheapest best case first
    std::make_heap(candidates_.begin(), candidates_.end(), later);
    auto end = candidates_.end();
    while (end != candidates_.begin() && candidates_.front() <= best) {
      std::pop_heap(candidates_.begin(), end, later);
      --end;
      const std::uint32_t r = end->second;
      loads_[r - first].cached_blocks = held_blocks(replicas_[r].kv, reqs_[i].blocks);
      if (loads_[r - first].alive) best = std::min(best, {w.cost(rq, loads_[r - first]), r});
    }
    candidates_.erase(candidates_.begin(), end);  // keeps the ones asked
  }

  // How many leading blocks of `blocks` a replica's cache holds. What it holds of a chain is a
  // prefix of it: a block is freed only after every block that extends it (a sequence holds a
  // whole chain and frees it tail first), and the cache evicts the least recently freed first.
  // So it is found by bisection, the whole prompt tried first: most replicas hold all of a
  // shared system prompt, and one lookup tells.
  static int held_blocks(const kv::kv_cache_manager& cache, std::span<const kv::block_hash> blocks) {
    auto holds = [&](std::size_t n) { return cache.prefix_length(blocks.subspan(n - 1, 1), 1) == 1; };  // its n-th block
    std::size_t lo = 0, hi = blocks.size();  // it holds lo blocks, at most hi
    if (holds(hi)) return int(hi);
    for (--hi; lo < hi;) {
      const std::size_t mid = (lo + hi + 1) / 2;
      if (holds(mid))
        lo = mid;
      else
        hi = mid - 1;
    }
    return int(lo);
  }

  // The router's policy over replicas [first, first + count) for request i.
  std::uint32_t route(std::size_t i, std::uint32_t first, std::uint32_t count, double now) {
    report_loads(now);
    loads_.assign(reported_.begin() + first, reported_.begin() + first + count);
    for (auto& l : loads_) l.cached_blocks = 0;
    // What it brings to compute: its prompt, or after a handoff the one token past its KV.
    const routing::route_request rq{i, seqs_[i].num_tokens - seqs_[i].num_computed, 0, bs()};
    if (prefix_aware_ && seqs_[i].num_computed == 0 && !reqs_[i].blocks.empty()) look_up_prefix(i, first, count, rq);
    const auto d = policy_(rq, loads_, cfg_.params, decisions_++);
    if (!d.index) throw input_error("simulation: policy " + cfg_.policy + " placed no request: " + d.why);
    const auto& chosen = loads_[*d.index];
    routing::count_placement(reported_[first + *d.index], rq.prompt_tokens, chosen.cached_blocks * bs());
    return first + std::uint32_t(*d.index);
  }

  // Plans and starts replica r's next step, if it is idle and has work.
  void start_step(std::uint32_t r, double now) {
    sim_replica& rep = replicas_[r];
    if (rep.busy) return;
    sim_device* dev = cfg_.device.empty() ? nullptr : &devices_[cfg_.device[r]];
    if (dev && dev->busy) {  // another replica's step holds the device: wait for a turn
      if (!rep.in_turn && (!rep.waiting.empty() || !rep.running.empty())) {
        rep.in_turn = true;
        dev->turns.push_back(r);
      }
      return;
    }
    std::vector<sched::seq_snapshot> running, waiting;
    // With a block free for each running sequence and for every block the budget can fill, this
    // step preempts nobody, and what each would give back (a walk over its blocks) is not needed.
    const bool roomy = rep.kv.num_free() >= int(rep.running.size()) + cfg_.sched.max_num_batched_tokens / bs() + 1;
    for (auto id : rep.running)
      running.push_back({id, seqs_[id].num_tokens, seqs_[id].num_computed, rep.kv.num_blocks_of(id), 0, id, 0,
                         roomy ? -1 : rep.kv.num_exclusive(id)});
    // No more can be admitted than there are sequence slots and tokens in the budget.
    const std::size_t admissible = std::size_t(std::max(0, std::min(cfg_.sched.max_num_seqs - int(rep.running.size()),
                                                                    cfg_.sched.max_num_batched_tokens)));
    hits_.clear();
    for (auto it = rep.waiting.begin(); it != rep.waiting.end() && hits_.size() < admissible; ++it) {
      const sim_seq& s = seqs_[*it];
      if (s.kv_arrived) {  // blocks for all it has computed, taken from the free ones
        waiting.push_back({*it, s.num_tokens, s.num_computed, 0, 0, *it, 0, -1});
        hits_.emplace_back(*it, kv::prefix_hit{});
        continue;
      }
      kv::prefix_hit hit = rep.kv.find_prefix(reqs_[s.req].blocks, (s.num_tokens - 1) / bs());
      waiting.push_back({*it, s.num_tokens, hit.tokens(bs()), int(hit.blocks.size()), 0, *it, hit.evictable, -1});
      hits_.emplace_back(*it, std::move(hit));
    }
    const sched::step_plan plan = sched::plan_step(cfg_.sched, std::move(running), std::move(waiting), rep.kv.num_free());
    apply(rep, plan);
    if (plan.scheduled.empty()) {
      if (!rep.waiting.empty() && rep.running.empty())
        throw input_error("simulation: request " + std::to_string(*rep.waiting.begin()) + " of " +
                          std::to_string(seqs_[*rep.waiting.begin()].num_tokens) + " tokens cannot fit " + std::to_string(cfg_.kv_blocks) +
                          " KV blocks of " + std::to_string(bs()) + " tokens");
      return;
    }
    std::int64_t tokens = 0, reads = 0, decode = 0;
    for (const auto& sc : plan.scheduled) {
      const sim_seq& s = seqs_[sc.id];
      const std::int64_t n = sc.num_new_tokens, before = s.num_computed;
      tokens += n;
      reads += n * before + n * (n + 1) / 2;
      decode += s.generated > 0 && n == 1 && before == s.num_tokens - 1;  // the token it generated last
    }
    rep.step = plan.scheduled;
    rep.busy = true;
    if (dev) dev->busy = true;
    events_.push({now + profile_.seconds(tokens, reads, decode), order_++, r});
    ++result_.steps;
  }

  // Sequence `id` joins replica `rep`'s queue: nothing computed, or its KV just arrived.
  void wait(sim_replica& rep, std::uint64_t id) {
    rep.waiting.insert(id);
    rep.waiting_tokens += seqs_[id].num_tokens - seqs_[id].num_computed;
  }

  void apply(sim_replica& rep, const sched::step_plan& plan) {
    for (auto id : plan.preempted) {
      rep.kv.free(id);
      seqs_[id].num_computed = 0;
      seqs_[id].kv_arrived = false;  // recomputed here
      ++seqs_[id].preemptions;
      sim_erase(rep.running, id);
      wait(rep, id);
    }
    for (auto id : plan.admitted) {
      sim_seq& s = seqs_[id];
      rep.waiting.erase(id);
      rep.waiting_tokens -= s.num_tokens - s.num_computed;
      rep.running.push_back(id);
      if (s.kv_arrived) continue;
      const auto found = std::find_if(hits_.begin(), hits_.end(), [id](const auto& h) { return h.first == id; });
      const kv::prefix_hit& hit = found->second;
      if (!hit.blocks.empty()) rep.kv.attach_prefix(id, hit);
      rep.kv.count_lookup(s.num_tokens, hit.tokens(bs()));
      s.num_computed = hit.tokens(bs());
      if (!s.admitted_once) s.cached = s.num_computed;
      s.admitted_once = true;
    }
    for (const auto& sc : plan.scheduled)
      if (!rep.kv.allocate(sc.id, sc.new_blocks)) throw std::logic_error("simulation: plan_step planned more blocks than are free");
  }

  // Replica r's step ends at `now`: positions computed, a token for each sequence caught up,
  // finished requests out, and the next step planned.
  void finish_step(std::uint32_t r, double now) {
    sim_replica& rep = replicas_[r];
    for (const auto& sc : rep.step) {
      sim_seq& s = seqs_[sc.id];
      s.num_computed += sc.num_new_tokens;
      // No token ids: with events and offload off the cache keeps only the hashes.
      rep.kv.cache_blocks(sc.id, reqs_[s.req].blocks, {}, s.num_computed / bs());
      if (prefix_aware_ && s.num_computed >= bs() && s.num_computed - sc.num_new_tokens < bs() && cfg_.prefix_caching) {
        auto& holders = first_block_holders_[reqs_[s.req].blocks.front()];
        if (std::find(holders.begin(), holders.end(), r) == holders.end()) holders.push_back(r);
      }
      if (s.num_computed < s.num_tokens) continue;  // a prefill chunk short of the prompt's end
      if (s.first_s < 0) {
        s.first_s = now;
        entry_queue_.started(virtual_time(now));
        if (cfg_.autoscale.enabled) latencies_.first_token("main", now - reqs_[s.req].arrival_s + cfg_.first_token_s, virtual_time(now));
      }
      s.last_s = now;
      const bool done = ++s.generated >= reqs_[s.req].output_tokens;
      if (!done) ++s.num_tokens;
      if (!done && r >= std::uint32_t(cfg_.prefill_replicas)) continue;
      rep.kv.free(sc.id);
      sim_erase(rep.running, sc.id);
      if (done)
        record(s);
      else  // a prefill replica's work on it is done: its KV moves to the decode pool
        events_.push({now + cfg_.transfer.seconds(s.num_computed), order_++, 0, sc.id});
    }
    rep.step.clear();
    rep.busy = false;
    if (cfg_.autoscale.enabled) stop_if_drained(r);
    if (!cfg_.device.empty()) {  // the device goes to the replicas waiting for it first
      sim_device& dev = devices_[cfg_.device[r]];
      dev.busy = false;
      while (!dev.busy && !dev.turns.empty()) {
        const std::uint32_t next = dev.turns.front();
        dev.turns.pop_front();
        replicas_[next].in_turn = false;
        start_step(next, now);
      }
    }
    start_step(r, now);
  }

  // One of `draws` for request `req` (0 when there are none): the same request draws the same.
  static double drawn(const std::vector<double>& draws, std::size_t req, std::uint64_t salt) {
    return draws.empty() ? 0.0 : draws[splitmix64(std::uint64_t(req) * 2 + salt) % draws.size()];
  }

  void record(const sim_seq& s) {
    const sim_request& q = reqs_[s.req];
    request_outcome& o = result_.requests[s.req];
    // What the client sees: the steps' times, what serving adds, and this request's own spread
    // (never a token before the step that made it). Every token waits as long as its first; its
    // last waits its stream too.
    const double held = std::max(0.0, cfg_.first_token_s + drawn(cfg_.first_token_jitter_s, s.req, 0));
    const double streamed = std::max(0.0, cfg_.stream_s + drawn(cfg_.itl_jitter_s, s.req, 1) * double(s.generated - 1));
    const double first = s.first_s + held, last = s.last_s + held + (s.generated > 1 ? streamed : 0);
    o.ttft_s = first - q.arrival_s;
    o.e2e_s = last - q.arrival_s;
    o.mean_itl_s = s.generated > 1 ? (last - first) / (s.generated - 1) : 0;
    o.cached_tokens = s.cached;
    if (cfg_.autoscale.enabled && s.generated > 1) latencies_.between_tokens("main", o.mean_itl_s, virtual_time(s.last_s));
    o.preemptions = s.preemptions;
    result_.end_s = std::max(result_.end_s, s.last_s);
  }

  const sim_config& cfg_;
  const step_profile& profile_;
  std::span<const sim_request> reqs_;
  const routing::policy& policy_;
  std::vector<sim_replica> replicas_;
  std::vector<sim_device> devices_;
  std::vector<sim_seq> seqs_;  // by request index, which is also the sequence's id
  std::vector<routing::replica_load> reported_, loads_;
  const bool prefix_aware_ = cfg_.policy == "kv_aware";
  const routing::kv_aware_weights kv_weights_ = routing::kv_aware_weights::of(cfg_.params);  // read once, not per arrival
  // By first block: the replicas that cached a chain starting with it.
  std::unordered_map<kv::block_hash, std::vector<std::uint32_t>> first_block_holders_;
  std::vector<std::pair<double, std::uint32_t>> candidates_;  // of the arrival being routed
  double next_report_ = 0;
  admission::admission_config admission_;
  admission::pool_queue entry_queue_;
  admission::pool_latencies latencies_;  // the autoscaler's TTFT and ITL signals
  autoscale::pool_memory autoscale_memory_;
  double last_look_ = 0;
  std::vector<std::pair<std::uint64_t, kv::prefix_hit>> hits_;  // of the step being planned
  std::priority_queue<sim_event, std::vector<sim_event>, std::greater<sim_event>> events_;
  std::uint64_t order_ = 0, decisions_ = 0;
  sim_result result_;
};

}  // namespace

sim_result simulate(const sim_config& c, const step_profile& p, std::span<const sim_request> requests) {
  for (std::size_t i = 1; i < requests.size(); ++i)
    if (requests[i].arrival_s < requests[i - 1].arrival_s) throw input_error("simulation: requests must come in arrival order");
  return sim_cluster(c, p, requests).run();
}

std::vector<kv::block_hash> sim_prompt_blocks(std::span<const std::int64_t> trace_blocks, int trace_block_tokens, std::size_t index,
                                              int prompt_tokens, int block_size) {
  std::vector<kv::block_hash> out;
  kv::block_hash parent = splitmix64(0x74726f757065ull);  // every chain's root
  const std::int64_t traced = std::int64_t(trace_blocks.size()) * trace_block_tokens;
  for (int b = 0; b < prompt_tokens / block_size; ++b) {
    const std::int64_t at = std::int64_t(b) * block_size;
    // A traced block's content is its id and the offset in it; a block of its own, the request's.
    const std::uint64_t content = at < traced
        ? splitmix64(std::uint64_t(trace_blocks[std::size_t(at / trace_block_tokens)])) + std::uint64_t(at % trace_block_tokens)
        : splitmix64(~std::uint64_t(index)) + std::uint64_t(b);
    parent = splitmix64(parent ^ content);
    out.push_back(parent);
  }
  return out;
}

}  // namespace troupe::sim
