// One scheduling step as a pure function: which sequences compute how many tokens, which are
// admitted from the waiting queue and which are preempted (recomputed later) when KV blocks run
// out. Prefill, chunked prefill and decode are all "compute the tokens known but not yet
// computed", up to a per-step token budget.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace troupe::sched {

enum class queue_order { fcfs, priority };

struct scheduler_config {
  int max_num_batched_tokens = 2048;  // token budget of one step
  int max_num_seqs = 128;             // running sequences at most
  int long_prefill_chunk = 512;       // at most this many tokens of one sequence per step
  int block_size = 16;                // tokens per KV block
  // Pool units a new block takes: 1, or its pages under window groups (kv/window_groups.h). The
  // free count, a hit's free blocks and what preemption gives back are in these units.
  int pages_per_block = 1;
  queue_order order = queue_order::fcfs;
};

// What the scheduler sees of a sequence; no pointers into the engine or the block pool.
struct seq_snapshot {
  std::uint64_t id = 0;
  int num_tokens = 0;    // prompt + generated so far
  int num_computed = 0;  // tokens whose KV is in the cache
  int num_blocks = 0;    // blocks held
  int priority = 0;      // lower runs first under queue_order::priority
  std::uint64_t arrival = 0;
  // Waiting sequences: blocks of a prefix-cache hit (counted in num_blocks, their tokens in
  // num_computed) that nobody holds, so admitting the sequence takes them from the free ones.
  int cached_free_blocks = 0;
  // Running sequences: blocks that preempting it gives back (held by it alone; a block it
  // shares with another sequence stays in use). -1: all num_blocks.
  int exclusive_blocks = -1;
  int releasable() const { return exclusive_blocks < 0 ? num_blocks : exclusive_blocks; }
};

struct scheduled_seq {
  std::uint64_t id;
  int num_new_tokens;  // tokens to compute this step, starting at num_computed
  int new_blocks;      // blocks to allocate before the step
};

struct step_plan {
  std::vector<scheduled_seq> scheduled;  // running sequences first, then admitted ones
  std::vector<std::uint64_t> admitted;   // moved from waiting to running
  std::vector<std::uint64_t> preempted;  // release all blocks, back to waiting, num_computed = 0
  int num_tokens = 0;
};

// Plans one step. `running` and `waiting` in any order; `free_blocks` is what the pool has.
// Guarantees: the sum of new_blocks is at most free_blocks plus the blocks of preempted
// sequences; num_tokens <= max_num_batched_tokens; nothing is admitted in a step that preempts.
// A running sequence is preempted only if the ones ahead of it need its blocks; victims are
// taken from the back of the order (newest, or lowest priority).
step_plan plan_step(const scheduler_config& cfg, std::vector<seq_snapshot> running,
                    std::vector<seq_snapshot> waiting, int free_blocks);

}  // namespace troupe::sched
