// The engine: continuous batching over a paged KV cache. Requests join and leave at every
// step; each step runs one forward pass over the scheduled tokens of every running sequence.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/engine/forward_plan.h"
#include "runtime/engine/request.h"
#include "runtime/kv/block_pool.h"
#include "runtime/kv/kv_cache.h"
#include "runtime/model/llama_model.h"
#include "runtime/sched/scheduler.h"
#include "runtime/sim/cost_model.h"
#include "runtime/tokenizer/tokenizer.h"

namespace troupe::engine {

struct engine_config {
  sched::scheduler_config sched;
  kernels::dtype kv_type = kernels::dtype::f32;
  std::size_t kv_memory_bytes = std::size_t(256) << 20;  // sizes the block pool
  int num_blocks = 0;                                    // overrides kv_memory_bytes when > 0
  int max_model_len = 0;                                 // 0: the model's max_position_embeddings
};

struct engine_stats {
  std::uint64_t steps = 0;
  double forward_seconds = 0;       // in the model's forward pass (sim: the cost model's time)
  double last_forward_seconds = 0;  // of the latest step
  std::uint64_t prompt_tokens_computed = 0;   // includes recomputation after preemption
  std::uint64_t generated_tokens = 0;
  std::uint64_t preemptions = 0;
  std::uint64_t kv_losses = 0;              // lose_kv() calls: the workers' KV was lost
  std::uint64_t recomputed_after_loss = 0;  // sequences sent back to recompute by them
};

class engine {
 public:
  // `tok` may be null: prompts are then token ids only and outputs carry no text.
  engine(std::shared_ptr<const model::llama_model> model, std::shared_ptr<const tokenizer::tokenizer> tok,
         engine_config cfg);
  // The sim backend: the same scheduling and block accounting with no weights and no KV
  // tensors; each step computes nothing, returns deterministic tokens (a hash of the request
  // seed and position, never an EOS id) and reports the cost model's time for it as
  // stats().last_forward_seconds. The caller lets that time pass.
  engine(const model::model_config& shape, const sim::gpu_spec& gpu, engine_config cfg);
  // The scheduling half only: the forward runs on workers that own the KV tensors (sized from
  // the same config). Drive it with begin_step / finish_step; step() is not available.
  engine(const model::model_config& shape, std::shared_ptr<const tokenizer::tokenizer> tok, engine_config cfg);
  ~engine();

  // Queues a request. Throws input_error (naming the field) for a duplicate id, an empty
  // prompt, a token id outside the vocabulary, invalid sampling parameters, or a prompt that
  // cannot fit the context or the KV pool.
  void add_request(request r);

  // Ends a request now and frees its blocks; its final output (reason abort) comes from the
  // next step(). Returns false if the id is not live.
  bool abort(const std::string& id);

  // Runs one scheduling step and forward pass; returns the outputs of every request that made
  // progress or finished. step() == begin_step + the forward + finish_step.
  std::vector<request_output> step();

  // A step in two halves, for a forward that runs elsewhere. begin_step schedules (admits,
  // preempts, allocates blocks) and hands over the plan the workers execute (its block ids
  // stay allocated until finish_step or lose_kv). finish_step takes the logits of plan.logit_rows ([rows][vocab]; empty in
  // sim mode) and the forward's time, samples, and returns the outputs. Between the two,
  // add_request is fine and abort() takes effect when the step finishes.
  forward_plan begin_step();
  std::vector<request_output> finish_step(std::span<const float> logits, double forward_seconds);
  bool step_in_flight() const { return pending_.has_value(); }

  // Frees the blocks a handed-off request still holds (after its KV was exported).
  void release_held(const std::string& id);

  // The workers lost their KV (a rank died, the group restarted): the step in flight, if any,
  // is dropped, and every running sequence goes back to waiting with its tokens kept, to be
  // recomputed, exactly as after a preemption. Outputs are unchanged by it.
  void lose_kv();

  bool has_unfinished() const { return !seqs_.empty() || !aborted_.empty(); }
  std::size_t num_running() const { return running_.size(); }
  std::size_t num_waiting() const { return waiting_.size(); }
  // Tokens of waiting sequences not yet computed (what a router weighs as queued prefill).
  std::size_t waiting_prompt_tokens() const;
  const kv::block_pool& blocks() const { return pool_; }
  const engine_stats& stats() const { return stats_; }
  const engine_config& config() const { return cfg_; }
  const model::model_config& model_config() const { return mc_; }
  bool simulated() const { return sim_.has_value(); }
  const tokenizer::tokenizer* tokenizer() const { return tok_.get(); }

 private:
  struct sequence;
  // Releases the sequence's blocks, fills the final fields of `o` and forgets the sequence.
  void finish(sequence& s, finish_reason why, request_output& o);
  finish_reason check_stop(sequence& s, std::string& delta);
  std::int32_t sample(const sequence& s, const float* logits_row, std::vector<float>& scratch) const;
  std::int32_t sim_token(const sequence& s) const;
  void apply_deferred_aborts();

  struct pending {  // the step between begin_step and finish_step
    pending() {}  // user-provided: clang cannot see default member initializers of a nested class here
    std::size_t logit_rows = 0;      // rows of logits the plan asked for
    bool computes = false;           // the plan has tokens (a forward ran)
    std::vector<std::uint64_t> ids;  // scheduled sequences, in plan order
    std::vector<int> new_tokens;     // tokens each computes this step
    std::vector<int> logit_row;      // its row in the logits, or -1 (a prefill chunk)
    std::vector<request_output> out; // aborts finished before the step
  };

  std::shared_ptr<const model::llama_model> model_;  // null in sim mode
  model::model_config mc_;
  std::optional<sim::gpu_spec> sim_;
  std::shared_ptr<const tokenizer::tokenizer> tok_;
  engine_config cfg_;
  kv::block_pool pool_;
  std::unique_ptr<kv::kv_cache> cache_;  // null in sim mode
  std::map<std::uint64_t, std::unique_ptr<sequence>> seqs_;
  std::map<std::string, std::uint64_t> by_name_;
  std::vector<std::uint64_t> running_, waiting_;
  std::vector<request_output> aborted_;
  std::optional<pending> pending_;
  std::vector<std::string> deferred_aborts_;
  std::map<std::string, std::vector<kv::block_id>> held_;  // handed-off requests' blocks
  std::uint64_t next_id_ = 1;
  engine_stats stats_;
  std::vector<float> logits_;
  model::forward_workspace workspace_;
};

// Runs requests to completion on a fresh engine and returns each one's generated tokens, in
// the order given. For tests and `troupe generate`.
std::vector<std::vector<std::int32_t>> generate_all(engine& e, const std::vector<request>& requests);

}  // namespace troupe::engine
