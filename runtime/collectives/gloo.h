// The Gloo backend of runtime/collectives/communicator.h: ranks in different processes or on
// different hosts, over TCP (Debian's libgloo-dev). Ranks meet through a rendezvous store (a
// directory every rank can see, or any key-value service the caller hands in: the worker group
// serves one as an actor, actors/cluster/rendezvous.h) under a key prefix that names the group and its generation, so a restarted group never meets a dead
// generation's ranks. Reductions are a Gloo all-gather followed by a sum in rank order on every
// rank (all-reduce) or an all-to-all followed by the same (reduce-scatter): the same bits as the
// shared-memory backend and as a single rank, at N times the bytes, which for the few ranks of a
// CPU group costs little against determinism. A peer that dies or a call past its deadline makes
// Gloo throw; the communicator turns that into collective_error and stays failed.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "runtime/collectives/communicator.h"

namespace troupe::collectives {

// A key-value service the ranks of a group share: `set` publishes, `get` waits until the key is
// there (or throws past the deadline).
struct rendezvous {
  std::function<void(const std::string& key, const std::string& value)> set;
  std::function<std::string(const std::string& key, std::chrono::milliseconds deadline)> get;
};

struct gloo_options {
  int rank = 0, size = 1;
  std::uint64_t generation = 1;
  std::string group;       // names the group (a replica's id and dimension); part of the key prefix
  std::string store_dir;   // the rendezvous directory, shared by every rank (when no `store`)
  std::string host = "127.0.0.1";  // the address this rank listens on for its peers
  std::chrono::milliseconds timeout{30000};
  rendezvous store;        // the rendezvous service, when set (else store_dir)
};

// Connects to every other rank of the group (blocks until all have come, or throws
// collective_error after the timeout).
std::unique_ptr<communicator> connect_gloo(const gloo_options& opt);

}  // namespace troupe::collectives
