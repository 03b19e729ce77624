#include "runtime/common/log.h"
#include "runtime/common/wall_clock.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace troupe::log {

namespace {

std::atomic<int> g_level{int(level::info)};
std::atomic<int> g_format{int(format::text)};

spdlog::logger& sink() {
  // The line is composed here; spdlog writes it whole ("%v"), one writer at a time.
  static std::shared_ptr<spdlog::logger> l = [] {
    auto s = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto lg = std::make_shared<spdlog::logger>("troupe", s);
    lg->set_pattern("%v");
    lg->set_level(spdlog::level::trace);
    lg->flush_on(spdlog::level::trace);
    return lg;
  }();
  return *l;
}

std::string timestamp(double unix_seconds) {
  const std::time_t secs = std::time_t(unix_seconds);
  const int ms = int((unix_seconds - double(secs)) * 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[40];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, ms);
  return out;
}

// A text field's value: bare when it is a plain word, quoted JSON otherwise.
std::string text_value(const nlohmann::json& v) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    bool plain = !s.empty();
    for (char c : s)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == ':' || c == '/')) plain = false;
    return plain ? s : v.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  }
  return v.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

}  // namespace

void configure(level l, format f) {
  g_level = int(l);
  g_format = int(f);
}
void set_level(level l) { g_level = int(l); }
level current_level() { return level(g_level.load()); }
bool enabled(level l) { return l != level::off && int(l) >= g_level.load(); }

std::optional<level> parse_level(std::string_view s) {
  if (s == "debug") return level::debug;
  if (s == "info") return level::info;
  if (s == "warn" || s == "warning") return level::warn;
  if (s == "error") return level::error;
  if (s == "off") return level::off;
  return std::nullopt;
}

std::optional<format> parse_format(std::string_view s) {
  if (s == "text") return format::text;
  if (s == "json") return format::json;
  return std::nullopt;
}

const char* level_name(level l) {
  switch (l) {
    case level::debug: return "debug";
    case level::info: return "info";
    case level::warn: return "warn";
    case level::error: return "error";
    case level::off: return "off";
  }
  return "?";
}

std::string render(format f, level l, std::string_view event, const fields& fs, double unix_seconds) {
  if (f == format::json) {
    nlohmann::json j{{"ts", timestamp(unix_seconds)}, {"level", level_name(l)}, {"event", std::string(event)}};
    for (const auto& [k, v] : fs) j[k] = v;
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::string line = timestamp(unix_seconds) + " ";
  for (const char* c = level_name(l); *c; ++c) line += char(std::toupper(static_cast<unsigned char>(*c)));
  line += " ";
  line += event;
  for (const auto& [k, v] : fs) line += " " + k + "=" + text_value(v);
  return line;
}

void write(level l, std::string_view event, const fields& f) {
  if (!enabled(l)) return;
  const double now = unix_seconds();
  sink().info(render(format(g_format.load()), l, event, f, now));
}

}  // namespace troupe::log
