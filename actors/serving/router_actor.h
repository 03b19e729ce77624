// The router: holds each replica's last load report and liveness, and answers "where should
// this request run?" with a routing policy from runtime/routing (a pure function).
#pragma once
#include <chrono>
#include <map>
#include <chrono>
#include <set>
#include <vector>

#include "actors/protocol/router_protocol.h"
#include "actors/serving/kv_event_publisher.h"
#include "runtime/api/lora_catalog.h"
#include "runtime/common/bounded_log.h"
#include "runtime/routing/canary_split.h"
#include "runtime/routing/disaggregation.h"
#include "runtime/routing/policy.h"
#include "runtime/routing/replica_registry.h"
#include "runtime/routing/prefix_index.h"
#include "topology/topology.h"

namespace troupe::actors {

struct router_config {
  std::string policy = "round_robin";
  routing::policy_params params;
  std::chrono::milliseconds poll_interval{50};  // how often replicas are asked for their load
  std::chrono::milliseconds request_timeout{30000};
  // A replica silent (no load report) for longer than this is suspect: new requests go elsewhere
  // while another can take them (routing::replica_registry::judge).
  std::chrono::milliseconds suspect_after{3000};
  // Replica id -> its pool's role (absent: both). With prefill replicas live, a new request
  // goes to one of them and is handed off to a decode (or both) replica after its prefill;
  // without, it runs whole on a decode or both replica.
  std::map<replica_id, topology::pool_role> roles;
  topology::replica_names names;               // for logs
  std::set<std::uint32_t> parked;              // warm at start: placed on by nobody until resumed
  routing::disaggregation_params disaggregation;  // which prompts go to a prefill replica
  // How the replicas key their prefix-cache blocks (engine_config's), for KV-aware routing.
  int block_size = 16;
  std::string model_key = "model";
  // With [models.NAME] tables: replica (and KV store) id -> the model it serves (absent: [model]),
  // and each such model's key. A request goes only to its model's replicas and stores, its
  // block hashes rooted in its model's key.
  std::map<replica_id, std::string> models;
  std::map<std::string, std::string> model_keys;
  // The head's served LoRA adapters: a replica that registers is given those loaded at run time
  // before anything is placed on it (it loads the topology's itself). Null without [lora].
  std::shared_ptr<const api::lora_catalog> loras;
  // KV events go out here too when set (the topology's [kv_events], on the first head).
  std::shared_ptr<kv_event_publisher> publisher;
};

struct router_state {
  router_config cfg;
  routing::policy policy;
  routing::replica_registry book;           // slots, loads, liveness, drains and parks
  std::vector<scheduler_actor> replicas;    // by the book's slot
  std::uint64_t decisions = 0;
  kv::block_hash root = 0;                  // of the model's key: where its prompts' block hashes start
  std::map<std::string, kv::block_hash> model_roots;  // each [models.NAME]'s (cfg.model_keys), by NAME
  std::map<replica_id, std::string> revisions;         // each replica's cache key, from its load reports
  std::map<std::string, routing::canary_split> splits;  // canary rollouts, by model
  std::map<std::string, kv::block_hash> split_roots;    // each split's canary key, hashed
  bool kv_aware = false;                    // the policy reads the prefix index
  routing::prefix_index index;              // fed by the replicas' KV events
  std::map<std::string, std::uint64_t> reasons;  // decisions by reason
  admin_event_sink events;                            // the admin console's, if one watches
  std::map<replica_id, kv_store_actor> stores;   // the nodes' KV stores, indexed like replicas
  router_stats stats;
  bounded_log<std::int64_t> decision_ns{100000};  // handler time per decision
  static inline const char* name = "troupe.router";
};

router_actor::behavior_type router(router_actor::stateful_pointer<router_state> self, router_config cfg);

}  // namespace troupe::actors
