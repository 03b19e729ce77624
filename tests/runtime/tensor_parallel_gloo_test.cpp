// Tensor and expert parallelism across processes: the ranks of the group are separate processes
// joined by the Gloo collectives over loopback TCP, each loading only its shard. Their greedy
// tokens equal the whole model's, their logits are within 1e-4 of it, and every rank ends with
// the same bits.
#define BOOST_TEST_MODULE tensor_parallel_gloo
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <boost/test/unit_test.hpp>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "runtime/collectives/gloo.h"
#include "tests/support/models.h"
#include "tests/support/tp_run.h"

using namespace troupe;

namespace {

void write_floats(const std::string& path, const test::run_output& o) {
  std::ofstream f(path, std::ios::binary);
  for (auto& l : o.logits) f.write(reinterpret_cast<const char*>(l.data()), std::streamsize(l.size() * 4));
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

std::vector<std::int32_t> test_prompt() {
  std::vector<std::int32_t> prompt;
  for (int i = 0; i < 21; ++i) prompt.push_back((i * 37 + 11) % 2000 + 3);
  return prompt;
}
constexpr int steps = 8;

// A rank is this executable started again with TROUPE_TP_RANK set: main() runs its shard instead
// of the tests (a fresh process, not a fork of one with threads).
int run_rank(const char* rank) {
    int code = 1;
    try {
      const int r = std::atoi(rank), n = std::atoi(std::getenv("TROUPE_TP_SIZE"));
      const bool ep = std::string(std::getenv("TROUPE_TP_EP")) == "1";
      auto shard = model::llama_model::load(std::getenv("TROUPE_TP_MODEL"), {}, {r, n, ep});
      auto comm = collectives::connect_gloo({r, n, 1, "tp", std::getenv("TROUPE_TP_STORE"), "127.0.0.1", std::chrono::milliseconds(60000)});
      write_floats(std::getenv("TROUPE_TP_OUT"), test::generate(*shard, comm.get(), test_prompt(), steps));
      code = 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %s: %s\n", rank, e.what());
    }
    return code;
}

// Runs a group of `n` rank processes over the model in `dir` (expert parallel when `ep`); every
// rank writes its logits to a file; returns them, rank by rank.
std::vector<std::vector<float>> run_group(const std::string& dir, int n, bool ep, const std::string& tag) {
  const auto work = std::filesystem::path(TROUPE_BINARY_DIR) / "tp-gloo" / (tag + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(work);
  std::filesystem::create_directories(work / "store");  // the ranks' rendezvous
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> env = {"TROUPE_TP_RANK=" + std::to_string(r), "TROUPE_TP_SIZE=" + std::to_string(n),
                                    std::string("TROUPE_TP_EP=") + (ep ? "1" : "0"), "TROUPE_TP_MODEL=" + dir,
                                    "TROUPE_TP_STORE=" + (work / "store").string(),
                                    "TROUPE_TP_OUT=" + (work / ("rank" + std::to_string(r))).string()};
    for (char** e = environ; *e; ++e) env.push_back(*e);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string self = "/proc/self/exe";
    char* argv[] = {self.data(), nullptr};
    pid_t pid = 0;
    BOOST_TEST_REQUIRE(::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) == 0);
    pids.push_back(pid);
  }
  for (pid_t p : pids) {
    int st = 0;
    ::waitpid(p, &st, 0);
    BOOST_TEST_REQUIRE((WIFEXITED(st) && WEXITSTATUS(st) == 0), tag << ": a rank failed");
  }
  std::vector<std::vector<float>> out;
  for (int r = 0; r < n; ++r) out.push_back(read_floats((work / ("rank" + std::to_string(r))).string()));
  std::filesystem::remove_all(work);
  return out;
}

void check(const std::string& dir, int n, bool ep, const std::string& tag) {
  const auto ranks = run_group(dir, n, ep, tag);
  const auto whole = model::llama_model::load(dir);
  const auto ref = test::generate(*whole, nullptr, test_prompt(), steps);
  std::vector<float> flat;
  for (auto& l : ref.logits) flat.insert(flat.end(), l.begin(), l.end());
  for (int r = 0; r < n; ++r) BOOST_TEST((ranks[std::size_t(r)] == ranks[0]), tag << ": rank " << r << " differs from rank 0");
  BOOST_REQUIRE_EQUAL(ranks[0].size(), flat.size());
  float worst = 0;
  for (std::size_t i = 0; i < flat.size(); ++i) worst = std::max(worst, std::abs(ranks[0][i] - flat[i]));
  BOOST_TEST(worst <= 1e-4f, tag << ": max |logit difference| " << worst);
  // Greedy tokens: the argmax of each step's logits.
  const std::size_t V = std::size_t(whole->config().vocab_size);
  for (std::size_t s = 0; s < ref.tokens.size(); ++s) {
    const auto* row = &ranks[0][s * V];
    BOOST_TEST(std::int32_t(std::max_element(row, row + V) - row) == ref.tokens[s], tag << " step " << s);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(tensor_and_expert_parallel_groups_across_processes_give_the_whole_models_tokens) {
  ::signal(SIGPIPE, SIG_IGN);
  const std::string dense = test::synth_model("small-llama-f32", test::preset("small"));
  const std::string moe = test::synth_model("moe-qwen2-moe-tp-f32", test::preset("moe", "qwen2_moe"));
  check(dense, 2, false, "tp2-llama");
  check(moe, 2, false, "tp2-qwen2moe");
  check(moe, 2, true, "ep2-qwen2moe");
}

bool init_tests() { return true; }

int main(int argc, char* argv[]) {
  if (const char* rank = std::getenv("TROUPE_TP_RANK")) return run_rank(rank);
  return boost::unit_test::unit_test_main(&init_tests, argc, argv);
}
