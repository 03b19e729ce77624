#include "runtime/workload/trace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "runtime/common/error.h"
#include "runtime/common/splitmix.h"

namespace troupe::workload {

namespace {

constexpr const char* header = "seconds,prompt_tokens,max_tokens";
constexpr int max_length = 1 << 20;

double rate_at(const std::vector<rate_point>& p, double t) {
  if (p.empty()) return 0;
  if (t <= p.front().at_s) return p.front().per_s;
  for (std::size_t i = 1; i < p.size(); ++i)
    if (t < p[i].at_s) {
      const double f = (t - p[i - 1].at_s) / (p[i].at_s - p[i - 1].at_s);
      return p[i - 1].per_s + f * (p[i].per_s - p[i - 1].per_s);
    }
  return p.back().per_s;
}

// A uniform draw in (0, 1] from (seed, k).
double uniform(std::uint64_t seed, std::uint64_t k) {
  return (double(splitmix64(seed ^ splitmix64(k)) >> 11) + 1.0) / 9007199254740992.0;
}

}  // namespace

std::vector<arrival> parse_trace(const std::string& text, const std::string& source) {
  std::vector<arrival> out;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  auto fail = [&](const std::string& what) { throw input_error(source + ":" + std::to_string(n) + ": " + what); };
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (n == 1) {
      if (line != header) fail(std::string("expected the header \"") + header + "\"");
      continue;
    }
    if (line.empty()) continue;
    arrival a;
    std::istringstream f(line);
    std::string at, prompt, output, extra;
    if (!std::getline(f, at, ',') || !std::getline(f, prompt, ',') || !std::getline(f, output, ',') || std::getline(f, extra))
      fail("expected three fields: seconds,prompt_tokens,max_tokens");
    auto number = [&](const std::string& s, const char* what) {
      const auto v = number_field(s);
      if (!v) fail(std::string(what) + ": \"" + s + "\" is not a number");
      return *v;
    };
    a.at_s = number(at, "seconds");
    const double p = number(prompt, "prompt_tokens"), o = number(output, "max_tokens");
    if (a.at_s < 0) fail("seconds: must not be negative");
    if (!out.empty() && a.at_s < out.back().at_s) fail("seconds: arrivals must be in time order");
    if (p < 1 || p > max_length || p != std::floor(p)) fail("prompt_tokens: expected a whole number from 1 to 1048576");
    if (o < 1 || o > max_length || o != std::floor(o)) fail("max_tokens: expected a whole number from 1 to 1048576");
    a.prompt_tokens = int(p);
    a.max_tokens = int(o);
    out.push_back(a);
  }
  if (n == 0) fail(std::string("empty: expected the header \"") + header + "\"");
  return out;
}

std::string read_trace_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw input_error(path + ": cannot read the trace");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::optional<double> number_field(const std::string& s) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used == 0 || used != s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::vector<arrival> read_trace(const std::string& path) { return parse_trace(read_trace_text(path), path); }

std::string format_trace(const std::vector<arrival>& trace) {
  std::ostringstream out;
  out << header << "\n";
  char line[96];
  for (const auto& a : trace) {
    std::snprintf(line, sizeof line, "%.4f,%d,%d\n", a.at_s, a.prompt_tokens, a.max_tokens);
    out << line;
  }
  return out.str();
}

std::vector<arrival> poisson_trace(const std::vector<rate_point>& profile, double duration_s, length_range prompt,
                                   length_range output, std::uint64_t seed) {
  double top = 0;
  for (const auto& p : profile) top = std::max(top, p.per_s);
  std::vector<arrival> out;
  if (top <= 0) return out;
  auto between = [&](length_range r, std::uint64_t k) {
    return r.min + int(std::min<double>(r.max - r.min, std::floor(uniform(seed, k) * (r.max - r.min + 1))));
  };
  double t = 0;
  for (std::uint64_t k = 0;; k += 4) {
    t += -std::log(uniform(seed, k)) / top;  // the next candidate at the top rate ...
    if (t >= duration_s) break;
    if (uniform(seed, k + 1) * top > rate_at(profile, t)) continue;  // ... kept with probability rate/top
    out.push_back({t, between(prompt, k + 2), between(output, k + 3)});
  }
  return out;
}

const std::vector<std::string>& shape_names() {
  static const std::vector<std::string> names{"ramp-spike-quiet", "hour"};
  return names;
}

std::vector<rate_point> shape_profile(const std::string& name, double peak, double& duration_s) {
  if (name == "ramp-spike-quiet") {
    duration_s = 80;
    return {{0, 0.10 * peak}, {20, 0.25 * peak}, {20.01, peak}, {40, peak}, {40.01, 0.02 * peak}};
  }
  if (name == "hour") {
    duration_s = 3600;
    return {{0, 0.10 * peak},     {600, 0.10 * peak},  {1200, 0.60 * peak}, {1500, 0.60 * peak}, {1560, peak},
            {1800, peak},         {1860, 0.60 * peak}, {2400, 0.60 * peak}, {2430, peak},        {2580, peak},
            {2640, 0.60 * peak},  {2880, 0.60 * peak}, {3300, 0.15 * peak}, {3600, 0.10 * peak}};
  }
  std::string known;
  for (const auto& n : shape_names()) known += (known.empty() ? "" : ", ") + n;
  throw input_error("no trace shape \"" + name + "\" (" + known + ")");
}

}  // namespace troupe::workload
