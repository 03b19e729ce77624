// Routing policies: pure functions that pick a replica for a request from a snapshot of the
// replicas' load. A policy decides; it does not forward (the router actor does that).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace troupe::routing {

// What a replica last reported, as the router sees it.
struct replica_load {
  std::uint32_t replica = 0;         // id within the topology
  bool alive = true;                 // false while dead or draining: never chosen
  int running_seqs = 0;
  int waiting_prompt_tokens = 0;     // prompt tokens queued but not yet computed
  int free_blocks = 0;
  int total_blocks = 0;
};

struct route_request {
  std::uint64_t request = 0;
  int prompt_tokens = 0;
  int priority = 0;
};

// Named numeric parameters from the topology's [router.params].
using policy_params = std::map<std::string, double>;

struct decision {
  std::optional<std::size_t> index;  // into the replica list; empty: no replica can take it
  std::string why;                   // one line for logs and the admin console
};

// A policy: (request, replicas, parameters, how many decisions were made before) -> decision.
// Must be deterministic in its arguments and must not pick a replica with alive == false.
using policy = std::function<decision(const route_request&, std::span<const replica_load>, const policy_params&,
                                      std::uint64_t decision_index)>;

// Built-in and user policies by name. Thread-safe.
class registry {
 public:
  static registry& global();  // holds round_robin and least_loaded from the start

  // Adds or replaces a policy. `params` lists the parameter names it accepts (others are an
  // error when a topology is validated).
  void add(const std::string& name, policy p, std::vector<std::string> params = {});
  bool has(const std::string& name) const;
  // Throws input_error naming the policy and the known ones if absent.
  const policy& get(const std::string& name) const;
  const std::vector<std::string>& params_of(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  struct entry {
    policy fn;
    std::vector<std::string> params;
  };
  std::map<std::string, entry> entries_;
};

// The built-ins, also usable directly.
decision round_robin(const route_request&, std::span<const replica_load>, const policy_params&, std::uint64_t index);
// Lowest running_weight * running_seqs + token_weight * (waiting_prompt_tokens + prompt_tokens);
// defaults 1 and 1/256. Ties go to the lowest replica id.
decision least_loaded(const route_request&, std::span<const replica_load>, const policy_params&, std::uint64_t index);

}  // namespace troupe::routing
