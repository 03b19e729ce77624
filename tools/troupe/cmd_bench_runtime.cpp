// troupe bench runtime: the control plane under load. Submits many requests at once to a
// topology started in this process (sim or cpu backend) and reports how fast the request owner
// and router place them, the router's decision time, and the end-to-end completion.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <caf/all.hpp>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "actors/cluster/local_cluster.h"
#include "runtime/common/error.h"
#include "runtime/common/log.h"
#include "tools/troupe/args.h"
#include "tools/troupe/cluster_auth.h"
#include "tools/troupe/commands.h"
#include "tools/troupe/model_folder.h"
#include "tools/troupe/process.h"

namespace troupe::cli {

namespace {
struct bench_config : caf::actor_system_config {
  bench_config(const topology::topology_config& t, bool network) {
    actors::register_protocols(*this);
    actors::configure_workers(*this);
    if (network) actors::configure_network(*this, t.timeouts, t.cluster);
  }
};

// A `troupe node` child for the replicas placed away from the head; killed when done.
class node_process {
 public:
  node_process(const std::string& config, const std::string& name, const std::string& head, const std::string& model) {
    int fds[2];
    if (::pipe(fds) != 0) throw input_error("pipe failed");
    pid_ = spawn_process({self_executable(), "node", config, "--name", name, "--head", head, "--model", model}, fds[1]);
    ::close(fds[1]);
    std::FILE* out = ::fdopen(fds[0], "r");
    char line[512];
    bool ready = false;
    while (!ready && std::fgets(line, sizeof line, out)) ready = std::strstr(line, "ready") != nullptr;
    std::fclose(out);
    if (!ready) throw input_error("node " + name + " exited before joining the head");
  }
  ~node_process() {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }

 private:
  pid_t pid_ = -1;
};

double percentile(std::vector<std::int64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return double(v[std::min(v.size() - 1, std::size_t(p * double(v.size())))]);
}
}  // namespace

// Time outside the forward pass per decode step (scheduling, messages, serialization), seen
// from a client: wall time per step minus the replica's own forward time, at batch size B.
nlohmann::json measure_overhead(caf::actor_system& sys, actors::local_cluster& cluster, actors::scheduler_actor replica,
                                int vocab, int batch, std::chrono::milliseconds timeout) {
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<actors::token_sink>(self);
  constexpr int window = 24;  // decode steps measured
  for (int i = 0; i < batch; ++i) {
    engine::request r;
    r.id = "o" + std::to_string(batch) + "-" + std::to_string(i);
    for (int p = 0; p < 16; ++p) r.prompt.push_back((i * 131 + p * 7) % vocab);
    r.params.max_tokens = window + 8;
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    self->request(cluster.owner(), timeout, actors::submit_atom::value, r, sink)
        .receive([](bool) {}, [&](caf::error& e) { throw input_error(sys.render(e)); });
  }
  auto load = [&] {
    actors::load_report out;
    self->request(replica, timeout, actors::load_atom::value)
        .receive([&](actors::load_report& r) { out = r; }, [&](caf::error& e) { throw input_error(sys.render(e)); });
    return out;
  };
  std::size_t tokens = 0, done = 0;
  auto next_batch = [&] {
    self->receive(
        [&](actors::token_batch& b) {
          for (auto& u : b.updates) {
            tokens += u.tokens.size();
            done += u.finished ? 1 : 0;
          }
        },
        caf::after(timeout) >> [&] { throw input_error("no tokens within the request timeout"); });
  };
  while (tokens < std::size_t(batch)) next_batch();  // every request past its prefill
  const actors::load_report l0 = load();
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < window; ++s) next_batch();
  const actors::load_report l1 = load();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  while (done < std::size_t(batch)) next_batch();
  const double steps = double(l1.steps - l0.steps);
  const double forward = l1.forward_seconds - l0.forward_seconds;
  const double per_step = wall / steps, overhead = (wall - forward) / steps;
  return {{"batch", batch}, {"steps", steps}, {"step_ms", per_step * 1e3}, {"forward_ms", forward / steps * 1e3},
          {"overhead_ms", overhead * 1e3}, {"overhead_fraction", overhead / per_step}};
}

