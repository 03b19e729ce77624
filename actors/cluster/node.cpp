#include "actors/cluster/node.h"

#include <thread>

#include <caf/io/all.hpp>

#include <algorithm>
#include <chrono>
#include <optional>

#include "actors/protocol/error_text.h"
#include "actors/serving/kv_store_actor.h"
#include "actors/cluster/local_cluster.h"
#include "actors/cluster/node_agent.h"
#include "actors/protocol/serve_error.h"
#include "runtime/common/error.h"
#include "runtime/common/machine.h"
#include "runtime/supervision/readiness.h"

namespace troupe::actors {

namespace {

struct head_link {
  head_address at;
  std::optional<node_registry_actor> registry;  // joined, while alive
  std::uint64_t generation = 0;                 // of the last process of this head joined
};

// One attempt to join a head: the replicas placed, or why not.
struct join_outcome {
  std::optional<std::uint32_t> placed;
  std::string why_not;
  bool refused = false;    // the head answered no
  bool final = false;      // a refusal that waiting does not change (token, model, name)
  bool restarted = false;  // a newer process of a head joined before
  bool fenced = false;     // an older process of a head answered: not rejoined
};

// The node's readiness word: "joining" while no head is joined, "unresponsive" when the agent
// does not answer, else its replicas' (their load reports say whether each drains or is parked).
std::string status_of(caf::scoped_actor& self, const node_agent_actor& agent, const std::vector<head_link>& links) {
  if (std::none_of(links.begin(), links.end(), [](const head_link& l) { return l.registry.has_value(); })) return "joining";
  std::vector<supervision::replica_mode> modes;
  bool answered = false;
  self->request(agent, std::chrono::seconds(6), load_atom::value)
      .receive(
          [&](const std::vector<load_report>& loads) {
            answered = true;
            for (const auto& l : loads)
              modes.push_back(l.draining ? supervision::replica_mode::draining
                              : l.parked ? supervision::replica_mode::parked
                                         : supervision::replica_mode::serving);
          },
          [](caf::error&) {});
  if (!answered) return "unresponsive";  // its replicas did not say what they do: not ready
  return supervision::node_readiness(modes);
}

join_outcome join(caf::actor_system& sys, caf::scoped_actor& self, const topology::topology_config& topo, head_link& h,
                  const join_request& req) {
  join_outcome out;
  node_registry_actor registry;
  try {
    registry = connect_registry(sys, h.at.host, h.at.port, topo.cluster.tls());
  } catch (const input_error& e) {
    out.why_not = e.what();
    return out;
  }
  std::string refused;
  std::optional<serve_errc> code;
  join_reply reply;
  self->request(registry, topo.timeouts.request, join_atom::value, req)
      .receive([&](const join_reply& r) { reply = r; },
               [&](caf::error& err) {
                 refused = error_message(sys, err);
                 code = serve_code(err);
               });
  if (refused.empty() && reply.generation < h.generation) {
    // An older process of this head (cut off, then back) while a newer one was joined: fenced.
    out.why_not = "head " + h.at.name + " answered from generation " + std::to_string(reply.generation) +
                  ", older than " + std::to_string(h.generation) + " joined before; not rejoining it";
    out.fenced = true;
    return out;
  }
  if (!refused.empty()) {
    out.why_not = "head " + h.at.name + " refused node " + req.node + ": " + refused;
    out.refused = true;
    // A restarted head may still see this node's old link alive for a heartbeat or two, and a
    // head that is starting admits nobody yet: both pass.
    out.final = code != serve_errc::join_later;
    return out;
  }
  out.placed = reply.placed;
  out.restarted = h.generation != 0 && reply.generation > h.generation;
  h.generation = reply.generation;
  h.registry = registry;
  self->monitor(registry);
  return out;
}

}  // namespace

namespace {

// The first joins of every head.
struct first_join {
  std::size_t placed = 0;
  std::string why_not;   // why a head did not take the node (empty: all did)
  bool refused = false;  // why_not is a head's refusal, not an unreachable head
};

// A refusal that waiting changes (join_outcome::final) is retried for twice the connection
// timeout: a node restarted at once after a crash finds a head that has not yet noticed its
// predecessor's death (it learns it from the closed connection, or at the latest after the
// connection timeout), and a starting head admits nobody yet.
first_join join_at_start(caf::actor_system& sys, caf::scoped_actor& self, const topology::topology_config& topo,
                         std::vector<head_link>& links, const join_request& req) {
  first_join out;
  const auto give_up = std::chrono::steady_clock::now() + 2 * topo.timeouts.connection;
  for (;;) {
    out.why_not.clear();
    out.refused = false;
    bool wait = false, final = false;
    for (auto& l : links) {
      if (l.registry) continue;  // joined on an earlier attempt
      const join_outcome o = join(sys, self, topo, l, req);
      if (o.placed) out.placed = std::max<std::size_t>(out.placed, *o.placed);
      if (o.final || (!o.placed && out.why_not.empty())) {
        out.why_not = o.why_not;
        out.refused = o.refused;
      }
      final |= o.final;
      if (o.final) break;
      wait |= o.refused;
    }
    if (final || !wait || std::chrono::steady_clock::now() > give_up) return out;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

namespace {

// A KV store (with [kv_store]) for each model loaded here, in that model's layout.
model_stores spawn_stores(caf::actor_system& sys, const topology::topology_config& topo, const loaded_models& models,
                          const std::string& node) {
  model_stores stores;
  for (const auto& [name, m] : models)
    if (m.model)
      if (auto store = spawn_kv_store(sys, topo, topology::engine_config_of(topo, name), m.model->config(), node)) stores[name] = store;
  return stores;
}

}  // namespace

void run_node(caf::actor_system& sys, const topology::topology_config& topo, const std::string& node,
              const std::vector<head_address>& heads, std::shared_ptr<const model::llama_model> model,
              std::shared_ptr<const tokenizer::tokenizer> tok, const join_credentials& credentials,
              const std::function<void(std::size_t)>& on_ready, const std::function<void(const std::string&)>& on_event,
              const std::atomic<bool>* stop, const std::function<void(const std::string&)>& on_status) {
  run_node(sys, topo, node, heads, loaded_models{{"", {std::move(model), std::move(tok)}}}, credentials, on_ready, on_event, stop,
           on_status);
}

void run_node(caf::actor_system& sys, const topology::topology_config& topo, const std::string& node,
              const std::vector<head_address>& heads, const loaded_models& models, const join_credentials& credentials,
              const std::function<void(std::size_t)>& on_ready, const std::function<void(const std::string&)>& on_event,
              const std::atomic<bool>* stop, const std::function<void(const std::string&)>& on_status) {
  if (!topo.node(node)) throw input_error(topo.source + ": no node named \"" + node + "\"");
  if (heads.empty()) throw input_error(topo.source + ": no head to join");
  for (const auto& [name, m] : models)
    if (m.model) topology::check_groups(topo, m.model->config(), name);
  topology::check_kv_memory(topo, node, machine_memory_bytes(), available_memory_bytes());
  // The node's KV stores (with [kv_store]), one per model it loaded: its replicas offload to
  // them, every head's router learns of them when the node joins.
  const model_stores stores = spawn_stores(sys, topo, models, node);
  std::vector<kv_store_actor> by_index;
  for (const auto* spec : topo.models()) by_index.push_back(stores.count(spec->name) ? stores.at(spec->name) : kv_store_actor{});
  auto primary = models.find("");
  auto agent = sys.spawn(node_agent, node, replica_factory_of(topo, models, stores, rank_placement{node, {}}),
                         primary != models.end() && primary->second.model ? primary->second.model->dir()
                                                                          : topo.model.path);  // the folder this process loaded (--model wins)
  caf::scoped_actor self{sys};
  const join_request req{node, agent, credentials.token, credentials.fingerprint, by_index};
  std::vector<head_link> links;
  for (const auto& h : heads) links.push_back({h, std::nullopt});
  const first_join j = join_at_start(sys, self, topo, links, req);
  const std::string& why_not = j.why_not;
  const std::size_t placed = j.placed;
  // At start every head must take the node, or at least one when the others are unreachable.
  if (!why_not.empty() && (std::none_of(links.begin(), links.end(), [](const head_link& l) { return l.registry.has_value(); }) ||
                           j.refused)) {
    self->send_exit(agent, caf::exit_reason::user_shutdown);
    for (auto& [name, store] : stores) self->send_exit(store, caf::exit_reason::user_shutdown);
    throw input_error(why_not);
  }
  // The agent announces a replica started or stopped at one head's request to the others.
  auto tell_heads = [&] {
    std::vector<caf::actor> regs;
    for (const auto& l : links)
      if (l.registry) regs.push_back(caf::actor_cast<caf::actor>(*l.registry));
    self->send(agent, heads_atom::value, regs);
  };
  tell_heads();
  if (on_ready) on_ready(placed);
  // Serve until the process is stopped. A head that goes away (killed, restarted, cut off)
  // leaves the replicas and their KV here, serving the other heads; the node joins it again
  // when it is back, and its requests that were running here were aborted by the schedulers.
  for (int tick = 0; !(stop && *stop);) {
    self->receive(
        [&](const caf::down_msg& d) {
          for (auto& l : links)
            if (l.registry && l.registry->address() == d.source) {
              l.registry.reset();
              tell_heads();
              if (on_event) on_event("head " + l.at.name + " is gone; keeping the replicas, rejoining when it is back");
            }
        },
        caf::after(std::chrono::milliseconds(250)) >> [&] {
          if (++tick % 4 != 0) return;  // rejoin attempts once a second; the stop flag four times
          for (auto& l : links)
            if (!l.registry) {
              const join_outcome o = join(sys, self, topo, l, req);
              if (o.placed) tell_heads();
              if (o.placed && on_event)
                on_event("rejoined head " + l.at.name + (o.restarted ? " (restarted: generation " + std::to_string(l.generation) + ")" : ""));
              if (!o.placed && !o.final && o.fenced && on_event) on_event(o.why_not);
              if (o.final && on_event) on_event(o.why_not);
            }
          if (on_status) on_status(status_of(self, agent, links));
        });
  }
  // Stopped: the replicas (and their KV segments) go with the agent, before the system ends.
  self->monitor(agent);
  self->send_exit(agent, caf::exit_reason::user_shutdown);
  for (auto& [name, store] : stores) self->send_exit(store, caf::exit_reason::user_shutdown);
  for (bool gone = false; !gone;)
    self->receive([&](const caf::down_msg& d) { gone = d.source == agent.address(); },
                  caf::after(std::chrono::seconds(10)) >> [&] { gone = true; });
}

}  // namespace troupe::actors
