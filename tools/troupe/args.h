// What one troupe command was given, as its runner reads it (tools/troupe/command_line.h parses
// the command line with CLI11 and fills this): flag values by name, then the positional words.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace troupe::cli {

class args {
 public:
  // `values`: each flag given, by its name without dashes ("1" for a switch).
  args(std::map<std::string, std::string> values, std::vector<std::string> positional)
      : values_(std::move(values)), positional_(std::move(positional)) {}

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

// A flag's comma-separated integers, each in [lo, hi]; else input_error as "--FLAG: expected
// WHAT like EXAMPLE, got '...'" or "--FLAG: each EACH must be LO..HI[ UNIT]".
struct int_list_spec {
  const char* flag;     // without dashes
  const char* what;     // "MiB values"
  const char* example;  // "1,4,16"
  const char* each;     // "size"
  int lo, hi;
  const char* unit = "";  // " MiB"
};
std::vector<int> int_list(const int_list_spec& spec, const std::string& value);

// --log-level LEVEL and --log-format text|json, when given, configure the process's log
// (runtime/common/log.h); a bad value is an input_error naming the flag.
void apply_log_flags(const args& a);

// Draws a progress bar on stderr: "label [#####.....]  45%  1.0/2.2 GB" (bytes), or with a
// unit, "label [#####.....]  45%  29/64 requests".
void progress_bar(const std::string& label, std::size_t done, std::size_t total, const char* unit = nullptr);

}  // namespace troupe::cli
