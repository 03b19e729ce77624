#include "runtime/admin/admin_message.h"

#include <cmath>

#include <stdexcept>

#include <msgpack.hpp>

namespace troupe::admin {

namespace {

constexpr int max_depth = 32;

void pack(msgpack::packer<msgpack::sbuffer>& pk, const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      pk.pack_nil();
      break;
    case nlohmann::json::value_t::boolean:
      v.get<bool>() ? pk.pack_true() : pk.pack_false();
      break;
    case nlohmann::json::value_t::number_integer:
      pk.pack(v.get<std::int64_t>());
      break;
    case nlohmann::json::value_t::number_unsigned:
      pk.pack(v.get<std::uint64_t>());
      break;
    case nlohmann::json::value_t::number_float:
      pk.pack(v.get<double>());
      break;
    case nlohmann::json::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      pk.pack_str(std::uint32_t(s.size()));
      pk.pack_str_body(s.data(), std::uint32_t(s.size()));
      break;
    }
    case nlohmann::json::value_t::binary: {
      const auto& b = v.get_binary();
      pk.pack_bin(std::uint32_t(b.size()));
      pk.pack_bin_body(reinterpret_cast<const char*>(b.data()), std::uint32_t(b.size()));
      break;
    }
    case nlohmann::json::value_t::array:
      pk.pack_array(std::uint32_t(v.size()));
      for (const auto& e : v) pack(pk, e);
      break;
    case nlohmann::json::value_t::object:
      pk.pack_map(std::uint32_t(v.size()));
      for (auto it = v.begin(); it != v.end(); ++it) {
        pk.pack_str(std::uint32_t(it.key().size()));
        pk.pack_str_body(it.key().data(), std::uint32_t(it.key().size()));
        pack(pk, it.value());
      }
      break;
  }
}

nlohmann::json unpack(const msgpack::object& o, int depth) {
  if (depth > max_depth) throw std::invalid_argument("nested deeper than " + std::to_string(max_depth) + " levels");
  switch (o.type) {
    case msgpack::type::NIL:
      return nullptr;
    case msgpack::type::BOOLEAN:
      return o.via.boolean;
    case msgpack::type::POSITIVE_INTEGER:
      return o.via.u64;
    case msgpack::type::NEGATIVE_INTEGER:
      return o.via.i64;
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return o.via.f64;
    case msgpack::type::STR:
      return std::string(o.via.str.ptr, o.via.str.size);
    case msgpack::type::BIN:
      return nlohmann::json::binary(std::vector<std::uint8_t>(o.via.bin.ptr, o.via.bin.ptr + o.via.bin.size));
    case msgpack::type::ARRAY: {
      nlohmann::json a = nlohmann::json::array();
      for (std::uint32_t i = 0; i < o.via.array.size; ++i) a.push_back(unpack(o.via.array.ptr[i], depth + 1));
      return a;
    }
    case msgpack::type::MAP: {
      nlohmann::json m = nlohmann::json::object();
      for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
        const auto& kv = o.via.map.ptr[i];
        if (kv.key.type != msgpack::type::STR) throw std::invalid_argument("a map key is not a string");
        std::string key(kv.key.via.str.ptr, kv.key.via.str.size);
        // Which of two values for one key counts is a guess; a guess in a control message is refused.
        if (m.contains(key)) throw std::invalid_argument("the map key \"" + key.substr(0, 64) + "\" appears twice");
        m[std::move(key)] = unpack(kv.val, depth + 1);
      }
      return m;
    }
    case msgpack::type::EXT:
      throw std::invalid_argument("a msgpack extension type, which this protocol does not use");
  }
  throw std::invalid_argument("an unknown msgpack type");
}

nlohmann::json message_map(std::string_view bytes, std::size_t max_bytes, const char* what) {
  nlohmann::json m;
  try {
    m = from_msgpack(bytes, max_bytes);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(what) + ": " + e.what());
  }
  if (!m.is_object()) throw std::invalid_argument(std::string(what) + ": not a msgpack map");
  if (!m.contains("v") || !m["v"].is_number_integer())
    throw std::invalid_argument(std::string(what) + ": no protocol version (\"v\")");
  if (m["v"].get<std::int64_t>() != protocol_version)
    throw std::invalid_argument(std::string(what) + ": protocol version " + m["v"].dump() + "; this server speaks " +
                                std::to_string(protocol_version));
  return m;
}

