// Embeddings below the server: a folder's sentence-transformers modules read into a pooling
// config (what Troupe cannot compute refused by name), the /v1/embeddings body parsed, and the
// engine computing an embedding inside its ordinary steps: chunked, next to a generating request
// in the same step, equal to pooling a plain forward of the whole prompt.
#define BOOST_TEST_MODULE embedding
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "runtime/api/embeddings.h"
#include "runtime/common/error.h"
#include "runtime/engine/cpu_executor.h"
#include "runtime/engine/engine.h"
#include "runtime/model/pooling.h"
#include "tests/support/engine_factory.h"
#include "tests/support/models.h"

using namespace troupe;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A model folder: the small test model's files, with modules.json and a Pooling config.
std::string with_modules(const std::string& name, const json& modules, const json& pooling) {
  const fs::path dir = fs::path(TROUPE_BINARY_DIR) / "test-models" / name;
  fs::remove_all(dir);
  fs::create_directories(dir / "1_Pooling");
  const std::string src = test::synth_model("small-llama-f32", test::preset("small"));
  for (const auto& f : fs::directory_iterator(src)) fs::create_symlink(f.path(), dir / f.path().filename());
  std::ofstream(dir / "modules.json") << modules.dump();
  std::ofstream(dir / "1_Pooling" / "config.json") << pooling.dump();
  return dir.string();
}

json st_modules(bool normalize) {
  json m = json::array({{{"path", ""}, {"type", "sentence_transformers.models.Transformer"}},
                        {{"path", "1_Pooling"}, {"type", "sentence_transformers.models.Pooling"}}});
  if (normalize) m.push_back({{"path", "2_Normalize"}, {"type", "sentence_transformers.models.Normalize"}});
  return m;
}

