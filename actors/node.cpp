#include "actors/node.h"

#include <caf/io/all.hpp>

#include "actors/error_text.h"
#include "actors/local_cluster.h"
#include "actors/node_agent.h"
#include "runtime/common/error.h"
#include "runtime/common/machine.h"

namespace troupe::actors {

void run_node(caf::actor_system& sys, const topology::topology_config& topo, const std::string& node,
              const std::string& head_host, std::uint16_t head_port, std::shared_ptr<const model::llama_model> model,
              std::shared_ptr<const tokenizer::tokenizer> tok, const join_credentials& credentials,
              const std::function<void(std::size_t)>& on_ready) {
  if (!topo.node(node)) throw input_error(topo.source + ": no node named \"" + node + "\"");
  if (model) check_groups(topo, model->num_layers());
  topology::check_kv_memory(topo, node, machine_memory_bytes());
  auto registry = std::optional<node_registry_actor>(connect_registry(sys, head_host, head_port, topo.cluster.tls()));
  auto agent = sys.spawn(node_agent, node, model, tok, engine_config_of(topo), group_configs_of(topo), topo.model.path);
  caf::scoped_actor self{sys};
  std::uint32_t placed = 0;
  std::string refused;
  self->request(*registry, topo.timeouts.request, join_atom::value, join_request{node, agent, credentials.token, credentials.fingerprint})
      .receive([&](std::uint32_t n) { placed = n; }, [&](caf::error& err) { refused = error_message(sys, err); });
  if (!refused.empty()) {
    self->send_exit(agent, caf::exit_reason::user_shutdown);
    throw input_error("the head refused node " + node + ": " + refused);
  }
  if (on_ready) on_ready(placed);
  // Serve until the head is gone: its registry going down (or the link to it) ends this node,
  // and the agent takes its replicas with it.
  self->monitor(*registry);
  bool head_alive = true;
  while (head_alive) self->receive([&](const caf::down_msg&) { head_alive = false; });
  self->send_exit(agent, caf::exit_reason::user_shutdown);
}

}  // namespace troupe::actors
