// What each replica's requests saw lately, as the request owner measured them: the time to the
// first token and between tokens, and how they ended (finished, failed, refused by admission
// there). A canary rollout compares the canary's replicas with the baseline's on these
// (runtime/admin/rollout.h). Each event carries its time, so a comparison takes only what came
// after a moment (a replica that changed revision brings nothing of its earlier life), and each
// replica keeps its latest events only, so memory stays bounded whatever the traffic.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

namespace troupe::admission {

// One replica's events since a moment: latency samples in seconds, oldest first, and counts.
struct replica_figures {
  std::uint32_t replica = 0;
  std::vector<double> ttft_s, itl_s;
  std::uint32_t finished = 0, failed = 0, refused = 0;
};

class figure_book {
 public:
  static constexpr std::size_t window = 4096;  // events kept per replica

  enum class kind : std::uint8_t { ttft, itl, finished, failed, refused };

  // `at`: seconds on a clock the callers share (the owner's steady clock).
  void record(std::uint32_t replica, kind k, double at, double value = 0);

  // Every replica's events at or after `since`.
  std::vector<replica_figures> since(double since) const;

 private:
  struct event {
    double at;
    kind k;
    double value;
  };
  std::map<std::uint32_t, std::deque<event>> replicas_;  // ids of the topology's replicas only
};

}  // namespace troupe::admission
