// troupe launch: starts every node of a topology as a local process (the head first), keeps
// them running (a node that dies is started again), and stops them all on SIGINT or SIGTERM.
// With --netns each non-head node runs in its own network namespace behind a veth pair.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <cstdio>
#include <algorithm>
#include <map>
#include <memory>
#include <thread>

#include "runtime/common/error.h"
#include "runtime/common/machine.h"
#include "runtime/supervision/restart_policy.h"
#include "tools/troupe/args.h"
#include "tools/troupe/cluster_auth.h"
#include "tools/troupe/commands.h"
#include "tools/troupe/model_folder.h"
#include "tools/troupe/netns.h"
#include "tools/troupe/process.h"
#include "topology/topology.h"


namespace troupe::cli {

namespace {

// What every process the launch starts is told.
struct launch_plan {
  std::string config;
  topology::topology_config topo;
  std::string exe;  // this program
  bool netns = false;
  int registry_base = -1, admin_base = -1;  // --registry-port, --admin-port (-1: not given)
  std::vector<std::string> model_flag;      // --model and the log flags: every process
  std::vector<std::string> head_flags;      // what only the heads take
  std::vector<std::string> tls_flags;       // the launch's own certificate, across namespaces
  supervision::restart_policy restarts;     // --restart-pause sets its pause
  // Head k's node registry port: --registry-port's N + k, else the topology's.
  int registry_port(std::size_t k) const { return registry_base > 0 ? registry_base + int(k) : int(topo.heads()[k]->port); }
};

struct proc {
  std::string name;
  std::vector<std::string> argv;
  bool head = false;
};

// A child's output, relayed line by line; returns once the line containing `until` came
// (true) or the child closed its output (false); the rest is relayed in the background.
std::pair<pid_t, bool> start_relayed(const std::vector<std::string>& cmd, const char* until) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw input_error("pipe failed");
  const pid_t pid = spawn_process(cmd, pipe_fds[1]);
  ::close(pipe_fds[1]);
  std::FILE* out = ::fdopen(pipe_fds[0], "r");
  char line[1024];
  bool seen = false;
  while (!seen && std::fgets(line, sizeof line, out)) {
    std::fputs(line, stdout);
    seen = std::string(line).find(until) != std::string::npos;
  }
  std::fflush(stdout);
  std::thread([out] {
    char l[1024];
    while (std::fgets(l, sizeof l, out)) {
      std::fputs(l, stdout);
      std::fflush(stdout);
    }
    std::fclose(out);
  }).detach();
  return {pid, seen};
}

launch_plan plan_launch(const args& a) {
  launch_plan lp;
  lp.config = a.positional()[0];
  lp.topo = topology::load_topology(lp.config);
  const auto& topo = lp.topo;
  lp.registry_base = a.has("registry-port") ? int(a.get_port("registry-port", 0)) : -1;
  lp.admin_base = a.has("admin-port") ? int(a.get_port("admin-port", 0)) : -1;
  if (lp.registry_base == 0 || lp.admin_base == 0) throw input_error("--registry-port and --admin-port need fixed ports (the nodes and consoles dial them)");
  for (const auto* h : topo.heads())
    if (h->port == 0 && lp.registry_base < 0) throw input_error(lp.config + ": the head (" + h->name + ") needs a fixed port for launch (or --registry-port)");
  // Every process it starts is on this host: their KV together must fit it, not each alone.
  topology::check_kv_memory(topo, "*", machine_memory_bytes(), available_memory_bytes());
  // The random models the test configs name are made once here, not raced for by every process.
  if (topo.model.backend != topology::backend_kind::sim) {
    ensure_model(a.get("model", topo.model.path));
    for (const auto& m : topo.more_models) ensure_model(m.path);
  }
  lp.exe = self_executable();
  lp.netns = a.has("netns");
  if (auto m = a.get("model")) lp.model_flag = {"--model", *m};
  if (auto g = a.get("shutdown-grace")) lp.head_flags = {"--shutdown-grace", *g};
  a.get_duration("shutdown-grace");  // a bad value is refused before anything starts
  if (auto pause = a.get_duration("restart-pause")) {
    if (pause->count() <= 0) throw input_error("--restart-pause: must be positive");
    lp.restarts.pause = *pause;
    lp.restarts.max_pause = std::max(lp.restarts.max_pause, *pause);
  }
  for (const char* f : {"log-level", "log-format"})  // every process logs alike
    if (auto v = a.get(f)) lp.model_flag.insert(lp.model_flag.end(), {std::string("--") + f, *v});
  return lp;
}

// The heads first (nodes join them); head k serves HTTP on the base port + k.
void start_heads(const launch_plan& lp, const args& a, std::map<pid_t, proc>& procs) {
  const auto heads = lp.topo.heads();
  const int http_base = int(a.get_port("port", lp.topo.frontend.port));
  for (std::size_t k = 0; k < heads.size(); ++k) {
    std::vector<std::string> cmd = {lp.exe, "serve", lp.config, "--name", heads[k]->name, "--registry-port",
                                    std::to_string(lp.registry_port(k))};
    if (lp.admin_base > 0) cmd.insert(cmd.end(), {"--admin-port", std::to_string(lp.admin_base + 2 * int(k))});
    if (lp.netns) cmd.insert(cmd.end(), {"--listen", "0.0.0.0"});
    cmd.insert(cmd.end(), lp.tls_flags.begin(), lp.tls_flags.end());
    cmd.insert(cmd.end(), lp.model_flag.begin(), lp.model_flag.end());
    cmd.insert(cmd.end(), lp.head_flags.begin(), lp.head_flags.end());
    if (a.get("port") || heads.size() > 1) cmd.insert(cmd.end(), {"--port", std::to_string(http_base == 0 ? 0 : http_base + int(k))});
    auto [pid, listening] = start_relayed(cmd, "listening");
    if (!listening) throw input_error("head " + heads[k]->name + " exited before listening (see its output above)");
    std::printf("troupe launch: started %s (pid %d), a head\n", heads[k]->name.c_str(), int(pid));
    std::fflush(stdout);
    procs[pid] = {heads[k]->name, cmd, true};
  }
}

void start_nodes(const launch_plan& lp, netns_star* star, std::map<pid_t, proc>& procs) {
  const auto heads = lp.topo.heads();
  for (const auto& node : lp.topo.nodes) {
    if (lp.topo.is_head(node.name)) continue;
    std::vector<std::string> cmd;
    // The heads' registries, told to the node when it cannot read them from the topology: from
    // a namespace they are at the host side's address; --registry-port moved them.
    std::string netns_host, head_list;
    if (lp.netns) {
      auto m = star->add(int(procs.size()));
      cmd = star->exec_prefix(m);
      netns_host = m.host_addr;
    }
    if (lp.netns || lp.registry_base > 0)
      for (std::size_t k = 0; k < heads.size(); ++k)
        head_list += (head_list.empty() ? "" : ",") + (lp.netns ? netns_host : heads[k]->host) + ":" + std::to_string(lp.registry_port(k));
    std::vector<std::string> node_cmd = {lp.exe, "node", lp.config, "--name", node.name};
    if (!head_list.empty()) node_cmd.insert(node_cmd.end(), {"--head", head_list});
    node_cmd.insert(node_cmd.end(), lp.model_flag.begin(), lp.model_flag.end());
    node_cmd.insert(node_cmd.end(), lp.tls_flags.begin(), lp.tls_flags.end());
    cmd.insert(cmd.end(), node_cmd.begin(), node_cmd.end());
    const pid_t pid = spawn_process(cmd);
    std::printf("troupe launch: started %s (pid %d)%s\n", node.name.c_str(), int(pid), lp.netns ? " in its own network namespace" : "");
    std::fflush(stdout);
    procs[pid] = {node.name, cmd, false};
  }
}

// Every process that dies is started again (a head too: the nodes keep their replicas and
// rejoin it) after a backoff, as an OTP supervisor would; one that dies more often than the
// restart intensity allows is paused, then tried again (runtime/supervision). Each decision is
// printed when it is made.
// Returns on SIGINT or SIGTERM (sent on to every process) with the launch's exit code.
int supervise(sigset_t& set, std::map<pid_t, proc>& procs, const supervision::restart_policy& policy) {
  std::map<std::string, supervision::restart_history> history;
  std::vector<std::pair<std::chrono::steady_clock::time_point, proc>> due;  // restarts waiting out their backoff
  for (;;) {
    int sig = 0;
    if (due.empty()) {
      sigwait(&set, &sig);
    } else {
      const auto next = std::min_element(due.begin(), due.end(), [](auto& x, auto& y) { return x.first < y.first; })->first;
      const auto wait = std::max<long long>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(next - std::chrono::steady_clock::now()).count());
      timespec ts{time_t(wait / 1000000000), long(wait % 1000000000)};
      sig = sigtimedwait(&set, nullptr, &ts);  // -1: a restart's time has come
    }
    if (sig == SIGINT || sig == SIGTERM) {
      std::printf("troupe launch: stopping\n");
      std::fflush(stdout);
      for (auto& [p, pr] : procs) ::kill(p, SIGTERM);
      return 0;
    }
    for (pid_t pid; (pid = ::waitpid(-1, nullptr, WNOHANG)) > 0;) {
      auto it = procs.find(pid);
      if (it == procs.end()) continue;
      proc pr = it->second;
      procs.erase(it);
      const auto d = history[pr.name].on_death(policy, std::chrono::steady_clock::now());
      if (d.paused)
        std::printf("troupe launch: %s (pid %d) died %d times within %lld s; pausing %.0f s before restarting it\n", pr.name.c_str(),
                    int(pid), d.recent + 1, (long long)std::chrono::duration_cast<std::chrono::seconds>(policy.period).count(),
                    std::chrono::duration<double>(d.delay).count());
      else
        std::printf("troupe launch: %s (pid %d) died; restarting it in %.1f s\n", pr.name.c_str(), int(pid),
                    std::chrono::duration<double>(d.delay).count());
      due.emplace_back(std::chrono::steady_clock::now() + d.delay, pr);
      std::fflush(stdout);
    }
    const auto now = std::chrono::steady_clock::now();
    for (auto it = due.begin(); it != due.end();) {
      if (it->first > now) {
        ++it;
        continue;
      }
      proc pr = it->second;
      it = due.erase(it);
      const pid_t again = pr.head ? start_relayed(pr.argv, "listening").first : spawn_process(pr.argv);
      std::printf("troupe launch: %s restarted as pid %d\n", pr.name.c_str(), int(again));
      std::fflush(stdout);
      procs[again] = pr;
    }
  }
}

