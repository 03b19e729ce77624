// Who may join a running cluster, with real processes: `troupe serve` as the head and
// `troupe node` processes trying to join it. A node with other weights, a node calling itself
// the head, a second copy of a joined node, or a node without the cluster's certificate is
// refused with the reason, and the real node still joins and serves.
#define BOOST_TEST_MODULE cluster_auth
#include <boost/test/unit_test.hpp>
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it
#include <boost/asio.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "tests/support/eventually.h"
#include "tests/support/http_client.h"
#include "tests/support/models.h"

using namespace troupe;

namespace {

const std::string troupe_bin = std::string(TROUPE_BINARY_DIR) + "/troupe";
std::string tiny() { return test::tiny_model_dir(); }
std::string other_tiny() {
  auto o = test::preset("tiny");
  o.seed = 7;  // same shapes, other weights
  return test::synth_model("tiny-llama-f32-seed7", o);
}

// A `troupe node` run to its end (or 60 s): exit status and everything it printed.
test::command_result node_attempt(const std::string& config, const std::string& name, std::uint16_t registry,
                                  const std::string& model, const std::string& extra = "") {
  return test::run_command("timeout 60 " + troupe_bin + " node " + config + " --name " + name + " --head 127.0.0.1:" +
                           std::to_string(registry) + " --model " + model + " " + extra + " 2>&1");
}

// A free port for the head's registry (the nodes must be told where it is).
// A topology file: three-local.toml plus `extra`.
std::string topology_with(const std::string& name, const std::string& extra) {
  std::ifstream in(std::string(TROUPE_SOURCE_DIR) + "/configs/three-local.toml");
  std::stringstream ss;
  ss << in.rdbuf() << "\n" << extra << "\n";
  const std::string path = std::string(TROUPE_BINARY_DIR) + "/" + name + ".toml";
  std::ofstream(path) << ss.str();
  return path;
}

// Bytes waiting in the receive queues of process `pid`'s TCP sockets (ss -tnp's Recv-Q).
long unread_bytes(pid_t pid) {
  const auto r = test::run_command("ss -tnpH 2>/dev/null");
  long total = 0;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("pid=" + std::to_string(pid) + ",") == std::string::npos) continue;
    std::istringstream words(line);
    std::string state;
    long recv_q = 0;
    words >> state >> recv_q;
    total += recv_q;
  }
  return total;
}

std::string make_cert(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const int rc = std::system(("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=t -keyout " +
                              dir + "/key.pem -out " + dir + "/cert.pem >/dev/null 2>&1").c_str());
  BOOST_TEST_REQUIRE(rc == 0);
  return dir;
}

}  // namespace

BOOST_AUTO_TEST_CASE(rogue_nodes_are_refused_and_the_real_one_serves) {
  const std::string config = std::string(TROUPE_SOURCE_DIR) + "/configs/three-local.toml";
  const std::uint16_t registry = test::free_port();
  ::unsetenv("TROUPE_CLUSTER_TOKEN");  // the head makes the token; nodes on this machine read it
  test::serve_process serve({config, "--model", tiny(), "--registry-port", std::to_string(registry)});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  auto r = node_attempt(config, "node-a", registry, other_tiny());
  BOOST_TEST(r.status == 1, r.output);
  BOOST_TEST(r.output.find("serves another model") != std::string::npos, r.output);
  r = node_attempt(config, "head", registry, tiny());
  BOOST_TEST(r.status == 1, r.output);
  BOOST_TEST(r.output.find("is a head, not a node that joins one") != std::string::npos, r.output);
  {
    ::setenv("TROUPE_CLUSTER_TOKEN", "not-the-cluster-token-at-all", 1);
    r = node_attempt(config, "node-a", registry, tiny());
    ::unsetenv("TROUPE_CLUSTER_TOKEN");
    BOOST_TEST(r.status == 1, r.output);
    BOOST_TEST(r.output.find("wrong cluster token") != std::string::npos, r.output);
  }
  BOOST_TEST(test::http_request(serve.port(), "GET", "/health").status == 503);  // nobody joined
  test::child_process real({troupe_bin, "node", config, "--name", "node-a", "--head", "127.0.0.1:" + std::to_string(registry),
                            "--model", tiny()});
  BOOST_TEST_REQUIRE(real.wait_for_line("ready"));
  r = node_attempt(config, "node-a", registry, tiny());  // a second node-a does not take the first one's place
  BOOST_TEST(r.status == 1, r.output);
  BOOST_TEST(r.output.find("has already joined and is alive") != std::string::npos, r.output);
  auto done = test::post_json(serve.port(), "/v1/completions", {{"prompt", {1, 2, 3}}, {"max_tokens", 4}});
  BOOST_TEST(done.status == 200, done.body);
}

