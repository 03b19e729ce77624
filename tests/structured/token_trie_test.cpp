// The vocabulary trie's token masks equal asking the automaton token by token, for automata with
// table states and with counter states, from every start state, on random vocabularies with
// shared prefixes, duplicates and empty (special) tokens.
#define BOOST_TEST_MODULE token_trie
#include <boost/test/unit_test.hpp>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "runtime/structured/token_trie.h"

using namespace troupe::structured;

namespace {

std::vector<std::string> random_vocab(std::mt19937& rng, std::size_t n, const std::string& alphabet) {
  std::vector<std::string> v;
  std::uniform_int_distribution<int> len(0, 7), pick(0, int(alphabet.size()) - 1);
  for (std::size_t i = 0; i < n; ++i) {
    std::string t;
    for (int k = len(rng); k > 0; --k) t += alphabet[std::size_t(pick(rng))];
    v.push_back(t);
  }
  v.push_back(v[3]);  // two ids, the same bytes
  return v;
}

template <class State, class Step>
token_mask one_by_one(const std::vector<std::string>& vocab, Step step, State start) {
  token_mask m(vocab.size());
  for (std::size_t id = 0; id < vocab.size(); ++id) {
    if (vocab[id].empty()) continue;
    std::optional<State> s = start;
    for (char c : vocab[id])
      if (!(s = step(*s, static_cast<unsigned char>(c)))) break;
    if (s) m.set(id);
  }
  return m;
}

bool same(const token_mask& a, const token_mask& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a.test(i) != b.test(i)) return false;
  return true;
}

}  // namespace

BOOST_AUTO_TEST_CASE(masks_equal_asking_token_by_token) {
  std::mt19937 rng(7);
  const auto vocab = random_vocab(rng, 3000, "ab{}\"1");
  const token_trie trie(vocab);
  BOOST_TEST(trie.vocab_size() == vocab.size());
  BOOST_TEST(trie.max_token_bytes() == 7);
  // A table automaton: (ab)* then digits, states 0 (after b or at start), 1 (after a), 2 (digits).
  auto table = [](int s, unsigned char c) -> std::optional<int> {
    if (s == 0 && c == 'a') return 1;
    if (s == 1 && c == 'b') return 0;
    if ((s == 0 || s == 2) && c == '1') return 2;
    return std::nullopt;
  };
  // A counter automaton (the shape of a pushdown one): braces nest up to 3 deep, quotes toggle.
  struct nest {
    int depth = 0;
    bool quoted = false;
  };
  auto braces = [](nest s, unsigned char c) -> std::optional<nest> {
    if (c == '"') return nest{s.depth, !s.quoted};
    if (s.quoted) return s;
    if (c == '{') return s.depth < 3 ? std::optional<nest>(nest{s.depth + 1, false}) : std::nullopt;
    if (c == '}') return s.depth > 0 ? std::optional<nest>(nest{s.depth - 1, false}) : std::nullopt;
    return s;
  };
  token_mask m;
  for (int s : {0, 1, 2}) {
    trie.allowed(table, s, m);
    BOOST_TEST(same(m, one_by_one(vocab, table, s)), "table state " << s);
  }
  for (int d = 0; d <= 3; ++d)
    for (bool q : {false, true}) {
      trie.allowed(braces, nest{d, q}, m);
      const auto expect = one_by_one(vocab, braces, nest{d, q});
      BOOST_TEST(same(m, expect), "depth " << d << " quoted " << q);
      BOOST_TEST(m.count() == expect.count());
    }
  // Both ids of a duplicated token, never an empty one.
  trie.allowed([](int, unsigned char) -> std::optional<int> { return 0; }, 0, m);
  std::size_t nonempty = 0;
  for (const auto& t : vocab) nonempty += t.empty() ? 0 : 1;
  BOOST_TEST(m.count() == nonempty);
  BOOST_TEST(m.test(3));
  BOOST_TEST(m.test(vocab.size() - 1));
  // Nothing accepted: an empty mask.
  trie.allowed([](int, unsigned char) -> std::optional<int> { return std::nullopt; }, 0, m);
  BOOST_TEST(m.count() == 0u);
}

BOOST_AUTO_TEST_CASE(a_very_long_token_does_not_overflow_the_stack) {
  const token_trie trie({std::string(200000, 'x'), "x", ""});
  BOOST_TEST(trie.max_token_bytes() == 200000);
  token_mask m;
  trie.allowed([](int n, unsigned char) -> std::optional<int> { return n < 10 ? std::optional<int>(n + 1) : std::nullopt; }, 0, m);
  BOOST_TEST(!m.test(0));
  BOOST_TEST(m.test(1));
  BOOST_TEST(!m.test(2));
}
