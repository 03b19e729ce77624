#include "runtime/routing/canary_split.h"

#include <cstdint>

namespace troupe::routing {

bool canary_side(std::string_view sender, double share) {
  if (share <= 0) return false;
  if (share >= 1) return true;
  // FNV-1a, then a 64-bit finalizer (splitmix64's): stable across processes and builds, so every
  // head puts a sender on the same side, and spread evenly even for senders named alike.
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : sender) h = (h ^ c) * 1099511628211ull;
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return double(h >> 11) * 0x1.0p-53 < share;
}

}  // namespace troupe::routing
