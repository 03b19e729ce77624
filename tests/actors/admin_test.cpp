// The admin console over real sockets against a running multi-process topology
// (configs/admin.toml under `troupe launch`: a head and two node processes): every command's
// --json output asserted; drain and kill under load leave every request with the tokens of an
// undisturbed run; malformed and oversized messages get an error reply and the server keeps
// serving; with CURVE keys, a client with no key or a wrong one gets no reply and no event.
#define BOOST_TEST_MODULE admin
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <future>
#include <mutex>
#include <thread>

#include <zmq.hpp>

#include <pty.h>
#include <poll.h>
#include <sys/wait.h>

#include "actors/control/admin_client.h"
#include "runtime/admin/admin_message.h"
#include "tests/support/http_client.h"
#include "tests/support/models.h"
#include "tests/support/process.h"

using namespace troupe;

namespace {

const std::string troupe_exe = std::string(TROUPE_BINARY_DIR) + "/troupe";

// The admin endpoint's port (its events at + 1) and the node registry's, both free: launch's
// --admin-port and --registry-port, so the module runs beside anything on the defaults.
std::uint16_t admin_port() {
  static const std::uint16_t p = test::free_port_pair();
  return p;
}
std::string admin_endpoint() { return "tcp://127.0.0.1:" + std::to_string(admin_port()); }
std::string events_endpoint() { return "tcp://127.0.0.1:" + std::to_string(admin_port() + 1); }
std::string endpoint_flags() { return " --endpoint " + admin_endpoint() + " --events " + events_endpoint(); }
actors::admin_client_config client_config() {
  actors::admin_client_config c;
  c.endpoint = admin_endpoint();
  c.events = events_endpoint();
  return c;
}

// `troupe admin ARGS --json`: its exit status and its output parsed (null if not JSON).
struct admin_result {
  int status = -1;
  nlohmann::json json;
  std::string text;
};

admin_result admin_cli(const std::string& args, int timeout_s = 20) {
  const auto r = test::run_command(troupe_exe + " admin --timeout " + std::to_string(timeout_s) + " --json" + endpoint_flags() + " " +
                                   args + " 2>&1");
  admin_result out{r.status, nullptr, r.output};
  out.json = nlohmann::json::parse(r.output, nullptr, false);
  if (out.json.is_discarded()) out.json = nullptr;
  return out;
}

// configs/admin.toml started once for the whole module.
struct cluster {
  std::uint16_t http = test::free_port();
  std::string model_dir = test::synth_model("small-llama-f32", test::preset("small"));
  std::unique_ptr<test::child_process> launch;
  cluster() {
    launch = std::make_unique<test::child_process>(std::vector<std::string>{
        troupe_exe, "launch", std::string(TROUPE_SOURCE_DIR) + "/configs/admin.toml", "--model", model_dir, "--port", std::to_string(http),
        "--registry-port", std::to_string(test::free_port()), "--admin-port", std::to_string(admin_port())});
    std::set<std::string> ready;  // the nodes come up in either order
    for (std::string line; ready.size() < 2;) {
      BOOST_TEST_REQUIRE(launch->wait_for_line(": ready", &line));
      for (const char* n : {"node-a", "node-b"})
        if (line.find(std::string("node ") + n + ": ready") != std::string::npos) ready.insert(n);
    }
    // Drain the rest of launch's output so its pipe never fills; ends when launch exits.
    drain = std::thread([l = launch.get()] { l->wait_for_line("a line no process prints"); });
  }
  std::thread drain;
  ~cluster() {
    launch->kill(SIGTERM);
    drain.join();  // launch closed its output as it exited
    launch->reap();
  }
};

cluster& the_cluster() {
  static cluster c;
  return c;
}

// Completions of `n` fixed prompts (greedy and seeded alternately), all in flight at once;
// `during` runs once every request has been sent.
std::vector<std::string> completions(std::uint16_t port, int n, const std::function<void()>& during = {}) {
  std::vector<std::future<std::string>> out;
  for (int i = 0; i < n; ++i)
    out.push_back(std::async(std::launch::async, [port, i] {
      nlohmann::json body{{"prompt", "request " + std::to_string(i) + " of the admin test"}, {"max_tokens", 48}};
      if (i % 2) {
        body["temperature"] = 0.9;
        body["seed"] = 1000 + i;
      } else {
        body["temperature"] = 0.0;
      }
      const auto r = test::post_json(port, "/v1/completions", body);
      if (r.status != 200) return "HTTP " + std::to_string(r.status) + ": " + r.body;
      return nlohmann::json::parse(r.body)["choices"][0]["text"].get<std::string>();
    }));
  if (during) during();
  std::vector<std::string> texts;
  for (auto& f : out) texts.push_back(f.get());
  return texts;
}

// Events from the admin endpoint, gathered on a thread until stop() (then returned as one line
// of JSON each).
struct event_collector {
  std::atomic<bool> done{false};
  std::string lines;
  std::thread t;
  event_collector() {
    std::atomic<bool> subscribed{false};
    t = std::thread([this, &subscribed] {
      actors::admin_client c(client_config());
      c.next_event(std::chrono::milliseconds(1));  // subscribes
      subscribed = true;
      while (!done)
        if (auto e = c.next_event(std::chrono::milliseconds(100))) lines += e->dump() + "\n";
    });
    while (!subscribed) std::this_thread::yield();  // (events before the subscription lands are lost: the
                                                     // tests look for ones that come seconds later)
  }
  std::string stop() {
    done = true;
    t.join();
    return lines;
  }
};

nlohmann::json replica(const nlohmann::json& status, const std::string& name) {
  for (const auto& r : status["replicas"])
    if (r["name"] == name) return r;
  return nullptr;
}

// Waits (polling status, bounded) until `name` runs at least one request.
bool busy(const std::string& name) {
  for (int i = 0; i < 400; ++i) {
    const auto s = admin_cli("status");
    const auto r = replica(s.json, name);
    if (!r.is_null() && r["running"].get<int>() > 0) return true;
  }
  return false;
}

}  // namespace