json mode(const std::string& m) { return {{"pooling_mode_" + m, true}, {"include_prompt", true}}; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Records what each step's plan holds, then runs it on the CPU.
struct recording_executor final : engine::executor {
  recording_executor(std::shared_ptr<const model::llama_model> m, kv::kv_cache_config c) : inner(std::move(m), c) {}
  void execute(engine::forward_plan plan, step_done done) override {
    steps.push_back({plan.pools.size(), plan.logit_rows.size()});
    inner.execute(std::move(plan), std::move(done));
  }
  std::vector<std::pair<int, int>> kv_ranks() const override { return inner.kv_ranks(); }
  std::vector<kv::transfer::kv_source> kv_sources() const override { return inner.kv_sources(); }
  void pull_kv(kv::transfer::kv_handle from, kv::transfer::kv_layout mine, std::vector<std::int32_t> table, kv::transfer::backend how,
               std::chrono::steady_clock::time_point deadline, pull_done done) override {
    inner.pull_kv(std::move(from), std::move(mine), std::move(table), how, deadline, std::move(done));
  }
  engine::cpu_executor inner;
  std::vector<std::pair<std::size_t, std::size_t>> steps;  // (pooled spans, logit rows)
};

// The embedding of `prompt` by a plain forward of all of it, pooled and finished here.
std::vector<float> direct_embedding(const model::llama_model& m, const std::vector<std::int32_t>& prompt) {
  const auto& pc = *m.config().pooling;
  kv::kv_cache cache(kv::kv_cache_config{64, 16}, m.config().num_hidden_layers, m.config().num_key_value_heads, m.config().head_dim);
  std::vector<std::int32_t> table;
  for (int b = 0; b < 64; ++b) table.push_back(b);
  model::forward_batch b;
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    b.tokens.push_back(prompt[i]);
    b.positions.push_back(std::int32_t(i));
    b.tables.push_back(table.data());
  }
  model::forward_workspace ws;
  m.embed(b, ws);
  m.run_layers(b, 0, m.num_layers(), cache, ws);
  const auto want = model::positions_to_pool(pc, int(prompt.size()));
  const auto sum = m.pool(ws, {{want.first, want.count}})[0];
  return model::finish_embedding(pc, std::vector<double>(sum.begin(), sum.end()), want.count);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_folders_modules_say_how_to_pool) {
  auto last = model::load_pooling_config(with_modules("emb-last", st_modules(true), mode("lasttoken")));
  BOOST_TEST_REQUIRE(last.has_value());
  BOOST_TEST(std::string(model::pooling_method_name(last->method)) == "last");
  BOOST_TEST(last->normalize);
  auto mean = model::load_pooling_config(with_modules("emb-mean", st_modules(false), mode("mean_tokens")));
  BOOST_TEST(std::string(model::pooling_method_name(mean->method)) == "mean");
  BOOST_TEST(!mean->normalize);
  BOOST_TEST(!model::load_pooling_config(test::synth_model("small-llama-f32", test::preset("small"))).has_value());

  // What cannot be computed exactly as the folder says is refused, naming the file and the key.
  std::string e = error_of([] { model::load_pooling_config(with_modules("emb-bad", st_modules(false), mode("max_tokens"))); });
  BOOST_TEST(e.find("pooling_mode_max_tokens is not supported") != std::string::npos, e);
  BOOST_TEST(e.find("1_Pooling/config.json") != std::string::npos, e);
  json two = mode("lasttoken");
  two["pooling_mode_mean_tokens"] = true;
  e = error_of([&] { model::load_pooling_config(with_modules("emb-bad", st_modules(false), two)); });
  BOOST_TEST(e.find("several pooling modes") != std::string::npos, e);
  json dense = st_modules(false);
  dense.push_back({{"path", "2_Dense"}, {"type", "sentence_transformers.models.Dense"}});
  e = error_of([&] { model::load_pooling_config(with_modules("emb-bad", dense, mode("lasttoken"))); });
  BOOST_TEST(e.find("sentence_transformers.models.Dense is not supported") != std::string::npos, e);
  json escape = st_modules(false);
  escape[1]["path"] = "../elsewhere";
  e = error_of([&] { model::load_pooling_config(with_modules("emb-bad", escape, mode("lasttoken"))); });
  BOOST_TEST(e.find("\"path\" must name") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(finishing_averages_and_normalizes) {
  model::pooling_config c{model::pooling_method::mean, false};
  auto v = model::finish_embedding(c, {2.0, 4.0}, 2);
  BOOST_TEST(v[0] == 1.0f);
  BOOST_TEST(v[1] == 2.0f);
  c.normalize = true;
  v = model::finish_embedding(c, {3.0, 4.0}, 1);
  BOOST_TEST(v[0] == 0.6f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(v[1] == 0.8f, boost::test_tools::tolerance(1e-6f));
  v = model::finish_embedding(c, {0.0, 0.0}, 1);  // stays zero (no division by zero)
  BOOST_TEST(v[0] == 0.0f);
}

BOOST_AUTO_TEST_CASE(the_request_body_is_checked_field_by_field) {
  auto r = api::parse_embedding_request(R"({"input": ["a", [1, 2]], "encoding_format": "base64", "user": "u", "store": false})");
  BOOST_TEST_REQUIRE(r.inputs.size() == 2u);
  BOOST_TEST(*r.inputs[0].text == "a");
  BOOST_TEST((r.inputs[1].ids == std::vector<std::int32_t>{1, 2}));
  BOOST_TEST(r.base64);
  BOOST_TEST(r.no_effect_fields == std::vector<std::string>{"store"});
  auto param_of = [](const std::string& body) {
    try {
      api::parse_embedding_request(body);
    } catch (const api::api_error& e) {
      return e.param();
    }
    return std::string("(accepted)");
  };
  BOOST_TEST(param_of(R"({})") == "input");
  BOOST_TEST(param_of(R"({"input": ""})") == "input");
  BOOST_TEST(param_of(R"({"input": []})") == "input");
  BOOST_TEST(param_of(R"({"input": "a", "encoding_format": "int8"})") == "encoding_format");
  BOOST_TEST(param_of(R"({"input": "a", "dimensions": 0})") == "dimensions");
  BOOST_TEST(param_of(R"({"input": "a", "truncate": true})") == "truncate");
  BOOST_TEST(param_of(json{{"input", std::vector<std::string>(2049, "a")}}.dump()) == "input");
  // OpenAI's base64: the float32 values' little-endian bytes.
  BOOST_TEST(api::base64_floats({1.0f}) == "AACAPw==");
  BOOST_TEST(api::base64_floats({1.0f, -2.0f}) == "AACAPwAAAMA=");
}

// Mean pooling over a prompt computed in chunks of 64 beside a generating request: equal to the
// pooling of one plain forward over all of it; one step holds both kinds of rows.
BOOST_AUTO_TEST_CASE(an_embedding_is_computed_in_the_steps_of_generation) {
  const std::string dir = with_modules("emb-engine", st_modules(true), mode("mean_tokens"));
  const std::shared_ptr<const model::llama_model> m = model::llama_model::load(dir);
  BOOST_TEST_REQUIRE(m->config().pooling.has_value());
  auto cfg = test::engine_cfg(64, 96);
  cfg.num_blocks = 128;
  auto exec = std::make_unique<recording_executor>(m, engine::kv_geometry(cfg, m->config()));
  auto* rec = exec.get();
  engine::engine e(m->config(), nullptr, cfg, std::move(exec));
  engine::request gen;
  gen.id = "gen";
  gen.prompt = {1, 2, 3};
  gen.params.max_tokens = 12;
  gen.params.ignore_eos = true;
  e.add_request(gen);
  engine::request emb;
  emb.id = "emb";
  for (int i = 0; i < 200; ++i) emb.prompt.push_back((i * 7919 + 13) % 32000);
  emb.embed = true;
  emb.params.max_tokens = 1;
  e.add_request(emb);
  std::vector<float> got;
  int outputs_of_emb = 0;
  while (e.has_work())
    for (auto& o : e.step())
      if (o.id == "emb") {
        ++outputs_of_emb;
        BOOST_TEST(o.finished);
        BOOST_TEST(o.new_tokens.empty());
        BOOST_TEST(int(o.reason) == int(engine::finish_reason::stop));
        got = o.embedding;
      }
  BOOST_TEST(outputs_of_emb == 1);
  const auto want = direct_embedding(*m, emb.prompt);
  BOOST_TEST_REQUIRE(got.size() == want.size());
  double worst = 0, norm = 0;
  for (std::size_t d = 0; d < got.size(); ++d) {
    worst = std::max(worst, std::abs(double(got[d]) - want[d]));
    norm += double(got[d]) * got[d];
  }
  BOOST_TEST(worst <= 1e-5);
  BOOST_TEST(norm == 1.0, boost::test_tools::tolerance(1e-5));
  int spans = 0;
  bool both = false;
  for (auto [pools, logits] : rec->steps) {
    spans += int(pools);
    both = both || (pools > 0 && logits > 0);
  }
  BOOST_TEST(spans >= 4);  // 200 positions in chunks of at most 64
  BOOST_TEST(both, "a step held an embedding's rows and the generating request's logit row");
}

BOOST_AUTO_TEST_CASE(a_model_without_pooling_refuses_embedding_requests) {
  auto e = engine::cpu_engine(test::small_model(), nullptr, test::engine_cfg(64, 256, 64));
  engine::request r;
  r.id = "emb";
  r.prompt = {1, 2, 3};
  r.embed = true;
  r.params.max_tokens = 1;
  const std::string why = error_of([&] { e.add_request(r); });
  BOOST_TEST(why.find("computes no embeddings") != std::string::npos, why);
}
