// The Grafana dashboard (deploy/grafana/troupe-dashboard.json) against a real Prometheus
// (Debian's) scraping a real `troupe serve` under load: every panel's every query, evaluated
// through Prometheus's HTTP API, returns data with a number in it, and names only metrics the
// server exports. The topology exercises what the panels show: a prefill and a decode pool (KV
// transfer), n-gram speculation on the decode pool, an SLO, tenants, priorities, prompts that
// hit the prefix cache, a cancelled stream and a refused request, in two waves a scrape apart.
#define BOOST_TEST_MODULE dashboard
#include <boost/test/unit_test.hpp>
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it
#include <boost/asio.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "tests/support/eventually.h"
#include "tests/support/http_client.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

const std::string topology_text = R"(
[model]
path = "models/kjv"

[[nodes]]
name = "head"

[[pools]]
name = "prefill"
role = "prefill"

[[pools]]
name = "decode"
role = "decode"

[pools.speculative]
method = "ngram"
k = 4
ngram_min = 1
ngram_max = 3
min_acceptance = 0

[scheduler]
max_batched_tokens = 1024
kv_memory = "128MiB"

[frontend]
ttft_slo = "2s"
itl_slo = "500ms"
)";

std::string url_encoded(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += char(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

// Prometheus on a port of its own, scraping `target` every second.
struct prometheus {
  fs::path dir;
  std::uint16_t port = test::free_port();
  std::unique_ptr<test::child_process> proc;

  prometheus(const fs::path& d, std::uint16_t target) : dir(d) {
    fs::create_directories(dir / "data");
    std::ofstream(dir / "prometheus.yml") << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                             "scrape_configs:\n  - job_name: troupe\n    static_configs:\n      - targets: ['127.0.0.1:"
                                          << target << "']\n";
    proc = std::make_unique<test::child_process>(std::vector<std::string>{
        "/usr/bin/prometheus", "--config.file=" + (dir / "prometheus.yml").string(), "--storage.tsdb.path=" + (dir / "data").string(),
        "--web.listen-address=127.0.0.1:" + std::to_string(port), "--log.level=warn"});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!ready() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling a deadline, not synchronising
  }
  bool ready() const {
    try {
      return test::http_request(port, "GET", "/-/ready").status == 200;
    } catch (const std::exception&) {
      return false;
    }
  }
  nlohmann::json query(const std::string& expr) const {
    const auto r = test::http_request(port, "GET", "/api/v1/query?query=" + url_encoded(expr));
    BOOST_TEST_REQUIRE(r.status == 200, expr << ": " << r.body);
    return r.json();
  }
  // Every metric name Prometheus has seen from the server.
  std::set<std::string> names() const {
    const auto r = test::http_request(port, "GET", "/api/v1/label/__name__/values");
    std::set<std::string> out;
    const auto body = r.json();
    for (const auto& n : body["data"]) out.insert(n.get<std::string>());
    return out;
  }
};

// The dashboard's queries as Prometheus runs them: Grafana's variables given values.
std::vector<std::pair<std::string, std::string>> panel_queries() {
  std::ifstream in(std::string(TROUPE_SOURCE_DIR) + "/deploy/grafana/troupe-dashboard.json");
  const auto dash = nlohmann::json::parse(in);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& p : dash["panels"])
    for (const auto& t : p.value("targets", nlohmann::json::array())) {
      std::string e = t["expr"];
      e = std::regex_replace(e, std::regex("\\$__rate_interval"), "1m");
      e = std::regex_replace(e, std::regex("\\$model"), ".*");
      out.emplace_back(p["title"].get<std::string>() + " / " + t["legendFormat"].get<std::string>(), e);
    }
  return out;
}

nlohmann::json completion(std::uint16_t port, const std::string& prompt, int max_tokens, const std::string& user, int priority) {
  const nlohmann::json body{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"user", user}, {"priority", priority}};
  return test::post_json(port, "/v1/completions", body).json();
}