BOOST_AUTO_TEST_CASE(status_topology_kv_and_help_answer_in_json) {
  the_cluster();
  const auto s = admin_cli("status");
  BOOST_TEST_REQUIRE(s.status == 0, s.text);
  BOOST_TEST_REQUIRE(s.json["replicas"].size() == 3u);  // decode-2: a stopped slot (max_replicas 3, no warm one)
  BOOST_TEST(replica(s.json, "decode-2")["state"] == "stopped");
  for (const std::string name : {"decode-0", "decode-1"}) {
    const auto r = replica(s.json, name);
    BOOST_TEST_REQUIRE(!r.is_null(), name);
    BOOST_TEST(r["pool"] == "decode");
    BOOST_TEST(r["role"] == "both");
    BOOST_TEST(r["state"] == "running");
    BOOST_TEST(r["generation"] == 1);
    BOOST_TEST(r["kv_total_blocks"].get<int>() > 0);
  }
  BOOST_TEST(replica(s.json, "decode-0")["node"] == "node-a");
  BOOST_TEST(replica(s.json, "decode-1")["node"] == "node-b");
  BOOST_TEST(s.json["nodes"].size() == 3u);

  const auto t = admin_cli("topology");
  BOOST_TEST(t.status == 0);
  BOOST_TEST(t.json["pools"][0]["name"] == "decode");
  BOOST_TEST(t.json["router"]["policy"] == "least_loaded");
  // The model the head loaded (launch's --model), not the one configs/admin.toml names.
  BOOST_TEST(t.json["model"]["path"] == the_cluster().model_dir);
  BOOST_TEST(t.json["model"]["name"] == "small-llama-f32");
  BOOST_TEST(t.json["model"]["max_model_len"] == 4096);
  BOOST_TEST(t.json["model"]["architecture"] == "LlamaForCausalLM");
  // Without --json: a table and sentences, not the reply's JSON.
  const auto text = test::run_command(troupe_exe + " admin" + endpoint_flags() + " topology 2>&1");
  BOOST_TEST(text.status == 0);
  BOOST_TEST(text.output.find("model   " + the_cluster().model_dir + " (served as small-llama-f32") != std::string::npos, text.output);
  BOOST_TEST(text.output.find('{') == std::string::npos, text.output);

  completions(the_cluster().http, 2);  // something in the prefix caches
  const auto kv = admin_cli("kv decode-0");
  BOOST_TEST_REQUIRE(kv.status == 0, kv.text);
  BOOST_TEST(kv.json["replicas"].size() == 1u);
  BOOST_TEST(kv.json["replicas"][0]["name"] == "decode-0");
  BOOST_TEST(kv.json["replicas"][0]["prefix_queries"].get<std::uint64_t>() > 0u);
  BOOST_TEST(admin_cli("kv").json["replicas"].size() == 3u);

  // `help` reaches the server through the protocol (the CLI's own `help` prints its usage).
  actors::admin_client c(client_config());
  const auto h = c.call("help");
  BOOST_TEST_REQUIRE(h.ok);
  BOOST_TEST(h.result["commands"].size() >= 6u);

  const auto policy = admin_cli("set-policy router round_robin");
  BOOST_TEST(policy.status == 0, policy.text);
  BOOST_TEST(policy.json["router"]["policy"] == "round_robin");
  const auto bad_policy = admin_cli("set-policy router nope");
  BOOST_TEST(bad_policy.status == 1);
  BOOST_TEST(bad_policy.text.find("no routing policy \"nope\"") != std::string::npos, bad_policy.text);
  const auto bad_param = admin_cli("set-policy router least_loaded prefix_weight=2");
  BOOST_TEST(bad_param.text.find("takes no parameter \"prefix_weight\"") != std::string::npos, bad_param.text);
  BOOST_TEST(admin_cli("set-policy router least_loaded").status == 0);

  const auto warn = admin_cli("log-level warn");
  BOOST_TEST(warn.status == 0, warn.text);
  BOOST_TEST(warn.json["level"] == "warn");
  BOOST_TEST(warn.json["nodes"] == 2, warn.text);  // node-a's and node-b's processes too
  BOOST_TEST(admin_cli("log-level").json["level"] == "warn");
  const auto loud = admin_cli("log-level loud");
  BOOST_TEST(loud.status == 1);
  BOOST_TEST(loud.text.find("'loud' is not one of") != std::string::npos, loud.text);
  BOOST_TEST(admin_cli("log-level info").json["level"] == "info");

  const auto bad = admin_cli("drain no-such-replica");
  BOOST_TEST(bad.status == 1);
  BOOST_TEST(bad.text.find("no replica named 'no-such-replica'") != std::string::npos, bad.text);
  const auto unknown = admin_cli("frobnicate");
  BOOST_TEST(unknown.status == 1);
  BOOST_TEST(unknown.text.find("unknown command 'frobnicate'") != std::string::npos, unknown.text);
}

