// Disaggregated serving across processes on the transfer engine: this test is the head (router
// and request owner) and starts node-a (prefill) and node-b (decode) as `troupe node` processes.
// Each request's KV goes from node-a's cache straight into node-b's reserved blocks (shared
// memory or TCP); the head carries only handles, which its sockets' byte counts show. Killing the
// prefill process mid-stream must leave no request unfinished, no token different and no block
// held on the decode side.
#define BOOST_TEST_MODULE disagg_process
#include <boost/test/unit_test.hpp>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <cstddef>
#include <filesystem>
#include <fstream>

#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "actors/cluster/local_cluster.h"
#include "runtime/kv/kv_region.h"
#include "runtime/model/fingerprint.h"
#include "tests/support/cluster_run.h"
#include "tests/support/engine_factory.h"
#include "tests/support/models.h"
#include "tests/support/process.h"

using namespace troupe;
using namespace troupe::actors;

namespace {

using config = test::network_config;

// Bytes the TCP connections of this process (the head) have received and sent so far, as the
// kernel counts them per socket (TCP_INFO): every byte that reached or left the head.
std::uint64_t io_bytes() {
  std::uint64_t sum = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::atoi(e.path().filename().c_str());
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    struct tcp_info info {};
    socklen_t len = sizeof info;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && len >= offsetof(tcp_info, tcpi_bytes_received) + 8)
      sum += info.tcpi_bytes_received + info.tcpi_bytes_acked;
  }
  return sum;
}

std::string topology_text(const std::string& model_dir, const std::string& kv_transfer) {
  return R"([model]
path = ")" + model_dir + R"("

[[nodes]]
name = "head"
address = "127.0.0.1:7710"

[[nodes]]
name = "node-a"
address = "127.0.0.1:0"

[[nodes]]
name = "node-b"
address = "127.0.0.1:0"

[[pools]]
name = "prefill"
role = "prefill"
replicas = 1
nodes = ["node-a"]

[[pools]]
name = "decode"
role = "decode"
replicas = 1
nodes = ["node-b"]

[scheduler]
max_batched_tokens = 1024
block_size = 16
kv_memory = "256MiB"

[timeouts]
heartbeat = "200ms"
connection = "2s"
request = "30s"

[kv_transfer]
)" + kv_transfer + "\n";
}

struct outcome {
  std::map<std::string, std::vector<std::int32_t>> tokens;
  std::vector<load_report> loads;  // of the live replicas at the end
  std::uint64_t head_io = 0;       // bytes through the head's system calls during the run
};

// The head in this process and node-a and node-b as `troupe node` processes, on `text`.
struct two_nodes {
  std::string path;
  topology::topology_config topo;
  std::unique_ptr<config> cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<local_cluster> head;
  std::unique_ptr<test::child_process> a, b;  // destroyed (killed) first

  explicit two_nodes(const std::string& text) : path("/tmp/troupe-kv-test-" + std::to_string(::getpid()) + ".toml") {
    std::ofstream(path) << text;
    topo = topology::load_topology(path);
    cfg = std::make_unique<config>(topo);
    sys = std::make_unique<caf::actor_system>(*cfg);
    head = std::make_unique<local_cluster>(*sys, topo, nullptr, nullptr, placement_mode::head_node_only);
    const std::uint16_t port = head->publish("127.0.0.1", 0);
    const std::string token = "kv-test-token-" + std::to_string(::getpid());
    ::setenv("TROUPE_CLUSTER_TOKEN", token.c_str(), 1);
    head->admit({token, model::model_fingerprint(topo.model.path)});
    auto node = [&](const std::string& name) {
      return std::vector<std::string>{std::string(TROUPE_BINARY_DIR) + "/troupe", "node", path, "--name", name, "--head",
                                      "127.0.0.1:" + std::to_string(port)};
    };
    a = std::make_unique<test::child_process>(node("node-a"));
    b = std::make_unique<test::child_process>(node("node-b"));
    BOOST_TEST_REQUIRE(a->wait_for_line("ready"));
    BOOST_TEST_REQUIRE(b->wait_for_line("ready"));
    BOOST_TEST_REQUIRE(head->live_replicas() == 2u);
  }
  ~two_nodes() {
    a.reset();
    b.reset();
    head.reset();
    sys.reset();
    std::remove(path.c_str());
  }
};

