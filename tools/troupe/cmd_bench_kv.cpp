// troupe bench kv-transfer: GB/s of each KV transfer backend for 1 MiB to 256 MiB of blocks,
// against this machine's memcpy bandwidth measured in the same run. The shared-memory and TCP
// senders run in a forked process (what another replica on this host is); the in-process sender
// is a second cache in this process.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include <sys/wait.h>
#include <unistd.h>

#include "runtime/common/error.h"
#include "runtime/kv/transfer/pull.h"
#include "runtime/kv/transfer/registry.h"
#include "runtime/sim/step_fit.h"
#include "tools/troupe/args.h"
#include "tools/troupe/commands.h"

namespace troupe::cli {

namespace {

using namespace kv::transfer;
using clock_type = std::chrono::steady_clock;

// A 1B-class layout in f16: 8 KV heads of 128, 16 tokens a block; one block of every layer's K
// and V is 512 KiB.
kv_layout bench_layout() {
  kv_layout l;
  l.type = kernels::dtype::f16;
  l.block_size = 16;
  l.num_layers = 8;
  l.n_kv_heads = 8;
  l.head_dim = 128;
  l.model_key = "bench@1";
  l.ranks = {{0, 8}};
  return l;
}

void fill(kv::kv_cache& c) {
  std::mt19937_64 rng(1);
  for (int l = 0; l < c.num_layers(); ++l)
    for (int kv = 0; kv < 2; ++kv)
      for (int b = 0; b < c.config().num_blocks; ++b) {
        auto* p = reinterpret_cast<std::uint64_t*>(c.block_data(l, kv, b));
        for (std::size_t i = 0; i < c.block_bytes() / 8; ++i) p[i] = rng();
      }
}

std::shared_ptr<kv::kv_cache> make_cache(int blocks, bool shared) {
  const kv_layout l = bench_layout();
  return std::make_shared<kv::kv_cache>(kv::kv_cache_config{blocks, l.block_size, l.type, shared}, l.num_layers, l.n_kv_heads,
                                        l.head_dim);
}

// The sender process: a shared-memory cache served over TCP too, until its parent closes the pipe.
struct remote_sender {
  pid_t pid = -1;
  int to_child = -1;
  kv_source source;
  explicit remote_sender(int blocks) {
    int up[2], down[2];
    if (::pipe(up) != 0 || ::pipe(down) != 0) throw std::runtime_error("pipe failed");
    pid = ::fork();
    if (pid == 0) {
      ::close(up[0]);
      ::close(down[1]);
      auto c = make_cache(blocks, true);
      fill(*c);
      kv_source s = registry::global().with_tcp(registry::global().expose(c));
      std::ostringstream o;
      o << s.key << "\n" << s.num_blocks << "\n" << s.host_id << "\n" << s.pid << "\n" << s.host << "\n" << s.port << "\n" << s.secret << "\n";
      const std::string msg = o.str();
      [[maybe_unused]] auto w = ::write(up[1], msg.data(), msg.size());
      char x;
      [[maybe_unused]] auto r = ::read(down[0], &x, 1);  // EOF: the parent is done
      registry::global().withdraw(s.key);
      c.reset();
      ::_exit(0);
    }
    ::close(up[1]);
    ::close(down[0]);
    to_child = down[1];
    std::string got;
    char buf[512];
    while (std::count(got.begin(), got.end(), '\n') < 7) {
      const auto n = ::read(up[0], buf, sizeof buf);
      if (n <= 0) throw std::runtime_error("the sender process did not start");
      got.append(buf, std::size_t(n));
    }
    ::close(up[0]);
    std::istringstream in(got);
    std::string num, p, port;
    std::getline(in, source.key);
    std::getline(in, num);
    std::getline(in, source.host_id);
    std::getline(in, p);
    std::getline(in, source.host);
    std::getline(in, port);
    std::getline(in, source.secret);
    source.shared = true;
    source.num_blocks = std::stoi(num);
    source.pid = std::stoi(p);
    source.port = std::uint16_t(std::stoi(port));
  }
  ~remote_sender() {
    ::close(to_child);
    ::waitpid(pid, nullptr, 0);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// --fit-profile FILE: the transfer cost fitted to the pulls just timed over `backend`, added to
// the step profile `troupe bench engine --fit-profile FILE` wrote (the simulator prices a
// handoff with both: bytes per token from the model, seconds per byte from here).
void add_transfer_fit(const std::string& path, const std::string& backend, const nlohmann::json& rows) {
  if (backend != "inproc" && backend != "shm" && backend != "tcp") throw input_error("--backend: inproc, shm or tcp, not " + backend);
  sim::profile_file p = sim::read_profile_file(path, "fit-profile");
  std::vector<sim::transfer_sample> pulls;
  for (const auto& r : rows) pulls.push_back({r["bytes"].get<double>(), r["bytes"].get<double>() / (r[backend + "_gbps"].get<double>() * 1e9)});
  p.transfer = sim::fit_transfer(pulls, "troupe bench kv-transfer over " + backend);
  sim::write_profile_file(path, p, "fit-profile");
  std::fprintf(stderr, "transfer: %.1f us + %.3f GB/s over %s -> %s\n", p.transfer->base_s * 1e6,
               p.transfer->per_byte_s > 0 ? 1e-9 / p.transfer->per_byte_s : 0.0, backend.c_str(), path.c_str());
}

}  // namespace

int cmd_bench_kv(const args& a) {
  const std::vector<int> sizes_mib = int_list({"sizes", "MiB values", "1,4,16", "size", 1, 4096, " MiB"}, a.get("sizes", "1,4,16,64,256"));
  const int reps = int(a.get_int("reps", 5));
  if (reps < 1) throw input_error("--reps: must be positive");
  const bool json_out = a.has("json");
  const kv_layout lay = bench_layout();
  const std::size_t per_block = 2 * std::size_t(lay.num_layers) * lay.block_bytes();  // every layer's K and V
  const int max_blocks = int((std::size_t(*std::max_element(sizes_mib.begin(), sizes_mib.end())) << 20) / per_block);

  remote_sender remote(max_blocks);  // forked before this process starts any thread
  auto local = make_cache(max_blocks, false);
  fill(*local);
  const kv_source local_source = registry::global().expose(local);
  auto dst = make_cache(max_blocks, false);
  std::vector<std::int32_t> table(static_cast<std::size_t>(max_blocks), 0);
  for (int i = 0; i < max_blocks; ++i) table[std::size_t(i)] = (i + max_blocks / 2) % max_blocks;  // not the sender's ids

  // memcpy of the same bytes between two buffers already touched: the ceiling of any copy.
  std::vector<std::uint8_t> from(std::size_t(max_blocks) * per_block, 1), to(std::size_t(max_blocks) * per_block, 2);
  nlohmann::json rows = nlohmann::json::array();
  if (!json_out) std::printf("%-8s %10s %10s %10s %10s %10s\n", "MiB", "memcpy", "inproc", "shm", "tcp", "GB/s");
  for (int mib : sizes_mib) {
    const int n = std::max(1, int((std::size_t(mib) << 20) / per_block));
    const double bytes = double(n) * double(per_block);
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = clock_type::now();
      std::memcpy(to.data(), from.data(), std::size_t(bytes));
      t.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
    }
    nlohmann::json row{{"mib", mib}, {"bytes", bytes}, {"memcpy_gbps", bytes / median(t) / 1e9}};
    for (backend how : {backend::inproc, backend::shm, backend::tcp}) {
      kv_handle h;
      h.request = "bench";
      h.layout = lay;
      h.sources = {how == backend::inproc ? local_source : remote.source};
      for (int i = 0; i < n; ++i) h.blocks.push_back(i);
      h.positions = n * lay.block_size;
      const std::span<const std::int32_t> into(table.data(), std::size_t(n));
      t.clear();
      for (int r = 0; r < reps + 1; ++r) {  // the first maps the segment once: not timed
        const auto res = pull(h, {dst.get(), 0, lay, into}, how, clock_type::now() + std::chrono::seconds(60));
        if (r > 0) t.push_back(res.seconds);
      }
      // The bytes arrived intact (both senders were filled from the same seed).
      for (int i = 0; i < n; i += std::max(1, n / 8))
        if (std::memcmp(dst->block_data(lay.num_layers - 1, 1, table[std::size_t(i)]), local->block_data(lay.num_layers - 1, 1, i),
                        lay.block_bytes()) != 0)
          throw std::runtime_error(std::string("bench kv-transfer: ") + backend_name(how) + " moved block " + std::to_string(i) + " wrong");
      row[std::string(backend_name(how)) + "_gbps"] = bytes / median(t) / 1e9;
    }
    for (const char* b : {"inproc", "shm", "tcp"})
      row[std::string(b) + "_vs_memcpy"] = row[std::string(b) + "_gbps"].get<double>() / row["memcpy_gbps"].get<double>();
    if (!json_out)
      std::printf("%-8d %10.2f %10.2f %10.2f %10.2f   (shm %.0f%%, tcp %.0f%% of memcpy)\n", mib, row["memcpy_gbps"].get<double>(),
                  row["inproc_gbps"].get<double>(), row["shm_gbps"].get<double>(), row["tcp_gbps"].get<double>(),
                  100 * row["shm_vs_memcpy"].get<double>(), 100 * row["tcp_vs_memcpy"].get<double>());
    rows.push_back(row);
  }
  registry::global().withdraw(local_source.key);
  if (const auto path = a.get("fit-profile")) add_transfer_fit(*path, a.get("backend", "tcp"), rows);
  if (json_out) {
    nlohmann::json j{{"layout", {{"dtype", "f16"}, {"block_size", lay.block_size}, {"layers", lay.num_layers},
                                 {"kv_heads", lay.n_kv_heads}, {"head_dim", lay.head_dim}}},
                     {"reps", reps},
                     {"note", "median of reps; shm and tcp from a forked sender process; memcpy between two touched buffers"},
                     {"sizes", rows}};
    std::printf("%s\n", j.dump(2).c_str());
  }
  return 0;
}

}  // namespace troupe::cli