// The heads' grace period for requests in flight, and a moment more to leave; then make sure.
void stop_all(std::map<pid_t, proc>& procs, std::chrono::milliseconds grace) {
  const auto deadline = std::chrono::steady_clock::now() + grace + std::chrono::seconds(10);
  std::size_t left = procs.size();
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    pid_t pid = ::waitpid(-1, nullptr, WNOHANG);
    if (pid > 0) --left;
    else if (pid < 0) break;
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a deadline, not synchronising
  }
  for (auto& [p, pr] : procs) ::kill(p, SIGKILL);
  while (::waitpid(-1, nullptr, 0) > 0) {
  }
}

}  // namespace

int cmd_launch(const args& a) {
  apply_log_flags(a);
  if (a.positional().size() != 1) throw input_error("usage: troupe launch CONFIG [--netns] [--model DIR] [--port HTTP_PORT]");
  launch_plan lp = plan_launch(a);

  // Signals arrive through sigwait, so no handler runs concurrently with the bookkeeping.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  std::unique_ptr<netns_star> star;
  if (lp.netns) star = std::make_unique<netns_star>(std::to_string(::getpid() % 100000));
  // One token for the head and the nodes this launch starts, inherited through the environment.
  if (!std::getenv("TROUPE_CLUSTER_TOKEN") && lp.topo.cluster.token.empty() && lp.topo.cluster.token_file.empty())
    ::setenv("TROUPE_CLUSTER_TOKEN", new_cluster_token().c_str(), 1);
  // Across namespaces the head listens on 0.0.0.0: its links need TLS. Without [cluster] TLS
  // files, a certificate made for this launch is presented and trusted by every process.
  std::string tls_dir;
  if (lp.netns && !lp.topo.cluster.tls()) {
    const std::string dir = tls_dir = make_launch_certificate();
    lp.tls_flags = {"--tls-certificate", dir + "/cert.pem", "--tls-key", dir + "/key.pem", "--tls-ca", dir + "/cert.pem"};
  }
  std::map<pid_t, proc> procs;
  start_heads(lp, a, procs);
  start_nodes(lp, star.get(), procs);
  const int exit_code = supervise(set, procs, lp.restarts);
  stop_all(procs, a.get_duration("shutdown-grace").value_or(lp.topo.frontend.shutdown_grace));
  if (!tls_dir.empty()) std::filesystem::remove_all(tls_dir);
  std::fflush(stdout);
  return exit_code;
}

}  // namespace troupe::cli
