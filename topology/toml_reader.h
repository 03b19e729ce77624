// Reads a topology file's TOML tables with errors that name the file, the line and the key
// (input_error "FILE:LINE: KEY: what"). Internal to topology/.
#pragma once
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "runtime/common/error.h"

namespace troupe::topology::detail {

// localhost, ::1 or 127.x.y.z: a host that may listen without authentication.
inline bool loopback(const std::string& host) { return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0; }


inline const char* type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date or time";
  }
}

// Reads one file's tables with errors that name the file, the line and the key.
class reader {
 public:
  explicit reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const toml::node* n, const std::string& key, const std::string& what) const {
    std::string where = source_;
    if (n && n->source().begin.line > 0) where += ":" + std::to_string(n->source().begin.line);
    throw input_error(where + ": " + key + ": " + what);
  }

  void only_keys(const toml::table& t, const std::string& prefix, std::initializer_list<const char*> allowed) const {
    for (auto&& [k, v] : t) {
      bool ok = false;
      for (auto* a : allowed) ok = ok || k.str() == a;
      if (!ok) {
        std::string list;
        for (auto* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
        fail(&v, prefix + std::string(k.str()), "unknown key (allowed here: " + list + ")");
      }
    }
  }

  const toml::table* table(const toml::table& t, const char* key, const std::string& prefix) const {
    const toml::node* n = t.get(key);
    if (!n) return nullptr;
    if (!n->is_table()) fail(n, prefix + key, std::string("expected a table, got ") + type_name(*n));
    return n->as_table();
  }

  std::string string(const toml::table& t, const char* key, const std::string& prefix, std::optional<std::string> fallback) const {
    const toml::node* n = t.get(key);
    if (!n) {
      if (!fallback) fail(&t, prefix + key, "required key is missing");
      return *fallback;
    }
    if (!n->is_string()) fail(n, prefix + key, std::string("expected a string, got ") + type_name(*n));
    return n->value<std::string>().value();
  }

  std::int64_t integer(const toml::table& t, const char* key, const std::string& prefix, std::int64_t fallback,
                       std::int64_t min, std::int64_t max) const {
    const toml::node* n = t.get(key);
    if (!n) return fallback;
    if (!n->is_integer()) fail(n, prefix + key, std::string("expected an integer, got ") + type_name(*n));
    std::int64_t v = n->value<std::int64_t>().value();
    if (v < min || v > max)
      fail(n, prefix + key, std::to_string(v) + " is out of range [" + std::to_string(min) + ", " + std::to_string(max) + "]");
    return v;
  }

  double number(const toml::node& n, const std::string& key) const {
    if (n.is_integer()) return double(n.value<std::int64_t>().value());
    if (n.is_floating_point()) return n.value<double>().value();
    fail(&n, key, std::string("expected a number, got ") + type_name(n));
  }

  // "512MiB", "2GB", "3.35TB" or a plain integer of bytes. `per_second` accepts a "/s" suffix.
  double size(const toml::node& n, const std::string& key, bool per_second = false) const {
    if (!n.is_string()) return number(n, key);
    std::string s = n.value<std::string>().value();
    if (per_second) {
      if (s.size() < 2 || s.compare(s.size() - 2, 2, "/s") != 0) fail(&n, key, "expected a rate such as \"3.35TB/s\", got \"" + s + "\"");
      s.resize(s.size() - 2);
    }
    static const std::pair<const char*, double> units[] = {{"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
        {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1.0}};
    if (auto v = with_unit(s, units)) return *v;
    fail(&n, key, "expected a size such as \"512MiB\" or \"2GB\", got \"" + s + "\"");
  }

  // A non-negative number followed by the first of `units`' suffixes it ends with, times that
  // unit's factor; nothing if no suffix matches or the number before it is not one.
  template <std::size_t N>
  static std::optional<double> with_unit(const std::string& s, const std::pair<const char*, double> (&units)[N]) {
    for (auto& [suffix, factor] : units) {
      const std::size_t len = std::strlen(suffix);
      if (s.size() <= len || s.compare(s.size() - len, len, suffix) != 0) continue;
      try {
        std::size_t used = 0;
        const double v = std::stod(s.substr(0, s.size() - len), &used);
        if (used == s.size() - len && v >= 0) return v * factor;
      } catch (const std::exception&) {
      }
      return std::nullopt;
    }
    return std::nullopt;
  }

  // "1s", "250ms", "100us", "2m" or an integer of milliseconds.
  std::chrono::microseconds duration(const toml::node& n, const std::string& key) const {
    if (n.is_integer()) return std::chrono::milliseconds(n.value<std::int64_t>().value());
    if (!n.is_string()) fail(&n, key, std::string("expected a duration such as \"500ms\", got ") + type_name(n));
    std::string s = n.value<std::string>().value();
    static const std::pair<const char*, double> units[] = {{"ms", 1e3}, {"us", 1.0}, {"s", 1e6}, {"m", 60e6}};
    if (auto v = with_unit(s, units)) return std::chrono::microseconds(std::int64_t(std::llround(*v)));
    fail(&n, key, "expected a duration such as \"500ms\" or \"2s\", got \"" + s + "\"");
  }

  bool boolean(const toml::table& t, const char* key, const std::string& prefix, bool fallback) const {
    const toml::node* n = t.get(key);
    if (!n) return fallback;
    if (!n->is_boolean()) fail(n, prefix + key, std::string("expected true or false, got ") + type_name(*n));
    return n->value<bool>().value();
  }

  template <typename E>
  E choice(const toml::table& t, const char* key, const std::string& prefix, E fallback,
           std::initializer_list<std::pair<const char*, E>> options) const {
    const toml::node* n = t.get(key);
    if (!n) return fallback;
    const std::string v = string(t, key, prefix, std::nullopt);
    std::string list;
    for (auto& [name, e] : options) {
      if (v == name) return e;
      list += (list.empty() ? "" : ", ") + std::string(name);
    }
    fail(n, prefix + key, "\"" + v + "\" is not one of " + list);
  }

 private:
  std::string source_;
};

}  // namespace troupe::topology::detail
