// A star of Linux network namespaces around the current one, for running nodes as separate
// hosts on one machine: each member gets its own namespace and a veth pair to this namespace,
// so a test (or an operator) can cut one node's link. Needs root and iproute2's `ip`.
#pragma once
#include <string>
#include <vector>

namespace troupe::cli {

class netns_star {
 public:
  struct member {
    std::string ns;         // namespace name
    std::string host_if;    // veth end in this namespace
    std::string host_addr;  // its address: what the member reaches this side at
    std::string peer_addr;  // the member's address
  };

  // `tag` makes names unique per run (at most 5 characters, e.g. from the pid); the subnet
  // 10.<second>.<k>.0/24 is derived from it so concurrent runs do not overlap.
  explicit netns_star(const std::string& tag);
  // Deletes every namespace it created (their veth pairs go with them).
  ~netns_star();
  netns_star(const netns_star&) = delete;
  netns_star& operator=(const netns_star&) = delete;

  // Creates member k's namespace and link, up and addressed. Throws input_error naming the
  // failing `ip` command (and hinting at root) on failure.
  member add(int k);

  // argv prefix that runs a command inside the member's namespace.
  std::vector<std::string> exec_prefix(const member& m) const { return {"/sbin/ip", "netns", "exec", m.ns}; }

  // Takes the member's link down (as a cut cable would) or back up.
  void cut(const member& m);
  void restore(const member& m);

 private:
  std::string tag_;
  int second_octet_;
  std::vector<member> members_;
};

}  // namespace troupe::cli
