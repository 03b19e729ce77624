// How a pool speculates: which proposer, how far, and when not to. What [pools.speculative] in a
// topology reads into (topology/topology.cpp) and an engine runs by (runtime/engine/engine.h).
#pragma once
#include <optional>
#include <string>

#include "runtime/speculative/ngram.h"

namespace troupe::speculative {

enum class method { off, ngram, draft };

const char* method_name(method m);

struct speculative_config {
  method how = method::off;
  int k = 4;             // tokens a sequence proposes per step at most (1..16)
  ngram_config ngram;    // method ngram
  std::string draft_model;  // method draft: a model folder with the target's tokenizer
  // A request whose acceptance falls below this proposes one token every probe_every steps only,
  // so that a change in its text is still seen (0: always propose as the policy plans).
  double min_acceptance = 0.1;
  int probe_every = 16;
  // More running sequences than this: no proposals at all, whatever the cost model says (0: the
  // cost model alone decides).
  int max_running = 0;
  // false: every sequence proposes up to k whatever its acceptance and the step's cost (what
  // vLLM does; for measuring a fixed k). true: the policy (policy.h) decides how far, per step.
  bool adaptive = true;

  bool on() const { return how != method::off; }
  // Why this cannot run, naming the field under `where` ("pools.speculative.k: 0 is not in
  // 1..16"), or nothing. Whether the draft folder exists and fits the target is the loader's.
  std::optional<std::string> invalid(const std::string& where = "speculative") const;
};

constexpr int max_proposals = 16;  // bounds a verify step's rows per sequence

}  // namespace troupe::speculative
