#include "runtime/kv/window_groups.h"

#include <algorithm>

namespace troupe::kv {

window_groups window_groups_of(const std::vector<int>& layer_windows) {
  window_groups g;
  const auto global = std::int32_t(std::count(layer_windows.begin(), layer_windows.end(), 0));
  const auto windowed = std::int32_t(layer_windows.size()) - global;
  if (global == 0 || windowed == 0) return g;
  g.count = int((windowed + global - 1) / global);
  std::int32_t next_global = 0, next_windowed = 0;
  for (int w : layer_windows) {
    if (w == 0) {
      g.group.push_back(0);
      g.slot.push_back(next_global++);
    } else {
      g.group.push_back(1 + next_windowed / global);
      g.slot.push_back(next_windowed++ % global);
      g.window = std::max(g.window, w);
    }
  }
  return g;
}

}  // namespace troupe::kv
