// Two models in one topology (issue 29), served by real processes: [model] in a pool on the
// head, a [models.beta] in a pool on a node process that joins it. Requests are routed by the
// model they name (or an alias), each getting the answers of a server running that model alone,
// also when both are asked at once; /v1/models lists both; a prefix computed for one model is
// never found for the other; and a node whose copy of a model has another revision is refused.
// Under overload, [model]'s fallback (beta) answers what would wait past the target, named in the
// answer and a header, nothing refused or dropped, /metrics counting each model's answers.
#define BOOST_TEST_MODULE multi_model
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "tests/support/http_client.h"
#include "tests/support/models.h"
#include "tests/support/process.h"

using namespace troupe;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const fs::path dir = fs::path(TROUPE_BINARY_DIR) / "multi-model";

const std::string& alpha_dir() {
  static const std::string d = test::synth_model("tiny-llama-f32", test::preset("tiny"));
  return d;
}

const std::string& beta_dir() {  // the same shapes and tokenizer, other weights
  static const std::string d = [] {
    model::synth_options o = test::preset("tiny");
    o.seed = 9;
    return test::synth_model("tiny-llama-f32-seed9", o);
  }();
  return d;
}

std::string write(const std::string& name, const std::string& text) {
  fs::create_directories(dir);
  const std::string file = (dir / (name + ".toml")).string();
  std::ofstream(file) << text;
  return file;
}

const std::string common = "[scheduler]\nmax_batched_tokens = 512\nchunk = 64\nkv_memory = \"64MiB\"\n"
                           "[router]\npolicy = \"kv_aware\"\n[timeouts]\nrequest = \"120s\"\n";

std::string alone(const std::string& name, const std::string& model) {
  return write(name, "[model]\npath = \"" + model + "\"\n[[nodes]]\nname = \"head\"\naddress = \"127.0.0.1:0\"\n"
                     "[[pools]]\nname = \"main\"\n" + common);
}

// A head serving [model] (alpha) and a node serving [models.beta] with revision `revision`.
std::string both(const std::string& name, const std::string& revision) {
  return write(name, "[model]\npath = \"" + alpha_dir() + "\"\n"
                     "[models.beta]\npath = \"" + beta_dir() + "\"\nserved_names = [\"beta\", \"b\"]\nrevision = \"" + revision + "\"\n"
                     "[[nodes]]\nname = \"head\"\naddress = \"127.0.0.1:0\"\n"
                     "[[nodes]]\nname = \"n1\"\naddress = \"127.0.0.1:0\"\n"
                     "[[pools]]\nname = \"main\"\nnodes = [\"head\"]\n"
                     "[[pools]]\nname = \"small\"\nmodel = \"beta\"\nnodes = [\"n1\"]\n"
                     "[kv_store]\ncapacity = \"16MiB\"\n" + common);
}

std::vector<std::string> prompts() { return test::bible_prompts(10); }

struct answer {
  int status = 0;
  std::string text, model, body, header;  // header: X-Troupe-Model
};

