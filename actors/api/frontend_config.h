// What the head's HTTP face is configured with (from the topology): the frontend and its
// request preparers read it.
#pragma once
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "actors/api/http_server.h"
#include "actors/protocol/lora_protocol.h"
#include "runtime/api/lora_catalog.h"
#include "runtime/admission/admission.h"
#include "runtime/chat/chat_template.h"
#include "runtime/chat/tool_calls.h"
#include "runtime/model/pooling.h"
#include "runtime/sampling/sampling_params.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/workload/request_trace.h"
#include "topology/topology.h"

namespace troupe::actors {

// One model the frontend serves ([model], or a [models.NAME]): the names requests give it and
// what preparing its requests reads.
struct served_model_spec {
  std::string key;                    // the topology's name (engine::request::model); "" : [model]
  std::string model_name = "troupe";  // what /v1/models lists and requests may name
  std::vector<std::string> model_aliases;  // other names requests may give it, listed too
  int max_model_len = 4096;           // context: longer prompts get 413
  int vocab_size = 0;                 // token-id prompts are checked against it
  sampling::sampling_params sampling_defaults;  // from generation_config.json
  // The format the model writes tool calls in ([model] tool_call_parser); unset: the chat
  // template's (stated in the log at start). tool_choice "auto" parses answers in it; with
  // none, "auto" with tools is refused.
  std::optional<chat::tool_format> tool_call_parser;
  // An embedding model's pooling (its folder's modules.json): /v1/embeddings serves it, with
  // vectors of embedding_size values. Unset: /v1/embeddings is a 400 naming the model.
  std::optional<model::pooling_config> pooling;
  int embedding_size = 0;
  std::string fallback;  // the served name of the model that answers its overflow ([model] fallback); empty: none
  std::shared_ptr<const tokenizer::tokenizer> tok;  // null: token-id prompts only
  std::optional<chat::chat_template> chat;          // none: no chat endpoint for it
};

struct frontend_config {
  http::server_config http;
  // The models served, [model] first: a request that names none gets the first.
  std::vector<served_model_spec> models = {served_model_spec{}};
  // Replica id -> the served name of the model it runs (absent: the first's), for /metrics.
  std::map<std::uint32_t, std::string> replica_models;
  int max_requests = 4096;            // in flight; beyond it, 429 with Retry-After
  admission::admission_config admission;  // tenants' request rates and token budgets (the queue bound: the owner)
  topology::replica_names replica_names;  // the topology's: the `replica` label
  std::set<std::uint32_t> started_replicas;  // those the topology starts: /health names the ones not alive
  int retry_after_s = 1;              // Retry-After of 429 and 503
  // [frontend] ttft_slo and itl_slo (0: not set): what troupe:slo_requests_total judges by.
  std::chrono::milliseconds ttft_slo{0}, itl_slo{0};
  std::string metric_prefix = "troupe:";
  std::vector<std::string> api_keys;   // the OpenAI routes need one of these as a bearer token
  bool api_key_on_all_routes = false;  // /health and /metrics too
  // Per api_keys entry, the tenant it names ("" none). The prefix cache keeps tenants apart:
  // a request's tenant is its key's, else its `user`, else the shared default.
  std::vector<std::string> api_key_tenants;
  bool tenant_by_user = true;  // false: `user` does not separate caches
  // System prompts (name, text) every tenant shares prefix-cache blocks of.
  std::vector<std::pair<std::string, std::string>> public_prompts;
  std::chrono::milliseconds request_timeout{30000};  // for the frontend's own asks (health, metrics)
  // LoRA adapters served as models ([lora], with [model] alone): /v1/models lists them, requests name them, and
  // /v1/load_lora_adapter and /v1/unload_lora_adapter change them when runtime_loading allows
  // (404 naming the key otherwise).
  lora_serving lora;
  // The request log ([frontend] request_trace), written by the frontend actor alone; null: none.
  std::shared_ptr<workload::request_trace> request_trace;
};

}  // namespace troupe::actors
