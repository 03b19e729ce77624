// The frontend's LoRA routes: vLLM's POST /v1/load_lora_adapter and /v1/unload_lora_adapter,
// answered by the head's LoRA manager (actors/serving/lora_manager.h), and the adapters' cards
// in /v1/models.
#pragma once
#include <caf/all.hpp>

#include <functional>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/api/frontend_config.h"
#include "actors/api/http_server.h"
#include "runtime/api/api_error.h"

namespace troupe::actors {

// Answers a load (`load`) or an unload on `ex`: 200 with vLLM's text once every replica holds
// (or dropped) the adapter; errors go to `on_error`: 404 while [lora] runtime_loading is off or
// for an adapter not loaded, 400 naming the field at fault, 503 when no replica can answer.
void answer_lora_route(caf::event_based_actor* self, const frontend_config& cfg, const std::shared_ptr<http::exchange>& ex,
                       bool load, std::function<void(const api::api_error&)> on_error);

// One card per served adapter: its name, the folder it came from as `root`, the base as `parent`.
std::vector<nlohmann::json> adapter_cards(const frontend_config& cfg, std::int64_t created);

}  // namespace troupe::actors
