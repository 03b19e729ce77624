#include "actors/protocol/engine_protocol.h"

namespace troupe::actors {

void register_engine_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_type<sampling::sampling_params>("troupe.sampling_params");
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
  e.params = r.params;
  e.priority = r.priority;
  e.prefill_only = r.prefill_only;
  if (!r.kv.empty()) e.kv = std::make_shared<const std::vector<float>>(r.kv);
  return e;
}

generate_request to_generate_request(const engine::request& e) {
  generate_request r;
  r.id = e.id;
  r.prompt = e.prompt;
  r.generated = e.generated;
  r.params = e.params;
  r.priority = e.priority;
  r.prefill_only = e.prefill_only;
  if (e.kv) r.kv = *e.kv;
  return r;
}

}  // namespace troupe::actors
