// The admin protocol's messages (docs/admin.md), as MessagePack maps, so any language's
// msgpack and ZeroMQ libraries can speak it:
//   request  {"v": 1, "id": uint, "cmd": str, "args": [str, ...]}
//   reply    {"v": 1, "id": uint, "ok": true, "result": any} or {"v": 1, "id": uint, "ok": false, "error": str}
//   event    {"v": 1, "seq": uint, "time": float (Unix seconds), "kind": str, ...the kind's fields}
// Values cross as nlohmann::json (results are built and printed as JSON); decoding is bounded
// (size, nesting, string and array lengths) and every malformed message gets an error naming
// what was wrong, never a crash.
#pragma once
#include <cstdint>
#include <optional>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace troupe::admin {

inline constexpr int protocol_version = 1;
inline constexpr std::size_t max_request_bytes = 64 * 1024;  // larger requests get an error reply
inline constexpr std::size_t max_args = 64;

struct request {
  std::uint64_t id = 0;
  std::string cmd;
  std::vector<std::string> args;
};

struct reply {
  std::uint64_t id = 0;
  bool ok = false;
  nlohmann::json result;  // when ok
  std::string error;      // when not
};

// MessagePack bytes of a value (maps, arrays, strings, numbers, booleans, null).
std::string to_msgpack(const nlohmann::json& v);
// The value of MessagePack bytes; throws std::invalid_argument naming what is wrong (truncated,
// trailing bytes, too deep, too large, a type JSON has no form for).
nlohmann::json from_msgpack(std::string_view bytes, std::size_t max_bytes);

std::string encode(const request& r);
std::string encode(const reply& r);
std::string encode_event(std::uint64_t seq, double time, const std::string& kind, nlohmann::json fields);

// Throws std::invalid_argument naming what is wrong: too large, not msgpack, not a map, another
// protocol version, a missing or mistyped field, too many arguments.
request decode_request(std::string_view bytes);
reply decode_reply(std::string_view bytes);
// An event's map (v, seq, time, kind and the rest).
nlohmann::json decode_event(std::string_view bytes);

// Command arguments of the form KEY=NUMBER from args[from] on (set-policy's weights), into `out`;
// the error names the first argument that is not one, is not a finite number >= 0, or repeats a
// key; nullopt when all are good.
std::optional<std::string> parse_key_numbers(const std::vector<std::string>& args, std::size_t from,
                                             std::vector<std::pair<std::string, double>>& out);

// The commands the admin actor answers, with what each does: `help`'s answer and the command
// list of `troupe admin --help`, so the two cannot drift apart.
const std::vector<std::pair<std::string, std::string>>& server_commands();

}  // namespace troupe::admin
