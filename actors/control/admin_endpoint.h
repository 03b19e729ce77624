// The admin endpoint on a head (docs/admin.md), and the autoscaler when the topology has one: a ZeroMQ ROUTER socket answers admin requests
// (runtime/admin/admin_message.h) through the admin actor, and a PUB socket sends its events for
// `watch`. With [admin] secret_key and authorized_keys both sockets are CURVE servers and a ZAP
// handler lets in only the authorized client keys: anyone else gets no reply and no event.
// The sockets live on a thread of their own; the actor's replies and events reach it through a
// bounded queue and an eventfd, so no actor ever blocks on a socket.
#pragma once
#include <caf/all.hpp>

#include <memory>
#include <string>
#include <thread>

#include "actors/control/admin_actor.h"
#include "actors/control/zap.h"  // the CURVE key helpers its callers use
#include "topology/topology.h"

namespace troupe::actors {

class admin_endpoint {
 public:
  // Binds [admin] endpoint (and events) and spawns the admin actor; throws input_error naming
  // the key when an address cannot be bound or a key file is unusable. `model`: what the head
  // actually serves (path, served name, architecture, context...), shown by `topology`.
  admin_endpoint(caf::actor_system& sys, const topology::topology_config& topo, router_actor router, owner_actor owner,
                 node_registry_actor registry = {}, nlohmann::json model = {}, lora_serving lora = {}, std::string head = {});
  ~admin_endpoint();
  admin_endpoint(const admin_endpoint&) = delete;
  admin_endpoint& operator=(const admin_endpoint&) = delete;

  admin_actor actor() const { return actor_; }

  struct shared;  // what the actor's callbacks and the socket thread share

 private:
  void run();
  std::shared_ptr<shared> q_;
  struct sockets;
  std::unique_ptr<sockets> z_;
  admin_actor actor_;
  autoscaler_actor autoscaler_;  // with [autoscaler]
  std::thread thread_;
};

}  // namespace troupe::actors
