// The router's book of replicas: each one's slot, last load figures and liveness, and what keeps
// it from new requests (draining, parked in the warm pool, stopped on purpose). Pure: the router
// actor keeps the handles (by slot) and carries out the logging and messages; time is passed in.
//
// Several heads route over the same replicas. A drain or park one head's console made reaches
// the others through the replicas' load reports; a report is not adopted within a second of
// this router being told about that replica itself, since one in flight may predate the change.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "runtime/common/ids.h"
#include "runtime/routing/policy.h"

namespace troupe::routing {

// What the router reads of a replica's load report.
struct replica_report {
  int running_seqs = 0;
  int waiting_prompt_tokens = 0;
  int used_blocks = 0;
  int total_blocks = 0;
  bool draining = false;
  bool parked = false;
};

class replica_registry {
 public:
  using clock = std::chrono::steady_clock;

  // `parked`: the replicas warm at start, placed on by nobody until resumed.
  explicit replica_registry(const std::set<std::uint32_t>& parked = {});

  // A replica (re)registers: its slot, with fresh figures; no longer draining or stopped.
  std::size_t enroll(replica_id r);
  // Its slot, if it ever registered.
  std::optional<std::size_t> slot(replica_id r) const;
  std::size_t size() const { return loads_.size(); }
  // The replica in `slot` died: never chosen until it registers anew.
  void down(std::size_t slot) {
    loads_[slot].alive = false;
    suspects_.erase(loads_[slot].replica);
    heard_at_.erase(loads_[slot].replica);
  }
  // Scaled down on purpose: stopped, not dead. The slot it was in, if it had registered.
  std::optional<std::size_t> retire(replica_id r);

  void drain(replica_id r, clock::time_point now);
  // True if it was parked.
  bool resume(replica_id r, clock::time_point now);
  // True if it was not parked before.
  bool park(replica_id r, clock::time_point now);
  // A load report. Returns the replica's new parked flag when the report changed it (a park or
  // resume another head made).
  std::optional<bool> report(replica_id r, const replica_report& rep, clock::time_point now);
  // A request's prompt computed (or the request finished) there, before its next report.
  void progress(replica_id r, int prompt_tokens, bool finished);

  // The failure detector's first stage. A replica heard from (a load report, its registration)
  // is trusted; one silent for longer than `after` is suspect: new requests go elsewhere while
  // another live replica can take them, but its own run on (a busy or briefly stopped host is
  // slow, not dead). Dead is the link's verdict (a longer silence: the connection timeout), or
  // its process ending. judge() returns the replicas whose standing changed, and to what
  // (true: now suspect), for the caller to log.
  void heard(replica_id r, clock::time_point now);
  std::vector<std::pair<replica_id, bool>> judge(clock::time_point now, clock::duration after);
  bool suspect(replica_id r) const { return suspects_.count(r) > 0; }
  bool any_suspect() const { return !suspects_.empty(); }

  // Placed on by nobody now: draining (told or reported), or parked.
  bool held_back(replica_id r) const { return draining_.count(r) || parked_.count(r) || reported_draining_.count(r); }
  bool any_held_back() const { return !draining_.empty() || !parked_.empty() || !reported_draining_.empty(); }
  std::uint32_t placeable() const;

  const std::vector<replica_load>& loads() const { return loads_; }
  replica_load& load(std::size_t slot) { return loads_[slot]; }

  // For the console's view.
  std::uint32_t generation(replica_id r) const;  // times registered; 0: never
  bool draining(replica_id r) const { return draining_.count(r) || reported_draining_.count(r); }
  bool parked(replica_id r) const { return parked_.count(r) > 0; }
  bool stopped(replica_id r) const { return stopped_.count(r) > 0; }

 private:
  bool told_lately(replica_id r, clock::time_point now) const;

  std::vector<replica_load> loads_;  // by slot
  std::map<replica_id, std::uint32_t> registrations_;
  std::set<replica_id> draining_;           // told to drain here
  std::set<replica_id> reported_draining_;  // draining by its reports (another head's drain)
  std::set<replica_id> parked_;             // the warm pool
  std::set<replica_id> stopped_;            // scaled down, not dead
  std::map<replica_id, clock::time_point> told_at_;  // when this router was last told (drain, resume, park)
  std::map<replica_id, clock::time_point> heard_at_;  // when each live replica was last heard from
  std::set<replica_id> suspects_;
};

}  // namespace troupe::routing
