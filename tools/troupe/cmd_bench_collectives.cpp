// troupe bench collectives: all-reduce and all-to-all latency and bandwidth of each collectives
// backend that runs here (shared memory between threads, Gloo between processes over loopback
// TCP), per message size, against memcpy bandwidth measured in the same run; and, with --model,
// the step time of a replica's worker group (the real supervisor and ranks) for TP=1, TP=2 and
// PP=2 with and without micro-batches, with the time its ranks spent in collectives.
//
// Bandwidths follow nccl-tests: "algbw" is bytes / time; "busbw" scales it by what each rank must
// move (all-reduce 2(n-1)/n, all-to-all (n-1)/n), so it is comparable to a link's bandwidth.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <caf/all.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include "actors/cluster/local_cluster.h"
#include "actors/serving/worker_group.h"
#include "kernels/cpu/stream_copy.h"
#include "runtime/collectives/gloo.h"
#include "runtime/collectives/shm.h"
#include "runtime/common/error.h"
#include "runtime/model/op_profile.h"
#include "tools/troupe/args.h"
#include "tools/troupe/commands.h"

namespace troupe::cli {

namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

enum class op_kind { all_reduce, all_to_all };
const char* op_name(op_kind k) { return k == op_kind::all_reduce ? "all_reduce" : "all_to_all"; }

struct result {
  std::string backend, op;
  std::size_t bytes = 0;
  double latency_us = 0, algbw_gbs = 0, busbw_gbs = 0;
};

// Calls of `k` on `c` over `bytes` per rank: the mean seconds per call after a warm-up, on
// this rank (every rank waits for the slowest, so it is the group's).
double time_op(collectives::communicator& c, op_kind k, std::size_t bytes, int iters) {
  const std::size_t count = std::max<std::size_t>(1, bytes / 4 / std::size_t(c.size())) * std::size_t(c.size());  // whole blocks
  std::vector<float> a(count, 1.0f), b(a.size());
  auto once = [&] {
    if (k == op_kind::all_reduce) c.all_reduce(a);
    else c.all_to_all(a, b);
  };
  for (int i = 0; i < 2; ++i) once();
  const auto t0 = clock_type::now();
  for (int i = 0; i < iters; ++i) once();
  return since(t0) / iters;
}

int iters_for(std::size_t bytes) { return int(std::clamp<std::size_t>((std::size_t(64) << 20) / std::max<std::size_t>(bytes, 1), 5, 2000)); }

result make_result(const std::string& backend, op_kind k, std::size_t bytes, double seconds, int n) {
  const double alg = double(bytes) / seconds / 1e9;
  const double factor = k == op_kind::all_reduce ? 2.0 * (n - 1) / n : double(n - 1) / n;
  return {backend, op_name(k), bytes, seconds * 1e6, alg, alg * factor};
}

std::vector<result> bench_shm(int n, const std::vector<std::size_t>& sizes) {
  std::vector<result> out;
  for (op_kind k : {op_kind::all_reduce, op_kind::all_to_all})
    for (std::size_t bytes : sizes) {
      auto group = collectives::make_shm_group({n, 1, std::chrono::milliseconds(120000)});
      std::vector<double> secs(static_cast<std::size_t>(n));
      std::vector<std::thread> ranks;
      for (int r = 0; r < n; ++r) ranks.emplace_back([&, r] { secs[std::size_t(r)] = time_op(*group[std::size_t(r)], k, bytes, iters_for(bytes)); });
      for (auto& t : ranks) t.join();
      out.push_back(make_result("shm", k, bytes, *std::max_element(secs.begin(), secs.end()), n));
    }
  return out;
}

// Gloo ranks 1..n-1 are forked children (before this process starts any thread); rank 0 here
// measures. Each size is its own group generation.
std::vector<result> bench_gloo(int n, const std::vector<std::size_t>& sizes) {
  char tmpl[] = "/tmp/troupe-bench-gloo-XXXXXX";
  if (!::mkdtemp(tmpl)) throw input_error("bench collectives: cannot make a rendezvous directory in /tmp");
  const std::string dir = tmpl;
  auto run_rank = [&](int r, std::vector<result>* out) {
    std::uint64_t gen = 0;
    for (op_kind k : {op_kind::all_reduce, op_kind::all_to_all})
      for (std::size_t bytes : sizes) {
        auto c = collectives::connect_gloo({r, n, ++gen, "bench", dir, "127.0.0.1", std::chrono::milliseconds(120000)});
        const double s = time_op(*c, k, bytes, iters_for(bytes));
        if (out) out->push_back(make_result("gloo", k, bytes, s, n));
      }
  };
  std::vector<pid_t> children;
  for (int r = 1; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        run_rank(r, nullptr);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "troupe: gloo rank %d: %s\n", r, e.what());
        code = 1;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  std::vector<result> out;
  std::string failed;
  try {
    run_rank(0, &out);
  } catch (const std::exception& e) {
    failed = e.what();
  }
  for (pid_t p : children) {
    int st = 0;
    ::waitpid(p, &st, 0);
  }
  std::filesystem::remove_all(dir);
  if (!failed.empty()) throw input_error("bench collectives: gloo: " + failed);
  return out;
}

// memcpy bandwidth (bytes copied per second) over a buffer far larger than the caches.
double memcpy_gbs() {
  const std::size_t bytes = std::size_t(256) << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::memcpy(b.data(), a.data(), bytes);
  double best = 1e9;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = clock_type::now();
    std::memcpy(b.data(), a.data(), bytes);
    best = std::min(best, since(t0));
  }
  return double(bytes) / best / 1e9;
}

