// LoRA adapters served by `troupe serve` (issue 29): adapters the test writes (random low-rank
// matrices in PEFT's layout) are served as models by name; an adapter's answers are those of a
// server running the base with that adapter merged into its weights; requests for two adapters
// and the base at once each get their own model's answers; the prefix cache never finds one
// model's blocks for another; and loading and unloading adapters through vLLM's routes while
// requests for the base and another adapter stream fails none of them.
#define BOOST_TEST_MODULE lora_serve
#include <boost/test/unit_test.hpp>

#include <stdlib.h>

#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "runtime/model/model_source.h"
#include "tests/support/http_client.h"
#include "tests/support/lora_folders.h"
#include "tests/support/models.h"
#include "tests/support/process.h"

using namespace troupe;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const fs::path dir = fs::path(TROUPE_BINARY_DIR) / "lora-serve";

const std::string& base_dir() {
  static const std::string d = test::synth_model("tiny-llama-f32", test::preset("tiny"));
  return d;
}

// Three adapters (psalms, proverbs, and one loaded only at run time), and the base with psalms
// merged into its weights.
struct folders {
  fs::path psalms, proverbs, later, merged;
};

const folders& adapters() {
  static const folders f = [] {
    fs::remove_all(dir);
    const auto c = model::load_model_config(base_dir());
    folders out;
    out.psalms = test::write_lora_adapter(dir / "psalms", c, 101);
    out.proverbs = test::write_lora_adapter(dir / "proverbs", c, 202);
    out.later = test::write_lora_adapter(dir / "later", c, 303);
    out.merged = test::write_merged_model(dir / "merged-psalms", base_dir(), model::read_lora_adapter(out.psalms.string(), c));
    return out;
  }();
  return f;
}

std::string config(const std::string& name, const std::string& model, const std::string& extra) {
  const std::string file = (dir / (name + ".toml")).string();
  std::ofstream t(file);
  t << "[model]\npath = \"" << model << "\"\n"
    << "[[nodes]]\nname = \"head\"\naddress = \"127.0.0.1:0\"\n"
    << "[[pools]]\nname = \"main\"\nreplicas = 2\n"
    << "[scheduler]\nmax_batched_tokens = 512\nchunk = 64\nkv_memory = \"64MiB\"\n"
    << "[router]\npolicy = \"kv_aware\"\n"
    << "[timeouts]\nrequest = \"120s\"\n"
    << extra;
  return file;
}

std::string lora_section(bool runtime_loading) {
  return "[lora]\nmax_adapters = 3\nruntime_loading = " + std::string(runtime_loading ? "true" : "false") + "\n" +
         "[[lora.adapters]]\nname = \"psalms\"\npath = \"" + adapters().psalms.string() + "\"\n" +
         "[[lora.adapters]]\nname = \"proverbs\"\npath = \"" + adapters().proverbs.string() + "\"\n";
}

std::vector<std::string> prompts() { return test::bible_prompts(12); }

struct answer {
  int status = 0;
  std::string text, model, body;
};

