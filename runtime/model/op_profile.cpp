#include "runtime/model/op_profile.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace troupe::model {

namespace {
const char* const names[] = {"embed", "rmsnorm", "qkv_proj", "rope", "kv_write", "attention", "o_proj",
                             "gate_up_proj", "swiglu", "down_proj", "residual", "lm_head",
                             "all_reduce", "all_gather", "all_to_all", "moe_route"};
}

void op_profile::enable(bool on) { on_ = on; }

std::string op_profile::report() {
  std::array<double, std::size_t(op::count)> totals;
  double total = 0;
  for (std::size_t i = 0; i < totals.size(); ++i) total += totals[i] = totals_[i].load();
  std::vector<std::size_t> order(totals_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return totals[a] > totals[b]; });
  std::string out;
  char line[96];
  for (std::size_t i : order) {
    if (totals[i] <= 0) continue;
    std::snprintf(line, sizeof line, "%s %.1f ms (%.0f%%)  ", names[i], totals[i] * 1e3, 100 * totals[i] / total);
    out += line;
  }
  return out;
}

}  // namespace troupe::model
