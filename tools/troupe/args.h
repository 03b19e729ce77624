// Minimal command-line parsing for the troupe subcommands: --flag VALUE and --switch.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace troupe::cli {

class args {
 public:
  // `switches` take no value. Throws input_error for an unknown or valueless flag.
  args(int argc, char** argv, int first, const std::set<std::string>& flags, const std::set<std::string>& switches);

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::string get(const std::string& name, const std::string& fallback) const;
  std::optional<std::string> get(const std::string& name) const;
  long long get_int(const std::string& name, long long fallback) const;
  double get_double(const std::string& name, double fallback) const;
  // A TCP port: an integer in [0, 65535] (0: any free port), else input_error naming the flag.
  std::uint16_t get_port(const std::string& name, std::uint16_t fallback) const;
  // A duration: seconds, or with a unit ("500ms", "30s"), in [0, 1 day]; else input_error naming
  // the flag. nullopt when the flag is absent.
  std::optional<std::chrono::milliseconds> get_duration(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

// --log-level LEVEL and --log-format text|json, when given, configure the process's log
// (runtime/common/log.h); a bad value is an input_error naming the flag.
void apply_log_flags(const args& a);

// Draws a progress bar on stderr: "label [#####.....]  45%  1.0/2.2 GB" (bytes), or with a
// unit, "label [#####.....]  45%  29/64 requests".
void progress_bar(const std::string& label, std::size_t done, std::size_t total, const char* unit = nullptr);

}  // namespace troupe::cli
