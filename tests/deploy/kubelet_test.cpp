// The manifests `troupe deploy kubernetes` writes, run as a kubelet would run them, with no
// cluster: tests/deploy/kubernetes/kubelet.mjs starts each pod's command, arguments, environment
// and mounted ConfigMap and Secret files as processes in network namespaces named like the pods,
// with the Services' names resolvable, probes, and StatefulSet restarts. Through the API Service:
// requests are served; a pod killed with SIGKILL is started again as its StatefulSet would, and
// the requests it held move with identical tokens; a scale-down runs the pod's preStop drain and
// no request fails.
#define BOOST_TEST_MODULE kubelet
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "tests/support/http_client.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

const std::string troupe_bin = std::string(TROUPE_BINARY_DIR) + "/troupe";

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The number after `word ` in a line the kubelet printed.
std::uint16_t port_in(const std::string& line, const std::string& word) {
  std::smatch m;
  BOOST_TEST_REQUIRE(std::regex_search(line, m, std::regex(word + " ([0-9]+)")), line);
  return std::uint16_t(std::stoi(m[1]));
}

struct cluster {
  fs::path dir = fs::temp_directory_path() / ("troupe-kubelet-test-" + std::to_string(::getpid()));
  std::string api_key;
  std::unique_ptr<test::child_process> kubelet;
  std::uint16_t api = 0, control = 0;

  cluster() {
    const auto r = test::run_command("cd " + std::string(TROUPE_SOURCE_DIR) + " && " + troupe_bin +
                                     " deploy kubernetes configs/kubernetes.toml -o " + dir.string() + " 2>&1");
    BOOST_TEST_REQUIRE(r.status == 0, r.output);
    std::smatch m;
    const std::string secret = read_file(dir / "secret-api-key.yaml");
    BOOST_TEST_REQUIRE(std::regex_search(secret, m, std::regex("api-key: \"([0-9a-f]+)\"")), secret);
    api_key = m[1];
    kubelet = std::make_unique<test::child_process>(std::vector<std::string>{
        "/usr/bin/env", "node", std::string(TROUPE_SOURCE_DIR) + "/tests/deploy/kubernetes/kubelet.mjs", dir.string(), "--bin",
        TROUPE_BINARY_DIR, "--claim", "troupe-models=" + std::string(TROUPE_SOURCE_DIR) + "/models"});
    std::string line;
    BOOST_TEST_REQUIRE(kubelet->wait_for_line("service troupe-api ", &line));
    api = port_in(line, "troupe-api");
    BOOST_TEST_REQUIRE(kubelet->wait_for_line("control ", &line));
    control = port_in(line, "control");
    await_ready({"troupe-head-0", "troupe-main-0", "troupe-main-1"});
  }
  ~cluster() {
    kubelet->kill(SIGTERM);
    kubelet->reap_within(std::chrono::seconds(60));
    fs::remove_all(dir);
  }

  // Reads the kubelet's lines until each pod named has been reported ready.
  void await_ready(std::set<std::string> pods) {
    std::string line;
    while (!pods.empty()) {
      BOOST_TEST_REQUIRE(kubelet->wait_for_line("", &line), "the kubelet ended waiting for readiness");
      BOOST_TEST_REQUIRE(line.rfind("failed ", 0) != 0, line);  // a pod that cannot start, and why
      if (line.rfind("ready ", 0) == 0) pods.erase(line.substr(6, line.find_last_not_of("\n") - 5));
    }
  }

  test::http_response call(const std::string& method, const std::string& path, const std::string& body = "") const {
    return test::http_request(api, method, path, body, {{"Authorization", "Bearer " + api_key}, {"Content-Type", "application/json"}});
  }

  int live() const {
    const auto h = call("GET", "/health");
    return h.status == 200 ? h.json()["replicas_live"].get<int>() : 0;
  }

  void await_live(int n) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (live() != n && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling a deadline, not synchronising
    BOOST_TEST_REQUIRE(live() == n);
  }

  // Requests running on `replica`, from /metrics through the Service.
  double running_on(const std::string& replica) const {
    const std::string text = call("GET", "/metrics").body;
    std::smatch m;
    const std::regex series("troupe:replica_num_requests_running\\{[^}]*replica=\"" + replica + "\"[^}]*\\} ([0-9.]+)");
    return std::regex_search(text, m, series) ? std::stod(m[1]) : 0;
  }

