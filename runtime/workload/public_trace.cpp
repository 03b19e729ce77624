#include "runtime/workload/public_trace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/common/splitmix.h"

namespace troupe::workload {

namespace {

constexpr const char* azure_header = "TIMESTAMP,ContextTokens,GeneratedTokens";
constexpr const char* burstgpt_header = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type";
constexpr double longest_length = 1 << 20;

// One file being read: where, and how to fail there.
struct row_cursor {
  const std::string& source;
  int line = 0;
  [[noreturn]] void fail(const std::string& what) const {
    throw input_error(source + ":" + std::to_string(line) + ": " + what);
  }
  double number(const std::string& s, const std::string& what) const {
    const auto v = number_field(s);
    if (!v) fail(what + ": \"" + s + "\" is not a number");
    return *v;
  }
  int length(double v, const std::string& what) const {
    if (v < 0 || v > longest_length || v != std::floor(v)) fail(what + ": expected a whole number from 0 to 1048576");
    return int(v);
  }
};

std::vector<std::string> split_fields(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream f(line);
  for (std::string field; std::getline(f, field, ',');) out.push_back(field);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

// Days from 1970-01-01 to a date of the proleptic Gregorian calendar.
std::int64_t days_since_1970(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = unsigned(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + std::int64_t(doe) - 719468;
}

// "2023-11-16 18:15:46.6805900" as seconds since 1970 (UTC).
double azure_time(const row_cursor& c, const std::string& s) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, used = 0;
  double sec = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2d %2d:%2d:%lf%n", &y, &mo, &d, &h, &mi, &sec, &used) != 6 ||
      used != int(s.size()) || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec < 0 || sec >= 61)
    c.fail("TIMESTAMP: expected \"YYYY-MM-DD HH:MM:SS.fffffff\", got \"" + s + "\"");
  return double(days_since_1970(y, unsigned(mo), unsigned(d))) * 86400 + h * 3600 + mi * 60 + sec;
}

// Appends a request at absolute time `at` (the trace's own clock; `origin`: its first row's),
// or counts it skipped.
void add_request(public_trace& t, const row_cursor& c, double at, int prompt, int output, std::vector<std::int64_t> blocks,
         double origin) {
  if (prompt < 1 || output < 1) {
    ++t.skipped;
    return;
  }
  const double rel = at - origin;
  if (rel < 0 || (!t.arrivals.empty() && rel < t.arrivals.back().at_s)) c.fail("arrivals must be in time order");
  t.arrivals.push_back({rel, prompt, output});
  if (t.format == trace_format::mooncake) t.prefix_blocks.push_back(std::move(blocks));
}

void parse_csv(public_trace& t, std::istringstream& in, row_cursor& c) {
  double origin = 0;
  bool first = true;
  for (std::string line; std::getline(in, line);) {
    ++c.line;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const auto f = split_fields(line);
    if (t.format == trace_format::azure) {
      if (f.size() != 3) c.fail(std::string("expected three fields: ") + azure_header);
      const double at = azure_time(c, f[0]);
      if (first) origin = at;
      add_request(t, c, at, c.length(c.number(f[1], "ContextTokens"), "ContextTokens"),
          c.length(c.number(f[2], "GeneratedTokens"), "GeneratedTokens"), {}, origin);
    } else {
      if (f.size() != 6) c.fail(std::string("expected six fields: ") + burstgpt_header);
      const double at = c.number(f[0], "Timestamp");
      if (first) origin = at;
      add_request(t, c, at, c.length(c.number(f[2], "Request tokens"), "Request tokens"),
          c.length(c.number(f[3], "Response tokens"), "Response tokens"), {}, origin);
    }
    first = false;
  }
}

void parse_mooncake(public_trace& t, std::istringstream& in, row_cursor& c) {
  double origin = 0;
  bool first = true;
  for (std::string line; std::getline(in, line);) {
    ++c.line;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      c.fail("not a JSON object");
    }
    auto field = [&](const char* name) {
      if (!j.is_object() || !j.contains(name) || !j[name].is_number()) c.fail(std::string("expected a number \"") + name + "\"");
      return j[name].get<double>();
    };
    const double at = field("timestamp") / 1000.0;
    if (first) origin = at;
    first = false;
    std::vector<std::int64_t> blocks;
    if (j.contains("hash_ids")) {
      if (!j["hash_ids"].is_array()) c.fail("\"hash_ids\": expected an array of integers");
      for (const auto& h : j["hash_ids"]) {
        if (!h.is_number_integer()) c.fail("\"hash_ids\": expected an array of integers");
        blocks.push_back(h.get<std::int64_t>());
      }
    }
    add_request(t, c, at, c.length(field("input_length"), "input_length"), c.length(field("output_length"), "output_length"),
        std::move(blocks), origin);
  }
}

}  // namespace

const char* trace_format_name(trace_format f) {
  switch (f) {
    case trace_format::troupe: return "troupe";
    case trace_format::azure: return "azure";
    case trace_format::mooncake: return "mooncake";
    case trace_format::burstgpt: return "burstgpt";
  }
  return "?";
}

public_trace parse_public_trace(const std::string& text, const std::string& source) {
  public_trace t;
  std::istringstream in(text);
  std::string first;
  std::getline(in, first);
  if (!first.empty() && first.back() == '\r') first.pop_back();
  row_cursor c{source, 1};
  if (first.rfind("seconds,", 0) == 0) {
    t.arrivals = parse_trace(text, source);
    return t;
  }
  if (first == azure_header) {
    t.format = trace_format::azure;
    parse_csv(t, in, c);
  } else if (first == burstgpt_header) {
    t.format = trace_format::burstgpt;
    parse_csv(t, in, c);
  } else if (!first.empty() && first.front() == '{') {
    t.format = trace_format::mooncake;
    std::istringstream all(text);
    c.line = 0;
    parse_mooncake(t, all, c);
  } else {
    c.fail(std::string("not a trace this reads: expected a first line \"seconds,prompt_tokens,max_tokens\", \"") +
           azure_header + "\" (Azure), \"" + burstgpt_header + "\" (BurstGPT) or a JSON object (Mooncake)");
  }
  return t;
}

std::vector<std::int32_t> trace_prompt(const arrival& a, const std::vector<std::int64_t>& blocks, std::size_t index, int vocab) {
  std::vector<std::int32_t> out;
  out.reserve(std::size_t(a.prompt_tokens));
  const auto v = std::uint64_t(std::max(1, vocab));
  for (std::int64_t id : blocks)
    for (int k = 0; k < mooncake_block_tokens && int(out.size()) < a.prompt_tokens; ++k)
      out.push_back(std::int32_t(splitmix64(std::uint64_t(id) * 1048576 + std::uint64_t(k)) % v));
  for (std::size_t p = out.size(); int(p) < a.prompt_tokens; ++p)  // its own tokens
    out.push_back(std::int32_t((index * 131 + p * 7) % v));
  return out;
}

public_trace read_public_trace(const std::string& path) { return parse_public_trace(read_trace_text(path), path); }

}  // namespace troupe::workload