BOOST_AUTO_TEST_CASE(malformed_and_oversized_messages_get_an_error_reply_and_the_server_keeps_serving) {
  the_cluster();
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, 20000);
  s.connect(admin_endpoint());
  auto ask = [&](const std::string& payload) {
    s.send(zmq::message_t(), zmq::send_flags::sndmore);
    s.send(zmq::buffer(payload));
    zmq::message_t delim, reply;
    BOOST_TEST_REQUIRE(s.recv(delim).has_value(), "no reply");
    BOOST_TEST_REQUIRE(s.recv(reply).has_value(), "no reply");
    return admin::decode_reply(std::string_view(static_cast<const char*>(reply.data()), reply.size()));
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\xc1 is never msgpack", "not valid msgpack"},
      {admin::to_msgpack({{"v", 1}, {"cmd", "status"}}) + "tail", "4 bytes after the message"},
      {admin::to_msgpack({1, 2, 3}), "not a msgpack map"},
      {admin::to_msgpack({{"v", 9}, {"cmd", "status"}}), "protocol version 9"},
      {admin::to_msgpack({{"v", 1}}), "no command"},
      {admin::to_msgpack({{"v", 1}, {"cmd", "status"}, {"args", "x"}}), "\"args\" must be an array of strings"},
      {admin::to_msgpack({{"v", 1}, {"cmd", "status"}, {"extra", 1}}), "unknown field \"extra\""},
      {std::string("\x92\x01", 2), "truncated"},
      {admin::to_msgpack({{"v", 1}, {"cmd", std::string(100000, 'x')}}), "exceeds the limit of 65536"},
  };
  for (const auto& [payload, why] : cases) {
    const auto r = ask(payload);
    BOOST_TEST(!r.ok);
    BOOST_TEST(r.error.find(why) != std::string::npos, r.error << " should say " << why);
  }
  const auto ok = ask(admin::encode(admin::request{7, "status", {}}));
  BOOST_TEST(ok.ok);
  BOOST_TEST(ok.id == 7u);
  BOOST_TEST(admin_cli("status").status == 0);  // and the console still works
}

BOOST_AUTO_TEST_CASE(drain_under_load_moves_requests_with_identical_tokens_then_resume_serves_again) {
  auto& c = the_cluster();
  const auto expected = completions(c.http, 8);
  admin_result drained;
  event_collector collector;
  std::string cli_events;  // the console's own watch, for a few events
  std::thread watcher([&] { cli_events = test::run_command(troupe_exe + " admin --json" + endpoint_flags() + " watch --count 3 --for 60").output; });
  admin_result listed;
  const auto got = completions(c.http, 8, [&] {
    BOOST_TEST_REQUIRE(busy("decode-0"));
    listed = admin_cli("requests decode-0");
    drained = admin_cli("drain decode-0");
  });
  BOOST_TEST_REQUIRE(listed.status == 0, listed.text);
  BOOST_TEST_REQUIRE(listed.json["requests"].size() > 0u, listed.text);
  for (const auto& r : listed.json["requests"]) {
    BOOST_TEST(r["replica"] == "decode-0");
    BOOST_TEST(r["prompt_tokens"].get<int>() > 0);
  }
  BOOST_TEST(got == expected, "tokens changed by the drain");
  BOOST_TEST_REQUIRE(drained.status == 0, drained.text);
  BOOST_TEST(drained.json["state"] == "drained");
  BOOST_TEST(drained.json["safe_to_remove"] == true);
  const auto s = admin_cli("status");
  BOOST_TEST(replica(s.json, "decode-0")["state"] == "drained");
  BOOST_TEST(replica(s.json, "decode-0")["running"] == 0);
  const auto resumed = admin_cli("resume decode-0");
  BOOST_TEST(resumed.status == 0, resumed.text);
  BOOST_TEST(replica(admin_cli("status").json, "decode-0")["state"] == "running");
  watcher.join();
  BOOST_TEST(std::count(cli_events.begin(), cli_events.end(), '\n') >= 3, cli_events);
  const std::string events = collector.stop();
  BOOST_TEST(events.find("\"command\":\"drain\"") != std::string::npos, events);
  BOOST_TEST(events.find("\"to\":\"draining\"") != std::string::npos, events);
  BOOST_TEST(events.find("\"to\":\"drained\"") != std::string::npos, events);
  BOOST_TEST(events.find("\"kind\":\"placement\"") != std::string::npos, events);
}