struct step_times {
  std::string shape;
  int pipeline = 1, tensor = 1, micro = 1;
  double prefill_ms = 0, decode_ms = 0;  // one prefill step of all sequences; median decode step
  double collective_ms_per_step = 0;     // per rank, over the decode steps
};

struct group_cfg : caf::actor_system_config {
  group_cfg() {
    actors::register_protocols(*this);
    actors::configure_workers(*this);
  }
};

// Steps of a real worker group (supervisor and ranks as actors) on `model`: one prefill of
// `seqs` sequences of `context` tokens, then `steps` decode steps of one token each.
step_times time_group(caf::actor_system& sys, const std::shared_ptr<const model::llama_model>& m, int pipeline, int tensor,
                      int micro, int seqs, int context, int steps) {
  using namespace actors;
  const int per = (context + steps + 16) / 16;
  caf::scoped_actor self{sys};
  group_config g;
  g.pipeline_ranks = pipeline;
  g.tensor_ranks = tensor;
  g.micro_batches = micro;
  auto group = self->spawn(group_supervisor, m, kv::kv_cache_config{seqs * per, 16, kernels::dtype::f32, false}, g,
                           caf::actor_cast<caf::actor>(self));
  engine::forward_plan plan;
  for (int s = 0; s < seqs; ++s) {
    plan.tables.emplace_back(std::size_t(per));
    std::iota(plan.tables.back().begin(), plan.tables.back().end(), s * per);
  }
  sampling::sampling_row greedy;
  greedy.params.temperature = 0;
  auto run = [&](const engine::forward_plan& p) {
    const auto t0 = clock_type::now();
    self->request(group, std::chrono::minutes(10), execute_atom::value, stage_input{p, {}})
        .receive([](engine::step_result&) {}, [&](caf::error& e) { throw input_error("bench collectives: step failed: " + sys.render(e)); });
    return since(t0);
  };
  auto build = [&](int from, int count) {
    engine::forward_plan p;
    p.tables = plan.tables;
    for (int s = 0; s < seqs; ++s) {
      for (int i = from; i < from + count; ++i) {
        p.tokens.push_back((s * 131 + i * 7 + 3) % (m->config().vocab_size - 1) + 1);
        p.positions.push_back(i);
        p.seq_of_token.push_back(s);
      }
      p.logit_rows.push_back(std::int32_t(p.tokens.size()) - 1);
      p.sampling.push_back(greedy);
    }
    return p;
  };
  step_times out;
  out.pipeline = pipeline, out.tensor = tensor, out.micro = micro;
  out.shape = "TP=" + std::to_string(tensor) + " PP=" + std::to_string(pipeline) + (pipeline > 1 ? " micro=" + std::to_string(micro) : "");
  out.prefill_ms = run(build(0, context)) * 1e3;
  model::op_profile::reset();
  model::op_profile::enable(true);
  std::vector<double> decode;
  for (int i = 0; i < steps; ++i) decode.push_back(run(build(context + i, 1)));
  model::op_profile::enable(false);
  std::sort(decode.begin(), decode.end());
  out.decode_ms = decode[decode.size() / 2] * 1e3;
  const double coll = model::op_profile::seconds(model::op::all_reduce) + model::op_profile::seconds(model::op::all_gather) +
                      model::op_profile::seconds(model::op::all_to_all);
  out.collective_ms_per_step = coll * 1e3 / steps / (pipeline * tensor);
  self->send_exit(group, caf::exit_reason::user_shutdown);
  return out;
}

