// The engine: continuous batching over a paged KV cache. Requests join and leave at every
// step; each step schedules the tokens of every running sequence (sched::plan_step), has the
// executor run them (executor.h) and turns the chosen tokens into outputs (output_processor.h).
// The KV blocks, the prefix cache and the block tables belong to the kv_cache_manager.
#pragma once
#include <cstdint>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/engine/engine_stats.h"
#include "runtime/engine/executor.h"
#include "runtime/engine/output_processor.h"
#include "runtime/engine/request.h"
#include "runtime/kv/connector.h"
#include "runtime/kv/kv_cache.h"
#include "runtime/kv/kv_cache_manager.h"
#include "runtime/kv/prefix_lookup.h"
#include "runtime/kv/window_groups.h"
#include "runtime/model/llama_model.h"
#include "runtime/sched/scheduler.h"
#include "runtime/sim/cost_model.h"
#include "runtime/speculative/config.h"
#include "runtime/speculative/policy.h"
#include "runtime/speculative/proposer.h"
#include "runtime/structured/constraint.h"
#include "runtime/tokenizer/tokenizer.h"

namespace troupe::engine {

struct engine_config {
  sched::scheduler_config sched;
  kernels::dtype kv_type = kernels::dtype::f32;
  std::size_t kv_memory_bytes = std::size_t(256) << 20;  // sizes the block pool
  int num_blocks = 0;                                    // overrides kv_memory_bytes when > 0
  int max_model_len = 0;                                 // 0: the model's max_position_embeddings
  bool prefix_caching = true;                            // reuse computed blocks of equal prefixes
  // What the KV depends on besides the tokens: "<model id>@<revision>". Every replica of a
  // model must use the same key (it roots the block hashes the router compares).
  std::string model_key = "model";
  // The topology's name of the model this engine serves ([models.NAME]'s NAME; empty: [model]).
  // A request for another (request::model) is refused.
  std::string served_model;
  // The KV cache in a shared-memory segment, so replicas in other processes on this host pull
  // blocks by mapping it (otherwise over TCP).
  bool kv_shared_memory = false;
  // Pulling a request's KV from the replica that prefilled it (request::kv_from).
  kv::transfer::backend transfer_backend = kv::transfer::backend::automatic;
  std::chrono::milliseconds transfer_timeout{10000};  // a pull not done by then failed
  // A failed pull releases the reserved blocks, then: recompute the prompt here, or end the
  // request with reason transfer_failed so its owner prefills it again on another replica.
  using transfer_failure = kv::connector::failure_policy;
  transfer_failure on_transfer_failure = transfer_failure::recompute;
  // How long a handed-off request's blocks wait for the receiver's pull (its scheduler actor
  // frees them after this even if no release came: the receiver died or gave up).
  std::chrono::milliseconds handoff_hold{60000};
  // Offer cached blocks nobody holds any more to a KV store (take_offloads).
  bool kv_offload = false;
  // A model with sliding-window and global layers keeps its windowed layers' KV only for the
  // window (kv/window_groups.h). Off, or with kv_offload, every layer keeps every position: what
  // a replica that sends or receives KV (a disaggregated pool's) needs, as transfers address
  // whole layers. A replica with it on hands requests off without their KV (they recompute).
  bool free_windows = true;
  // LoRA adapters loaded at most at once (engine::load_adapter); 0: none. `start_adapters`
  // (name, PEFT folder) are read and loaded when the engine is made.
  int max_adapters = 0;
  std::vector<std::pair<std::string, std::string>> start_adapters;
  // Speculative decoding ([pools.speculative]). Method draft needs a draft proposer given to the
  // engine (cpu_engine makes one); ngram makes its own.
  speculative::speculative_config speculative;
};

// Blocks to copy to a KV store: `from` is a handle on them (from.blocks[i] is blocks[i]), pinned
// until offload_done.
struct offload_batch {
  kv::transfer::kv_handle from;
  std::vector<kv::offload_block> blocks;
};

// One pull of a request's KV that ended (for the owner of the sending replica's blocks).
struct transfer_record {
  std::string id;
  pull_outcome outcome;
  double seconds = 0;
};

// How many KV blocks (pages, with window groups) the config gives a model, and the geometry an
// executor sizes its cache by.
kv::window_groups kv_window_groups(const engine_config& cfg, const model::model_config& m);
int kv_pool_blocks(const engine_config& cfg, const model::model_config& m);
kv::kv_cache_config kv_geometry(const engine_config& cfg, const model::model_config& m);
// The KV layout replicas of this config and model agree on, for caches split as `ranks`
// (pipeline stages) and each stage's KV heads over `tensor_parallel` ranks.
kv::transfer::kv_layout kv_layout_of(const engine_config& cfg, const model::model_config& m,
                                     std::vector<std::pair<int, int>> ranks, int tensor_parallel = 1);

// The engine's private records (engine_sequence.h): a live sequence, the step with the executor.
struct live_sequence;
struct pending_step;

class engine {
 public:
  // `tok` may be null: prompts are then token ids only and outputs carry no text.
  // `draft`: the proposer of speculative method draft (null otherwise).
  engine(model::model_config shape, std::shared_ptr<const tokenizer::tokenizer> tok, engine_config cfg,
         std::unique_ptr<executor> exec, std::unique_ptr<speculative::proposer> draft = nullptr);
  ~engine();
  engine(engine&&) = default;

