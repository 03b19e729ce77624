#include "runtime/admin/swap_plan.h"

namespace troupe::admin {

std::variant<swap_request, std::string> parse_swap(const std::vector<std::string>& args) {
  const std::string usage = "expected POOL --model DIR [--revision R]";
  if (args.empty() || args[0].rfind("--", 0) == 0) return usage;
  swap_request r;
  r.pool = args[0];
  for (std::size_t i = 1; i < args.size(); i += 2) {
    if (i + 1 >= args.size()) return args[i] + " needs a value; " + usage;
    const std::string& flag = args[i];
    std::string* into = flag == "--model" ? &r.dir : flag == "--revision" ? &r.revision : nullptr;
    if (!into) return "unknown argument '" + flag + "'; " + usage;
    if (!into->empty()) return flag + " given twice";
    *into = args[i + 1];
    if (into->empty()) return flag + " is empty";
  }
  if (r.dir.empty()) return "--model DIR is required; " + usage;
  return r;
}

swap_step next_swap_step(const std::vector<replica_status>& replicas, const std::string& pool, const std::string& key, int want) {
  std::vector<std::size_t> old_serving, old_warm, stopped;
  int serving = 0, new_serving = 0;
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    const auto& r = replicas[i];
    if (r.pool != pool) continue;
    const std::string s = state_of(r);
    const bool other = !r.has_load || r.load.model_key != key;
    if (s == "running") {
      ++serving;
      if (other) old_serving.push_back(i);
      else ++new_serving;
    }
    if (s == "warm" && other) old_warm.push_back(i);
    if (s == "stopped") stopped.push_back(i);
  }
  swap_step step;
  if (want >= 0) {  // a canary's replicas: each replaces an old one while another old one serves on
    if (new_serving >= want) return step;
    if (old_serving.size() > 1) {
      step.old_replica = old_serving.front();
      step.what = stopped.empty() ? swap_step::kind::replace_in_place : swap_step::kind::replace_via_spare;
      step.spare = stopped.empty() ? 0 : stopped.front();
      return step;
    }
    if (!stopped.empty()) {  // the last old one stays: the canary's replica comes beside it
      step.what = swap_step::kind::add_spare;
      step.spare = stopped.front();
      return step;
    }
    step.what = swap_step::kind::refuse;
    step.why = "pool " + pool + " has no stopped slot and no second replica of the old revision for another canary replica";
    return step;
  }
  if (!old_serving.empty()) {
    step.old_replica = old_serving.front();
    if (!stopped.empty()) {
      step.what = swap_step::kind::replace_via_spare;
      step.spare = stopped.front();
    } else if (serving > 1) {
      step.what = swap_step::kind::replace_in_place;
    } else {
      step.what = swap_step::kind::refuse;
      step.why = "pool " + pool + " has one serving replica and no stopped slot to start the new revision in (max_replicas > replicas gives a swap room)";
    }
    return step;
  }
  if (!old_warm.empty()) {
    step.what = swap_step::kind::restart_warm;
    step.old_replica = old_warm.front();
  }
  return step;
}

std::vector<std::size_t> drains_to_undo(const std::vector<replica_status>& replicas, const std::vector<std::size_t>& draining) {
  std::vector<std::size_t> out;
  for (auto i : draining) {
    bool other = false;
    for (std::size_t j = 0; j < replicas.size() && !other; ++j)
      other = j != i && replicas[j].pool == replicas[i].pool && replicas[j].alive && state_of(replicas[j]) == "running";
    if (!other) out.push_back(i);
  }
  return out;
}

}  // namespace troupe::admin
