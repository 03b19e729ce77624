#include "actors/protocol/engine_protocol.h"

namespace troupe::actors {

void register_engine_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_type<sampling::sampling_params>("troupe.sampling_params");
  cfg.add_message_type<engine::request>("troupe.request");
  cfg.add_message_type<token_update>("troupe.token_update");
  cfg.add_message_type<std::vector<token_update>>("troupe.token_updates");
  cfg.add_message_type<token_batch>("troupe.token_batch");
  cfg.add_message_type<load_report>("troupe.load_report");
  cfg.add_message_type<token_sink>("troupe.token_sink");
  cfg.add_message_type<replica_id>("troupe.replica_id");
  cfg.add_message_type<std::vector<replica_id>>("troupe.replica_ids");
  cfg.add_message_type<kv::kv_event>("troupe.kv_event");
  cfg.add_message_type<std::vector<kv::kv_event>>("troupe.kv_events");
  cfg.add_message_type<kv::kv_event_batch>("troupe.kv_event_batch");
  cfg.add_message_type<kv_snapshot>("troupe.kv_snapshot");
  cfg.add_message_type<kv_event_sink>("troupe.kv_event_sink");
  cfg.add_message_type<std::vector<std::uint64_t>>("troupe.uint64s");
}

}  // namespace troupe::actors