// configs/admin.toml keeps no warm replica: decode-2 is stopped until a scale-up starts it on
// node-a (a separate process) through that node's agent; it then serves, and a scale-down drains
// it and has the agent stop it again.
BOOST_AUTO_TEST_CASE(scale_up_starts_a_stopped_replica_on_its_node_and_scale_down_stops_it) {
  auto& c = the_cluster();
  auto s = admin_cli("status");
  BOOST_TEST(replica(s.json, "decode-2")["state"] == "stopped", s.text);
  BOOST_TEST(replica(s.json, "decode-2")["node"] == "node-a");
  BOOST_TEST(s.json["pools"][0]["stopped"] == 1);
  BOOST_TEST(s.json["pools"][0]["warm_target"] == 0);
  const auto up = admin_cli("scale decode 3");
  BOOST_TEST_REQUIRE(up.status == 0, up.text);
  BOOST_TEST(up.json["added"] == nlohmann::json::array({"decode-2"}), up.text);
  BOOST_TEST(replica(admin_cli("status").json, "decode-2")["state"] == "running");
  std::uint64_t served = 0;
  for (int round = 0; round < 5 && served == 0; ++round) {  // least_loaded spreads 12 at once over the three
    for (const auto& t : completions(c.http, 12)) BOOST_TEST(t.rfind("HTTP", 0) != 0, t);
    served = admin_cli("kv decode-2").json["replicas"][0]["prefix_queries"].get<std::uint64_t>();
  }
  BOOST_TEST(served > 0u, "the started replica served nothing");
  const auto down = admin_cli("scale decode 2");
  BOOST_TEST_REQUIRE(down.status == 0, down.text);
  BOOST_TEST(down.json["removed"] == nlohmann::json::array({"decode-2"}), down.text);
  // The warm pool is brought back to warm_replicas (0) after the answer: decode-2 stops.
  bool stopped = false;
  for (int i = 0; i < 400 && !stopped; ++i) stopped = replica(admin_cli("status").json, "decode-2")["state"] == "stopped";
  BOOST_TEST(stopped, "decode-2 was not stopped after the scale-down");
  BOOST_TEST(admin_cli("status").json["pools"][0]["replicas"] == 2);
}

BOOST_AUTO_TEST_CASE(kill_under_load_every_request_completes_with_the_undisturbed_tokens) {
  auto& c = the_cluster();
  const auto expected = completions(c.http, 8);
  admin_result killed;
  event_collector collector;
  const auto got = completions(c.http, 8, [&] {
    BOOST_TEST_REQUIRE(busy("decode-1"));
    killed = admin_cli("kill decode-1");
  });
  BOOST_TEST(got == expected, "tokens changed by the kill");
  BOOST_TEST_REQUIRE(killed.status == 0, killed.text);
  BOOST_TEST(killed.json["killed"] == true);
  // Its node agent restarts it after a backoff (it stayed dead for good before): running again.
  bool restarted = false;
  const auto restart_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!restarted && std::chrono::steady_clock::now() < restart_deadline)
    restarted = replica(admin_cli("status").json, "decode-1")["state"] == "running";
  BOOST_TEST(restarted, "decode-1 was not restarted after it was killed");
  const std::string events = collector.stop();
  // Its whole node now: the process dies (SIGKILL), launch starts it again, and the replica
  // comes back as generation 2.
  const auto node = admin_cli("kill node-b");
  BOOST_TEST_REQUIRE(node.status == 0, node.text);
  BOOST_TEST(node.json["killed"] == true);
  bool back = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!back && std::chrono::steady_clock::now() < deadline) {
    const auto r = replica(admin_cli("status").json, "decode-1");
    back = !r.is_null() && r["state"] == "running" && r["generation"].get<int>() >= 2;
  }
  BOOST_TEST(back, "decode-1 did not come back after its node was killed");
  BOOST_TEST(admin_cli("kill head").text.find("is a head") != std::string::npos);
  BOOST_TEST(events.find("\"to\":\"dead\"") != std::string::npos, events);
  BOOST_TEST(events.find("\"kind\":\"migration\"") != std::string::npos, events);
  BOOST_TEST(events.find("\"from\":\"decode-1\"") != std::string::npos, events);
}

// Another revision of the cluster's model: the same shapes and tokenizer, other weights.
std::string other_revision() {
  model::synth_options o = test::preset("small");
  o.seed = 9;
  return test::synth_model("small-llama-f32-seed9", o);
}

// The decode pool swapped under load to another revision (the same shapes and tokenizer, other
// weights) through the console: no request fails, every serving replica ends on the new
// revision's key, the answers change, and swapping back restores the first answers exactly.
BOOST_AUTO_TEST_CASE(swap_under_load_fails_no_request_and_serves_the_new_revision) {
  auto& c = the_cluster();
  const std::string other = other_revision();
  const auto before = completions(c.http, 8);
  event_collector collector;
  admin_result swapped;
  // Slowed (each step waits 50 ms), decode-0 holds requests for seconds rather than the tiny
  // model's one and a half, so `status` samples it busy even on a loaded machine (a fresh-clone
  // run once sampled it only before and after). The swap replaces it, and the delay with it.
  BOOST_TEST_REQUIRE(admin_cli("slow decode-0 50").status == 0);
  const auto during = completions(c.http, 16, [&] {
    BOOST_TEST_REQUIRE(busy("decode-0"));
    swapped = admin_cli("swap decode --model " + other + " --revision r2", 300);
  });
  for (const auto& t : during) BOOST_TEST(t.rfind("HTTP", 0) != 0, t);
  BOOST_TEST_REQUIRE(swapped.status == 0, swapped.text);
  const std::string key = swapped.json["model_key"].get<std::string>();
  BOOST_TEST(key.size() > 3u);
  BOOST_TEST(key.substr(key.size() - 3) == "@r2", key);
  BOOST_TEST(swapped.json["replaced"].size() == 2u, swapped.text);
  const auto s = admin_cli("status");
  int serving = 0;
  for (const auto& r : s.json["replicas"])
    if (r["state"] == "running") {
      ++serving;
      BOOST_TEST(r["model_key"] == key, r.dump());
    }
  BOOST_TEST(serving == 2, s.text);
  const auto after = completions(c.http, 8);
  for (const auto& t : after) BOOST_TEST(t.rfind("HTTP", 0) != 0, t);
  BOOST_TEST(after != before, "the answers did not change with the weights");
  const auto back = admin_cli("swap decode --model " + c.model_dir, 300);
  BOOST_TEST_REQUIRE(back.status == 0, back.text);
  BOOST_TEST(completions(c.http, 8) == before, "swapping back did not restore the first answers");
  const auto refused = admin_cli("swap decode --model /nonexistent-model-dir");
  BOOST_TEST(refused.status != 0);
  BOOST_TEST(refused.text.find("/nonexistent-model-dir") != std::string::npos, refused.text);
  const std::string events = collector.stop();
  BOOST_TEST(events.find("\"phase\":\"loaded\"") != std::string::npos, events);
  BOOST_TEST(events.find("\"phase\":\"replaced\"") != std::string::npos, events);
  BOOST_TEST(events.find("\"phase\":\"done\"") != std::string::npos, events);
}

