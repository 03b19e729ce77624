// A rollout's quality probe (runtime/admin/quality_gate.h): one short-lived actor that sends a
// quality_set straight to one replica's scheduler, bypassing the router (the canary split must
// not choose the replica) and the request owner (its figures are the clients' alone), and
// answers probe_atom with what the replica returned: the held-out windows' summed NLL and the
// prompts' greedy answers. A request that fails (the replica drained, died or refused it) makes
// the answer an error naming it; the asker's timeout bounds the rest.
#pragma once
#include <caf/all.hpp>

#include <string>

#include "actors/protocol/engine_protocol.h"
#include "runtime/admin/quality_gate.h"

namespace troupe::admin {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, quality_sample& x) {
  return f(caf::meta::type_name("quality_sample"), x.nll, x.scored, x.answers);
}

}  // namespace troupe::admin

namespace troupe::actors {

using probe_atom = caf::atom_constant<caf::atom("qprobe")>;

using quality_probe_actor = caf::typed_actor<caf::reacts_to<token_batch>, caf::replies_to<probe_atom>::with<admin::quality_sample>>;

// Starts probing `target` at once: every request is greedy, ids "<tag>-w<i>" and "<tag>-p<i>",
// for the topology's model `model` ("" : [model]). `timeout` bounds each submission.
quality_probe_actor spawn_quality_probe(caf::actor_system& sys, scheduler_actor target, admin::quality_set set, std::string model,
                                        std::string tag, std::chrono::milliseconds timeout);

}  // namespace troupe::actors
