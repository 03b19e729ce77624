// Troupe's log: one line per event, as text ("2026-11-30T14:30:01.123Z INFO request_end
// id=cmpl-1 ...") or JSON lines ({"ts": ..., "level": "info", "event": "request_end", "id": ...}),
// on stderr, through spdlog (thread-safe, its level changeable at run time: the admin console's
// log-level). Events name what happened; fields carry the request's trace id wherever a
// request is involved, so one `grep` follows it through every actor.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace troupe::log {

enum class level { debug, info, warn, error, off };
enum class format { text, json };

// Process-wide; call before threads log (a later call changes the level and format atomically).
void configure(level l, format f);
void set_level(level l);
level current_level();
bool enabled(level l);

std::optional<level> parse_level(std::string_view s);    // debug, info, warn(ing), error, off
std::optional<format> parse_format(std::string_view s);  // text, json
const char* level_name(level l);

using fields = std::vector<std::pair<std::string, nlohmann::json>>;

// Writes one line if `l` is enabled.
void write(level l, std::string_view event, const fields& f = {});
inline void debug(std::string_view e, const fields& f = {}) { write(level::debug, e, f); }
inline void info(std::string_view e, const fields& f = {}) { write(level::info, e, f); }
inline void warn(std::string_view e, const fields& f = {}) { write(level::warn, e, f); }
inline void error(std::string_view e, const fields& f = {}) { write(level::error, e, f); }

// The line write() would print (for tests and other sinks).
std::string render(format f, level l, std::string_view event, const fields& fs, double unix_seconds);

}  // namespace troupe::log
