#include "runtime/admission/replica_figures.h"

namespace troupe::admission {

void figure_book::record(std::uint32_t replica, kind k, double at, double value) {
  auto& events = replicas_[replica];
  events.push_back({at, k, value});
  if (events.size() > window) events.pop_front();
}

std::vector<replica_figures> figure_book::since(double since) const {
  std::vector<replica_figures> out;
  for (const auto& [replica, events] : replicas_) {
    replica_figures f;
    f.replica = replica;
    for (const auto& e : events) {
      if (e.at < since) continue;
      switch (e.k) {
        case kind::ttft: f.ttft_s.push_back(e.value); break;
        case kind::itl: f.itl_s.push_back(e.value); break;
        case kind::finished: ++f.finished; break;
        case kind::failed: ++f.failed; break;
        case kind::refused: ++f.refused; break;
      }
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace troupe::admission
