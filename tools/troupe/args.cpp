#include "tools/troupe/args.h"

#include "runtime/common/log.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unistd.h>

#include "runtime/common/error.h"

namespace troupe::cli {

std::string args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

std::optional<std::string> args::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::vector<int> int_list(const int_list_spec& spec, const std::string& value) {
  const std::string flag = std::string("--") + spec.flag;
  std::vector<int> out;
  for (std::size_t pos = 0; pos < value.size();) {
    const std::size_t comma = std::min(value.find(',', pos), value.size());
    try {
      out.push_back(std::stoi(value.substr(pos, comma - pos)));
    } catch (const std::exception&) {
      throw input_error(flag + ": expected " + spec.what + " like " + spec.example + ", got '" + value + "'");
    }
    if (out.back() < spec.lo || out.back() > spec.hi)
      throw input_error(flag + ": each " + spec.each + " must be " + std::to_string(spec.lo) + ".." + std::to_string(spec.hi) + spec.unit);
    pos = comma + 1;
  }
  return out;
}

long long args::get_int(const std::string& name, long long fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  try {
    std::size_t used = 0;
    long long x = std::stoll(*v, &used);
    if (used != v->size()) throw std::invalid_argument("trailing");
    return x;
  } catch (const std::exception&) {
    throw input_error("option --" + name + " expects an integer, got '" + *v + "'");
  }
}

std::optional<std::chrono::milliseconds> args::get_duration(const std::string& name) const {
  auto v = get(name);
  if (!v) return std::nullopt;
  double scale = 1000;  // seconds
  std::string n = *v;
  if (n.ends_with("ms")) scale = 1, n.resize(n.size() - 2);
  else if (n.ends_with("s")) n.pop_back();
  try {
    std::size_t used = 0;
    const double x = std::stod(n, &used);
    if (used == n.size() && x >= 0 && x <= 86400) return std::chrono::milliseconds(std::llround(x * scale));
  } catch (const std::exception&) {
  }
  throw input_error("--" + name + ": expected seconds (or \"500ms\", \"30s\"), got '" + *v + "'");
}

std::uint16_t args::get_port(const std::string& name, std::uint16_t fallback) const {
  const long long p = get_int(name, fallback);
  if (p < 0 || p > 65535) throw input_error("option --" + name + ": " + std::to_string(p) + " is not a port (0 to 65535)");
  return std::uint16_t(p);
}

double args::get_double(const std::string& name, double fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  try {
    std::size_t used = 0;
    double x = std::stod(*v, &used);
    if (used != v->size()) throw std::invalid_argument("trailing");
    return x;
  } catch (const std::exception&) {
    throw input_error("option --" + name + " expects a number, got '" + *v + "'");
  }
}

void progress_bar(const std::string& label, std::size_t done, std::size_t total, const char* unit) {
  static int last_percent = -1;
  const int percent = total ? int(100.0 * double(done) / double(total)) : 100;
  if (!::isatty(2)) {  // a log, not a terminal: a plain line at every quarter
    const int quarter = percent / 25;
    if (quarter == last_percent && done < total) return;
    last_percent = done >= total ? -1 : quarter;
    if (unit) std::fprintf(stderr, "%s: %d%% (%zu/%zu %s)\n", label.c_str(), percent, done, total, unit);
    else std::fprintf(stderr, "%s: %d%% (%.2f/%.2f GB)\n", label.c_str(), percent, done / 1e9, total / 1e9);
    std::fflush(stderr);
    return;
  }
  if (percent == last_percent && done < total) return;  // redraw only when the number moves
  last_percent = done >= total ? -1 : percent;
  const int width = 30;
  const double frac = total ? double(done) / double(total) : 1.0;
  const int filled = int(frac * width);
  std::string bar(std::size_t(filled), '#');
  bar.resize(width, '.');
  if (unit)
    std::fprintf(stderr, "\r%s [%s] %3d%%  %zu/%zu %s", label.c_str(), bar.c_str(), int(frac * 100), done, total, unit);
  else
    std::fprintf(stderr, "\r%s [%s] %3d%%  %.2f/%.2f GB", label.c_str(), bar.c_str(), int(frac * 100), done / 1e9, total / 1e9);
  if (done >= total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

void apply_log_flags(const args& a) {
  auto l = log::current_level();
  auto f = log::format::text;
  if (auto v = a.get("log-level")) {
    auto parsed = log::parse_level(*v);
    if (!parsed) throw input_error("--log-level: '" + *v + "' is not one of debug, info, warn, error, off");
    l = *parsed;
  }
  if (auto v = a.get("log-format")) {
    auto parsed = log::parse_format(*v);
    if (!parsed) throw input_error("--log-format: '" + *v + "' is not text or json");
    f = *parsed;
  }
  log::configure(l, f);
}

}  // namespace troupe::cli
