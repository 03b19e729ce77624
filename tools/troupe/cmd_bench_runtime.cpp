// troupe bench runtime: the control plane under load. Submits many requests at once to a
// topology started in this process (sim or cpu backend) and reports how fast the request owner
// and router place them, the router's decision time, and the end-to-end completion.
#include <algorithm>
#include <caf/all.hpp>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "actors/local_cluster.h"
#include "runtime/common/error.h"
#include "tools/troupe/args.h"
#include "tools/troupe/commands.h"
#include "tools/troupe/model_folder.h"

namespace troupe::cli {

namespace {
struct bench_config : caf::actor_system_config {
  bench_config() { actors::register_protocols(*this); }
};

double percentile(std::vector<std::int64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return double(v[std::min(v.size() - 1, std::size_t(p * double(v.size())))]);
}
}  // namespace

int cmd_bench_runtime(int argc, char** argv) {
  args a(argc, argv, 3, {"config", "requests", "prompt", "max-tokens"}, {"json"});
  const std::string config = a.get("config", "configs/sim-32.toml");
  auto topo = topology::load_topology(config);
  const int n = int(a.get_int("requests", 10000));
  const int prompt_len = int(a.get_int("prompt", 256));
  const int max_tokens = int(a.get_int("max-tokens", 32));
  opened_model m;
  int vocab = 0;
  if (topo.model.backend == topology::backend_kind::sim) {
    vocab = actors::sim_shape(topo).vocab_size;
  } else {
    m = open_model(topo.model.path);
    vocab = m.model->config().vocab_size;
  }
  bench_config cfg;
  caf::actor_system sys{cfg};
  actors::local_cluster cluster(sys, topo, m.model, m.tok);
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<actors::token_sink>(self);

  std::vector<actors::generate_request> reqs(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto& r = reqs[std::size_t(i)];
    r.id = "b" + std::to_string(i);
    for (int p = 0; p < prompt_len; ++p) r.prompt.push_back((i * 131 + p * 7) % vocab);
    r.max_tokens = max_tokens;
    r.temperature = 0;
    r.ignore_eos = true;
  }
  const auto t0 = std::chrono::steady_clock::now();
  using handle = decltype(self->request(cluster.owner(), topo.timeouts.request, actors::submit_atom::value, reqs[0], sink));
  std::vector<handle> pending;
  pending.reserve(reqs.size());
  for (auto& r : reqs) pending.push_back(self->request(cluster.owner(), topo.timeouts.request, actors::submit_atom::value, r, sink));
  int accepted = 0;
  std::string first_error;
  for (auto& h : pending)
    h.receive([&](bool ok) { accepted += ok ? 1 : 0; },
              [&](caf::error& e) { if (first_error.empty()) first_error = sys.render(e); });
  const double placed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (accepted != n) throw input_error(std::to_string(n - accepted) + " requests were refused: " + first_error);

  std::size_t done = 0, tokens = 0;
  while (done < reqs.size())
    self->receive(
        [&](actors::token_batch& b) {
          for (auto& u : b.updates) {
            tokens += u.tokens.size();
            done += u.finished ? 1 : 0;
          }
        },
        caf::after(std::chrono::duration_cast<std::chrono::milliseconds>(topo.timeouts.request)) >>
            [&] { throw input_error("no tokens for " + std::to_string(topo.timeouts.request.count()) + " ms"); });
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<std::int64_t> decisions;
  self->request(cluster.router(), topo.timeouts.request, actors::timing_atom::value)
      .receive([&](std::vector<std::int64_t>& d) { decisions = std::move(d); }, [](caf::error&) {});

  nlohmann::json j = {{"config", config},
                      {"backend", topology::backend_name(topo.model.backend)},
                      {"replicas", cluster.schedulers().size()},
                      {"requests", n},
                      {"prompt_tokens", prompt_len},
                      {"max_tokens", max_tokens},
                      {"placed_per_second", n / placed_s},
                      {"router_decision_us_p50", percentile(decisions, 0.50) / 1e3},
                      {"router_decision_us_p99", percentile(decisions, 0.99) / 1e3},
                      {"completion_seconds", total_s},
                      {"generated_tokens", tokens}};
  if (a.has("json")) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s: %zu %s replicas, %d requests (%d prompt tokens, %d output tokens each)\n", config.c_str(),
              cluster.schedulers().size(), topology::backend_name(topo.model.backend), n, prompt_len, max_tokens);
  std::printf("placed: %d requests in %.3f s = %.0f requests/s (submit -> route -> replica accepted)\n", n, placed_s, n / placed_s);
  std::printf("router decision time: p50 %.1f us, p99 %.1f us over %zu decisions\n", percentile(decisions, 0.5) / 1e3,
              percentile(decisions, 0.99) / 1e3, decisions.size());
  std::printf("all finished after %.2f s wall (%zu tokens)\n", total_s, tokens);
  return 0;
}

}  // namespace troupe::cli
