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
  // A new request's: two pseudo-observations at `replica`'s rate, so a request starts from what
  // its replica's draft achieves rather than from 0.5 (with a draft accepted 95% of the time,
  // 0.5 left each new request proposing nothing until an exploration showed otherwise).
  static acceptance starting_from(const acceptance& replica);

 private:
  double accepted_ = 1, rejected_ = 1;
};

// Seconds of a replica's forward step as a function of its rows and of whether it verifies
// proposals: a + b * rows + c * verifying, fitted to recent observations (least squares,
// exponentially forgotten), so it follows the machine and model it runs on rather than a table.
// The jump c is measured because it is real: a step where some sequence has several rows leaves
// the kernels' one-row-per-sequence decode path (on a CPU, a 1b model's step of one sequence
// with 5 rows costs about 1.15 times its step of 1), so a first proposal costs more than a row.
class step_cost {
 public:
  void observe(int rows, double seconds, bool verifying = false);
  // Predicted seconds; nothing until steps of two different sizes were seen. Without verifying
  // steps among them the jump is taken as 0 (the first proposals measure it).
  std::optional<double> seconds(int rows, bool verifying = false) const;

 private:
  // Weighted sums over x = (1, rows, verifying): s_[i][j] = sum w x_i x_j, r_[i] = sum w x_i y.
  double s_[3][3] = {}, r_[3] = {};
};

// A step_cost per batch size (the step's rows without proposals, in powers of two), and one of
// every step. A single line does not fit a CPU's kernels across batch sizes: up to 16 rows a
// step reads the weights once (flat), beyond that it is bound by arithmetic, so a line learned at
// concurrency 4 (where a verify step crosses into the second regime) told concurrency 1 what
// verifying costs at 4: on kjv-1b with models/kjv as its draft (accepted 95% of the time) only
// 52 of 187 steps verified anything.
class step_costs {
 public:
  void observe(int base_rows, int rows, double seconds, bool verifying = false);
  // The line of base_rows' batch size once it has one, else the line of all steps.
  const step_cost& at(int base_rows) const;
  // The line of base_rows' batch size, whether it has one yet or not (what explorations go by:
  // where it has none, exploring is how it gets one).
  const step_cost& local(int base_rows) const { return by_size_[size_of(base_rows)]; }

 private:
  static constexpr int sizes = 8;  // 1, 2-3, 4-7, ..., 64-127, 128 and more
  static int size_of(int base_rows);
  step_cost by_size_[sizes];
  step_cost all_;
};

// What a draft model's proposals cost: each round of its forward (one proposed position for every
// sequence still proposing) and each position it computes, the proposals and the positions a
// sequence must catch up on first (what it decoded while it did not propose). Measured by the
// draft; all 0 for n-gram lookup.
struct draft_cost {
  double per_round = 0, per_position = 0;
  double seconds(int rounds, int positions) const { return per_round * rounds + per_position * positions; }
};

struct plan_inputs {
  int base_rows = 0;                      // the step's rows without speculation (decodes + prefill chunk)
  int base_tokens = 0;                    // tokens the step yields without speculation (its decodes)
  std::span<const double> acceptance;     // of each sequence that may speculate
  int k_max = 4;                          // proposals per sequence at most
  std::span<const int> k_cap;             // each sequence's own most, below k_max (empty: k_max for all)
  draft_cost draft;                       // n-gram: nothing
  std::span<const int> catch_up;          // positions each sequence's draft computes before proposing (empty: 0)
  // When nothing pays, one proposal to the likeliest sequence anyway. The caller sets it now and
  // then: a line learned at another batch size, or from a text that was hard to guess, would
  // otherwise never be measured again where it now says no.
  bool explore = false;
  // What a step of only the yielding sequences' rows (one each) would cost, from the line of that
  // batch size; nothing: the step's own base rows. The plan is judged against plain decoding at
  // that rate, the proposals adding what they cost at the step's rows: a prefill chunk in the
  // step is paid whatever the plan, and counted in, it made any proposal look cheap beside the
  // step's few tokens a second, while each proposal row is a row no decode gets.
  std::optional<double> decode_seconds;
};

// Proposals per sequence (the order of inputs.acceptance), each in 0..min(k_max, k_cap): one proposal at a
// time to the sequence whose next one is likeliest accepted (a^(k+1)); of the plans along that
// order, the one with the most expected tokens per second (the first proposal pays the verify
// jump, so a plan may pay only from its second or third proposal on), if it beats proposing
// nothing by 5% (the margin of the cost model's error). Until `cost` has
// a line, every sequence whose acceptance is above 0 gets one proposal, so that steps of
// different sizes are seen and the line can be learned; with `explore`, a plan of nothing gives
// the likeliest sequence one proposal.
std::vector<int> plan_lengths(const plan_inputs& in, const step_cost& cost);

// The sequence an exploration gives its one proposal: the likeliest that may propose (the size
// of in.acceptance when none may); and what proposing it costs the draft, catch-up included.
std::size_t explored(const plan_inputs& in);
double exploration_seconds(const plan_inputs& in);

// Steps between explorations (plan_inputs::explore) at a step of `base_rows`: `probe_every`, or
// more when an exploration is dear, so that exploring costs at most about 1% of the steps' time.
// An exploration pays the measured jump for verifying and `propose_seconds`, what proposing
// costs (a draft's catch-up over everything since it last ran: on models/kjv at batch 32 that
// made a draft 20% slower than no speculation). At batch 32 a step with one proposal among the
// decodes measured up to 3 times a decode step here: explored every 16 steps it cost 10-15%.
int explore_interval(const step_cost& cost, int base_rows, int probe_every, double propose_seconds = 0);

}  // namespace troupe::speculative