  // Queues a request. Throws input_error (naming the field) for a duplicate id, an empty
  // prompt, a token id outside the vocabulary, invalid sampling parameters, or a prompt that
  // cannot fit the context or the KV pool.
  void add_request(request r);

  // LoRA adapters requests may name (request::adapter), by identity (model::lora_identity).
  // Loading throws input_error when the executor cannot run adapters (a model split over ranks),
  // when max_adapters are loaded, or for an adapter not shaped for this model. Unloading refuses
  // new requests at once; those already here keep the weights until they end. Unload returns
  // false for an identity not loaded.
  void load_adapter(const std::string& identity, std::shared_ptr<const model::lora_adapter> a);
  bool unload_adapter(const std::string& identity);
  std::vector<std::string> adapters() const;

  // Ends a request now and frees its blocks; its final output (reason abort) comes from the
  // next step. Returns false if the id is not live.
  bool abort(const std::string& id);

  // Runs one step: schedules (admits, preempts, allocates blocks), has the executor run the
  // plan, and calls `emit` with the outputs of every request that made progress or finished,
  // at once or when the executor is done. Between, add_request is fine and abort() takes
  // effect when the step ends. If the executor fails, the KV is lost (lose_kv) and `emit`
  // gets what ended anyway (aborts).
  using emit_fn = std::function<void(std::vector<request_output>)>;
  void step(emit_fn emit);
  // One step with an executor that completes at once (CPU, sim without a clock).
  std::vector<request_output> step();
  bool step_in_flight() const { return pending_ != nullptr; }

  // Ends every request here with reason handoff, for another replica to continue (a drain):
  // those with KV computed hand it over (request_output::kv, held like a prefill's); those still
  // waiting to pull theirs pass on the handle they came with (its holder still holds the blocks);
  // the others go without. Requests whose own KV is still arriving are left for a later call.
  // Not while a step is in flight.
  std::vector<request_output> hand_off_all();

  // A request that ended with reason handoff keeps its blocks for the replica that pulls its
  // KV (request_output::kv); this frees them. False if `id` holds none.
  bool release_handoff(const std::string& id);
  std::size_t num_handoffs_held() const { return held_.size(); }

  // With kv_offload: the cached blocks let go of since the last call, pinned for a store to copy;
  // offload_done unpins them (copied or not).
  offload_batch take_offloads();
  void offload_done(const std::vector<std::int32_t>& blocks);

