#include "runtime/sched/scheduler.h"

#include <algorithm>

#include "runtime/kv/block_pool.h"

namespace troupe::sched {

namespace {

void sort_queue(std::vector<seq_snapshot>& q, queue_order order) {
  std::sort(q.begin(), q.end(), [order](const seq_snapshot& a, const seq_snapshot& b) {
    if (order == queue_order::priority && a.priority != b.priority) return a.priority < b.priority;
    return a.arrival < b.arrival || (a.arrival == b.arrival && a.id < b.id);
  });
}

int tokens_this_step(const scheduler_config& cfg, const seq_snapshot& s, int budget) {
  int n = std::min(s.num_tokens - s.num_computed, budget);
  if (cfg.long_prefill_chunk > 0) n = std::min(n, cfg.long_prefill_chunk);
  return n;
}

}  // namespace

step_plan plan_step(const scheduler_config& cfg, std::vector<seq_snapshot> running,
                    std::vector<seq_snapshot> waiting, int free_blocks) {
  step_plan plan;
  sort_queue(running, cfg.order);
  int budget = cfg.max_num_batched_tokens;
  int free = free_blocks;
  std::size_t end = running.size();  // running[end..] have been preempted
  for (std::size_t i = 0; i < end; ++i) {
    const seq_snapshot& s = running[i];
    const int n = tokens_this_step(cfg, s, budget);
    if (n <= 0) continue;
    const int need = kv::blocks_for(s.num_computed + n, cfg.block_size) - s.num_blocks;
    const int cost = std::max(need, 0) * cfg.pages_per_block;
    while (cost > free && end > i + 1) {
      --end;  // the last in order gives its blocks to those ahead of it
      plan.preempted.push_back(running[end].id);
      free += running[end].releasable();
    }
    if (cost > free) {  // nobody behind it is left: it waits for blocks itself
      plan.preempted.push_back(s.id);
      free += s.releasable();
      end = i;
      break;
    }
    plan.scheduled.push_back({s.id, n, std::max(need, 0)});
    free -= cost;
    budget -= n;
  }
  if (!plan.preempted.empty()) {
    plan.num_tokens = cfg.max_num_batched_tokens - budget;
    return plan;
  }
  sort_queue(waiting, cfg.order);
  int num_running = static_cast<int>(running.size());
  for (const seq_snapshot& w : waiting) {
    if (num_running >= cfg.max_num_seqs) break;
    const int n = tokens_this_step(cfg, w, budget);
    if (n <= 0) break;
    const int need = kv::blocks_for(w.num_computed + n, cfg.block_size) - w.num_blocks;
    const int cost = std::max(need, 0) * cfg.pages_per_block + w.cached_free_blocks;
    if (cost > free) break;  // head-of-line: later arrivals do not overtake
    plan.scheduled.push_back({w.id, n, std::max(need, 0)});
    plan.admitted.push_back(w.id);
    free -= cost;
    budget -= n;
    ++num_running;
  }
  plan.num_tokens = cfg.max_num_batched_tokens - budget;
  return plan;
}

}  // namespace troupe::sched