  // Greedy completions of `n` prompts at once; during() runs once one of them runs on `busy`.
  std::vector<std::string> completions(int n, const std::string& busy = "", const std::function<void()>& during = {}) const {
    std::vector<std::future<std::string>> out;
    for (int i = 0; i < n; ++i)
      out.push_back(std::async(std::launch::async, [this, i] {
        const nlohmann::json body{{"prompt", "And it came to pass, request " + std::to_string(i)}, {"max_tokens", 480},
                                  {"temperature", 0}, {"ignore_eos", true}};
        const auto r = call("POST", "/v1/completions", body.dump());
        if (r.status != 200) return "HTTP " + std::to_string(r.status) + ": " + r.body;
        return nlohmann::json::parse(r.body)["choices"][0]["text"].get<std::string>();
      }));
    if (during) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (running_on(busy) == 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a deadline, not synchronising
      BOOST_TEST_REQUIRE(running_on(busy) > 0, busy << " never ran a request");
      during();
    }
    std::vector<std::string> texts;
    for (auto& f : out) texts.push_back(f.get());
    return texts;
  }

  // A counter's sum over its series, from /metrics through the Service.
  double metric(const std::string& name) const {
    std::istringstream lines(call("GET", "/metrics").body);
    double sum = 0;
    for (std::string line; std::getline(lines, line);)
      if (line.rfind(name + "{", 0) == 0 || line.rfind(name + " ", 0) == 0) sum += std::stod(line.substr(line.rfind(' ') + 1));
    return sum;
  }

  // `troupe admin COMMAND` against the head pod's admin endpoint, with the hooks' key.
  std::string admin(const std::string& command) const {
    std::string head_ip;
    for (const auto& p : test::http_request(control, "GET", "/pods").json())
      if (p["name"] == "troupe-head-0") head_ip = p["ip"];
    std::smatch m;
    const std::string secret = read_file(dir / "secret-admin.yaml");
    BOOST_TEST_REQUIRE(std::regex_search(secret, m, std::regex("client.key: \\|\\n +(\\S+)")), secret);
    std::ofstream(dir / "client.key") << m[1] << "\n";
    BOOST_TEST_REQUIRE(std::regex_search(secret, m, std::regex("server.pub: \\|\\n +(\\S+)")), secret);
    const auto r = test::run_command(troupe_bin + " admin --endpoint tcp://" + head_ip + ":7600 --server-key '" + std::string(m[1]) +
                                     "' --key " + (dir / "client.key").string() + " --timeout 60 " + command + " 2>&1");
    BOOST_TEST(r.status == 0, r.output);
    return r.output;
  }

  void await_line(const std::string& needle) {
    BOOST_TEST_REQUIRE(kubelet->wait_for_line(needle), "the kubelet ended before printing " << needle);
  }

  nlohmann::json command(const std::string& path) const {
    const auto r = test::http_request(control, "POST", path);
    BOOST_TEST_REQUIRE(r.status == 200, r.body);
    return r.json();
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(the_manifests_serve_survive_a_killed_pod_and_drain_on_scale_down) {
  BOOST_TEST_REQUIRE(::geteuid() == 0, "network namespaces and mounts need root");
  cluster c;
  c.await_live(2);
  // Served through the API Service, with the key from the Secret; without it, refused.
  BOOST_TEST(test::http_request(c.api, "POST", "/v1/completions", R"({"prompt":"x","max_tokens":1})").status == 401);
  const auto expected = c.completions(8);
  for (const auto& t : expected) BOOST_TEST(t.rfind("HTTP", 0) != 0, t);

  // SIGKILL: the StatefulSet starts the pod again; the requests it held move, tokens unchanged.
  const auto after_kill = c.completions(8, "main-1", [&] { c.command("/kill/troupe-main-1"); });
  BOOST_TEST(after_kill == expected, boost::test_tools::per_element());
  BOOST_TEST(c.metric("troupe:num_migrations_total") > 0, "no request moved: the kill found nothing to move");
  c.await_ready({"troupe-main-1"});
  c.await_live(2);

  // KEDA's scale-up starts troupe-main-2, whose replica joins; the scale-down that follows runs
  // its preStop drain first, so the requests it holds move and none fails.
  c.command("/scale/troupe-main/3");
  c.await_ready({"troupe-main-2"});
  c.await_live(3);
  // A replica drained through the admin endpoint takes its pod out of readiness (its status
  // file says so), and a resume brings it back.
  BOOST_TEST(c.admin("drain main-2").find("drained") != std::string::npos);
  c.await_line("unready troupe-main-2");
  BOOST_TEST(c.admin("resume main-2").find("running") != std::string::npos);
  c.await_ready({"troupe-main-2"});
  nlohmann::json stopped;
  const auto after_drain = c.completions(8, "main-2", [&] { stopped = c.command("/scale/troupe-main/2"); });
  BOOST_TEST(after_drain == expected, boost::test_tools::per_element());
  BOOST_TEST(stopped["troupe-main-2"]["prestop"] == 0, stopped.dump());
  BOOST_TEST(stopped["troupe-main-2"]["prestopOutput"].get<std::string>().find("replica main-2: drained") != std::string::npos,
             stopped.dump());
  c.await_live(2);
}