std::uint64_t id_of(const nlohmann::json& m, const char* what) {
  if (!m.contains("id")) return 0;
  if (!m["id"].is_number_unsigned() && !(m["id"].is_number_integer() && m["id"].get<std::int64_t>() >= 0))
    throw std::invalid_argument(std::string(what) + ": \"id\" must be an unsigned integer");
  return m["id"].get<std::uint64_t>();
}

}  // namespace

std::string to_msgpack(const nlohmann::json& v) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pack(pk, v);
  return std::string(buf.data(), buf.size());
}

nlohmann::json from_msgpack(std::string_view bytes, std::size_t max_bytes) {
  if (bytes.size() > max_bytes)
    throw std::invalid_argument("message of " + std::to_string(bytes.size()) + " bytes exceeds the limit of " +
                                std::to_string(max_bytes));
  if (bytes.empty()) throw std::invalid_argument("empty message");
  try {
    std::size_t off = 0;
    // Limits: no container or string may claim more elements than the message has bytes.
    const std::size_t n = bytes.size();
    const msgpack::unpack_limit limit(n, n, n, n, n, max_depth);
    msgpack::object_handle h = msgpack::unpack(bytes.data(), bytes.size(), off, nullptr, nullptr, limit);
    if (off != bytes.size()) throw std::invalid_argument(std::to_string(bytes.size() - off) + " bytes after the message");
    return unpack(h.get(), 0);
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const msgpack::insufficient_bytes&) {
    throw std::invalid_argument("truncated msgpack");
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("not valid msgpack (") + e.what() + ")");
  }
}

std::string encode(const request& r) {
  nlohmann::json m{{"v", protocol_version}, {"id", r.id}, {"cmd", r.cmd}, {"args", r.args}};
  return to_msgpack(m);
}

std::string encode(const reply& r) {
  nlohmann::json m{{"v", protocol_version}, {"id", r.id}, {"ok", r.ok}};
  if (r.ok)
    m["result"] = r.result;
  else
    m["error"] = r.error;
  return to_msgpack(m);
}

std::string encode_event(std::uint64_t seq, double time, const std::string& kind, nlohmann::json fields) {
  if (!fields.is_object()) fields = nlohmann::json::object();
  fields["v"] = protocol_version;
  fields["seq"] = seq;
  fields["time"] = time;
  fields["kind"] = kind;
  return to_msgpack(fields);
}

request decode_request(std::string_view bytes) {
  const nlohmann::json m = message_map(bytes, max_request_bytes, "admin request");
  request r;
  r.id = id_of(m, "admin request");
  if (!m.contains("cmd") || !m["cmd"].is_string() || m["cmd"].get_ref<const std::string&>().empty())
    throw std::invalid_argument("admin request: no command (\"cmd\", a string)");
  r.cmd = m["cmd"].get<std::string>();
  if (m.contains("args")) {
    if (!m["args"].is_array()) throw std::invalid_argument("admin request: \"args\" must be an array of strings");
    if (m["args"].size() > max_args)
      throw std::invalid_argument("admin request: " + std::to_string(m["args"].size()) + " arguments; at most " +
                                  std::to_string(max_args));
    for (const auto& a : m["args"]) {
      if (!a.is_string()) throw std::invalid_argument("admin request: \"args\" must be an array of strings");
      r.args.push_back(a.get<std::string>());
    }
  }
  for (auto it = m.begin(); it != m.end(); ++it)
    if (it.key() != "v" && it.key() != "id" && it.key() != "cmd" && it.key() != "args")
      throw std::invalid_argument("admin request: unknown field \"" + it.key() + "\"");
  return r;
}