answer complete(std::uint16_t port, const std::string& model, const std::string& prompt) {
  json b{{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
  if (!model.empty()) b["model"] = model;
  const auto r = test::post_json(port, "/v1/completions", b);
  answer a{r.status, "", "", r.body};
  if (r.status == 200) {
    const json j = json::parse(r.body);
    a.text = j["choices"][0]["text"];
    a.model = j["model"];
  }
  return a;
}

// Each prompt alone, in turn, for `model`.
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

}  // namespace

BOOST_AUTO_TEST_CASE(an_adapter_answers_as_the_base_with_it_merged_and_models_mix_in_a_batch) {
  std::vector<std::string> merged;
  {
    test::serve_process ref({config("merged", adapters().merged.string(), "")});
    BOOST_TEST_REQUIRE(ref.port() != 0);
    merged = one_by_one(ref.port(), "");
  }
  test::serve_process serve({config("adapters", base_dir(), lora_section(false))});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::uint16_t port = serve.port();

  const json models = json::parse(test::http_request(port, "GET", "/v1/models", "").body);
  std::map<std::string, json> cards;
  for (const auto& m : models["data"]) cards[m["id"]] = m;
  BOOST_TEST_REQUIRE(cards.count("psalms") == 1u);
  BOOST_TEST(cards["psalms"]["parent"] == models["data"][0]["id"]);  // the base, listed first
  BOOST_TEST(cards["psalms"]["root"] == adapters().psalms.string());
  BOOST_TEST(cards.count("proverbs") == 1u);

  const auto base = one_by_one(port, "");
  const auto psalms = one_by_one(port, "psalms");
  const auto proverbs = one_by_one(port, "proverbs");
  int differ = 0;
  for (std::size_t i = 0; i < merged.size(); ++i) {
    BOOST_TEST(psalms[i] == merged[i], "prompt " << i << ": [" << psalms[i] << "] vs the merged model's [" << merged[i] << "]");
    differ += psalms[i] != base[i];
    differ += proverbs[i] != psalms[i];
  }
  BOOST_TEST(differ > int(merged.size()), "the adapters hardly change the answers (" << differ << ")");
  const answer named = complete(port, "psalms", prompts()[0]);
  BOOST_TEST(named.model == "psalms");
  const answer unknown = complete(port, "psalter", prompts()[0]);
  BOOST_TEST(unknown.status == 404, unknown.body);

  // All three models at once, 18 requests in flight: each gets its own model's answer.
  const std::vector<std::pair<std::string, const std::vector<std::string>*>> mix = {{"", &base}, {"psalms", &psalms}, {"proverbs", &proverbs}};
  std::vector<std::thread> ts;
  std::mutex m;
  std::vector<std::string> wrong;
  std::atomic<std::size_t> next{0};
  const std::size_t total = 3 * prompts().size();
  for (int c = 0; c < 18; ++c)
    ts.emplace_back([&] {
      for (std::size_t n; (n = next++) < total;) {
        const auto& [model, want] = mix[n % 3];
        const std::size_t i = n / 3;
        const answer a = complete(port, model, prompts()[i]);
        if (a.status != 200 || a.text != (*want)[i]) {
          std::lock_guard<std::mutex> l(m);
          wrong.push_back("'" + model + "' prompt " + std::to_string(i) + ": " + std::to_string(a.status) + " [" + a.text + "] " + a.body);
        }
      }
    });
  for (auto& t : ts) t.join();
  for (const auto& w : wrong) BOOST_ERROR(w);

  // The prefix cache: a long prompt computed for psalms is found again for psalms, never for
  // the base or proverbs (the adapter roots its blocks' hashes).
  std::string long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt += "and it came to pass in those days ";
  BOOST_TEST_REQUIRE(complete(port, "psalms", long_prompt).status == 200);
  double hits = settled_hits(port);
  BOOST_TEST_REQUIRE(complete(port, "", long_prompt).status == 200);
  BOOST_TEST_REQUIRE(complete(port, "proverbs", long_prompt).status == 200);
  BOOST_TEST(settled_hits(port) == hits, "a block computed for psalms was found for another model");
  BOOST_TEST_REQUIRE(complete(port, "psalms", long_prompt).status == 200);
  BOOST_TEST(settled_hits(port) > hits, "psalms did not find its own blocks again");
}

BOOST_AUTO_TEST_CASE(loading_and_unloading_under_load_fails_no_request) {
  const std::uint16_t admin_port = test::free_port_pair();  // the endpoint, and its events at + 1
  test::serve_process serve({config("runtime", base_dir(), lora_section(true)), "--admin-port", std::to_string(admin_port)});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::uint16_t port = serve.port();
  const auto base = one_by_one(port, "");
  const auto psalms = one_by_one(port, "psalms");

  // Off unless the topology allows it.
  {
    test::serve_process off({config("no-runtime", base_dir(), lora_section(false))});
    BOOST_TEST_REQUIRE(off.port() != 0);
    const auto r = test::post_json(off.port(), "/v1/load_lora_adapter", {{"lora_name", "later"}, {"lora_path", adapters().later.string()}});
    BOOST_TEST(r.status == 404);
    BOOST_TEST(r.body.find("runtime_loading") != std::string::npos, r.body);
  }
  // Refusals name the field.
  auto load = [&](const json& body) { return test::post_json(port, "/v1/load_lora_adapter", body); };
  auto unload = [&](const std::string& name) { return test::post_json(port, "/v1/unload_lora_adapter", {{"lora_name", name}}); };
  const auto missing = load({{"lora_name", "later"}, {"lora_path", (dir / "nowhere").string()}});
  BOOST_TEST(missing.status == 400);
  BOOST_TEST(missing.body.find("lora_path") != std::string::npos, missing.body);
  BOOST_TEST(load({{"lora_name", "psalms"}, {"lora_path", adapters().later.string()}}).status == 400);
  BOOST_TEST(load({{"lora_name", "later"}, {"lora_path", adapters().later.string()}, {"rank", 4}}).status == 400);
  BOOST_TEST(unload("psalms").status == 400);  // the topology's
  BOOST_TEST(unload("later").status == 404);

  // Clients stream base and psalms requests while `later` is loaded, used and unloaded 5 times.
  std::atomic<bool> stop{false};
  std::atomic<int> served{0};
  std::mutex m;
  std::vector<std::string> wrong;
  std::atomic<int> failures{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 6; ++c)
    clients.emplace_back([&, c] {
      for (std::size_t n = std::size_t(c); !stop; ++n) {
        const std::size_t i = n % prompts().size();
        const bool adapted = n % 2 == 1;
        const answer a = complete(port, adapted ? "psalms" : "", prompts()[i]);
        if (a.status != 200 || a.text != (adapted ? psalms : base)[i]) {
          std::lock_guard<std::mutex> l(m);
          wrong.push_back(std::to_string(a.status) + " [" + a.text + "] " + a.body);
          ++failures;
        }
        ++served;
      }
    });
  // Each change lands while requests run: six more are answered after each, whatever the speed.
  auto while_serving = [&] {
    const int from = served;
    while (served < from + 6 && failures == 0) std::this_thread::yield();
  };
  std::string later_answer;
  for (int round = 0; round < 5; ++round) {
    while_serving();
    const auto l = load({{"lora_name", "later"}, {"lora_path", adapters().later.string()}});
    BOOST_TEST(l.status == 200, l.body);
    const answer a = complete(port, "later", prompts()[3]);
    BOOST_TEST(a.status == 200, a.body);
    BOOST_TEST(a.model == "later");
    if (round == 0) later_answer = a.text;
    BOOST_TEST(a.text == later_answer, "round " << round);
    while_serving();
    const auto u = unload("later");
    BOOST_TEST(u.status == 200, u.body);
    BOOST_TEST(complete(port, "later", prompts()[3]).status == 404);
  }
  stop = true;
  for (auto& t : clients) t.join();
  BOOST_TEST_MESSAGE(served << " requests served while the adapter was loaded and unloaded 5 times");
  BOOST_TEST(served > 0);
  for (const auto& w : wrong) BOOST_ERROR(w);
  BOOST_TEST(later_answer != psalms[3]);

  // The same from the admin console.
  auto admin = [&](const std::string& command) {
    const auto r = test::run_command(std::string(TROUPE_BINARY_DIR) + "/troupe admin --json --timeout 20 --endpoint tcp://127.0.0.1:" +
                                     std::to_string(admin_port) + " " + command + " 2>&1");
    BOOST_TEST(r.status == 0, command << ": " << r.output);
    return r.output;
  };
  admin("lora load later " + adapters().later.string());
  const json listed = json::parse(admin("lora list"));
  std::map<std::string, std::string> from;
  for (const auto& a : listed["adapters"]) from[a["name"]] = a["from"];
  BOOST_TEST(from["psalms"] == "topology");
  BOOST_TEST(from["later"] == "runtime");
  BOOST_TEST(complete(port, "later", prompts()[3]).text == later_answer);
  admin("lora unload later");
  BOOST_TEST(complete(port, "later", prompts()[3]).status == 404);
}

// vLLM's habits: `troupe serve MODEL --enable-lora --lora-modules NAME=PATH` with
// VLLM_ALLOW_RUNTIME_LORA_UPDATING=true serves the adapter and the load/unload routes; a LoRA
// flag without --enable-lora is refused by name.
BOOST_AUTO_TEST_CASE(vllm_lora_flags_serve_adapters) {
  const auto refused = test::run_command(std::string(TROUPE_BINARY_DIR) + "/troupe serve " + base_dir() +
                                         " --port 0 --lora-modules psalms=" + adapters().psalms.string() + " 2>&1");
  BOOST_TEST(refused.status != 0);
  BOOST_TEST(refused.output.find("--lora-modules: needs --enable-lora") != std::string::npos, refused.output);

  ::setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True", 1);
  test::serve_process serve({base_dir(), "--enable-lora", "--lora-modules", "psalms=" + adapters().psalms.string(), "--max-loras", "2"});
  ::unsetenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING");
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const answer a = complete(serve.port(), "psalms", prompts()[0]);
  BOOST_TEST(a.status == 200, a.body);
  BOOST_TEST(a.model == "psalms");
  const auto l = test::post_json(serve.port(), "/v1/load_lora_adapter", {{"lora_name", "later"}, {"lora_path", adapters().later.string()}});
  BOOST_TEST(l.status == 200, l.body);
  // --max-loras 2: a third is refused by name.
  const auto full = test::post_json(serve.port(), "/v1/load_lora_adapter", {{"lora_name", "proverbs"}, {"lora_path", adapters().proverbs.string()}});
  BOOST_TEST(full.status == 400);
  BOOST_TEST(full.body.find("max_adapters") != std::string::npos, full.body);
}

// docs/lora.md named a folder the clone does not have: its commands now start from one the
// command line writes (`troupe model synth-lora`), and serve it as the page says.
BOOST_AUTO_TEST_CASE(the_docs_adapter_is_written_by_the_command_line_and_served) {
  const std::string exe = std::string(TROUPE_BINARY_DIR) + "/troupe";
  const std::string kjv = std::string(TROUPE_SOURCE_DIR) + "/models/kjv", out = (dir / "kjv-psalms-lora").string();
  fs::remove_all(out);
  const auto wrote = test::run_command(exe + " model synth-lora --base " + kjv + " --out " + out + " 2>&1");
  BOOST_TEST_REQUIRE(wrote.status == 0, wrote.output);
  test::serve_process server({kjv, "--enable-lora", "--lora-modules", "kjv-psalms=" + out, "--max-loras", "4"});
  BOOST_TEST_REQUIRE(server.port() != 0);
  const auto r = test::post_json(server.port(), "/v1/completions", {{"model", "kjv-psalms"}, {"prompt", "The LORD"}, {"max_tokens", 4}});
  BOOST_TEST(r.status == 200, r.body);
  BOOST_TEST(json::parse(r.body)["model"] == "kjv-psalms");
}