// Requests from `clients` senders (each its own `user`) one after another until stop(); what
// failed, by its HTTP status and body.
struct steady_load {
  std::atomic<bool> done{false};
  std::atomic<int> sent{0};
  std::mutex m;
  std::vector<std::string> failures;
  std::vector<std::thread> clients;
  steady_load(std::uint16_t port, int n) {
    for (int k = 0; k < n; ++k)
      clients.emplace_back([this, port, k] {
        for (int i = 0; !done; ++i) {
          const nlohmann::json body{{"prompt", "load " + std::to_string(i) + " from client " + std::to_string(k)}, {"max_tokens", 16},
                                    {"user", "client-" + std::to_string(k)}};
          const auto r = test::post_json(port, "/v1/completions", body);
          ++sent;
          if (r.status != 200) {
            std::lock_guard<std::mutex> l(m);
            failures.push_back("HTTP " + std::to_string(r.status) + ": " + r.body);
          }
        }
      });
  }
  std::vector<std::string> stop() {
    done = true;
    for (auto& t : clients) t.join();
    return failures;
  }
};

// Polls `rollout status POOL` (bounded) until its phase is one of `ends`; returns that rollout.
nlohmann::json rollout_until(const std::string& pool, std::set<std::string> ends) {
  nlohmann::json last;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
  while (std::chrono::steady_clock::now() < deadline) {
    const auto s = admin_cli("rollout status " + pool);
    if (s.json.is_object() && !s.json["rollouts"].empty()) last = s.json["rollouts"][0];
    if (!last.is_null() && ends.count(last["phase"].get<std::string>())) return last;
  }
  return last;
}

// The cache keys the serving replicas report, joined ("none" for one without a report).
std::string serving_keys() {
  std::set<std::string> keys;
  const auto s = admin_cli("status");
  if (!s.json.is_object()) return "no status: " + s.text;
  for (const auto& r : s.json["replicas"])
    if (r["state"] == "running") keys.insert(r["model_key"].is_string() ? r["model_key"].get<std::string>() : "none");
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : " ") + k;
  return out;
}