  // This replica's KV layout (what a sender's handle must match).
  const kv::transfer::kv_layout& kv_layout() const { return layout_; }

  // Called whenever a pull of a request's KV ends, successfully or not (the sender's blocks can
  // go), from the thread that drives the engine.
  void on_transfer(std::function<void(const transfer_record&)> f) { on_transfer_ = std::move(f); }

  // The executor's KV was lost (a rank died, the group restarted): every running sequence goes
  // back to waiting with its tokens kept, to be recomputed as after a preemption, and the
  // prefix cache forgets everything. Outputs are unchanged by it.
  void lose_kv();

  bool has_unfinished() const { return !seqs_.empty() || !aborted_.empty(); }
  // Whether a step now would do anything: false while every live request waits on its KV.
  bool has_work() const;
  std::size_t num_running() const { return running_.size(); }
  std::size_t num_waiting() const { return waiting_.size(); }
  // Tokens of waiting sequences still to compute, what the prefix cache holds for them
  // excepted (what a router weighs as queued prefill).
  std::size_t waiting_prompt_tokens() const;
  const kv::kv_cache_manager& kv() const { return kv_; }
  kv::kv_cache_manager& kv() { return kv_; }
  const kv::block_pool& blocks() const { return kv_.pool(); }
  const engine_stats& stats() const { return stats_; }
  const engine_config& config() const { return cfg_; }
  const model::model_config& model_config() const { return mc_; }
  const tokenizer::tokenizer* tokenizer() const { return tok_.get(); }

 private:
  using sequence = live_sequence;  // engine_sequence.h, private to the engine's files
  using pending = pending_step;
  struct candidate;  // a decode that may propose this step (engine_speculation.cpp)
  // A step: the admissions planned (prefix lookups and all), the plan applied to the tables,
  // then the forward built.
  sched::step_plan plan_admissions(kv::prefix_lookup& look);
  void apply_plan(const sched::step_plan& plan, const kv::prefix_lookup& look);
  forward_plan begin_step();
  std::vector<request_output> finish_step(std::optional<step_result> result);
  // Releases the sequence's blocks, fills the final fields of `o` and forgets the sequence.
  void finish(sequence& s, finish_reason why, request_output& o);
  void apply_deferred_aborts();
  void start_pull(sequence& s);
  void pulled(std::uint64_t id, std::uint64_t epoch, pull_outcome out);
  sampling::sampling_row sampling_row_of(const sequence& s) const;
  // Speculation (engine_speculation.cpp): each scheduled decode's proposed tokens, their KV
  // blocks allocated; and what a verify step's rows chose, turned into the tokens kept.
  std::map<std::uint64_t, std::vector<std::int32_t>> propose(const sched::step_plan& plan);
  finish_reason keep_verified(sequence& s, const std::vector<std::int32_t>& proposed,
                              std::span<sampling::sampled_token> chosen, request_output& o);
  void forget_proposals(std::uint64_t id, int valid);
  // Structured output (engine_constraint.cpp): a request's automaton (its generated tokens
  // replayed), the mask on a row, and proposals cut where the grammar refuses them.
  std::unique_ptr<structured::constrained_output> constraint_for(const request& r);
  void constrain(sequence& s, sampling::sampling_row& row) const;
  void cut_proposal(sequence& s, std::vector<std::int32_t>& proposed) const;
  // The masks this step's constrained decodes need, computed over the CPU threads (a miss walks
  // the vocabulary's trie; different grammars' walks run at once) into their caches.
  void prefetch_masks(const sched::step_plan& plan) const;
  void constrain(sequence& s, const std::vector<std::int32_t>& proposed, std::vector<sampling::sampling_row>& rows) const;
  // Takes a kept token into the sequence's automaton: whether the output can take nothing more.
  bool constraint_ends(sequence& s, std::int32_t token) const;
  // Registers the sequence's blocks computed in full in the prefix cache.
  void cache_computed(sequence& s);
  // The most pages a sequence of `tokens` tokens holds at once: its blocks, and with window
  // groups each one's window pages while in its window or in the step computing it.
  int pages_for(int tokens) const;
  void add_score_rows(const sequence& s, int new_tokens, forward_plan& fp, pending& p) const;
  // Adapters (engine_adapters.cpp): the one a request names (null for the base), and the span of
  // a sequence's rows [first, end of the plan) that runs with its adapter.
  std::shared_ptr<const model::lora_adapter> adapter_of(const request& r) const;
  void add_adapter_rows(const sequence& s, std::size_t first, forward_plan& fp) const;
  // Embeddings (engine_pooling.cpp): the rows of the step an embedding pools; its output once its
  // prompt is computed.
  void add_pool_rows(const sequence& s, int new_tokens, forward_plan& fp, pending& p) const;
  void take_pooled(sequence& s, const step_result& r, const pending& p, std::size_t i) const;
  request_output embedding_output(const sequence& s) const;