namespace {

// --overhead B,...: the runtime's cost per decode step of one replica, batch by batch.
int report_overhead(caf::actor_system& sys, actors::local_cluster& cluster, const topology::topology_config& topo,
                    const std::string& config, int vocab, const std::string& list, bool json_out, bool one_process) {
  std::vector<actors::scheduler_actor> replicas;
  caf::scoped_actor q{sys};
  q->request(cluster.router(), topo.timeouts.request, actors::replicas_atom::value)
      .receive([&](std::vector<actors::scheduler_actor>& r) { replicas = std::move(r); }, [](caf::error&) {});
  if (replicas.size() != 1) throw input_error("--overhead measures one replica; " + config + " has " + std::to_string(replicas.size()));
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t pos = 0; pos < list.size();) {
    std::size_t comma = list.find(',', pos);
    const int b = std::stoi(list.substr(pos, comma - pos));
    rows.push_back(measure_overhead(sys, cluster, replicas[0], vocab, b, topo.timeouts.request));
    pos = comma == std::string::npos ? list.size() : comma + 1;
  }
  if (json_out) {
    std::printf("%s\n", nlohmann::json{{"config", config}, {"overhead", rows}}.dump(2).c_str());
    return 0;
  }
  std::printf("%s: runtime overhead per decode step, %s (client -> owner -> scheduler and back)\n", config.c_str(),
              one_process ? "one process" : "the replica in a node process");
  for (auto& r : rows)
    std::printf("batch %3d: step %.2f ms, forward %.2f ms, outside the forward %.3f ms (%.1f%%)\n", r["batch"].get<int>(),
                r["step_ms"].get<double>(), r["forward_ms"].get<double>(), r["overhead_ms"].get<double>(),
                100 * r["overhead_fraction"].get<double>());
  return 0;
}

// `n` greedy requests of `prompt_len` distinct-ish tokens that each run `max_tokens` steps.
std::vector<engine::request> bench_requests(int n, int prompt_len, int max_tokens, int vocab) {
  std::vector<engine::request> reqs(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto& r = reqs[std::size_t(i)];
    r.id = "b" + std::to_string(i);
    for (int p = 0; p < prompt_len; ++p) r.prompt.push_back((i * 131 + p * 7) % vocab);
    r.params.max_tokens = max_tokens;
    r.params.temperature = 0;
    r.params.ignore_eos = true;
  }
  return reqs;
}

// The text form of the report.
void print_runtime_report(const nlohmann::json& j, std::size_t decisions) {
  const int n = j["requests"].get<int>();
  const double placed_s = n / j["placed_per_second"].get<double>();
  std::printf("%s: %zu %s replicas, %d requests (%d prompt tokens, %d output tokens each)\n", j["config"].get<std::string>().c_str(),
              j["replicas"].get<std::size_t>(), j["backend"].get<std::string>().c_str(), n, j["prompt_tokens"].get<int>(),
              j["max_tokens"].get<int>());
  std::printf("placed: %d requests in %.3f s = %.0f requests/s (submit -> route -> replica accepted)\n", n, placed_s, n / placed_s);
  std::printf("router decision time: p50 %.1f us, p99 %.1f us over %zu decisions\n", j["router_decision_us_p50"].get<double>(),
              j["router_decision_us_p99"].get<double>(), decisions);
  std::printf("all finished after %.2f s wall (%zu tokens)\n", j["completion_seconds"].get<double>(), j["generated_tokens"].get<std::size_t>());
}

// Replicas on other nodes than the head run in `troupe node` processes started here.
std::vector<std::string> remote_nodes_of(const topology::topology_config& topo) {
  const std::string head_name = topo.heads().front()->name;
  std::vector<std::string> out;
  for (auto& p : topology::place_replicas(topo))
    if (p.node != head_name && std::find(out.begin(), out.end(), p.node) == out.end()) out.push_back(p.node);
  return out;
}

struct run_figures {
  double placed_s = 0, total_s = 0;  // until every request was accepted; until every one finished
  std::size_t tokens = 0;
  std::vector<std::int64_t> decisions;  // the router's decision times, ns
};

