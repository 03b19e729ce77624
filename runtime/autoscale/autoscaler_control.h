// What the console asks of the autoscaler and what it answers, as values: `autoscaler status |
// pause | resume | pin POOL | unpin POOL | set KEY=VALUE...` (and `set-policy autoscaler default
// KEY=VALUE...`) parsed once at the console's edge into a `command`; the autoscaler's answer is a
// `view` of its state, shaped into JSON here (docs/admin.md). Pure: the actors only carry them.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/autoscale/autoscale.h"

namespace troupe::autoscale {

struct command {
  enum class verb : std::uint8_t { status, pause, resume, pin, unpin, set };
  verb what = verb::status;
  std::string pool;                                       // pin, unpin
  std::vector<std::pair<std::string, double>> settings;  // set: KEY=VALUE, in order
};

// The console's words after `autoscaler` (an empty list is `status`), or the error naming what
// was wrong.
std::variant<command, std::string> parse_command(const std::vector<std::string>& args);

// `settings` applied to `cfg` all or none: nullopt, or the error naming the first bad key or value
// (unknown, negative, or a down threshold not below its up threshold).
std::optional<std::string> apply_settings(autoscale_config& cfg, const std::vector<std::pair<std::string, double>>& settings);

// The autoscaler's state, as `autoscaler status` shows it.
struct view {
  bool paused = false;
  std::set<std::string> pinned;
  std::map<std::string, std::string> last;  // pool -> its last decision, with the reason
  autoscale_config cfg;
};

nlohmann::json view_json(const view& v);

}  // namespace troupe::autoscale