// Canary rollouts under steady load, no client request failing: a good revision is promoted to
// every replica step by step; then a canary made slow (each of its steps delayed, as a
// regression would) is rolled back by the live figures to the revision the pool ran before.
// The quality gate's files: held-out text and prompts (one per line), written once.
std::string quality_flags() {
  static const std::string flags = [] {
    const auto dir = std::filesystem::temp_directory_path() / ("troupe-admin-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "held-out.txt") << "In the beginning God created the heaven and the earth. And the earth was without form, and void;"
                                            " and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the"
                                            " waters. And God said, Let there be light: and there was light.\n";
    std::ofstream(dir / "prompts.txt") << "The capital of France is\nOnce upon a time\n1, 2, 3, 4,\nThe quick brown fox\n";
    return " --held-out " + (dir / "held-out.txt").string() + " --prompts " + (dir / "prompts.txt").string();
  }();
  return flags;
}

// A good canary (the same weights under a new revision: the quality gate passes) is promoted
// step by step; a slowed one is rolled back by the live figures.
BOOST_AUTO_TEST_CASE(a_good_canary_is_promoted_and_a_slow_one_rolled_back_with_no_failed_request) {
  auto& c = the_cluster();
  steady_load load(c.http, 4);
  // Bounds a loaded two-core machine's noise stays within (a fresh replica's first requests run
  // slower).
  const auto good = admin_cli("rollout decode --model " + c.model_dir + " --revision r5 --canary 50% --step 50%:1s --min-requests 5"
                              " --max-ttft-ratio 20 --max-itl-ratio 20" + quality_flags(), 300);
  BOOST_TEST_REQUIRE(good.status == 0, good.text);
  BOOST_TEST(good.json["phase"] == "canary");
  const std::string key = good.json["model_key"].get<std::string>();
  const auto promoted = rollout_until("decode", {"promoted", "rolled_back", "failed"});
  BOOST_TEST_REQUIRE(promoted["phase"] == "promoted", promoted.dump());
  std::string passed;  // the gate ran, and passed, before the step advanced
  for (const auto& d : promoted["decisions"])
    if (d["decision"] == "quality_passed") passed = d["reason"].get<std::string>();
  BOOST_TEST(passed.find("agree on 100%") != std::string::npos, promoted.dump());
  BOOST_TEST(passed.find("held-out perplexity") != std::string::npos, promoted.dump());
  BOOST_TEST(serving_keys() == key, admin_cli("status").text);
  BOOST_TEST(admin_cli("status").json["pools"][0]["replicas"] == 2);  // back to its size

  // The canary is slowed by 600 ms a step, whatever the machine's load makes a step: a loaded
  // two-core machine's steps of 60-170 ms kept a 150 ms delay under a bound of 4x, and the gate
  // never decided. 2x is crossed while the baseline's steps stay under 600 ms.
  const auto slow = admin_cli("rollout decode --model " + c.model_dir + " --revision r6 --canary 50% --step 50%:10m --min-requests 5"
                              " --max-ttft-ratio 2 --max-itl-ratio 2", 300);
  BOOST_TEST_REQUIRE(slow.status == 0, slow.text);
  const std::string slow_key = slow.json["model_key"].get<std::string>();
  std::string canary;
  const auto during = admin_cli("status");
  for (const auto& r : during.json["replicas"])
    if (r["state"] == "running" && r["model_key"] == slow_key) canary = r["name"].get<std::string>();
  BOOST_TEST_REQUIRE(!canary.empty(), slow_key + " in " + during.text);
  BOOST_TEST_REQUIRE(admin_cli("slow " + canary + " 600").status == 0);
  const auto back = rollout_until("decode", {"promoted", "rolled_back", "failed"});
  BOOST_TEST_REQUIRE(back["phase"] == "rolled_back", back.dump());
  std::string reasons;
  for (const auto& d : back["decisions"]) reasons += d["decision"].get<std::string>() + ": " + d["reason"].get<std::string>() + "\n";
  BOOST_TEST((reasons.find("roll_back: TTFT") != std::string::npos || reasons.find("roll_back: ITL") != std::string::npos), reasons);
  BOOST_TEST(serving_keys() == key);  // the revision it ran before
  const auto failures = load.stop();
  BOOST_TEST(load.sent > 20);
  BOOST_TEST(failures.empty(), (failures.empty() ? "" : failures.front()));
}

// A broken revision (the same architecture and tokenizer, other weights) is as fast as the
// baseline, so the live figures pass it: the quality gate's greedy answers and perplexity
// catch it, and it is rolled back with no client request failed.
BOOST_AUTO_TEST_CASE(a_broken_revision_is_rolled_back_by_the_quality_gate_with_no_failed_request) {
  auto& c = the_cluster();
  const std::string before = serving_keys();
  steady_load load(c.http, 4);
  const auto broken = admin_cli("rollout decode --model " + other_revision() + " --revision r7 --canary 50% --step 50%:1s --min-requests 5"
                                " --max-ttft-ratio 20 --max-itl-ratio 20" + quality_flags(), 300);
  BOOST_TEST_REQUIRE(broken.status == 0, broken.text);
  const auto back = rollout_until("decode", {"promoted", "rolled_back", "failed"});
  BOOST_TEST_REQUIRE(back["phase"] == "rolled_back", back.dump());
  std::string reason;
  for (const auto& d : back["decisions"])
    if (d["decision"] == "roll_back") reason = d["reason"].get<std::string>();
  BOOST_TEST(reason.rfind("quality: ", 0) == 0u, back.dump());
  BOOST_TEST(serving_keys() == before);
  const auto failures = load.stop();
  BOOST_TEST(load.sent > 0);
  BOOST_TEST(failures.empty(), (failures.empty() ? "" : failures.front()));
  // A gate file the head cannot read refuses the rollout, naming it.
  const auto unreadable = admin_cli("rollout decode --model " + c.model_dir + " --prompts /nonexistent/prompts.txt");
  BOOST_TEST(unreadable.status != 0);
  BOOST_TEST(unreadable.text.find("--prompts: cannot read /nonexistent/prompts.txt") != std::string::npos, unreadable.text);
}

// X-Troupe-Split pins a request to one side of a rollout whatever its sender draws: greedy
// answers pinned to a canary of other weights are never the baseline's, those pinned to the
// baseline always are; `bench serve --canary-split` replays one workload against each side;
// with no rollout under way the header is refused by name, not silently ignored.
BOOST_AUTO_TEST_CASE(x_troupe_split_pins_requests_to_one_side_of_a_rollout) {
  auto& c = the_cluster();
  auto greedy = [&](const std::string& side, int sender) {
    const nlohmann::json body{{"prompt", "a pinned request of the admin test"}, {"max_tokens", 12}, {"temperature", 0.0},
                              {"user", "sender-" + std::to_string(sender)}};
    std::vector<std::pair<std::string, std::string>> headers;
    if (!side.empty()) headers.emplace_back("X-Troupe-Split", side);
    return test::http_request(c.http, "POST", "/v1/completions", body.dump(), headers);
  };
  auto text = [](const test::http_response& r) { return r.status == 200 ? r.json()["choices"][0]["text"].get<std::string>() : r.body; };
  const auto unsplit = greedy("canary", 0);
  BOOST_TEST(unsplit.status == 503);
  BOOST_TEST(unsplit.body.find("X-Troupe-Split: no canary rollout of model") != std::string::npos, unsplit.body);
  const auto sideways = greedy("sideways", 0);
  BOOST_TEST(sideways.status == 400);
  BOOST_TEST(sideways.body.find("X-Troupe-Split: expected canary or baseline") != std::string::npos, sideways.body);
  const std::string baseline_text = text(greedy("", 0));

  const auto started = admin_cli("rollout decode --model " + other_revision() + " --revision r8 --canary 50% --step 50%:10m"
                                 " --max-ttft-ratio 100 --max-itl-ratio 100", 300);
  BOOST_TEST_REQUIRE(started.status == 0, started.text);
  for (int sender = 0; sender < 8; ++sender) {  // senders that draw either side
    const auto canary = greedy("canary", sender);
    BOOST_TEST_REQUIRE(canary.status == 200, canary.body);
    BOOST_TEST(text(canary) != baseline_text, "sender " << sender);
    BOOST_TEST(text(greedy("baseline", sender)) == baseline_text, "sender " << sender);
  }
  const std::string out = std::string(TROUPE_BINARY_DIR) + "/admin-test-split.json";
  const auto bench = test::run_command(troupe_exe + " bench serve --url http://127.0.0.1:" + std::to_string(c.http) +
                                       " --requests 6 --concurrency 3 --prompt-len 16 --output-len 4 --canary-split --quiet --json " + out + " 2>&1");
  BOOST_TEST(bench.status == 0, bench.output);
  BOOST_TEST(bench.output.find("(canary) against") != std::string::npos, bench.output);
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in, nullptr, false);
  BOOST_TEST_REQUIRE(j.is_object(), bench.output);
  BOOST_TEST(j["split"] == "canary");
  BOOST_TEST(j["completed"] == 6);
  BOOST_TEST(j["baseline"]["completed"] == 6);
  BOOST_TEST(j["versus_baseline"].size() == 12u);
  BOOST_TEST_REQUIRE(admin_cli("rollback decode").status == 0);
  BOOST_TEST(rollout_until("decode", {"rolled_back", "failed"})["phase"] == "rolled_back");
}

