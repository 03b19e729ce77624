#include "actors/protocol/engine_protocol.h"

namespace troupe::actors {

void register_engine_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_type<generate_request>("troupe.generate_request");
  cfg.add_message_type<token_update>("troupe.token_update");
  cfg.add_message_type<std::vector<token_update>>("troupe.token_updates");
  cfg.add_message_type<token_batch>("troupe.token_batch");
  cfg.add_message_type<load_report>("troupe.load_report");
  cfg.add_message_type<token_sink>("troupe.token_sink");
}

engine::request to_engine_request(const generate_request& r) {
  engine::request e;
  e.id = r.id;
  e.prompt = r.prompt;
  e.generated = r.generated;
  e.priority = r.priority;
  auto& p = e.params;
  p.temperature = r.temperature;
  p.top_k = r.top_k;
  p.top_p = r.top_p;
  p.min_p = r.min_p;
  p.repetition_penalty = r.repetition_penalty;
  p.presence_penalty = r.presence_penalty;
  p.frequency_penalty = r.frequency_penalty;
  if (r.has_seed) p.seed = r.seed;
  p.max_tokens = r.max_tokens;
  p.stop_token_ids = r.stop_token_ids;
  p.stop = r.stop;
  p.ignore_eos = r.ignore_eos;
  p.logprobs = r.logprobs;
  e.prefill_only = r.prefill_only;
  if (!r.kv.empty()) e.kv = std::make_shared<const std::vector<float>>(r.kv);
  return e;
}

generate_request to_generate_request(const engine::request& e) {
  generate_request r;
  r.id = e.id;
  r.prompt = e.prompt;
  r.generated = e.generated;
  r.priority = e.priority;
  const auto& p = e.params;
  r.temperature = p.temperature;
  r.top_k = p.top_k;
  r.top_p = p.top_p;
  r.min_p = p.min_p;
  r.repetition_penalty = p.repetition_penalty;
  r.presence_penalty = p.presence_penalty;
  r.frequency_penalty = p.frequency_penalty;
  r.has_seed = p.seed.has_value();
  r.seed = p.seed.value_or(0);
  r.max_tokens = p.max_tokens;
  r.stop_token_ids = p.stop_token_ids;
  r.stop = p.stop;
  r.ignore_eos = p.ignore_eos;
  r.logprobs = p.logprobs;
  r.prefill_only = e.prefill_only;
  if (e.kv) r.kv = *e.kv;
  return r;
}

}  // namespace troupe::actors
