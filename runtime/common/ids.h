// Identifiers that must not be mixed up get types of their own: a KV block id, a replica id and
// a count are all small integers, and a function taking two of them should not accept them
// swapped. `id<Tag, Rep>` wraps the integer; `.value` is the raw number at the edges (messages,
// kernels, logs).
#pragma once
#include <compare>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace troupe {

template <class Tag, class Rep>
struct id {
  Rep value{};
  constexpr id() = default;
  constexpr explicit id(Rep v) : value(v) {}
  friend constexpr auto operator<=>(id, id) = default;
  friend std::string to_string(id x) { return std::to_string(x.value); }
  friend std::ostream& operator<<(std::ostream& os, id x) { return os << x.value; }
};

// A replica of the topology: numbered pool by pool in file order (topology::place_replicas).
using replica_id = id<struct replica_tag, std::uint32_t>;

}  // namespace troupe

template <class Tag, class Rep>
struct std::hash<troupe::id<Tag, Rep>> {
  std::size_t operator()(troupe::id<Tag, Rep> x) const noexcept { return std::hash<Rep>{}(x.value); }
};