// Submits every request at once, then waits for each one's last token.
run_figures submit_and_wait(caf::actor_system& sys, actors::local_cluster& cluster, const topology::topology_config& topo,
                            const std::vector<engine::request>& reqs) {
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<actors::token_sink>(self);
  const auto t0 = std::chrono::steady_clock::now();
  using handle = decltype(self->request(cluster.owner(), topo.timeouts.request, actors::submit_atom::value, reqs[0], sink));
  std::vector<handle> pending;
  pending.reserve(reqs.size());
  for (auto& r : reqs) pending.push_back(self->request(cluster.owner(), topo.timeouts.request, actors::submit_atom::value, r, sink));
  std::size_t accepted = 0;
  std::string first_error;
  for (auto& h : pending)
    h.receive([&](bool ok) { accepted += ok ? 1 : 0; },
              [&](caf::error& e) { if (first_error.empty()) first_error = sys.render(e); });
  run_figures out;
  out.placed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (accepted != reqs.size()) throw input_error(std::to_string(reqs.size() - accepted) + " requests were refused: " + first_error);
  std::size_t done = 0;
  while (done < reqs.size())
    self->receive(
        [&](actors::token_batch& b) {
          for (auto& u : b.updates) {
            out.tokens += u.tokens.size();
            done += u.finished ? 1 : 0;
          }
        },
        caf::after(std::chrono::duration_cast<std::chrono::milliseconds>(topo.timeouts.request)) >>
            [&] { throw input_error("no tokens for " + std::to_string(topo.timeouts.request.count()) + " ms"); });
  out.total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  self->request(cluster.router(), topo.timeouts.request, actors::timing_atom::value)
      .receive([&](std::vector<std::int64_t>& d) { out.decisions = std::move(d); }, [](caf::error&) {});
  return out;
}

}  // namespace

int cmd_bench_runtime(const args& a) {
  // The report is the output: the cluster's per-request lines (request_end, replica_started:
  // 10,000 of them by default) would bury it, so the log starts at warn unless asked otherwise.
  log::set_level(log::level::warn);
  apply_log_flags(a);
  const std::string config = a.get("config", a.has("overhead") ? "configs/local.toml" : "configs/sim-32.toml");
  auto topo = topology::load_topology(config);
  const int n = int(a.get_int("requests", 10000));
  const int prompt_len = int(a.get_int("prompt", 256));
  const int max_tokens = int(a.get_int("max-tokens", 32));
  opened_model m;
  int vocab = 0;
  if (topo.model.backend == topology::backend_kind::sim) {
    vocab = topology::sim_shape(topo).vocab_size;
  } else {
    m = open_model(topo.model.path);
    vocab = m.model->config().vocab_size;
  }
  const std::vector<std::string> remote_nodes = remote_nodes_of(topo);
  bench_config cfg(topo, !remote_nodes.empty());
  caf::actor_system sys{cfg};
  actors::local_cluster cluster(sys, topo, m.model, m.tok,
                                remote_nodes.empty() ? actors::placement_mode::all_here : actors::placement_mode::head_node_only);
  cluster_token_file token_file;  // removed when this command ends, however it ends
  std::vector<std::unique_ptr<node_process>> children;
  if (!remote_nodes.empty()) {
    const std::uint16_t port = cluster.publish("127.0.0.1", 0, topo.cluster.tls());
    cluster.admit({cluster_token(topo, port, true), served_fingerprint(topo, topo.model.path)});
    token_file.port = port;
    for (auto& n : remote_nodes)
      children.push_back(std::make_unique<node_process>(config, n, "127.0.0.1:" + std::to_string(port), topo.model.path));
  }
  if (auto list = a.get("overhead")) return report_overhead(sys, cluster, topo, config, vocab, *list, a.has("json"), remote_nodes.empty());
  const std::vector<engine::request> reqs = bench_requests(n, prompt_len, max_tokens, vocab);
  const run_figures r = submit_and_wait(sys, cluster, topo, reqs);

  nlohmann::json j = {{"config", config},
                      {"backend", topology::backend_name(topo.model.backend)},
                      {"replicas", cluster.schedulers().size()},
                      {"requests", n},
                      {"prompt_tokens", prompt_len},
                      {"max_tokens", max_tokens},
                      {"placed_per_second", n / r.placed_s},
                      {"router_decision_us_p50", percentile(r.decisions, 0.50) / 1e3},
                      {"router_decision_us_p99", percentile(r.decisions, 0.99) / 1e3},
                      {"completion_seconds", r.total_s},
                      {"generated_tokens", r.tokens}};
  if (a.has("json"))
    std::printf("%s\n", j.dump(2).c_str());
  else
    print_runtime_report(j, r.decisions.size());
  return 0;
}

}  // namespace troupe::cli