BOOST_AUTO_TEST_CASE(with_tls_only_a_node_holding_the_clusters_certificate_joins) {
  const std::string dir = std::string(TROUPE_BINARY_DIR) + "/cluster-auth-tls";
  make_cert(dir + "/cluster");
  make_cert(dir + "/stranger");
  const std::string config = topology_with("cluster-auth-tls", "[cluster]\ntls_certificate = \"" + dir + "/cluster/cert.pem\"\n"
                                           "tls_key = \"" + dir + "/cluster/key.pem\"\ntls_ca = \"" + dir + "/cluster/cert.pem\"\n");
  const std::uint16_t registry = test::free_port();
  ::setenv("TROUPE_CLUSTER_TOKEN", "the-tls-test-cluster-token", 1);
  test::serve_process serve({config, "--model", tiny(), "--registry-port", std::to_string(registry)});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  // The right token but another certificate: the TLS handshake fails.
  auto r = node_attempt(config, "node-a", registry, tiny(),
                        "--tls-certificate " + dir + "/stranger/cert.pem --tls-key " + dir + "/stranger/key.pem --tls-ca " +
                            dir + "/stranger/cert.pem");
  BOOST_TEST(r.status == 1, r.output);
  BOOST_TEST(r.output.find("cannot reach the head") != std::string::npos, r.output);
  // Plain TCP against a TLS registry: refused the same way.
  r = node_attempt(std::string(TROUPE_SOURCE_DIR) + "/configs/three-local.toml", "node-a", registry, tiny());
  BOOST_TEST(r.status == 1, r.output);
  test::child_process real({troupe_bin, "node", config, "--name", "node-a", "--head", "127.0.0.1:" + std::to_string(registry),
                            "--model", tiny()});
  BOOST_TEST_REQUIRE(real.wait_for_line("ready"));
  auto done = test::post_json(serve.port(), "/v1/completions", {{"prompt", {1, 2, 3}}, {"max_tokens", 4}});
  BOOST_TEST(done.status == 200, done.body);
  ::unsetenv("TROUPE_CLUSTER_TOKEN");
}

