// A draft model as a proposer: a small model with the target's vocabulary runs k autoregressive
// steps per verify step. It lives inside the replica: its KV sits in a cache of its own geometry
// addressed by the target's block ids, so a sequence's blocks hold both and share one lifecycle
// (allocated, preempted, freed, found in the prefix cache together).
//
// How its KV stays right: per sequence it knows how many leading positions it computed. A verify
// step rewinds that to what the target kept; a new block table (admission, preemption, a lost
// cache, a pulled prefill) rewinds it to 0, and its next proposal first computes the draft's KV
// of everything before it. A block shared through the prefix cache may so be written twice;
// both writes are the same bits (the same tokens at the same positions through the same
// kernels), so sharing never changes what either sequence reads.
//
// It samples each proposed token as the target would: the request's sampling parameters and the
// draw keyed by (seed, position), with the proposed tokens before it in the penalty history, so
// under sampling it proposes what the target is likely to draw.
#pragma once
#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "runtime/kv/kv_cache.h"
#include "runtime/model/llama_model.h"
#include "runtime/speculative/proposer.h"
#include "runtime/tokenizer/tokenizer.h"

namespace troupe::speculative {

class draft_proposer final : public proposer {
 public:
  // `blocks`: the target's pool geometry (number of blocks, block size, KV dtype).
  draft_proposer(std::shared_ptr<const model::llama_model> draft, const kv::kv_cache_config& blocks);
  bool cheap() const override { return false; }
  std::vector<std::vector<std::int32_t>> propose(std::span<const proposal_ask> asks) override;
  void rewind(std::uint64_t seq, int valid) override;
  void forget(std::uint64_t seq) override { computed_.erase(seq); }
  draft_cost cost() const override;
  int catch_up(std::uint64_t seq, int tokens) const override;
  std::size_t kv_bytes_per_token() const { return cache_.bytes_per_token(); }

 private:
  std::shared_ptr<const model::llama_model> draft_;
  kv::kv_cache cache_;
  model::forward_workspace ws_;
  std::map<std::uint64_t, int> computed_;  // per sequence: leading positions whose draft KV is right
  // Seconds of its forward rounds by positions computed (a line, like the target's), and the
  // mean round until the line has two sizes to go by.
  step_cost rounds_;
  double seconds_per_round_ = 0;
};

// The draft of method "draft" for a target: `draft_dir` loaded and checked. Throws input_error
// naming both models when the draft cannot serve this target (another vocabulary: a different
// size, or a token that decodes otherwise; no tokenizer where the target has one).
std::unique_ptr<draft_proposer> load_draft(const std::string& draft_dir, const std::string& target_name,
                                           const model::model_config& target, const tokenizer::tokenizer* target_tok,
                                           const kv::kv_cache_config& blocks);

}  // namespace troupe::speculative
