// The KV transfer engine: every backend moves blocks intact (bytes compared after the move) for
// f32, f16 and bf16 caches, between caches of different pool sizes and different rank splits,
// into reserved blocks at other ids; a layout mismatch is refused with its reason before a byte
// is written; the TCP server serves nothing without the cache's secret.
#define BOOST_TEST_MODULE kv_transfer
#include <boost/test/unit_test.hpp>

#include <random>
#include <sstream>

#include <signal.h>

#include <sys/wait.h>
#include <unistd.h>

#include "runtime/kv/transfer/pull.h"
#include "runtime/kv/transfer/registry.h"

using namespace troupe;
using namespace troupe::kv;
using namespace troupe::kv::transfer;
using kernels::dtype;

namespace {

constexpr int layers = 4, heads = 2, hd = 8, bs = 4;

// Every byte of every block of `c` from a seeded stream (any bit pattern: the bytes are moved,
// never interpreted).
void fill(kv_cache& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (int l = 0; l < c.num_layers(); ++l)
    for (int kv = 0; kv < 2; ++kv)
      for (int b = 0; b < c.config().num_blocks; ++b) {
        auto* p = c.block_data(l, kv, b);
        for (std::size_t i = 0; i < c.block_bytes(); ++i) p[i] = std::uint8_t(rng());
      }
}

kv_layout layout_of(dtype t, std::vector<std::pair<int, int>> ranks) {
  kv_layout l;
  l.type = t;
  l.block_size = bs;
  l.num_layers = layers;
  l.n_kv_heads = heads;
  l.head_dim = hd;
  l.model_key = "test-model@1";
  l.ranks = std::move(ranks);
  return l;
}

// A sending replica: its ranks' caches, exposed.
struct sender {
  std::vector<std::shared_ptr<kv_cache>> ranks;
  kv_handle handle;
  sender(dtype t, std::vector<std::pair<int, int>> split, int num_blocks, std::vector<std::int32_t> blocks, int positions,
         std::uint64_t seed) {
    handle.request = "req";
    handle.layout = layout_of(t, split);
    handle.blocks = std::move(blocks);
    handle.positions = positions;
    for (auto [a, b] : split) {
      auto c = std::make_shared<kv_cache>(kv_cache_config{num_blocks, bs, t, true}, b - a, heads, hd);
      fill(*c, seed + std::uint64_t(a));
      handle.sources.push_back(registry::global().with_tcp(registry::global().expose(c)));
      ranks.push_back(std::move(c));
    }
  }
  ~sender() {
    for (auto& s : handle.sources) registry::global().withdraw(s.key);
  }
  const std::uint8_t* block(int layer, int kv, std::int32_t b) const {
    const int r = handle.layout.rank_of(layer);
    return ranks[std::size_t(r)]->block_data(layer - handle.layout.ranks[std::size_t(r)].first, kv, b);
  }
};

auto soon() { return std::chrono::steady_clock::now() + std::chrono::seconds(20); }

// Pulls `s`'s blocks into receiving ranks split as `split`, then compares every byte.
void check_move(const sender& s, dtype t, std::vector<std::pair<int, int>> split, backend how) {
  const std::vector<std::int32_t> reserved = {9, 2, 7};  // any free ids of the receiver's pool
  for (auto [a, b] : split) {
    kv_cache dst({12, bs, t, false}, b - a, heads, hd);
    std::vector<int> done;
    const pull_result r = pull(s.handle, {&dst, a, layout_of(t, split), reserved}, how, soon(), [&](int l) { done.push_back(l); });
    BOOST_TEST(std::string(backend_name(r.used)) == backend_name(how == backend::automatic ? backend::inproc : how));
    BOOST_TEST(r.bytes == 2 * std::size_t(b - a) * 3 * dst.block_bytes());
    std::vector<int> want;
    for (int l = a; l < b; ++l) want.push_back(l);
    BOOST_TEST(done == want, "each layer reported once, in order");
    for (int l = a; l < b; ++l)
      for (int kv = 0; kv < 2; ++kv)
        for (std::size_t i = 0; i < reserved.size(); ++i)
          BOOST_TEST(std::memcmp(dst.block_data(l - a, kv, reserved[i]), s.block(l, kv, s.handle.blocks[i]), dst.block_bytes()) == 0,
                     "layer " << l << (kv ? " V" : " K") << " block " << i << " via " << backend_name(how));
    // Blocks outside the reservation are untouched (still zero).
    for (int l = a; l < b; ++l) {
      const auto* p = dst.block_data(l - a, 0, 0);
      BOOST_TEST(std::all_of(p, p + dst.block_bytes(), [](std::uint8_t x) { return x == 0; }));
    }
  }
}

}  // namespace