// What the panels show, happening: lengths, tenants, priorities, cache hits, a cancellation,
// a refusal.
void load(std::uint16_t port) {
  const std::string verse = "And God said, Let there be light: and there was light. And God saw the light, that it was good: ";
  const std::string refrain = "the king of Judah, the king of Israel, the king of Judah, the king of Israel, the king of Judah, ";
  std::string long_prompt;
  for (int i = 0; i < 8; ++i) long_prompt += verse;  // over 128 tokens
  std::vector<std::future<void>> all;
  for (int i = 0; i < 12; ++i)
    all.push_back(std::async(std::launch::async, [=] {
      completion(port, (i % 3 == 0 ? long_prompt : i % 3 == 1 ? verse : refrain) + std::to_string(i), i % 2 ? 24 : 160,
                 i % 2 ? "alice" : "bob", i % 3 - 1);
    }));
  for (auto& f : all) f.get();
  completion(port, long_prompt, 16, "bob", 0);  // the same prompt again: its prefix is cached
  completion(port, long_prompt, 16, "bob", 0);
  // A stream its client leaves after the first bytes: cancelled.
  {
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket s(io);
    s.connect({boost::asio::ip::make_address("127.0.0.1"), port});
    const std::string body = nlohmann::json{{"prompt", verse}, {"max_tokens", 400}, {"stream", true}, {"ignore_eos", true}}.dump();
    const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    boost::asio::write(s, boost::asio::buffer(req));
    char buf[512];
    s.read_some(boost::asio::buffer(buf));
  }
  BOOST_TEST(test::post_json(port, "/v1/completions", {{"prompt", "x"}, {"max_tokens", -1}}).status == 400);  // refused
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_panel_query_returns_data_from_a_real_prometheus) {
  const fs::path dir = fs::temp_directory_path() / ("troupe-dashboard-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "topology.toml") << topology_text;
  BOOST_TEST_REQUIRE(::chdir(TROUPE_SOURCE_DIR) == 0);  // models/kjv
  test::serve_process serve({(dir / "topology.toml").string()});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  prometheus prom(dir / "prometheus", serve.port());
  BOOST_TEST_REQUIRE(prom.ready());
  // Two waves: rates need a series to grow between scrapes, so the second wave's increments
  // land in series Prometheus has already seen (each wave ends with one cancelled stream).
  auto cancelled_seen = [&](double n) {
    const auto r = prom.query("sum(troupe:request_success_total{finished_reason=\"abort\"})");
    return !r["data"]["result"].empty() && std::stod(r["data"]["result"][0]["value"][1].get<std::string>()) >= n;
  };
  for (int wave = 1; wave <= 2; ++wave) {
    load(serve.port());
    BOOST_TEST_REQUIRE(test::eventually([&] { return cancelled_seen(wave); }, std::chrono::seconds(90), std::chrono::milliseconds(200)));
  }
  // Replicas' counters (steps, drafts, prefix lookups) come with their load reports: Prometheus
  // has the second wave's once it has the steps the server counts when they settle.
  const double steps = test::settled_metric_sum(serve.port(), "troupe:replica_engine_steps_total");
  auto steps_seen = [&] {
    const auto r = prom.query("sum(troupe:replica_engine_steps_total)");
    return !r["data"]["result"].empty() && std::stod(r["data"]["result"][0]["value"][1].get<std::string>()) >= steps;
  };
  BOOST_TEST_REQUIRE(test::eventually(steps_seen, std::chrono::seconds(90), std::chrono::milliseconds(200)));
  const auto names = prom.names();
  const auto queries = panel_queries();
  BOOST_TEST(queries.size() >= 40u);
  for (const auto& [panel, expr] : queries) {
    BOOST_TEST_CONTEXT(panel << ": " << expr) {
      static const std::regex metric_name("troupe:[a-z0-9_]+");
      for (std::sregex_iterator it(expr.begin(), expr.end(), metric_name), end; it != end; ++it)
        BOOST_TEST(names.count(it->str()) == 1u, it->str() << " is not a metric the server exports");
      const auto r = prom.query(expr);
      BOOST_TEST(r["status"] == "success");
      const auto& result = r["data"]["result"];
      BOOST_TEST(!result.empty(), "no data");
      bool number = false;
      for (const auto& s : result) number = number || std::isfinite(std::stod(s["value"][1].get<std::string>()));
      BOOST_TEST(number, "only NaN: " << result.dump());
    }
  }
  fs::remove_all(dir);
}
