// A head's LoRA manager: loads and unloads adapters at run time on every live replica (asked by
// /v1/load_lora_adapter, /v1/unload_lora_adapter and `troupe admin lora`), and keeps the head's
// catalog of served adapters (runtime/api/lora_catalog.h) in step: a name is served once every
// replica holds it, and stops being served before any replica drops it. Replicas that register
// later get the runtime-loaded adapters from the router (router_config::loras).
#pragma once
#include <memory>
#include <set>
#include <string>

#include "actors/protocol/lora_protocol.h"
#include "actors/protocol/router_protocol.h"
#include "runtime/api/lora_catalog.h"

namespace troupe::actors {

struct lora_manager_state {
  std::shared_ptr<api::lora_catalog> catalog;
  router_actor router;
  std::chrono::milliseconds timeout{30000};  // for each replica's answer
  std::set<std::string> loading;             // names whose load is under way
  static inline const char* name = "troupe.lora_manager";
};

lora_manager_actor::behavior_type lora_manager(lora_manager_actor::stateful_pointer<lora_manager_state> self,
                                               std::shared_ptr<api::lora_catalog> catalog, router_actor router,
                                               std::chrono::milliseconds timeout);

}  // namespace troupe::actors