reply decode_reply(std::string_view bytes) {
  const nlohmann::json m = message_map(bytes, std::size_t(64) << 20, "admin reply");
  reply r;
  r.id = id_of(m, "admin reply");
  if (!m.contains("ok") || !m["ok"].is_boolean()) throw std::invalid_argument("admin reply: no \"ok\"");
  r.ok = m["ok"].get<bool>();
  if (r.ok)
    r.result = m.contains("result") ? m["result"] : nlohmann::json();
  else
    r.error = m.contains("error") && m["error"].is_string() ? m["error"].get<std::string>() : "no reason given";
  return r;
}

nlohmann::json decode_event(std::string_view bytes) {
  nlohmann::json m = message_map(bytes, std::size_t(1) << 20, "admin event");
  if (!m.contains("kind") || !m["kind"].is_string()) throw std::invalid_argument("admin event: no \"kind\"");
  return m;
}

std::optional<std::string> parse_key_numbers(const std::vector<std::string>& args, std::size_t from,
                                             std::vector<std::pair<std::string, double>>& out) {
  for (std::size_t i = from; i < args.size(); ++i) {
    const auto eq = args[i].find('=');
    double v = 0;
    std::size_t used = 0;
    try {
      if (eq != std::string::npos) v = std::stod(args[i].substr(eq + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (eq == std::string::npos || eq == 0 || used == 0 || used != args[i].size() - eq - 1)
      return "expected KEY=NUMBER, got '" + args[i] + "'";
    // Weights: a NaN poisons every comparison, a negative one turns a penalty into a prize.
    if (!std::isfinite(v) || v < 0) return "'" + args[i] + "': a weight must be a finite number >= 0";
    const std::string key = args[i].substr(0, eq);
    for (const auto& [k, old] : out)
      if (k == key) return "'" + key + "' is given twice";
    out.emplace_back(key, v);
  }
  return std::nullopt;
}

const std::vector<std::pair<std::string, std::string>>& server_commands() {
  static const std::vector<std::pair<std::string, std::string>> list = {
      {"status", "nodes and replicas: role, state, generation, KV use, running/waiting, tokens/s"},
      {"topology", "the topology the cluster runs"},
      {"kv [REPLICA]", "KV blocks used and cached, prefix-cache hit rate"},
      {"requests [REPLICA]", "requests in progress: replica, tokens so far, migrations, age (oldest 1000)"},
      {"set-policy router NAME [K=V ...]", "route with another policy (and its parameters) from now on"},
      {"scale POOL N", "N replicas serve in POOL: warm ones join, or the newest drain (with their KV) and wait warm"},
      {"swap POOL --model DIR [--revision R]", "replace the pool's model by another revision under load, replica by replica, no request failed"},
      {"rollout POOL --model DIR [--revision R] [--canary P%] [--step P%:DUR] [gate]", "a canary of a new revision on a growing share of the pool's senders, promoted step by step or rolled back at the first breach"},
      {"rollout status|pause|resume [POOL]", "the rollouts and their decisions; hold or go on with one"},
      {"rollback POOL", "end a rollout now: every sender back on the baseline, the canary's replicas back on it"},
      {"autoscaler [status|pause|resume|pin POOL|unpin POOL]", "the autoscaler's state, or pause it, or hold one pool where it is"},
      {"set-policy autoscaler default K=V ...", "the autoscaler's thresholds: queue_up, queue_down, kv_up, kv_down, busy_down, ttft_slo, itl_slo (s)"},
      {"lora [list|load NAME DIR|unload NAME]", "the LoRA adapters served, or load/unload one on every replica ([lora] runtime_loading)"},
      {"log-level [LEVEL]", "the head's log level (debug, info, warn, error, off), or set it"},
      {"drain REPLICA", "admit nothing new, move what runs with its KV; answers once safe to remove"},
      {"resume REPLICA", "end a drain: the replica takes requests again"},
      {"slow REPLICA MS", "fault injection: each step of the replica waits MS first, as a slower machine or a regression would (0 ends it)"},
      {"kill REPLICA|NODE", "fault injection: the replica (or a node's whole process) dies as if it crashed; its requests migrate"},
      {"help", "this list"},
  };
  return list;
}

}  // namespace troupe::admin
