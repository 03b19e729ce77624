// Every topology in configs/ starts from a fresh clone with the command the README gives for it
// (its "The configs" table, read here so the two cannot drift), run from the repository's root
// as a user would: a server started so answers a completion, any other command exits 0.
#define BOOST_TEST_MODULE configs_start
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "tests/support/http_client.h"

using namespace troupe;

namespace {

struct config_row {
  std::string config, command;
};

std::vector<config_row> readme_rows() {
  std::ifstream in(std::string(TROUPE_SOURCE_DIR) + "/README.md");
  std::vector<config_row> rows;
  const std::regex row(R"(^\| `(configs/[^`]+\.toml)` \| `([^`]+)` \|)");
  std::string line;
  std::smatch m;
  while (std::getline(in, line))
    if (std::regex_search(line, m, row)) rows.push_back({m[1], m[2]});
  return rows;
}

// The command's words, `build/troupe` being this build's binary.
std::vector<std::string> argv_of(const std::string& command) {
  std::istringstream in(command);
  std::vector<std::string> argv;
  for (std::string w; in >> w;) argv.push_back(w == "build/troupe" ? std::string(TROUPE_BINARY_DIR) + "/troupe" : w);
  return argv;
}

// Sends a completion until one is served (a launch's nodes join after the head listens, and a
// disaggregated topology needs a decode replica as well as a prefill one): the last answer.
test::http_response await_served(std::uint16_t port, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  test::http_response last;
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      last = test::post_json(port, "/v1/completions", {{"prompt", {1, 2, 3}}, {"max_tokens", 4}, {"ignore_eos", true}});
      if (last.status == 200) return last;
    } catch (const std::exception& e) {
      last.body = e.what();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // polling a deadline, not synchronising
  }
  return last;
}

}  // namespace

struct run_from_source_root {
  run_from_source_root() { BOOST_REQUIRE(::chdir(TROUPE_SOURCE_DIR) == 0); }
};
BOOST_TEST_GLOBAL_FIXTURE(run_from_source_root);

BOOST_AUTO_TEST_CASE(every_config_has_a_start_command_in_the_readme) {
  const auto rows = readme_rows();
  for (const auto& f : std::filesystem::directory_iterator(std::string(TROUPE_SOURCE_DIR) + "/configs")) {
    if (f.path().extension() != ".toml") continue;
    const std::string name = "configs/" + f.path().filename().string();
    BOOST_TEST(std::count_if(rows.begin(), rows.end(), [&](const config_row& r) { return r.config == name; }) == 1, name);
  }
  for (const auto& r : rows) BOOST_TEST(r.command.find(r.config) != std::string::npos, r.config + ": " + r.command);
}

BOOST_AUTO_TEST_CASE(every_config_starts_with_its_readme_command_and_serves) {
  for (const auto& r : readme_rows()) {
    BOOST_TEST_CONTEXT(r.config << ": " << r.command) {
      const auto argv = argv_of(r.command);
      const bool server = argv.size() > 1 && (argv[1] == "serve" || argv[1] == "launch");
      if (!server) {
        const auto out = test::run_command(std::regex_replace(r.command, std::regex("^build/troupe"), argv[0]) + " 2>&1");
        BOOST_TEST(out.status == 0, out.output);
        continue;
      }
      test::child_process p(argv);
      BOOST_TEST_REQUIRE(p.started());
      std::string line;
      BOOST_TEST_REQUIRE(p.wait_for_line("listening on http://", &line));
      const std::smatch m = [&] {
        std::smatch x;
        std::regex_search(line, x, std::regex(R"(listening on http://[0-9.]+:([0-9]+))"));
        return x;
      }();
      BOOST_TEST_REQUIRE(m.size() == 2u, line);
      const auto port = std::uint16_t(std::stoi(m[1]));
      const auto res = await_served(port, std::chrono::seconds(240));
      BOOST_TEST(res.status == 200, res.body);
      if (res.status == 200) BOOST_TEST(res.json()["usage"]["completion_tokens"] == 4, res.body);
      p.kill(SIGTERM);
      const int status = p.reap();
      BOOST_TEST((WIFEXITED(status) && WEXITSTATUS(status) == 0), "exit status " << status);
    }
  }
}
