// A rollout as it outlives the head running it (docs/admin.md "Canary rollouts"): the head
// publishes a record of each rollout to every node agent at each decision and every second; a
// head that starts, or that hears nothing from the owner for `takeover_after_s`, reads the
// records back from the nodes and takes over the rollouts still under way where they stood.
// Every other head follows an active record's split in its own router, so that all heads send
// a sender to the same side. Plain values and JSON; the nodes keep the text as it is.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/admin/rollout.h"

namespace troupe::admin {

struct rollout_record {
  std::string pool;
  std::vector<std::string> args;  // the command's arguments, as `rollout` took them
  std::string model;              // the pool's model ("" : [model])
  std::string key;                // the canary's cache key
  std::string baseline_dir, baseline_revision;  // what a roll-back goes back to
  rollout_phase phase = rollout_phase::canary;
  std::size_t step = 0;
  double share = 0;       // of the senders on the canary now
  double held_s = 0;      // how long the step had been held when the record was made
  int serving_before = 0;
  nlohmann::json decisions = nlohmann::json::array();
  std::string owner;      // the head running it (its node name)
  std::uint64_t owner_start = 0;  // which process of that head (its start, ns since the epoch)
  double updated_at = 0;  // Unix seconds when the owner made the record
};

nlohmann::json to_json(const rollout_record& r);
// The record in `text`, or nothing when it is not one (the nodes keep whatever a head sent).
std::optional<rollout_record> record_from(const std::string& text);

// The phase named `name` (phase_name's inverse), or nothing.
std::optional<rollout_phase> phase_named(const std::string& name);

// What a head does with a record it read from the nodes. A head never takes over a rollout it
// runs itself; it takes over one under way whose owner is an earlier process of itself (a
// restart) or has said nothing for `takeover_after_s`; it follows the split of one under way
// that another live head runs; and it ends the split of one that has ended.
enum class record_action { ignore, take_over, follow, end_split };
record_action act_on(const rollout_record& r, const std::string& me, std::uint64_t my_start, bool running_it_here, double now,
                     double takeover_after_s);

// Of several copies (one per node, some older), the newest per pool.
std::vector<rollout_record> newest_per_pool(const std::vector<std::string>& texts);

}  // namespace troupe::admin