  model::model_config mc_;
  std::shared_ptr<const tokenizer::tokenizer> tok_;
  engine_config cfg_;
  std::unique_ptr<executor> exec_;
  kv::window_groups windows_;
  kv::kv_cache_manager kv_;
  output_processor outputs_;
  std::map<std::uint64_t, std::unique_ptr<sequence>> seqs_;
  std::map<std::string, std::uint64_t> by_name_;
  std::vector<std::uint64_t> running_, waiting_;
  std::vector<request_output> aborted_;
  std::unique_ptr<pending> pending_;  // set while a step is with the executor
  std::vector<std::string> deferred_aborts_;
  struct held_kv {
    std::uint64_t seq = 0;
    int positions = 0;
  };
  std::map<std::string, held_kv> held_;  // handed-off requests whose blocks are kept
  std::map<std::string, std::shared_ptr<const model::lora_adapter>> adapters_;  // by identity
  std::uint64_t next_id_ = 1;
  kv::block_hash root_;
  kv::transfer::kv_layout layout_;
  std::function<void(const transfer_record&)> on_transfer_;
  std::uint64_t pull_epoch_ = 0;
  bool stalled_ = false;  // the last step did nothing and nothing changed since
  engine_stats stats_;
  std::unique_ptr<speculative::proposer> proposer_;  // null: speculation off
  speculative::acceptance acceptance_;  // of every request's proposals: where a new request starts
  speculative::step_costs step_cost_;                // this replica's forward seconds by rows, per batch size
  int explore_wait_ = 0;                             // steps since the policy last proposed anything
  std::unique_ptr<structured::grammar_cache> grammars_;  // made with the first constrained request
  std::unique_ptr<structured::grammar_cache> special_text_grammars_;  // for skip_special_tokens false
};

// Method draft's proposer for `target` (null for the other methods): the draft model loaded and
// checked against the target (runtime/speculative/draft.h), its KV in the target's block ids.
std::unique_ptr<speculative::proposer> draft_for(const engine_config& cfg, const model::llama_model& target,
                                                 const tokenizer::tokenizer* tok);

// An engine whose forward runs on this process's CPU over `model`'s weights.
engine cpu_engine(std::shared_ptr<const model::llama_model> model, std::shared_ptr<const tokenizer::tokenizer> tok,
                  engine_config cfg);
// An engine over the sim backend (no weights, no KV tensors; see sim_executor.h).
engine sim_engine(const model::model_config& shape, const sim::gpu_spec& gpu, engine_config cfg);

// Reads the PEFT folder `dir` for e's model and loads it as adapter `name`; returns its identity
// (model::lora_identity). Throws input_error naming the file, or why the engine refused it.
std::string load_adapter_folder(engine& e, const std::string& name, const std::string& dir);

// Runs requests to completion on a fresh engine and returns each one's generated tokens, in
// the order given. For tests and `troupe generate`.
std::vector<std::vector<std::int32_t>> generate_all(engine& e, const std::vector<request>& requests);

}  // namespace troupe::engine
