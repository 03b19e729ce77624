// Prometheus metrics: counters, gauges and histograms with labels, rendered in the text
// exposition format (version 0.0.4). Thread-safe: the frontend updates them from its actor and
// renders them for /metrics.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace troupe::metrics {

using labels = std::vector<std::pair<std::string, std::string>>;  // name, value; in declared order

class registry;

// A bound on the values of a label that clients choose (tenant, priority): each distinct value
// is a series in every scrape, so past `max_values` distinct values, or longer than
// `max_length` bytes, a value is counted under `overflow` instead.
struct label_bound {
  std::size_t max_values = 100;
  std::size_t max_length = 64;
  std::string overflow = "other";
};

// The bounds of one registry and the values each bounded label has admitted so far. Bounded
// labels multiply (tenant x priority x ...), so a family also holds at most `max_series` label
// sets with a bounded value of their own; past that, new ones have every bounded label at
// `overflow`.
class label_bounds {
 public:
  static constexpr std::size_t max_series = 64;
  void add(const std::string& label, label_bound b);
  // The label set to record `l` under in a family holding `series`; the caller holds the
  // registry's lock.
  template <class Series>
  labels apply(const labels& l, const std::map<labels, Series>& series) {
    if (bounds_.empty()) return l;
    labels key = bound(l, false);
    if (series.size() >= max_series && !series.count(key)) key = bound(l, true);
    return key;
  }
  // The series `l` is recorded in: found as it is (admitted before: the per-token path is one
  // lookup), or created under its bounded label set.
  template <class Series>
  Series& series_of(const labels& l, std::map<labels, Series>& series) {
    auto it = series.find(l);
    if (it != series.end()) return it->second;
    return series[apply(l, series)];
  }

 private:
  struct entry {
    label_bound bound;
    std::set<std::string> seen;
  };
  labels bound(const labels& l, bool all_overflow);
  std::map<std::string, entry> bounds_;
};

// One number per label set: what counters and gauges share.
class scalar_family {
 public:
  double value(const labels& l) const;

 protected:
  friend class registry;
  mutable std::mutex* mu_ = nullptr;
  label_bounds* bounds_ = nullptr;
  std::map<labels, double> values_;
};

class counter : public scalar_family {
 public:
  void inc(const labels& l, double by = 1);
  // For a total read elsewhere (CPU time): moves the counter up to `total`, never down.
  void advance_to(const labels& l, double total);
};

class gauge : public scalar_family {
 public:
  void set(const labels& l, double v);
};

class histogram {
 public:
  void observe(const labels& l, double v);
  std::uint64_t count(const labels& l) const;
  double sum(const labels& l) const;

 private:
  friend class registry;
  struct series {
    std::vector<std::uint64_t> buckets;  // per upper bound (cumulative when rendered)
    std::uint64_t count = 0;
    double sum = 0;
  };
  mutable std::mutex* mu_ = nullptr;
  label_bounds* label_bounds_ = nullptr;
  std::vector<double> bounds_;
  std::map<labels, series> values_;
};

class registry {
 public:
  counter& add_counter(const std::string& name, const std::string& help);  // name without _total
  gauge& add_gauge(const std::string& name, const std::string& help);
  histogram& add_histogram(const std::string& name, const std::string& help, std::vector<double> bounds);

  // Bounds `label` in every family of this registry (applied to values recorded from now on).
  void bound_label(const std::string& label, label_bound b);

  // Every family, in the order added, as Prometheus text.
  std::string render() const;

 private:
  struct family {
    std::string name, help, type;
    std::unique_ptr<counter> c;
    std::unique_ptr<gauge> g;
    std::unique_ptr<histogram> h;
  };
  family& add(const std::string& name, const std::string& help, const char* type);
  mutable std::mutex mu_;
  label_bounds bounds_;
  std::vector<std::unique_ptr<family>> families_;
};

// Reading exposition text back (a scraper's view): the sum of every sample of `metric` whose
// line contains `label_match` (e.g. finished_reason="abort"); nullopt if there is none.
std::optional<double> sum_samples(const std::string& exposition, const std::string& metric,
                                  const std::string& label_match = "");

// Escapes a label value for the text format (backslash, double quote, newline).
std::string escape_label(const std::string& v);

}  // namespace troupe::metrics