// `troupe admin top --count FRAMES` in a pseudo-terminal of size `ws` (the default when null):
// everything it wrote; `status` gets its wait status.
std::string top_in_pty(const char* frames, const winsize* ws, int& status) {
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, ws);
  if (pid < 0) return "";
  if (pid == 0) {
    ::execl(troupe_exe.c_str(), troupe_exe.c_str(), "admin", "top", "--count", frames, "--endpoint", admin_endpoint().c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::string screen;
  char buf[4096];
  for (ssize_t n; (n = ::read(master, buf, sizeof buf)) > 0;) screen.append(buf, std::size_t(n));  // EIO once it exits
  ::waitpid(pid, &status, 0);
  ::close(master);
  return screen;
}

// What a pseudo-terminal's program wrote until `needle` appears `count` times in all of it (or
// `limit` passes, or the program exits), appended to `out`; whether it appeared.
bool pty_read_until(int master, std::string& out, const std::string& needle, int count, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  auto seen = [&] {
    int n = 0;
    for (std::size_t p = out.find(needle); p != std::string::npos; p = out.find(needle, p + 1)) ++n;
    return n;
  };
  char buf[4096];
  while (seen() < count && std::chrono::steady_clock::now() < deadline) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 200) != 1) continue;
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n <= 0) break;  // EIO once it exits
    out.append(buf, std::size_t(n));
  }
  return seen() >= count;
}

