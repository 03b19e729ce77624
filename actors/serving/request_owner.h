// The request owner: keeps each request (prompt, tokens so far, client sink, replica) until it
// ends. When a replica dies it resubmits that replica's requests elsewhere with the tokens
// already streamed, so the client sees no duplicate and no gap; a request that cannot be placed
// again ends with an error update, never silence.
#pragma once
#include <chrono>
#include <map>
#include <optional>
#include <set>

#include "runtime/admission/admission.h"
#include "runtime/admission/model_fallback.h"
#include "runtime/admission/pool_latencies.h"
#include "runtime/common/bounded_log.h"
#include "runtime/kv/connector.h"
#include "topology/topology.h"
#include "actors/protocol/owner_protocol.h"
#include "actors/protocol/router_protocol.h"
#include "actors/protocol/serve_error.h"

namespace troupe::actors {

struct owner_config {
  int migration_limit = 3;
  std::chrono::milliseconds request_timeout{30000};
  admission::admission_config admission;       // the queue bound per pool (tenants: the frontend)
  std::map<std::uint32_t, std::string> pools;  // replica id -> its pool
  // By the topology's model name: where its overflow goes instead of being refused
  // (runtime/admission/model_fallback.h).
  std::map<std::string, admission::fallback_rule> fallbacks;
  // By pool: the sequences its replicas that serve from the start run at once (max_seqs each),
  // for the wait a fallback rule predicts (admission::predicted_wait_s).
  std::map<std::string, int> pool_slots;
  topology::replica_names names;               // for logs
  // How often the book is held against the replicas (0: never): a request whose replica died
  // unnoticed, or lost it, moves; one a replica runs for nobody here is aborted there.
  std::chrono::milliseconds sweep{2000};
};

struct owned_request {
  engine::request request;             // as submitted
  std::vector<std::int32_t> tokens;     // streamed to the client so far
  std::int32_t text_tokens = 0;         // of them, those whose text was sent too
  token_sink client;
  replica_id replica;
  scheduler_actor scheduler;
  int migrations = 0;
  std::chrono::steady_clock::time_point submitted = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point first_token_at;  // of its first placement (for time between tokens)
  std::chrono::steady_clock::time_point lost_at;  // when its replica was found dead
  replica_id lost_replica;
  bool awaiting_first_token = false;              // migrated, no token from the new replica yet
  std::string queued_in;                          // the pool whose admission queue counts it (until it starts)
  std::optional<double> predicted_wait;           // at its admission, by a fallback rule (admission::predicted_wait_s)
  std::string running_in;                         // the pool whose queue counts it running (started, not yet ended there)
  std::vector<std::uint32_t> replicas;            // every replica it was placed on, in order (for its log line)
  bool fell_back = false;       // admission sent it to its model's fallback (once at most)
  bool prompt_done = false;     // this placement's first token came (told to the router)
  bool prefilled = false;       // handed off by a prefill replica: decode replicas only from now
  std::uint64_t sent = 0;       // the owner's submission count when it was sent to `scheduler` (0: not yet)
  bool aborted = false;         // its client gave up on it: it ends, wherever it is
  bool seeking = false;         // moving, and no replica could take it yet (placed again until the request timeout)
  std::chrono::steady_clock::time_point seeking_since;
  // Where that replica holds its KV (the handle, not the bytes), until a decode replica takes
  // it; the holder frees it when the receiver says, or when told the request went elsewhere.
  kv::connector::lease<caf::actor, replica_id> kv;
};


struct owner_state {
  owner_config cfg;
  router_actor router;
  std::map<std::string, owned_request> requests;
  bounded_log<migration_event> migrations{10000};  // the most recent, for tests, metrics and the console
  std::set<caf::actor_addr> watched;  // schedulers this actor monitors (a rejoined one is monitored anew)
  std::uint64_t sends = 0;            // submissions sent to replicas, counted (owned_request::sent)
  admin_event_sink events;            // the admin console's, if one watches
  std::map<std::string, admission::pool_queue> queues;  // by pool: admitted, not yet started
  std::uint64_t admitted = 0, refused = 0, fallbacks = 0;
  admission::pool_latencies latencies;  // by pool: time to first token and between tokens
  admission::figure_book figures;       // by replica, timed: for a canary's comparison
  static inline const char* name = "troupe.request_owner";
};

owner_actor::behavior_type request_owner(owner_actor::stateful_pointer<owner_state> self, router_actor router,
                                         owner_config cfg);

}  // namespace troupe::actors
