// When speculation pays, and how far: per request from its measured acceptance, per step from
// the replica's own measured step times. Pure: numbers in, proposal lengths out.
//
// Speculation trades rows for steps. A verify step with K extra rows costs t(rows + K) and yields,
// for a sequence proposing k tokens each accepted with probability a (independently, given the
// ones before), 1 + a + a^2 + ... + a^k tokens: the k-th proposal adds a^k. While the forward is
// bound by reading the weights, t barely grows with rows and every proposal is nearly free; once
// it is bound by arithmetic, t grows with every row and a proposal accepted with probability
// below 1 costs more than it yields. plan_lengths() gives each sequence the proposals that raise
// the step's tokens per second, so speculation turns itself down and off as the batch grows.
#pragma once
#include <optional>
#include <span>
#include <vector>

namespace troupe::speculative {

// A request's acceptance: the probability that a proposed token is accepted given the ones before
// it were, from its verify steps (exponentially forgotten, so a change of text shows quickly).
// A step that accepted `a` of `k` saw a acceptances and, if a < k, one rejection.
class acceptance {
 public:
  void observe(int proposed, int accepted);
  double rate() const;  // 0.5 before anything is observed (two pseudo-observations)

 private:
  double accepted_ = 1, rejected_ = 1;
};

// Seconds of a replica's forward step as a function of its rows: a line through recent
// observations (least squares, exponentially forgotten), so it follows the machine and model it
// runs on rather than a table.
class step_cost {
 public:
  void observe(int rows, double seconds);
  // Predicted seconds for `rows`; nothing until steps of two different sizes were seen.
  std::optional<double> seconds(int rows) const;

 private:
  double w_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
};

struct plan_inputs {
  int base_rows = 0;                      // the step's rows without speculation (decodes + prefill chunk)
  int base_tokens = 0;                    // tokens the step yields without speculation (its decodes)
  std::span<const double> acceptance;     // of each sequence that may speculate
  int k_max = 4;                          // proposals per sequence at most
  std::span<const int> k_cap;             // each sequence's own most, below k_max (empty: k_max for all)
  double draft_seconds_per_position = 0;  // a draft model's step, paid once per position proposed (n-gram: 0)
  // When nothing pays, one proposal to the likeliest sequence anyway. The caller sets it now and
  // then: a line learned at another batch size, or from a text that was hard to guess, would
  // otherwise never be measured again where it now says no.
  bool explore = false;
};

// Proposals per sequence (the order of inputs.acceptance), each in 0..min(k_max, k_cap): one proposal at a
// time to the sequence whose next one is likeliest accepted (a^(k+1)), while the step's expected
// tokens per second rises; it stops at the first proposal that would lower it. Until `cost` has
// a line, every sequence whose acceptance is above 0 gets one proposal, so that steps of
// different sizes are seen and the line can be learned; with `explore`, a plan of nothing gives
// the likeliest sequence one proposal.
std::vector<int> plan_lengths(const plan_inputs& in, const step_cost& cost);

}  // namespace troupe::speculative