// The interactive console in a pseudo-terminal. `watch --for 2` typed there streamed for over a
// minute (the console read no flags of its own) and swallowed what was typed meanwhile; Ctrl-C
// printed "Interrupted system call". Now the watch ends by itself, a typed line ends it and
// runs, and Ctrl-C stops a watch or clears the prompt, the console carrying on.
BOOST_AUTO_TEST_CASE(the_console_follows_what_is_typed_and_survives_ctrl_c) {
  the_cluster();
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  BOOST_TEST_REQUIRE(pid >= 0);
  if (pid == 0) {
    ::execl(troupe_exe.c_str(), troupe_exe.c_str(), "admin", "--endpoint", admin_endpoint().c_str(), "--events", events_endpoint().c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::string out;
  auto type = [&](const std::string& text) { BOOST_TEST_REQUIRE(::write(master, text.data(), text.size()) == ssize_t(text.size())); };
  const std::string prompt = "troupe> ";
  BOOST_TEST_REQUIRE(pty_read_until(master, out, prompt, 1, std::chrono::seconds(30)), out);
  type("watch --for 2\n");
  BOOST_TEST(pty_read_until(master, out, prompt, 2, std::chrono::seconds(30)), "watch --for 2 did not end: " << out);
  type("watch\n");
  BOOST_TEST_REQUIRE(pty_read_until(master, out, "Enter or Ctrl-C stops", 1, std::chrono::seconds(30)), out);
  type("status\n");  // ends the watch, then runs
  BOOST_TEST(pty_read_until(master, out, "decode-1", 1, std::chrono::seconds(30)), "status typed during a watch did not run: " << out);
  BOOST_TEST(pty_read_until(master, out, prompt, 3, std::chrono::seconds(30)), out);
  type("watch\n");
  BOOST_TEST_REQUIRE(pty_read_until(master, out, "Enter or Ctrl-C stops", 3, std::chrono::seconds(30)), out);
  type("\x03");  // Ctrl-C during a watch
  BOOST_TEST(pty_read_until(master, out, prompt, 4, std::chrono::seconds(30)), "Ctrl-C did not end the watch: " << out);
  type("sta\x03");  // Ctrl-C at the prompt drops the line
  BOOST_TEST(pty_read_until(master, out, prompt, 5, std::chrono::seconds(30)), out);
  type("status\n");
  BOOST_TEST(pty_read_until(master, out, "decode-1", 2, std::chrono::seconds(30)), "the console no longer answers: " << out);
  type("quit\n");
  int status = 0;
  pty_read_until(master, out, "\x01never", 1, std::chrono::seconds(10));  // to its exit
  ::waitpid(pid, &status, 0);
  ::close(master);
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST(out.find("Interrupted system call") == std::string::npos, out);
  BOOST_TEST(out.find("unknown argument") == std::string::npos, out);
}

// `top` in a pseudo-terminal: a cleared screen with every replica, its state and KV use.
BOOST_AUTO_TEST_CASE(top_draws_the_replicas_in_a_terminal) {
  the_cluster();
  int status = 0;
  const std::string screen = top_in_pty("2", nullptr, status);
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == 0, screen);
  const auto last = screen.rfind("\x1b[2J");  // the last frame
  BOOST_TEST_REQUIRE(last != std::string::npos, screen);
  const std::string frame = screen.substr(last);
  for (const char* want : {"troupe top", "REPLICA", "KV USE", "TOK/S", "decode-0", "decode-1", "node-a", "node-b"})
    BOOST_TEST(frame.find(want) != std::string::npos, want << " not in " << frame);
  BOOST_TEST(std::count(screen.begin(), screen.end(), '\x1b') >= 4, "two frames, each homed and cleared");

  // In a terminal 60 columns wide, no line is wider (the NODE column goes, the bar shrinks).
  winsize narrow{};
  narrow.ws_row = 24;
  narrow.ws_col = 60;
  const std::string small = top_in_pty("1", &narrow, status);
  BOOST_TEST(WEXITSTATUS(status) == 0, small);
  const std::string narrow_frame = small.substr(small.rfind("\x1b[2J") + 4);
  BOOST_TEST(narrow_frame.find("decode-0") != std::string::npos, narrow_frame);
  std::size_t widest = 0;
  for (std::size_t at = 0; at < narrow_frame.size();) {
    std::size_t end = narrow_frame.find('\n', at);
    if (end == std::string::npos) end = narrow_frame.size();
    std::string line = narrow_frame.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    widest = std::max(widest, line.size());
    at = end + 1;
  }
  BOOST_TEST(widest <= 60u, narrow_frame);
}

// With CURVE keys: only the authorized client key gets replies and events.
BOOST_AUTO_TEST_CASE(with_keys_a_client_with_no_key_or_a_wrong_key_gets_no_reply_and_no_event) {
  const std::string dir = std::string(TROUPE_BINARY_DIR) + "/admin-curve";
  test::run_command("rm -rf " + dir + " && mkdir -p " + dir);
  for (const char* who : {"server", "client", "stranger"})
    BOOST_TEST_REQUIRE(test::run_command("cd " + dir + " && " + troupe_exe + " admin keygen " + who).status == 0);
  auto key = [&](const std::string& file) {
    std::ifstream in(dir + "/" + file);
    std::string k;
    std::getline(in, k);
    return k;
  };
  const std::uint16_t req_port = test::free_port(), ev_port = test::free_port();
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(req_port), events = "tcp://127.0.0.1:" + std::to_string(ev_port);
  {
    std::ofstream t(dir + "/curve.toml");
    t << "[model]\npath = \"" << test::synth_model("tiny-llama-f32", test::preset("tiny")) << "\"\n"
      << "[[nodes]]\nname = \"head\"\naddress = \"127.0.0.1:0\"\n"
      << "[[pools]]\nname = \"both\"\nreplicas = 1\n"
      << "[admin]\nendpoint = \"" << endpoint << "\"\nevents = \"" << events << "\"\n"
      << "secret_key = \"" << dir << "/server.key\"\nauthorized_keys = [\"" << key("client.pub") << "\"]\n";
  }
  test::serve_process serve({dir + "/curve.toml"});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  auto client = [&](const std::string& secret) {
    actors::admin_client_config c;
    c.endpoint = endpoint;
    c.events = events;
    c.timeout = std::chrono::milliseconds(3000);
    if (!secret.empty()) {
      c.server_key = key("server.pub");
      c.secret_key = key(secret);
    }
    return std::make_unique<actors::admin_client>(c);
  };
  auto authorized = client("client.key");
  const auto r = authorized->call("status");
  BOOST_TEST_REQUIRE(r.ok, r.error);
  BOOST_TEST(r.result["replicas"].size() == 1u);
  for (const std::string who : {"", "stranger.key"}) {
    auto other = client(who);
    BOOST_CHECK_THROW(other->call("status"), std::runtime_error);
    // Events: both subscribe, a command makes one; only the authorized subscriber sees it.
    authorized->next_event(std::chrono::milliseconds(300));
    other->next_event(std::chrono::milliseconds(300));
    const auto drain = authorized->call("resume", {"both-0"});  // an admin action: an event
    BOOST_TEST(drain.ok, drain.error);
    bool seen = false;
    for (int i = 0; i < 20 && !seen; ++i)
      if (auto e = authorized->next_event(std::chrono::milliseconds(500))) seen = (*e)["kind"] == "admin";
    BOOST_TEST(seen, "the authorized subscriber got the event");
    BOOST_TEST(!other->next_event(std::chrono::milliseconds(1500)).has_value(), "an unauthorized subscriber got an event");
  }
}
