// Proposers: what suggests the tokens a verify step checks. One interface for the n-gram lookup
// (no state, no model) and a draft model (its own KV in the target's blocks), so the engine's
// seam does not know which it runs.
//
// Contract: propose() answers each ask with at most ask.k tokens (fewer or none is fine: the
// sequence then verifies what it got, or decodes plainly). A proposal never changes the output;
// a poor one only costs the rows it adds.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampling/sample_rows.h"
#include "runtime/speculative/ngram.h"
#include "runtime/speculative/policy.h"

namespace troupe::speculative {

struct proposal_ask {
  std::uint64_t seq = 0;                  // the engine's id of the sequence (what a stateful proposer keys by)
  std::span<const std::int32_t> tokens;   // prompt + output; the last one is decoded this step
  int k = 0;                              // tokens to propose at most
  const sampling::sampling_row* row = nullptr;  // how the target chooses the next token
  std::span<const std::int32_t> table;    // the sequence's block table, with room for k more positions
};

class proposer {
 public:
  virtual ~proposer() = default;
  // Asking costs next to nothing (n-gram): the engine asks with each sequence's most and plans
  // lengths over what came back. Otherwise it plans first and asks for exactly those lengths.
  virtual bool cheap() const = 0;
  virtual std::vector<std::vector<std::int32_t>> propose(std::span<const proposal_ask> asks) = 0;
  // Only the first `valid` positions of the sequence's KV hold its tokens now (a verify step
  // rejected the rest; 0 after a preemption, a lost cache or a new table): a proposer with KV of
  // its own recomputes from there.
  virtual void rewind(std::uint64_t /*seq*/, int /*valid*/) {}
  virtual void forget(std::uint64_t /*seq*/) {}
  // What proposing costs, measured, which the policy weighs (nothing: free).
  virtual draft_cost cost() const { return {}; }
  // Positions a proposal for `seq`, whose tokens are `tokens` long, computes before its first
  // proposed token beyond the one decoded this step (a draft's catch-up; 0 for n-gram lookup).
  virtual int catch_up(std::uint64_t /*seq*/, int /*tokens*/) const { return 0; }
};

class ngram_proposer final : public proposer {
 public:
  explicit ngram_proposer(ngram_config c) : c_(c) {}
  bool cheap() const override { return true; }
  std::vector<std::vector<std::int32_t>> propose(std::span<const proposal_ask> asks) override;

 private:
  ngram_config c_;
};

}  // namespace troupe::speculative