std::vector<std::size_t> parse_sizes(const std::string& s) {
  std::vector<std::size_t> out;
  std::size_t at = 0;
  while (at <= s.size()) {
    const std::size_t comma = std::min(s.find(',', at), s.size());
    const std::string item = s.substr(at, comma - at);
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    std::string unit = end ? end : "";
    double mult = unit.empty() || unit == "B" ? 1 : unit == "KiB" ? 1024 : unit == "MiB" ? 1048576 : 0;
    if (item.empty() || !(v > 0) || mult == 0)
      throw input_error("--sizes: '" + item + "' is not a size (like 4KiB, 1MiB or 65536)");
    out.push_back(std::max<std::size_t>(std::size_t(v * mult), 64));
    at = comma + 1;
  }
  return out;
}

}  // namespace

int cmd_bench_collectives(const args& a) {
  const int n = int(a.get_int("ranks", 2));
  if (n < 2 || n > 16) throw input_error("--ranks must be 2..16, got " + std::to_string(n));
  const auto sizes = parse_sizes(a.get("sizes", "4KiB,64KiB,1MiB,16MiB"));
  const bool json_out = a.has("json");
  std::vector<result> results;
  if (!a.has("no-gloo")) results = bench_gloo(n, sizes);  // first: it forks
  const auto shm = bench_shm(n, sizes);
  results.insert(results.end(), shm.begin(), shm.end());
  const double copy = memcpy_gbs();
  std::vector<step_times> groups;
  if (auto dir = a.get("model")) {
    std::shared_ptr<const model::llama_model> m = model::llama_model::load(*dir);
    group_cfg cfg;
    caf::actor_system sys{cfg};
    const int seqs = int(a.get_int("seqs", 8)), context = int(a.get_int("context", 128)), steps = int(a.get_int("steps", 8));
    for (auto [p, t, mb] : std::vector<std::tuple<int, int, int>>{{1, 1, 1}, {1, 2, 1}, {2, 1, 1}, {2, 1, 2}})
      groups.push_back(time_group(sys, m, p, t, mb, seqs, context, steps));
  }
  if (json_out) {
    nlohmann::json j;
    j["ranks"] = n;
    j["memcpy_gbs"] = copy;
    for (auto& r : results)
      j["collectives"].push_back({{"backend", r.backend}, {"op", r.op}, {"bytes", r.bytes}, {"latency_us", r.latency_us},
                                  {"algbw_gbs", r.algbw_gbs}, {"busbw_gbs", r.busbw_gbs}, {"busbw_of_memcpy", r.busbw_gbs / copy}});
    for (auto& g : groups)
      j["groups"].push_back({{"shape", g.shape}, {"pipeline", g.pipeline}, {"tensor", g.tensor}, {"micro_batches", g.micro},
                             {"prefill_ms", g.prefill_ms}, {"decode_ms", g.decode_ms}, {"collective_ms_per_step", g.collective_ms_per_step}});
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("memcpy: %.1f GB/s (this run's ceiling for moving bytes in memory)\n\n", copy);
  std::printf("%-6s %-11s %10s %12s %10s %10s %8s\n", "backend", "op", "bytes", "latency us", "algbw GB/s", "busbw GB/s", "of memcpy");
  for (auto& r : results)
    std::printf("%-6s %-11s %10zu %12.1f %10.2f %10.2f %7.1f%%\n", r.backend.c_str(), r.op.c_str(), r.bytes, r.latency_us, r.algbw_gbs,
                r.busbw_gbs, 100 * r.busbw_gbs / copy);
  if (!groups.empty()) {
    std::printf("\n%-20s %12s %12s %22s\n", "group", "prefill ms", "decode ms", "collectives ms/step/rank");
    for (auto& g : groups) std::printf("%-20s %12.1f %12.2f %22.2f\n", g.shape.c_str(), g.prefill_ms, g.decode_ms, g.collective_ms_per_step);
  }
  return 0;
}

}  // namespace troupe::cli
