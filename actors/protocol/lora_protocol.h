// Loading and unloading LoRA adapters at run time across a head's replicas (the head's LoRA
// manager, actors/serving/lora_manager.h): what the HTTP routes and the admin console ask.
#pragma once
#include <caf/all.hpp>

#include <memory>
#include <string>

#include "actors/protocol/engine_protocol.h"
#include "runtime/api/lora_catalog.h"

namespace troupe::actors {

using lora_manager_actor = caf::typed_actor<
    // Load adapter NAME from the PEFT folder DIR on every live replica: replies with its identity
    // once all hold it, or an error naming what was wrong (serve_errc::invalid), after unloading
    // it from those that took it.
    caf::replies_to<lora_atom, std::string, std::string>::with<std::string>,
    // Unload adapter NAME: new requests naming it get 404 at once; replies with its identity once
    // every live replica dropped it (requests running with it finish). serve_errc::not_found for
    // a name not loaded.
    caf::replies_to<lora_atom, std::string>::with<std::string>>;

// What a head's faces (the HTTP frontend, the admin console) hold of its adapters ([lora]): the
// catalog, read as requests name adapters, and the manager that loads and unloads them, which they
// ask only when the topology's runtime_loading allows (both null without [lora]).
struct lora_serving {
  std::shared_ptr<const api::lora_catalog> catalog;
  lora_manager_actor manager;
  bool runtime_loading = false;
};

}  // namespace troupe::actors