// First, before this process exposes anything (a forked child must not inherit a server): a
// sender in another process, reached through its shared-memory segment and over TCP.
BOOST_AUTO_TEST_CASE(blocks_from_another_process_arrive_intact) {
  for (dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {
    int to_parent[2], to_child[2];
    BOOST_TEST_REQUIRE(::pipe(to_parent) == 0);
    BOOST_TEST_REQUIRE(::pipe(to_child) == 0);
    const pid_t pid = ::fork();
    BOOST_TEST_REQUIRE(pid >= 0);
    if (pid == 0) {  // the sender: one rank, 16 blocks
      auto c = std::make_shared<kv_cache>(kv_cache_config{16, bs, t, true}, layers, heads, hd);
      fill(*c, 99);
      kv_source s = registry::global().with_tcp(registry::global().expose(c));
      std::string msg = s.key + "\n" + std::to_string(s.num_blocks) + "\n" + s.host_id + "\n" + std::to_string(s.pid) + "\n" +
                        s.host + "\n" + std::to_string(s.port) + "\n" + s.secret + "\n";
      [[maybe_unused]] auto w = ::write(to_parent[1], msg.data(), msg.size());
      char c1;
      [[maybe_unused]] auto r = ::read(to_child[0], &c1, 1);  // until the parent is done
      registry::global().withdraw(s.key);
      c.reset();  // the last owner: unlinks the segment
      ::_exit(0);
    }
    std::string got;
    char buf[512];
    while (std::count(got.begin(), got.end(), '\n') < 7) {
      const auto n = ::read(to_parent[0], buf, sizeof buf);
      BOOST_TEST_REQUIRE(n > 0);
      got.append(buf, std::size_t(n));
    }
    std::istringstream in(got);
    kv_source s;
    std::string num, pid_s, port;
    std::getline(in, s.key);
    std::getline(in, num);
    std::getline(in, s.host_id);
    std::getline(in, pid_s);
    std::getline(in, s.host);
    std::getline(in, port);
    std::getline(in, s.secret);
    s.shared = true;
    s.num_blocks = std::stoi(num);
    s.pid = std::stoi(pid_s);
    s.port = std::uint16_t(std::stoi(port));
    // The same bytes, made here from the same seed, to compare with.
    kv_cache mirror({16, bs, t, false}, layers, heads, hd);
    fill(mirror, 99);
    kv_handle h;
    h.request = "remote";
    h.layout = layout_of(t, {{0, layers}});
    h.sources = {s};
    h.blocks = {15, 0, 3, 4};
    h.positions = 3 * bs + 1;  // a partial last block moves whole
    for (backend how : {backend::shm, backend::tcp}) {
      kv_cache dst({8, bs, t, false}, layers, heads, hd);
      const std::vector<std::int32_t> reserved = {1, 2, 3, 4};
      BOOST_TEST(backend_name(choose_backend(s)) == std::string("shm"));
      pull(h, {&dst, 0, layout_of(t, {{0, layers}}), reserved}, how, soon());
      for (int l = 0; l < layers; ++l)
        for (int kv = 0; kv < 2; ++kv)
          for (std::size_t i = 0; i < 4; ++i)
            BOOST_TEST(std::memcmp(dst.block_data(l, kv, reserved[i]), mirror.block_data(l, kv, h.blocks[i]), dst.block_bytes()) == 0,
                       kernels::dtype_name(t) << " via " << backend_name(how) << " layer " << l << " block " << i);
    }
    int status = 0;
    if (t == dtype::bf16) {  // killed: its segment stays behind until a later process removes it
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      BOOST_CHECK_NO_THROW(kv_region::open_shared(s.key, 1));
      BOOST_TEST(remove_stale_segments() >= 1);
    } else {
      [[maybe_unused]] auto w = ::write(to_child[1], "x", 1);
      ::waitpid(pid, &status, 0);
    }
    for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) ::close(fd);
    // Unlinked by its owner at exit, or as stale after a kill: mapping it again fails.
    BOOST_CHECK_THROW(kv_region::open_shared(s.key, 1), std::runtime_error);
  }
}

