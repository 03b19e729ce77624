#include "actors/node.h"

#include <caf/io/all.hpp>

#include "actors/local_cluster.h"
#include "actors/scheduler_actor.h"
#include "runtime/common/error.h"

namespace troupe::actors {

void run_node(caf::actor_system& sys, const topology::topology_config& topo, const std::string& node,
              const std::string& head_host, std::uint16_t head_port, std::shared_ptr<const model::llama_model> model,
              std::shared_ptr<const tokenizer::tokenizer> tok, const std::function<void(std::size_t)>& on_ready) {
  if (!topo.node(node)) throw input_error(topo.source + ": no node named \"" + node + "\"");
  auto router = sys.middleman().remote_actor<router_actor>(head_host, head_port);
  if (!router)
    throw input_error("cannot reach the head at " + head_host + ":" + std::to_string(head_port) + ": " +
                      sys.render(router.error()));
  const engine::engine_config ec = engine_config_of(topo);
  std::vector<scheduler_actor> mine;
  caf::scoped_actor self{sys};
  for (const auto& p : topology::place_replicas(topo)) {
    if (p.node != node) continue;
    auto s = sys.spawn(scheduler, model, tok, ec);
    mine.push_back(s);
    self->request(*router, topo.timeouts.request, replica_atom::value, p.replica, s)
        .receive([](bool) {},
                 [&](caf::error& err) {
                   throw input_error("the head did not accept replica " + std::to_string(p.replica) + ": " + sys.render(err));
                 });
  }
  if (on_ready) on_ready(mine.size());
  // Serve until the head is gone: its router going down (or the link to it) ends this node.
  self->monitor(*router);
  bool head_alive = true;
  while (head_alive)
    self->receive([&](const caf::down_msg&) { head_alive = false; });
  for (auto& s : mine) self->send_exit(s, caf::exit_reason::user_shutdown);
}

}  // namespace troupe::actors