// Runs `reqs` on the prefill/decode topology; kills node-a once `kill_after` first tokens
// arrived (0: never).
outcome run(const std::string& model_dir, const std::string& kv_transfer, const std::vector<engine::request>& reqs,
            int kill_after = 0) {
  two_nodes c(topology_text(model_dir, kv_transfer));
  outcome out;
  caf::scoped_actor self{*c.sys};
  auto sink = caf::actor_cast<token_sink>(self);
  const std::uint64_t io0 = io_bytes();
  for (auto& r : reqs)
    self->request(c.head->owner(), std::chrono::seconds(30), submit_atom::value, r, sink)
        .receive([](bool ok) { BOOST_TEST(ok); }, [&](caf::error& e) { BOOST_FAIL("submit: " << to_string(e)); });
  std::size_t done = 0;
  int firsts = 0;
  while (done < reqs.size())
    self->receive(
        [&](token_batch& batch) {
          for (auto& u : batch.updates) {
            auto& t = out.tokens[u.id];
            if (t.empty() && !u.tokens.empty()) ++firsts;
            t.insert(t.end(), u.tokens.begin(), u.tokens.end());
            if (u.finished) {
              ++done;
              BOOST_TEST(engine::finish_reason_name(u.reason) == std::string("length"), u.id << ": " << u.error);
            }
          }
          if (kill_after > 0 && firsts >= kill_after) {
            c.a->kill(SIGKILL);
            kill_after = 0;
          }
        },
        caf::after(std::chrono::seconds(120)) >> [&] { BOOST_FAIL("no tokens for 120 s"); });
  out.head_io = io_bytes() - io0;
  out.loads = test::live_loads(self, c.head->router());
  return out;
}

// The nodes are killed (SIGKILL) when a case ends, so their caches' segments stay behind: removed
// here as the next troupe process on this host would.
struct stale_segments {
  ~stale_segments() { kv::remove_stale_segments(); }
};
BOOST_GLOBAL_FIXTURE(stale_segments);

std::string model_dir() { return test::synth_model("small-llama-f32", test::preset("small")); }

std::vector<std::vector<std::int32_t>> aggregated(const std::vector<engine::request>& reqs) {
  auto model = std::shared_ptr<const model::llama_model>(model::llama_model::load(model_dir()));
  auto e = engine::cpu_engine(model, nullptr, test::engine_cfg(512, 2048));
  return engine::generate_all(e, reqs);
}

}  // namespace

BOOST_AUTO_TEST_CASE(sixty_four_requests_decode_to_the_aggregated_tokens_with_no_kv_through_the_head) {
  // Greedy over shared memory, seeded over TCP: the transports move bytes whatever chose the
  // tokens, so the four combinations tested nothing the two do not (and took 70 s of CI alone).
  for (const auto& [backend, greedy] : std::vector<std::pair<const char*, bool>>{{"shm", true}, {"tcp", false}}) {
      const auto reqs = test::mixed_requests(64, 512, greedy, 160);
      const auto expected = aggregated(reqs);
      const outcome o = run(model_dir(), std::string("backend = \"") + backend + "\"", reqs);
      for (std::size_t i = 0; i < reqs.size(); ++i)
        BOOST_TEST(o.tokens.at(reqs[i].id) == expected[i], backend << (greedy ? " greedy" : " seeded") << " request " << i);
      std::uint64_t pulled = 0, pulls = 0, failures = 0, computed = 0, used = 0, held = 0;
      for (const auto& l : o.loads) {
        pulled += l.kv_pull_bytes;
        pulls += l.kv_pulls;
        failures += l.kv_pull_failures;
        computed += l.prompt_tokens_computed;
        used += std::uint64_t(l.used_blocks);
        held += std::uint64_t(l.handoffs_held);
      }
      std::uint64_t prompts = 0;
      for (const auto& r : reqs) prompts += r.prompt.size();
      std::printf("disaggregated (%s, %s): %llu KV bytes pulled node-a -> node-b in %llu pulls; %llu bytes through the head's I/O\n",
                  backend, greedy ? "greedy" : "seeded", (unsigned long long)pulled, (unsigned long long)pulls,
                  (unsigned long long)o.head_io);
      BOOST_TEST(pulls == reqs.size());
      BOOST_TEST(failures == 0u);
      BOOST_TEST(computed == prompts);  // each prompt once, on node-a
      // The head saw tokens and handles, not the KV: all of its I/O is a small part of the KV.
      BOOST_TEST(pulled > 0u);
      BOOST_TEST(o.head_io * 50 < pulled, o.head_io << " bytes through the head, " << pulled << " of KV moved");
      BOOST_TEST(used == 0u);  // nothing left allocated on either side
      BOOST_TEST(held == 0u);
    }
}