BOOST_AUTO_TEST_CASE(every_backend_moves_blocks_intact_for_every_dtype) {
  for (dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {
    // The sender has two ranks, the receivers one and three: every layer crosses a rank boundary
    // somewhere.
    sender s(t, {{0, 1}, {1, layers}}, 10, {5, 0, 8}, 2 * bs + 3, 7);
    for (backend how : {backend::automatic, backend::inproc, backend::shm, backend::tcp}) {
      check_move(s, t, {{0, layers}}, how);
      check_move(s, t, {{0, 2}, {2, 3}, {3, layers}}, how);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_layout_mismatch_is_refused_with_its_reason_before_any_byte_moves) {
  sender s(dtype::f16, {{0, layers}}, 6, {1, 2}, 2 * bs, 3);
  auto refused = [&](kv_layout receiver, const std::string& reason) {
    kv_cache dst({6, bs, receiver.type, false}, layers, heads, hd);
    const std::vector<std::int32_t> reserved = {3, 4};
    try {
      pull(s.handle, {&dst, 0, receiver, reserved}, backend::automatic, soon());
      BOOST_ERROR("no error for: " << reason);
    } catch (const transfer_error& e) {
      BOOST_TEST(std::string(e.what()).find(reason) != std::string::npos, e.what() << " should say " << reason);
    }
    for (int l = 0; l < layers; ++l) {
      const auto* p = dst.block_data(l, 0, 3);
      BOOST_TEST(std::all_of(p, p + dst.block_bytes(), [](std::uint8_t x) { return x == 0; }));
    }
  };
  auto l = layout_of(dtype::bf16, {{0, layers}});
  refused(l, "the cache dtype is f16 on the sender and bf16 on the receiver");
  l = layout_of(dtype::f16, {{0, layers}});
  l.model_key = "other@2";
  refused(l, "the model is 'test-model@1' on the sender and 'other@2' on the receiver");
  l = layout_of(dtype::f16, {{0, layers}});
  l.head_dim = 16;
  refused(l, "the head dimension is 8 on the sender and 16 on the receiver");
  l = layout_of(dtype::f16, {{0, layers}});
  l.n_kv_heads = 4;
  refused(l, "the number of KV heads is 2 on the sender and 4 on the receiver");
  l = layout_of(dtype::f16, {{0, layers}});
  l.block_size = 8;
  refused(l, "the block size is 4 on the sender and 8 on the receiver");
  l = layout_of(dtype::f16, {{0, 1}, {2, layers}});
  refused(l, "the receiver's ranks do not hold layers 0..3 once each");
}

BOOST_AUTO_TEST_CASE(the_tcp_server_serves_nothing_without_the_secret) {
  sender s(dtype::f32, {{0, layers}}, 4, {1}, 2, 5);
  kv_handle h = s.handle;
  h.sources[0].secret = std::string(32, '0');
  kv_cache dst({4, bs, dtype::f32, false}, layers, heads, hd);
  const std::vector<std::int32_t> reserved = {2};
  try {
    pull(h, {&dst, 0, layout_of(dtype::f32, {{0, layers}}), reserved}, backend::tcp, soon());
    BOOST_ERROR("served with a wrong secret");
  } catch (const transfer_error& e) {
    BOOST_TEST(std::string(e.what()).find("refused") != std::string::npos, e.what());
  }
  // A withdrawn cache is gone for every backend.
  registry::global().withdraw(s.handle.sources[0].key);
  for (backend how : {backend::inproc, backend::tcp})
    BOOST_CHECK_THROW(pull(s.handle, {&dst, 0, layout_of(dtype::f32, {{0, layers}}), reserved}, how, soon()), transfer_error);
}

BOOST_AUTO_TEST_CASE(a_transfer_larger_than_the_caches_arrives_intact) {
  // 10 MiB: past the size from which pulls copy with non-temporal stores.
  const int L = 4, H = 8, D = 128, B = 16, blocks = 40;
  kv_layout lay;
  lay.type = dtype::bf16;
  lay.block_size = B;
  lay.num_layers = L;
  lay.n_kv_heads = H;
  lay.head_dim = D;
  lay.model_key = "big@1";
  lay.ranks = {{0, L}};
  auto src = std::make_shared<kv_cache>(kv_cache_config{blocks, B, dtype::bf16, true}, L, H, D);
  fill(*src, 11);
  kv_handle h;
  h.request = "big";
  h.layout = lay;
  h.sources = {registry::global().expose(src)};
  for (int i = 0; i < blocks; ++i) h.blocks.push_back(blocks - 1 - i);
  h.positions = blocks * B;
  std::vector<std::int32_t> reserved;
  for (int i = 0; i < blocks; ++i) reserved.push_back(i + 1);
  for (backend how : {backend::inproc, backend::shm}) {
    kv_cache dst({blocks + 1, B, dtype::bf16, false}, L, H, D);
    const auto r = pull(h, {&dst, 0, lay, reserved}, how, soon());
    BOOST_TEST(r.bytes == std::size_t(2) * L * blocks * dst.block_bytes());
    for (int l = 0; l < L; ++l)
      for (int kv = 0; kv < 2; ++kv)
        for (int i = 0; i < blocks; ++i)
          BOOST_TEST_REQUIRE(std::memcmp(dst.block_data(l, kv, reserved[std::size_t(i)]), src->block_data(l, kv, h.blocks[std::size_t(i)]),
                                         dst.block_bytes()) == 0);
  }
  registry::global().withdraw(h.sources[0].key);
}
