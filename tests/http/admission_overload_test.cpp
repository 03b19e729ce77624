// Admission control over real HTTP against `troupe serve`: at about 5x what the replica can
// queue, admitted requests finish whole, the rest get 429 with a Retry-After, the less important
// priority is shed first, and the server's memory stays bounded; a tenant over its request
// rate gets 429 naming it, another tenant does not.
#define BOOST_TEST_MODULE admission_overload
#include <boost/test/unit_test.hpp>

#include <fstream>
#include <future>

#include "tests/support/http_client.h"
#include "tests/support/models.h"

using namespace troupe;
using json = nlohmann::json;

namespace {


// One replica running two sequences at a time, a queue of 4 (priority 3: 1), and an API key
// whose tenant may send one request per 20 seconds.
std::string write_config() {
  const std::string path = std::string(TROUPE_BINARY_DIR) + "/admission-overload.toml";
  std::ofstream t(path);
  t << "[model]\npath = \"" << test::synth_model("tiny-llama-f32", test::preset("tiny")) << "\"\n"
    << "[[nodes]]\nname = \"head\"\naddress = \"127.0.0.1:0\"\n"
    << "[[pools]]\nname = \"main\"\nreplicas = 1\n"
    << "[scheduler]\nmax_seqs = 2\n"
    << "[frontend]\napi_keys = [\"open-key\", { key = \"slow-key\", tenant = \"slow\" }]\n"
    << "[admission]\nmax_queued = 4\n"
    << "[admission.tenants.slow]\nrequests_per_second = 0.05\nburst = 1\n";
  return path;
}

struct outcome {
  int status = 0;
  int priority = 0;
  std::string retry_after;
  int completion_tokens = 0;
  std::string body;
};

outcome complete(std::uint16_t port, int priority, const std::string& key = "open-key") {
  const json body{{"prompt", "overload " + std::to_string(priority)}, {"max_tokens", 24}, {"priority", priority}, {"ignore_eos", true}};
  const auto r = test::http_request(port, "POST", "/v1/completions", body.dump(), {{"Authorization", "Bearer " + key}});
  outcome o{r.status, priority, r.headers.count("retry-after") ? r.headers.at("retry-after") : "", 0, r.body};
  if (r.status == 200) o.completion_tokens = json::parse(r.body)["usage"]["completion_tokens"].get<int>();
  return o;
}

}  // namespace

BOOST_AUTO_TEST_CASE(overload_sheds_the_least_important_first_and_admitted_requests_finish) {
  test::serve_process serve({write_config()});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  long rss_after_first = 0;
  int ok[2] = {0, 0}, refused[2] = {0, 0};
  for (int wave = 0; wave < 3; ++wave) {
    std::vector<std::future<outcome>> futures;
    for (int i = 0; i < 30; ++i)  // 2 running + 4 queued can be taken; 30 arrive at once
      futures.push_back(std::async(std::launch::async, [port = serve.port(), i] { return complete(port, i % 2 ? 3 : 0); }));
    for (auto& f : futures) {
      const outcome o = f.get();
      const int cls = o.priority == 0 ? 0 : 1;
      if (o.status == 200) {
        ++ok[cls];
        BOOST_TEST(o.completion_tokens == 24, "an admitted request finished short: " << o.body);
      } else {
        ++refused[cls];
        BOOST_TEST(o.status == 429, o.body);
        BOOST_TEST(!o.retry_after.empty());
        BOOST_TEST(std::stoi(o.retry_after) >= 1);
        BOOST_TEST(o.body.find("overloaded (retry after") != std::string::npos, o.body);
      }
    }
    if (wave == 0) rss_after_first = test::rss_kb(serve.child().pid());
  }
  BOOST_TEST_MESSAGE("priority 0: " << ok[0] << " served, " << refused[0] << " refused; priority 3: " << ok[1] << " served, "
                                    << refused[1] << " refused");
  BOOST_TEST(refused[0] + refused[1] > 0);
  BOOST_TEST(ok[0] > ok[1], "priority 0 is served more than priority 3");
  BOOST_TEST(refused[1] > refused[0], "priority 3 is shed first");
  const long rss_end = test::rss_kb(serve.child().pid());
  BOOST_TEST(rss_end < rss_after_first + 64 * 1024, "RSS grew from " << rss_after_first << " kB to " << rss_end << " kB");
}

BOOST_AUTO_TEST_CASE(a_tenant_over_its_request_rate_gets_429_naming_it_and_others_do_not) {
  test::serve_process serve({write_config()});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  // The bucket holds one request and refills one per 20 s: the second of two finds it empty.
  const outcome first = complete(serve.port(), 0, "slow-key");
  const outcome second = complete(serve.port(), 0, "slow-key");
  BOOST_TEST(first.status == 200, first.body);
  BOOST_TEST(second.status == 429, second.body);
  BOOST_TEST(second.body.find("tenant 'slow'") != std::string::npos, second.body);
  BOOST_TEST(std::stoi(second.retry_after) >= 10);  // one request per 20 s
  BOOST_TEST(complete(serve.port(), 0, "open-key").status == 200);  // the default tenant has no limit
}