BOOST_AUTO_TEST_CASE(the_prefill_process_killed_mid_stream_leaves_no_request_unfinished_and_no_block_held) {
  const auto reqs = test::mixed_requests(48, 512, false, 400);
  const auto expected = aggregated(reqs);
  const outcome o = run(model_dir(), "backend = \"tcp\"", reqs, 6);
  for (std::size_t i = 0; i < reqs.size(); ++i) BOOST_TEST(o.tokens.at(reqs[i].id) == expected[i], "request " << i);
  BOOST_TEST_REQUIRE(o.loads.size() == 1u);  // node-b alone is left
  BOOST_TEST(o.loads[0].used_blocks == 0);
  BOOST_TEST(o.loads[0].handoffs_held == 0);
  std::printf("prefill killed: node-b pulled %llu requests' KV, %llu pulls failed (recomputed)\n",
              (unsigned long long)o.loads[0].kv_pulls, (unsigned long long)o.loads[0].kv_pull_failures);
}

BOOST_AUTO_TEST_CASE(failing_pulls_recompute_and_free_the_blocks_on_both_sides) {
  // The decode side insists on shared memory, the prefill side has none: every pull fails
  // before a byte moves, node-b recomputes, and node-a frees what it held when told.
  const auto reqs = test::mixed_requests(16, 512, true, 160);
  const auto expected = aggregated(reqs);
  const outcome o = run(model_dir(), "backend = \"shm\"\nshared_memory = false", reqs);
  for (std::size_t i = 0; i < reqs.size(); ++i) BOOST_TEST(o.tokens.at(reqs[i].id) == expected[i], "request " << i);
  std::uint64_t failures = 0, used = 0, held = 0;
  for (const auto& l : o.loads) {
    failures += l.kv_pull_failures;
    used += std::uint64_t(l.used_blocks);
    held += std::uint64_t(l.handoffs_held);
  }
  BOOST_TEST(failures == reqs.size());
  BOOST_TEST(used == 0u);
  BOOST_TEST(held == 0u);
}

// Two nodes with a replica and a KV store each: a prefix computed on node-a and let go of goes to
// node-a's store; the next request with that prefix, placed on node-b, pulls it from there (over
// TCP, as from another host) and computes only the rest, with the tokens of a full recompute.
BOOST_AUTO_TEST_CASE(a_prefix_computed_on_node_a_is_fetched_from_its_store_on_node_b) {
  const std::string dir = model_dir();
  const int vocab = 512;
  auto reqs = test::mixed_requests(2, vocab, false, 60);
  for (auto& r : reqs) {
    std::vector<std::int32_t> p;
    for (int i = 0; i < 320; ++i) p.push_back((i * 4513 + 11) % vocab);
    p.insert(p.end(), r.prompt.begin(), r.prompt.end());
    r.prompt = std::move(p);
  }
  const auto expected = aggregated(reqs);
  std::string text = topology_text(dir, "backend = \"tcp\"\n\n[kv_store]\ncapacity = \"64MiB\"\n");
  // One replica on each node instead of a prefill and a decode pool; round robin places the
  // first request on node-a and the second on node-b.
  const auto a = text.find("[[pools]]"), b = text.find("[scheduler]");
  text.replace(a, b - a, "[[pools]]\nname = \"main\"\nreplicas = 2\nnodes = [\"node-a\", \"node-b\"]\n\n[router]\npolicy = \"round_robin\"\n\n");
  two_nodes c(text);
  caf::scoped_actor self{*c.sys};
  BOOST_TEST(test::run_request(self, c.head->owner(), reqs[0]) == expected[0]);
  // Wait until the head's router has heard from node-a's store that it holds the 20 prefix
  // blocks (its events cross the network after the replica's offload).
  router_stats rs;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (rs.store_blocks < 20 && std::chrono::steady_clock::now() < deadline)
    self->request(c.head->router(), std::chrono::seconds(30), router_stats_atom::value)
        .receive([&](router_stats& s) { rs = s; }, [&](caf::error& e) { BOOST_FAIL(to_string(e)); });
  BOOST_TEST_REQUIRE(rs.stores == 2u);
  BOOST_TEST_REQUIRE(rs.store_blocks >= 20u);
  BOOST_TEST(test::run_request(self, c.head->owner(), reqs[1]) == expected[1]);
  std::uint64_t pulls = 0, computed = 0;
  for (const auto& l : test::live_loads(self, c.head->router())) {
    pulls += l.kv_pulls;
    computed += l.prompt_tokens_computed;
  }
  BOOST_TEST(pulls == 1u);
  BOOST_TEST(computed == reqs[0].prompt.size() + reqs[1].prompt.size() - 320);  // the prefix once
}