// Over TLS, a node killed mid-stream took the head's link to every other node with it: CAF
// 0.17's TLS sessions leave OpenSSL's per-thread error queue as a failed read left it, and the
// next would-block read on another link of the same thread was taken for an SSL error. node-a
// then logged "head head is gone", its replica was declared dead, and it rejoined a second later.
BOOST_AUTO_TEST_CASE(a_node_killed_over_tls_takes_no_other_link_with_it) {
  const std::string dir = std::string(TROUPE_BINARY_DIR) + "/cluster-auth-tls-kill";
  make_cert(dir + "/cluster");
  const std::string config = topology_with("cluster-auth-tls-kill", "[cluster]\ntls_certificate = \"" + dir + "/cluster/cert.pem\"\n"
                                           "tls_key = \"" + dir + "/cluster/key.pem\"\ntls_ca = \"" + dir + "/cluster/cert.pem\"\n");
  const std::uint16_t registry = test::free_port();
  ::setenv("TROUPE_CLUSTER_TOKEN", "the-tls-kill-test-cluster-token", 1);
  test::serve_process serve({config, "--model", tiny(), "--registry-port", std::to_string(registry)});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::string log_a = dir + "/node-a.log";
  auto node = [&](const std::string& name, const std::string& log) {
    return std::vector<std::string>{"/bin/sh", "-c", "exec " + troupe_bin + " node " + config + " --name " + name + " --head 127.0.0.1:" +
                                                    std::to_string(registry) + " --model " + tiny() + " > " + log + " 2>&1"};
  };
  test::child_process a(node("node-a", log_a)), b(node("node-b", dir + "/node-b.log"));
  auto live = [&] {
    const auto h = test::http_request(serve.port(), "GET", "/health");
    return h.status == 200 ? h.json()["replicas_live"].get<int>() : 0;
  };
  // Each phase has a deadline of its own: one shared by all ran out on a busy machine.
  BOOST_TEST_REQUIRE(test::eventually([&] { return live() == 2; }), "the nodes did not both join");
  // Tokens in flight on both links when node-b dies, so its link ends with data unread.
  std::vector<std::future<int>> streams;
  for (int i = 0; i < 6; ++i)
    streams.push_back(std::async(std::launch::async, [&, i] {
      return test::post_json(serve.port(), "/v1/completions", {{"prompt", {1, 2, 3, i}}, {"max_tokens", 200}, {"ignore_eos", true}}).status;
    }));
  BOOST_TEST(test::eventually([&] { return test::metric_sum(serve.port(), "troupe:num_requests_running") >= 4; }, std::chrono::seconds(60),
                              std::chrono::milliseconds(20)));
  // node-b dies having read all the head sent, so its kernel closes the link in order (FIN):
  // the head's read ends in OpenSSL's "unexpected EOF", the error CAF left in the queue. (With
  // bytes unread, the link is reset instead and the read fails as a system call, which does not.)
  test::eventually([&] { return unread_bytes(b.pid()) == 0; }, std::chrono::seconds(60), std::chrono::milliseconds(1));
  b.kill(SIGKILL);
  for (auto& s : streams) BOOST_TEST(s.get() == 200);  // node-b's requests moved to node-a
  BOOST_TEST(test::eventually([&] { return live() == 1; }), "the head still counts node-b's replica");
  for (int i = 0; i < 3; ++i) BOOST_TEST(test::post_json(serve.port(), "/v1/completions", {{"prompt", {4, 5, 6}}, {"max_tokens", 8}}).status == 200);
  std::ifstream in(log_a);
  const std::string printed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  BOOST_TEST(printed.find("is gone") == std::string::npos, printed);
  BOOST_TEST(printed.find("rejoined") == std::string::npos, printed);
  ::unsetenv("TROUPE_CLUSTER_TOKEN");
}

// Token files piled up in the token folder: a head ended by an error (its HTTP port taken) left
// its own, and so did every killed head. Now a head removes its file however it ends, and a new
// head removes the files of ports no process holds.
BOOST_AUTO_TEST_CASE(cluster_token_files_do_not_accumulate) {
  namespace fs = std::filesystem;
  const fs::path runtime = fs::path(TROUPE_BINARY_DIR) / "token-sweep-runtime";
  fs::remove_all(runtime);
  fs::create_directories(runtime);
  fs::permissions(runtime, fs::perms::owner_all);
  ::setenv("XDG_RUNTIME_DIR", runtime.c_str(), 1);
  ::unsetenv("TROUPE_CLUSTER_TOKEN");
  fs::create_directories(runtime / "troupe");
  fs::permissions(runtime / "troupe", fs::perms::owner_all);
  const std::uint16_t gone = test::free_port();  // a head killed long ago: nobody holds its port
  std::ofstream(runtime / "troupe" / ("token-" + std::to_string(gone))) << "0123456789abcdef0123\n";
  const std::uint16_t taken = test::free_port();
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::acceptor holder(ioc, {boost::asio::ip::make_address("127.0.0.1"), taken});
  const auto r = test::run_command("timeout 120 " + troupe_bin + " serve " + std::string(TROUPE_SOURCE_DIR) +
                                   "/configs/local.toml --model " + tiny() + " --registry-port 0 --port " + std::to_string(taken) + " 2>&1");
  BOOST_TEST(r.status == 1, r.output);  // its HTTP port is taken: an error after the token was written
  int left = 0;
  for (const auto& f : fs::directory_iterator(runtime / "troupe")) left += f.path().filename().string().rfind("token-", 0) == 0;
  BOOST_TEST(left == 0, "token files left: " << left);
  ::unsetenv("XDG_RUNTIME_DIR");
}
