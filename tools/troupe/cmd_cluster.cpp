// troupe serve (the head) and troupe node (a process hosting replicas for the head).
#include <csignal>
#include <cstdio>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/local_cluster.h"
#include "actors/node.h"
#include "runtime/common/error.h"
#include "tools/troupe/args.h"
#include "tools/troupe/commands.h"
#include "tools/troupe/model_folder.h"

namespace troupe::cli {

namespace {

struct cluster_config : caf::actor_system_config {
  explicit cluster_config(const topology::topology_config& t) {
    actors::register_protocols(*this);
    actors::configure_network(*this, t.timeouts);
  }
};

std::pair<std::string, std::uint16_t> split_address(const std::string& a, const std::string& what) {
  const auto colon = a.rfind(':');
  try {
    if (colon != std::string::npos && colon > 0) return {a.substr(0, colon), std::uint16_t(std::stoi(a.substr(colon + 1)))};
  } catch (const std::exception&) {
  }
  throw input_error(what + ": expected HOST:PORT, got '" + a + "'");
}

}  // namespace

int cmd_node(int argc, char** argv) {
  args a(argc, argv, 2, {"name", "head", "model"}, {});
  if (a.positional().size() != 1) throw input_error("usage: troupe node CONFIG --name NODE [--head HOST:PORT] [--model DIR]");
  auto topo = topology::load_topology(a.positional()[0]);
  auto name = a.get("name");
  if (!name) throw input_error("--name NODE is required");
  if (!topo.node(*name)) throw input_error(topo.source + ": no node named \"" + *name + "\"");
  const auto& head = topo.nodes.front();
  auto [host, port] = a.has("head") ? split_address(*a.get("head"), "--head") : std::make_pair(head.host, head.port);
  if (port == 0) throw input_error(topo.source + ": the head's address has port 0; give --head HOST:PORT");
  opened_model m = open_model(a.get("model", topo.model.path));
  cluster_config cfg(topo);
  caf::actor_system sys{cfg};
  actors::run_node(sys, topo, *name, host, port, m.model, m.tok, [&](std::size_t n) {
    std::printf("troupe node %s: ready, %zu replica(s) registered with %s:%u\n", name->c_str(), n, host.c_str(), unsigned(port));
    std::fflush(stdout);
  });
  std::fprintf(stderr, "troupe node %s: the head is gone, stopping\n", name->c_str());
  return 0;
}

int cmd_serve(int argc, char** argv) {
  args a(argc, argv, 2, {"port", "model", "listen"}, {});
  const std::string config = a.positional().empty() ? "configs/local.toml" : a.positional()[0];
  auto topo = topology::load_topology(config);
  const auto& head = topo.nodes.front();
  const std::uint16_t port = std::uint16_t(a.get_int("port", head.port));
  bool head_hosts = false;
  for (auto& p : topology::place_replicas(topo)) head_hosts = head_hosts || p.node == head.name;
  opened_model m;
  if (head_hosts) m = open_model(a.get("model", topo.model.path));
  cluster_config cfg(topo);
  caf::actor_system sys{cfg};
  actors::local_cluster cluster(sys, topo, m.model, m.tok, actors::placement_mode::head_node_only);
  const std::string listen = a.get("listen", head.host);
  const std::uint16_t bound = cluster.publish(listen == "0.0.0.0" ? "" : listen, port);
  std::printf("troupe serve: head of %s listening on %s:%u for nodes; %u replica(s) live here\n", config.c_str(),
              listen.c_str(), unsigned(bound), cluster.live_replicas());
  std::printf("(the HTTP frontend is not part of this build yet; embed the runtime or use troupe generate)\n");
  std::fflush(stdout);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  int sig = 0;
  sigwait(&set, &sig);
  std::fprintf(stderr, "troupe serve: signal %d, stopping\n", sig);
  return 0;
}

}  // namespace troupe::cli
