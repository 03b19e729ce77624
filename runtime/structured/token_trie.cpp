#include "runtime/structured/token_trie.h"

#include <algorithm>
#include <bit>
#include <map>

namespace troupe::structured {

std::size_t token_mask::count() const {
  std::size_t c = 0;
  for (auto w : words_) c += std::size_t(std::popcount(w));
  return c;
}

namespace {

// The trie while it is built, as a pool of nodes (indices, not pointers: a token of 100,000 bytes
// must not become a chain of destructors 100,000 calls deep). Children ordered by byte, so the
// preorder is the tokens' byte order.
struct build_node {
  std::map<unsigned char, std::int32_t> children;
  std::vector<std::int32_t> tokens;
};

}  // namespace

token_trie::token_trie(const std::vector<std::string>& tokens) : vocab_(tokens.size()) {
  std::vector<build_node> pool(1);
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    if (tokens[id].empty()) continue;
    std::int32_t at = 0;
    for (char c : tokens[id]) {
      const auto b = static_cast<unsigned char>(c);
      auto it = pool[std::size_t(at)].children.find(b);
      if (it == pool[std::size_t(at)].children.end()) {
        pool.emplace_back();
        it = pool[std::size_t(at)].children.emplace(b, std::int32_t(pool.size() - 1)).first;
      }
      at = it->second;
    }
    pool[std::size_t(at)].tokens.push_back(std::int32_t(id));
    max_depth_ = std::max(max_depth_, int(tokens[id].size()));
  }
  // Preorder with an explicit stack (no recursion, for the same reason); a node's end is
  // written when the walk leaves its subtree.
  struct frame {
    std::int32_t node;
    unsigned char byte;
    int depth;
    std::int32_t index = -1;
  };
  std::vector<frame> stack{{0, 0, 0}};
  while (!stack.empty()) {
    if (stack.back().index >= 0) {
      end_[std::size_t(stack.back().index)] = std::int32_t(byte_.size());
      stack.pop_back();
      continue;
    }
    const frame f = stack.back();
    stack.back().index = std::int32_t(byte_.size());
    byte_.push_back(f.byte);
    depth_.push_back(f.depth);
    end_.push_back(0);
    first_token_.push_back(std::int32_t(token_ids_.size()));
    const build_node& node = pool[std::size_t(f.node)];
    token_ids_.insert(token_ids_.end(), node.tokens.begin(), node.tokens.end());
    for (auto it = node.children.rbegin(); it != node.children.rend(); ++it)  // the lowest byte on top
      stack.push_back({it->second, it->first, f.depth + 1});
  }
  first_token_.push_back(std::int32_t(token_ids_.size()));
}

}  // namespace troupe::structured