answer complete(std::uint16_t port, const std::string& model, const std::string& prompt, std::optional<bool> allow_fallback = {}) {
  json b{{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
  if (!model.empty()) b["model"] = model;
  if (allow_fallback) b["allow_fallback"] = *allow_fallback;
  const auto r = test::post_json(port, "/v1/completions", b);
  answer a{r.status, "", "", r.body, r.headers.count("x-troupe-model") ? r.headers.at("x-troupe-model") : ""};
  if (r.status == 200) {
    const json j = json::parse(r.body);
    a.text = j["choices"][0]["text"];
    a.model = j["model"];
  }
  return a;
}

std::vector<std::string> one_by_one(std::uint16_t port, const std::string& model) {
  std::vector<std::string> out;
  for (const auto& p : prompts()) {
    const answer a = complete(port, model, p);
    BOOST_TEST_REQUIRE(a.status == 200, model << ": " << a.body);
    out.push_back(a.text);
  }
  return out;
}

double settled_hits(std::uint16_t port) { return test::settled_metric_sum(port, "troupe:prefix_cache_hits_total"); }

test::child_process node(const std::string& config, std::uint16_t registry) {
  return test::child_process({std::string(TROUPE_BINARY_DIR) + "/troupe", "node", config, "--name", "n1", "--head",
                              "127.0.0.1:" + std::to_string(registry)});
}

// Each model's answers to prompts(), each served alone.
struct reference_answers {
  std::vector<std::string> alpha, beta;
};

const reference_answers& references() {
  static const reference_answers r = [] {
    reference_answers out;
    {
      test::serve_process a({alone("alpha", alpha_dir())});
      BOOST_TEST_REQUIRE(a.port() != 0);
      out.alpha = one_by_one(a.port(), "");
    }
    test::serve_process b({alone("beta", beta_dir())});
    BOOST_TEST_REQUIRE(b.port() != 0);
    out.beta = one_by_one(b.port(), "");
    return out;
  }();
  return r;
}

// The sum of a metric's series whose labels contain `label` (model_name="beta").
double metric_with(std::uint16_t port, const std::string& name, const std::string& label) {
  const std::string page = test::http_request(port, "GET", "/metrics", "").body;
  std::istringstream in(page);
  double sum = 0;
  for (std::string l; std::getline(in, l);)
    if (l.rfind(name + "{", 0) == 0 && l.find(label) != std::string::npos) sum += std::stod(l.substr(l.rfind(' ') + 1));
  return sum;
}

}  // namespace

BOOST_AUTO_TEST_CASE(two_models_are_routed_by_name_and_never_share_a_block) {
  const std::vector<std::string>& alpha = references().alpha;
  const std::vector<std::string>& beta = references().beta;
  int differ = 0;
  for (std::size_t i = 0; i < alpha.size(); ++i) differ += alpha[i] != beta[i];
  BOOST_TEST_REQUIRE(differ > 0, "the two models answer alike");

  const std::uint16_t registry = test::free_port();
  test::serve_process serve({both("both", "r1"), "--registry-port", std::to_string(registry)});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::uint16_t port = serve.port();
  test::child_process n1 = node(both("both", "r1"), registry);
  BOOST_TEST_REQUIRE(n1.wait_for_line("ready, 1 replica(s) registered"));

  // A node whose beta is another revision serves other KV: it is refused.
  {
    test::child_process stale = node(both("stale", "r2"), registry);
    BOOST_TEST(!stale.wait_for_line("ready"));
    const int status = stale.reap();
    BOOST_TEST((WIFEXITED(status) && WEXITSTATUS(status) != 0));
  }

  const json models = json::parse(test::http_request(port, "GET", "/v1/models", "").body);
  std::map<std::string, std::string> root;
  for (const auto& m : models["data"]) root[m["id"]] = m["root"];
  const std::string alpha_name = fs::path(alpha_dir()).filename().string();
  BOOST_TEST(models["data"][0]["id"] == alpha_name);  // [model] first: what a request naming none gets
  BOOST_TEST(root["beta"] == "beta");
  BOOST_TEST(root["b"] == "beta");

  BOOST_TEST(one_by_one(port, "") == alpha);
  BOOST_TEST(one_by_one(port, alpha_name) == alpha);
  BOOST_TEST(one_by_one(port, "beta") == beta);
  const answer by_alias = complete(port, "b", prompts()[2]);
  BOOST_TEST(by_alias.text == beta[2]);
  BOOST_TEST(by_alias.model == "beta");  // the first served name answers
  const answer unknown = complete(port, "gamma", prompts()[0]);
  BOOST_TEST(unknown.status == 404);
  // A refusal is counted under the model the request named.
  std::string too_long;
  for (int i = 0; i < 1200; ++i) too_long += "and it came to pass ";  // past the 4,096-token context
  BOOST_TEST(complete(port, "beta", too_long).status == 413);
  BOOST_TEST(metric_with(port, "troupe:request_rejected_total", "model_name=\"beta\",code=\"413\"") == 1.0);
  const std::string why = json::parse(unknown.body)["error"]["message"];
  BOOST_TEST(why.find("\"beta\"") != std::string::npos, why);  // the 404 names the models served

  // Both models at once, 12 clients: each request gets its own model's answer.
  std::vector<std::thread> ts;
  std::mutex m;
  std::vector<std::string> wrong;
  std::atomic<std::size_t> next{0};
  const std::size_t total = 2 * prompts().size();
  for (int c = 0; c < 12; ++c)
    ts.emplace_back([&] {
      for (std::size_t n; (n = next++) < total;) {
        const bool b = n % 2 == 1;
        const std::size_t i = n / 2;
        const answer a = complete(port, b ? "beta" : "", prompts()[i]);
        if (a.status != 200 || a.text != (b ? beta : alpha)[i]) {
          std::lock_guard<std::mutex> l(m);
          wrong.push_back(std::string(b ? "beta" : "alpha") + " prompt " + std::to_string(i) + ": " + std::to_string(a.status) + " [" +
                          a.text + "] " + a.body);
        }
      }
    });
  for (auto& t : ts) t.join();
  for (const auto& w : wrong) BOOST_ERROR(w);
  const std::string page = test::http_request(port, "GET", "/metrics", "").body;
  BOOST_TEST(page.find("troupe:replica_up{model_name=\"beta\",replica=\"small-0\"} 1") != std::string::npos);

  // A long prompt computed for alpha is found again for alpha, never for beta.
  std::string long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt += "and it came to pass in those days ";
  BOOST_TEST_REQUIRE(complete(port, "", long_prompt).status == 200);
  const double hits = settled_hits(port);
  BOOST_TEST_REQUIRE(complete(port, "beta", long_prompt).status == 200);
  BOOST_TEST(settled_hits(port) == hits, "a block computed for alpha was found for beta");
  BOOST_TEST_REQUIRE(complete(port, "", long_prompt).status == 200);
  const double again = settled_hits(port);
  BOOST_TEST(again > hits, "alpha did not find its own blocks again");
  BOOST_TEST_REQUIRE(complete(port, "beta", long_prompt).status == 200);
  BOOST_TEST(settled_hits(port) > again, "beta did not find its own blocks again");
}

// Six clients at once against [model]'s one replica, which runs one request at a time and queues
// 4 ([admission] max_queued): what its queue cannot take goes to its fallback, beta, which
// answers with its own tokens and names itself in the answer and the X-Troupe-Model header;
// nothing is refused or dropped, but a request that forbids the fallback is answered by alpha or
// refused with 429, never by beta; /metrics counts each model's answers, every fallback and
// every refusal. (A request falls back only while alpha holds the other five, so beta's queue
// never fills.)
BOOST_AUTO_TEST_CASE(overflow_goes_to_the_fallback_model_named_in_the_answer) {
  const reference_answers& ref = references();
  const std::string config = write("fallback", "[model]\npath = \"" + alpha_dir() + "\"\nfallback = \"b\"\n"
                                   "[models.beta]\npath = \"" + beta_dir() + "\"\nserved_names = [\"beta\", \"b\"]\n"
                                   "[[nodes]]\nname = \"head\"\naddress = \"127.0.0.1:0\"\n"
                                   "[[pools]]\nname = \"main\"\n[[pools]]\nname = \"small\"\nmodel = \"beta\"\nreplicas = 2\n"
                                   "[scheduler]\nmax_seqs = 1\nkv_memory = \"32MiB\"\n[admission]\nmax_queued = 4\n"
                                   "[timeouts]\nrequest = \"120s\"\n");
  test::serve_process serve({config});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::uint16_t port = serve.port();
  const std::string alpha_name = fs::path(alpha_dir()).filename().string();
  const std::string pair = "model_name=\"" + alpha_name + "\",fallback=\"beta\"";
  BOOST_TEST(metric_with(port, "troupe:model_fallbacks_total", pair) == 0.0);  // listed from the start

  std::mutex m;
  std::vector<std::string> wrong;
  std::map<std::string, int> by_model;
  int refused = 0;
  std::atomic<std::size_t> next{0};
  const std::size_t total = 80;
  std::vector<std::thread> ts;
  for (int c = 0; c < 6; ++c)
    ts.emplace_back([&] {
      for (std::size_t n; (n = next++) < total;) {
        const std::size_t i = n % prompts().size();
        const bool forbid = n % 10 == 3;
        const answer a = complete(port, "", prompts()[i], forbid ? std::optional<bool>(false) : std::nullopt);
        std::lock_guard<std::mutex> l(m);
        const bool is_beta = a.model == "beta";
        const bool right = a.status == 200 ? a.text == (is_beta ? ref.beta : ref.alpha)[i] && a.header == a.model && !(forbid && is_beta)
                                           : forbid && a.status == 429;
        if (!right)
          wrong.push_back(std::to_string(a.status) + " '" + a.model + "' (header '" + a.header + "') prompt " + std::to_string(i) +
                          (forbid ? " forbidding the fallback" : "") + ": [" + a.text + "] " + a.body);
        if (a.status == 200) ++by_model[a.model];
        refused += a.status == 429;
      }
    });
  for (auto& t : ts) t.join();
  for (const auto& w : wrong) BOOST_ERROR(w);
  BOOST_TEST_MESSAGE(by_model[alpha_name] << " answered by " << alpha_name << ", " << by_model["beta"] << " by beta, " << refused
                                          << " refused (forbidding the fallback)");
  BOOST_TEST(by_model["beta"] > 0, "nothing fell back");
  BOOST_TEST(by_model[alpha_name] > 0);
  BOOST_TEST(by_model[alpha_name] + by_model["beta"] + refused == int(total));
  // /metrics balances: each model's answers, every fallback and every refusal counted once.
  BOOST_TEST(metric_with(port, "troupe:model_fallbacks_total", pair) == double(by_model["beta"]));
  BOOST_TEST(metric_with(port, "troupe:request_success_total", "model_name=\"beta\"") == double(by_model["beta"]));
  BOOST_TEST(metric_with(port, "troupe:request_success_total", "model_name=\"" + alpha_name + "\"") == double(by_model[alpha_name]));
  BOOST_TEST(metric_with(port, "troupe:request_rejected_total", "code=\"429\"") == double(refused));
}
