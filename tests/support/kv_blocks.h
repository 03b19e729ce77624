// Block-id lists for KV tests: block ids are a type of their own, so a literal list needs this.
#pragma once
#include <initializer_list>
#include <vector>

#include "runtime/kv/block_pool.h"

namespace troupe::test {

inline std::vector<kv::block_id> blocks(std::initializer_list<int> ids) {
  std::vector<kv::block_id> out;
  for (int i : ids) out.push_back(kv::block_id(i));
  return out;
}

}  // namespace troupe::test
