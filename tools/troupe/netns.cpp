#include "tools/troupe/netns.h"

#include <sys/wait.h>

#include <functional>

#include "runtime/common/error.h"
#include "tools/troupe/process.h"


namespace troupe::cli {

namespace {

// Runs `ip ARGS...`; returns its exit status (-1 if it could not run).
int ip(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"/sbin/ip"};
  all.insert(all.end(), args.begin(), args.end());
  pid_t pid;
  try {
    pid = spawn_process(all);
  } catch (const input_error&) {
    return -1;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void must(const std::vector<std::string>& args) {
  if (ip(args) != 0) {
    std::string cmd = "ip";
    for (auto& a : args) cmd += " " + a;
    throw input_error("network namespace setup failed: '" + cmd + "' (this needs root and iproute2)");
  }
}

}  // namespace

netns_star::netns_star(const std::string& tag) : tag_(tag.substr(0, 5)) {
  second_octet_ = 100 + int(std::hash<std::string>{}(tag_) % 100);
}

netns_star::~netns_star() {
  for (auto& m : members_) {
    ip({"link", "del", m.host_if});  // removes both ends now, not when the kernel gets to it
    ip({"netns", "del", m.ns});
  }
}

netns_star::member netns_star::add(int k) {
  member m;
  m.ns = "trp" + tag_ + "n" + std::to_string(k);
  m.host_if = "trp" + tag_ + "h" + std::to_string(k);
  const std::string peer_if = "trp" + tag_ + "p" + std::to_string(k);
  const std::string subnet = "10." + std::to_string(second_octet_) + "." + std::to_string(k) + ".";
  m.host_addr = subnet + "1";
  m.peer_addr = subnet + "2";
  must({"netns", "add", m.ns});
  members_.push_back(m);  // from here on the destructor cleans it up
  must({"link", "add", m.host_if, "type", "veth", "peer", "name", peer_if});
  must({"link", "set", peer_if, "netns", m.ns});
  must({"addr", "add", m.host_addr + "/24", "dev", m.host_if});
  must({"link", "set", m.host_if, "up"});
  must({"netns", "exec", m.ns, "/sbin/ip", "addr", "add", m.peer_addr + "/24", "dev", peer_if});
  must({"netns", "exec", m.ns, "/sbin/ip", "link", "set", peer_if, "up"});
  must({"netns", "exec", m.ns, "/sbin/ip", "link", "set", "lo", "up"});
  return m;
}

void netns_star::cut(const member& m) { must({"link", "set", m.host_if, "down"}); }

void netns_star::restore(const member& m) { must({"link", "set", m.host_if, "up"}); }

}  // namespace troupe::cli
