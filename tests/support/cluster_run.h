// Runs requests through a topology started in this process (the embedding API) and collects
// every token, optionally injecting a fault mid-generation. Shared by the actor-level tests.
#pragma once
#include <boost/test/unit_test.hpp>

#include <caf/all.hpp>
#include <chrono>
#include <functional>
#include <map>

#include "actors/cluster/local_cluster.h"
#include "tests/support/engine_factory.h"
#include "tests/support/models.h"

namespace troupe::test {

struct config : caf::actor_system_config {
  config() {
    actors::register_protocols(*this);
    actors::configure_workers(*this);
  }
};

// For a head that nodes in other processes join: the protocols and the topology's middleman
// heartbeat and connection timeout.
struct network_config : caf::actor_system_config {
  explicit network_config(const topology::topology_config& t) {
    actors::register_protocols(*this);
    actors::configure_workers(*this);
    actors::configure_network(*this, t.timeouts);
  }
};

// configs/local.toml on the small test model, with `replicas` replicas placed round-robin.
inline topology::topology_config local_topology(int replicas) {
  auto t = topology::load_topology(std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml");
  t.model.path = synth_model("small-llama-f32", preset("small"));
  t.pools.at(0).replicas = replicas;
  t.router.policy = "round_robin";
  t.router.params.clear();
  return t;
}

struct run_result {
  std::map<std::string, std::vector<std::int32_t>> tokens;
  std::map<std::string, int> finished;
  std::map<std::string, std::string> reasons;
  int unfinished_on_dead = 0;  // even-indexed requests (replica 0's) unfinished at the fault
  std::vector<actors::migration_event> migrations;
  std::chrono::steady_clock::time_point fault_at;
  std::chrono::steady_clock::time_point first_token_after_fault;  // the first one after it
  actors::group_status group0;  // replica 0's worker group at the end (if it still exists)
  std::vector<actors::load_report> loads;  // each live replica's at the end, in spawn order
};

using fault_action = std::function<void(actors::local_cluster&)>;

// Submits all requests, runs `fault` once `fault_after` tokens have arrived, and collects every
// update until each request has finished. Round-robin places request i on replica
// i % replicas, so the even-indexed requests are the ones replica 0 held.
inline run_result run_cluster(const topology::topology_config& topo, const std::vector<engine::request>& reqs,
                              int fault_after = -1, fault_action fault = {},
                              std::shared_ptr<const model::llama_model> model = nullptr) {
  using namespace actors;
  config cfg;
  caf::actor_system sys{cfg};
  run_result out;
  {
    local_cluster cluster(sys, topo, model ? model : small_model(), nullptr);
    caf::scoped_actor self{sys};
    auto sink = caf::actor_cast<token_sink>(self);
    for (auto& r : reqs)
      self->request(cluster.owner(), std::chrono::seconds(30), submit_atom::value, r, sink)
          .receive([](bool ok) { BOOST_TEST(ok); },
                   [&](caf::error& e) { BOOST_FAIL("submit: " << sys.render(e)); });
    std::size_t done = 0;
    int received = 0;
    bool faulted = false, after = false;
    while (done < reqs.size()) {
      self->receive(
          [&](token_batch& b) {
            for (auto& u : b.updates) {
              received += int(u.tokens.size());
              if (faulted && !after && !u.tokens.empty()) {
                after = true;
                out.first_token_after_fault = std::chrono::steady_clock::now();
              }
              auto& t = out.tokens[u.id];
              t.insert(t.end(), u.tokens.begin(), u.tokens.end());
              if (u.finished) {
                ++out.finished[u.id];
                out.reasons[u.id] = engine::finish_reason_name(u.reason);
                ++done;
              }
            }
            if (!faulted && fault && received >= fault_after) {
              for (std::size_t i = 0; i < reqs.size(); i += 2) out.unfinished_on_dead += out.finished.count(reqs[i].id) == 0;
              out.fault_at = std::chrono::steady_clock::now();
              fault(cluster);
              faulted = true;
            }
          },
          caf::after(std::chrono::seconds(120)) >> [&] { BOOST_FAIL("no tokens for 120 s"); });
    }
    self->request(cluster.owner(), std::chrono::seconds(30), migrations_atom::value)
        .receive([&](std::vector<migration_event>& m) { out.migrations = std::move(m); },
                 [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
    for (const auto& s : cluster.schedulers())
      self->request(s, std::chrono::seconds(30), load_atom::value)
          .receive([&](actors::load_report& l) { out.loads.push_back(l); }, [](caf::error&) {});
    try {
      out.group0 = cluster.group_of(0);
    } catch (const std::exception&) {  // replica 0 is gone (killed)
    }
  }
  return out;
}

// Submits `r` through the request owner and collects its tokens until it finishes. Other
// messages (KV event batches a test subscribed to) stay in the mailbox for a later receive.
inline std::vector<std::int32_t> run_request(caf::scoped_actor& self, const actors::owner_actor& owner, const engine::request& r) {
  using namespace actors;
  self->request(owner, std::chrono::seconds(30), submit_atom::value, r, caf::actor_cast<token_sink>(self))
      .receive([](bool ok) { BOOST_TEST(ok); }, [&](caf::error& e) { BOOST_FAIL("submit: " << to_string(e)); });
  std::vector<std::int32_t> got;
  for (bool done = false; !done;)
    self->receive(
        [&](token_batch& b) {
          for (auto& u : b.updates) {
            got.insert(got.end(), u.tokens.begin(), u.tokens.end());
            done |= u.finished;
          }
        },
        caf::after(std::chrono::seconds(60)) >> [&] { BOOST_FAIL("no tokens for 60 s"); });
  return got;
}

// The load report of every replica the router can place on now, wherever it runs.
inline std::vector<actors::load_report> live_loads(caf::scoped_actor& self, const actors::router_actor& router) {
  using namespace actors;
  std::vector<scheduler_actor> reps;
  self->request(router, std::chrono::seconds(30), replicas_atom::value)
      .receive([&](std::vector<scheduler_actor>& r) { reps = std::move(r); },
               [&](caf::error& e) { BOOST_FAIL("replicas: " << to_string(e)); });
  std::vector<load_report> out;
  for (auto& s : reps)
    self->request(s, std::chrono::seconds(30), load_atom::value)
        .receive([&](load_report& l) { out.push_back(l); }, [&](caf::error& e) { BOOST_FAIL("load: " << to_string(e)); });
  return out;
}

inline void check_same(const std::vector<engine::request>& reqs, const std::vector<std::vector<std::int32_t>>& expected,
                       const run_result& got) {
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    BOOST_TEST(got.tokens.at(reqs[i].id) == expected[i], "request " << i << ": got " << got.tokens.at(reqs[i].id).size() << " tokens, expected " << expected[i].size());
    BOOST_TEST(got.finished.at(reqs[i].id) == 1);
    BOOST_TEST(got.reasons.at(reqs[i].id) == "length");
  }
}

// What the engine alone produces for the requests.
inline std::vector<std::vector<std::int32_t>> engine_outputs(const std::vector<engine::request>& reqs,
                                                             std::shared_ptr<const model::llama_model> model = nullptr) {
  auto e = engine::cpu_engine(model ? model : small_model(), nullptr, engine_cfg(512, 2048));
  return engine::generate_all(e, reqs);
}

}  // namespace troupe::test
