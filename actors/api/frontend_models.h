// The models the frontend serves: their cards in /v1/models (the base under each of its names,
// then the LoRA adapters), and vLLM's POST /v1/load_lora_adapter and /v1/unload_lora_adapter,
// answered by the head's LoRA manager (actors/serving/lora_manager.h).
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

// One card per served name: each model's under each of its names, [model]'s first (OpenAI's fields, vLLM's max_model_len and root, and the
// vocabulary's size, which a load generator needs to draw token ids for a model without a
// tokenizer), then each adapter's, with the folder it came from as `root` and the base as `parent`.
std::vector<nlohmann::json> model_cards(const frontend_config& cfg, std::int64_t created);

}  // namespace troupe::actors
