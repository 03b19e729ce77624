#include "runtime/metrics/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace troupe::metrics {

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) out += "\xef\xbf\xbd";  // U+FFFD: the format has no escape for these
    else out += c;
  }
  return out;
}

namespace {

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char b[32];
    std::snprintf(b, sizeof b, "%.0f", v);
    return b;
  }
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

std::string label_text(const labels& l, const std::string& extra_name = "", const std::string& extra_value = "") {
  if (l.empty() && extra_name.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (auto& [k, v] : l) {
    out += (first ? "" : ",") + k + "=\"" + escape_label(v) + "\"";
    first = false;
  }
  if (!extra_name.empty()) out += (first ? "" : ",") + extra_name + "=\"" + extra_value + "\"";
  return out + "}";
}

}  // namespace

void label_bounds::add(const std::string& label, label_bound b) { bounds_[label].bound = std::move(b); }

labels label_bounds::bound(const labels& l, bool all_overflow) {
  labels out = l;
  for (auto& [name, value] : out) {
    auto it = bounds_.find(name);
    if (it == bounds_.end()) continue;
    entry& e = it->second;
    if (all_overflow || value.size() > e.bound.max_length) {
      value = e.bound.overflow;
    } else if (!e.seen.count(value)) {
      if (e.seen.size() >= e.bound.max_values) value = e.bound.overflow;
      else e.seen.insert(value);
    }
  }
  return out;
}

double scalar_family::value(const labels& l) const {
  std::lock_guard<std::mutex> g(*mu_);
  auto it = values_.find(bounds_->apply(l, values_));
  return it == values_.end() ? 0 : it->second;
}
std::optional<double> sum_samples(const std::string& exposition, const std::string& metric,
                                  const std::string& label_match) {
  std::optional<double> sum;
  std::istringstream in(exposition);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(metric, 0) != 0 || line.size() <= metric.size()) continue;
    if (line[metric.size()] != '{' && line[metric.size()] != ' ') continue;  // another metric, same prefix
    if (!label_match.empty() && line.find(label_match) == std::string::npos) continue;
    sum = sum.value_or(0) + std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

void counter::inc(const labels& l, double by) {
  std::lock_guard<std::mutex> g(*mu_);
  bounds_->series_of(l, values_) += by;
}
void counter::advance_to(const labels& l, double total) {
  std::lock_guard<std::mutex> g(*mu_);
  double& v = bounds_->series_of(l, values_);
  v = std::max(v, total);
}
void gauge::set(const labels& l, double v) {
  std::lock_guard<std::mutex> g(*mu_);
  bounds_->series_of(l, values_) = v;
}
void histogram::observe(const labels& l, double v) {
  std::lock_guard<std::mutex> g(*mu_);
  series& s = label_bounds_->series_of(l, values_);
  if (s.buckets.empty()) s.buckets.assign(bounds_.size(), 0);
  const auto at = std::lower_bound(bounds_.begin(), bounds_.end(), v);  // le: v <= bound
  if (at != bounds_.end()) ++s.buckets[std::size_t(at - bounds_.begin())];
  ++s.count;
  s.sum += v;
}
std::uint64_t histogram::count(const labels& l) const {
  std::lock_guard<std::mutex> g(*mu_);
  auto it = values_.find(label_bounds_->apply(l, values_));
  return it == values_.end() ? 0 : it->second.count;
}
double histogram::sum(const labels& l) const {
  std::lock_guard<std::mutex> g(*mu_);
  auto it = values_.find(label_bounds_->apply(l, values_));
  return it == values_.end() ? 0 : it->second.sum;
}

registry::family& registry::add(const std::string& name, const std::string& help, const char* type) {
  auto f = std::make_unique<family>();
  f->name = name;
  f->help = help;
  f->type = type;
  families_.push_back(std::move(f));
  return *families_.back();
}

counter& registry::add_counter(const std::string& name, const std::string& help) {
  family& f = add(name, help, "counter");
  f.c = std::make_unique<counter>();
  f.c->mu_ = &mu_;
  f.c->bounds_ = &bounds_;
  return *f.c;
}
gauge& registry::add_gauge(const std::string& name, const std::string& help) {
  family& f = add(name, help, "gauge");
  f.g = std::make_unique<gauge>();
  f.g->mu_ = &mu_;
  f.g->bounds_ = &bounds_;
  return *f.g;
}
histogram& registry::add_histogram(const std::string& name, const std::string& help, std::vector<double> bounds) {
  family& f = add(name, help, "histogram");
  f.h = std::make_unique<histogram>();
  f.h->mu_ = &mu_;
  f.h->label_bounds_ = &bounds_;
  std::sort(bounds.begin(), bounds.end());
  f.h->bounds_ = std::move(bounds);
  return *f.h;
}

void registry::bound_label(const std::string& label, label_bound b) {
  std::lock_guard<std::mutex> g(mu_);
  bounds_.add(label, std::move(b));
}

std::string registry::render() const {
  std::lock_guard<std::mutex> g(mu_);
  std::string out;
  for (const auto& f : families_) {
    out += "# HELP " + f->name + (f->c ? "_total" : "") + " " + f->help + "\n";
    out += "# TYPE " + f->name + (f->c ? "_total" : "") + " " + f->type + "\n";
    if (f->c)
      for (auto& [l, v] : f->c->values_) out += f->name + "_total" + label_text(l) + " " + number(v) + "\n";
    if (f->g)
      for (auto& [l, v] : f->g->values_) out += f->name + label_text(l) + " " + number(v) + "\n";
    if (f->h)
      for (auto& [l, s] : f->h->values_) {
        std::uint64_t cum = 0;
        for (std::size_t i = 0; i < f->h->bounds_.size(); ++i) {
          cum += s.buckets[i];
          out += f->name + "_bucket" + label_text(l, "le", number(f->h->bounds_[i])) + " " + std::to_string(cum) + "\n";
        }
        out += f->name + "_bucket" + label_text(l, "le", "+Inf") + " " + std::to_string(s.count) + "\n";
        out += f->name + "_sum" + label_text(l) + " " + number(s.sum) + "\n";
        out += f->name + "_count" + label_text(l) + " " + std::to_string(s.count) + "\n";
      }
  }
  return out;
}

}  // namespace troupe::metrics
