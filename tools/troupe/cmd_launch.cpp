// troupe launch: starts every node of a topology as a local process (the head first), keeps
// them running (a node that dies is started again), and stops them all on SIGINT or SIGTERM.
// With --netns each non-head node runs in its own network namespace behind a veth pair.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <cstdio>
#include <map>
#include <memory>
#include <thread>

#include "runtime/common/error.h"
#include "tools/troupe/args.h"
#include "tools/troupe/cluster_auth.h"
#include "tools/troupe/commands.h"
#include "tools/troupe/netns.h"
#include "tools/troupe/process.h"
#include "topology/topology.h"


namespace troupe::cli {

int cmd_launch(int argc, char** argv) {
  args a(argc, argv, 2, {"model", "port"}, {"netns"});
  if (a.positional().size() != 1) throw input_error("usage: troupe launch CONFIG [--netns] [--model DIR] [--port HTTP_PORT]");
  const std::string config = a.positional()[0];
  const auto topo = topology::load_topology(config);
  const auto& head = topo.nodes.front();
  if (head.port == 0) throw input_error(config + ": the head (" + head.name + ") needs a fixed port for launch");
  const std::string exe = self_executable();
  const bool netns = a.has("netns");
  std::vector<std::string> model_flag;
  if (auto m = a.get("model")) model_flag = {"--model", *m};

  // Signals arrive through sigwait, so no handler runs concurrently with the bookkeeping.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  std::unique_ptr<netns_star> star;
  if (netns) star = std::make_unique<netns_star>(std::to_string(::getpid() % 100000));
  // One token for the head and the nodes this launch starts, inherited through the environment.
  if (!std::getenv("TROUPE_CLUSTER_TOKEN")) ::setenv("TROUPE_CLUSTER_TOKEN", cluster_token(topo, head.port, true).c_str(), 1);
  // Across namespaces the head listens on 0.0.0.0: its links need TLS. Without [cluster] TLS
  // files, a certificate made for this launch is presented and trusted by every process.
  std::vector<std::string> tls_flags;
  std::string tls_dir;
  if (netns && !topo.cluster.tls()) {
    const std::string dir = tls_dir = make_launch_certificate();
    tls_flags = {"--tls-certificate", dir + "/cert.pem", "--tls-key", dir + "/key.pem", "--tls-ca", dir + "/cert.pem"};
  }

  // The head first; nodes need it to be listening.
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw input_error("pipe failed");
  std::vector<std::string> head_cmd = {exe, "serve", config, "--registry-port", std::to_string(head.port)};
  if (netns) head_cmd.insert(head_cmd.end(), {"--listen", "0.0.0.0"});
  head_cmd.insert(head_cmd.end(), tls_flags.begin(), tls_flags.end());
  head_cmd.insert(head_cmd.end(), model_flag.begin(), model_flag.end());
  if (a.get("port")) head_cmd.insert(head_cmd.end(), {"--port", std::to_string(a.get_port("port", 0))});
  const pid_t head_pid = spawn_process(head_cmd, pipe_fds[1]);
  ::close(pipe_fds[1]);
  std::FILE* head_out = ::fdopen(pipe_fds[0], "r");
  char line[1024];
  bool listening = false;
  while (!listening && std::fgets(line, sizeof line, head_out)) {
    std::fputs(line, stdout);
    listening = std::string(line).find("listening") != std::string::npos;
  }
  std::fflush(stdout);
  if (!listening) throw input_error("the head exited before listening (see its output above)");
  std::thread([head_out] {  // keep relaying the head's output
    char l[1024];
    while (std::fgets(l, sizeof l, head_out)) {
      std::fputs(l, stdout);
      std::fflush(stdout);
    }
  }).detach();

  struct node_proc {
    std::vector<std::string> argv;
    int restarts = 0;
  };
  std::map<pid_t, node_proc> nodes;
  for (std::size_t k = 1; k < topo.nodes.size(); ++k) {
    std::vector<std::string> cmd;
    std::string head_addr = head.host;
    if (netns) {
      auto m = star->add(int(k));
      cmd = star->exec_prefix(m);
      head_addr = m.host_addr;
    }
    std::vector<std::string> node_cmd = {exe, "node", config, "--name", topo.nodes[k].name, "--head",
                                         head_addr + ":" + std::to_string(head.port)};
    node_cmd.insert(node_cmd.end(), model_flag.begin(), model_flag.end());
    node_cmd.insert(node_cmd.end(), tls_flags.begin(), tls_flags.end());
    cmd.insert(cmd.end(), node_cmd.begin(), node_cmd.end());
    const pid_t pid = spawn_process(cmd);
    std::printf("troupe launch: started %s (pid %d)%s\n", topo.nodes[k].name.c_str(), int(pid), netns ? " in its own network namespace" : "");
    std::fflush(stdout);
    nodes[pid] = {cmd, 0};
  }

  int exit_code = 0;
  for (bool running = true; running;) {
    int sig = 0;
    sigwait(&set, &sig);
    if (sig == SIGINT || sig == SIGTERM) {
      std::printf("troupe launch: stopping\n");
      ::kill(head_pid, SIGTERM);  // nodes stop when their head goes away
      running = false;
      break;
    }
    for (pid_t pid; (pid = ::waitpid(-1, nullptr, WNOHANG)) > 0;) {
      if (pid == head_pid) {
        std::printf("troupe launch: the head exited; stopping the nodes\n");
        for (auto& [p, n] : nodes) ::kill(p, SIGTERM);
        running = false;
        exit_code = 1;
        continue;
      }
      auto it = nodes.find(pid);
      if (it == nodes.end() || !running) continue;
      node_proc n = it->second;
      nodes.erase(it);
      if (++n.restarts > 5) {
        std::printf("troupe launch: a node died 5 times; not restarting it\n");
        continue;
      }
      const pid_t again = spawn_process(n.argv);
      std::printf("troupe launch: a node (pid %d) died; restarted as pid %d\n", int(pid), int(again));
      std::fflush(stdout);
      nodes[again] = n;
    }
  }
  // Give everyone a moment to leave, then make sure.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::size_t left = nodes.size() + 1;
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    pid_t pid = ::waitpid(-1, nullptr, WNOHANG);
    if (pid > 0) --left;
    else if (pid < 0) break;
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a deadline, not synchronising
  }
  for (auto& [p, n] : nodes) ::kill(p, SIGKILL);
  ::kill(head_pid, SIGKILL);
  while (::waitpid(-1, nullptr, 0) > 0) {
  }
  if (!tls_dir.empty()) std::filesystem::remove_all(tls_dir);
  std::fflush(stdout);
  return exit_code;
}

}  // namespace troupe::cli
