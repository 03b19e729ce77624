// Structured output in the engine, on the default model (which knows nothing of JSON: the
// grammar forces it): every output that stops is a complete sentence of its grammar, one that
// runs out of tokens says length; speculation, preemption and migration (generated tokens
// replayed) give exactly the tokens of a plain run; the mask beats logit_bias; a generated
// prefix that leaves the grammar is refused; special tokens kept in the text are text the
// grammar sees, and the token that stops an output adds none.
#define BOOST_TEST_MODULE structured_engine
#include <boost/test/unit_test.hpp>

#include <map>
#include <regex>

#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/engine/engine.h"
#include "runtime/structured/constraint.h"
#include "tests/support/engine_factory.h"

using namespace troupe;
using json = nlohmann::json;
using kind = sampling::output_constraint::kind;

namespace {

const std::string kjv = std::string(TROUPE_SOURCE_DIR) + "/models/kjv";

std::shared_ptr<const model::llama_model> kjv_model() {
  static auto m = std::shared_ptr<const model::llama_model>(model::llama_model::load(kjv));
  return m;
}
std::shared_ptr<const tokenizer::tokenizer> tok() {
  static auto t = std::shared_ptr<const tokenizer::tokenizer>(tokenizer::tokenizer::load(kjv + "/tokenizer.json"));
  return t;
}

const char* person_schema = R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},
  "age":{"type":"integer","minimum":0,"maximum":120},"tribe":{"enum":["Judah","Levi","Benjamin"]},
  "sons":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3}},
  "required":["name","age","tribe"],"additionalProperties":false})";

struct result {
  std::map<std::string, std::vector<std::int32_t>> tokens;
  std::map<std::string, std::string> text, reason;
  engine::engine_stats stats;
};

result run(const std::vector<engine::request>& reqs, engine::engine_config cfg) {
  auto e = engine::cpu_engine(kjv_model(), tok(), cfg);
  for (const auto& r : reqs) e.add_request(r);
  result res;
  while (e.has_unfinished())
    for (auto& o : e.step()) {
      auto& t = res.tokens[o.id];
      t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
      res.text[o.id] += o.text_delta;
      if (o.finished) res.reason[o.id] = engine::finish_reason_name(o.reason);
    }
  res.stats = e.stats();
  return res;
}

std::vector<engine::request> requests(const sampling::output_constraint& c, int n, int max_tokens) {
  std::vector<engine::request> out;
  const char* prompts[] = {"And the LORD spake unto Moses, saying,", "In the beginning", "Give me the man:",
                           "{\"name\": \"Ruth\", \"age\": 30", "And it came to pass"};
  for (int i = 0; i < n; ++i) {
    engine::request r;
    r.id = "r" + std::to_string(i);
    r.prompt = tok()->encode(prompts[i % 5]);
    r.params.max_tokens = max_tokens;
    r.params.constraint = c;
    if (i % 2) {
      r.params.temperature = 0.9f;
      r.params.top_p = 0.95f;
      r.params.seed = std::uint64_t(i);
    } else {
      r.params.temperature = 0;
    }
    if (i % 3 == 1) r.params.repetition_penalty = 1.3f;
    out.push_back(std::move(r));
  }
  return out;
}

bool is_person(const json& v) {
  if (!v.is_object() || !v.contains("name") || !v.contains("age") || !v.contains("tribe")) return false;
  if (!v["name"].is_string() || !v["age"].is_number_integer() || v["age"].get<int>() < 0 || v["age"].get<int>() > 120) return false;
  const auto t = v["tribe"];
  if (t != "Judah" && t != "Levi" && t != "Benjamin") return false;
  for (auto it = v.begin(); it != v.end(); ++it)
    if (it.key() != "name" && it.key() != "age" && it.key() != "tribe" && it.key() != "sons") return false;
  return !v.contains("sons") || (v["sons"].is_array() && v["sons"].size() <= 3);
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_output_that_stops_validates_and_a_cut_one_says_length) {
  const auto reqs = requests({kind::json_schema, person_schema}, 10, 120);
  const auto r = run(reqs, test::engine_cfg(512, 2048));
  int stopped = 0;
  for (const auto& q : reqs) {
    const std::string& text = r.text.at(q.id);
    const std::string& why = r.reason.at(q.id);
    BOOST_TEST_CONTEXT(q.id << ": " << text << " (" << why << ")") {
      BOOST_TEST((why == "stop" || why == "length"));
      if (why == "stop") {
        ++stopped;
        json v;
        BOOST_REQUIRE_NO_THROW(v = json::parse(text));
        BOOST_TEST(is_person(v));
      } else {
        BOOST_TEST(int(r.tokens.at(q.id).size()) == q.params.max_tokens);
      }
    }
  }
  BOOST_TEST(stopped >= 5);  // most of them close the object within 120 tokens
}

BOOST_AUTO_TEST_CASE(regex_choice_and_gbnf_outputs_match_independently) {
  const auto re = run(requests({kind::regex, "[A-Z][a-z]{1,8} (son|daughter) of [A-Z][a-z]{1,8}\\."}, 6, 60),
                      test::engine_cfg(512, 2048));
  for (const auto& [id, text] : re.text)
    if (re.reason.at(id) == "stop")
      BOOST_TEST(std::regex_match(text, std::regex("[A-Z][a-z]{1,8} (son|daughter) of [A-Z][a-z]{1,8}\\.")), text);
  const auto ch = run(requests({kind::choice, R"(["yea","nay","it is written"])"}, 6, 20), test::engine_cfg(512, 2048));
  for (const auto& [id, text] : ch.text) {
    BOOST_TEST(ch.reason.at(id) == "stop");
    BOOST_TEST((text == "yea" || text == "nay" || text == "it is written"), text);
  }
  const auto gb = run(requests({kind::grammar, "root ::= verse (\"; \" verse){0,2} \".\"\nverse ::= [A-Z] [a-z]{0,6} (\" \" [a-z]{1,6}){1,4}"},
                               6, 80),
                      test::engine_cfg(512, 2048));
  for (const auto& [id, text] : gb.text)
    if (gb.reason.at(id) == "stop")
      BOOST_TEST(std::regex_match(text, std::regex("[A-Z][a-z]{0,6}( [a-z]{1,6}){1,4}(; [A-Z][a-z]{0,6}( [a-z]{1,6}){1,4}){0,2}\\.")), text);
}

BOOST_AUTO_TEST_CASE(speculation_and_preemption_change_no_constrained_token) {
  const auto reqs = requests({kind::json_schema, person_schema}, 8, 60);
  const auto plain = run(reqs, test::engine_cfg(512, 2048));
  auto ngram = test::engine_cfg(512, 2048);
  ngram.speculative.how = speculative::method::ngram;
  ngram.speculative.k = 4;
  ngram.speculative.ngram.min_n = 1;
  ngram.speculative.ngram.max_n = 3;
  ngram.speculative.adaptive = false;
  const auto spec = run(reqs, ngram);
  const auto squeezed = run(reqs, test::engine_cfg(32, 256, 12));  // a pool too small for all: preemption
  for (const auto& q : reqs) {
    BOOST_TEST(spec.tokens.at(q.id) == plain.tokens.at(q.id), q.id);
    BOOST_TEST(spec.reason.at(q.id) == plain.reason.at(q.id), q.id);
    BOOST_TEST(squeezed.tokens.at(q.id) == plain.tokens.at(q.id), q.id);
  }
  BOOST_TEST(spec.stats.spec_drafts > 0u);  // proposals were made and checked against the grammar
  BOOST_TEST(squeezed.stats.preemptions > 0u);
}

BOOST_AUTO_TEST_CASE(a_migrated_request_replays_its_tokens_and_continues_the_same) {
  auto reqs = requests({kind::json_schema, person_schema}, 2, 50);
  const auto whole = run(reqs, test::engine_cfg(512, 2048));
  for (auto& q : reqs) {
    const auto& t = whole.tokens.at(q.id);
    BOOST_REQUIRE(t.size() > 6);
    q.generated.assign(t.begin(), t.begin() + 5);  // moved after 5 tokens
    q.text_returned = 5;
  }
  const auto moved = run(reqs, test::engine_cfg(512, 2048));
  for (const auto& q : reqs) {
    std::vector<std::int32_t> rest(whole.tokens.at(q.id).begin() + 5, whole.tokens.at(q.id).end());
    BOOST_TEST(moved.tokens.at(q.id) == rest, q.id);
  }
  // Generated tokens that leave the grammar are refused, naming the request and the position.
  auto bad = reqs[0];
  bad.generated = tok()->encode("hello", false);
  auto e = engine::cpu_engine(kjv_model(), tok(), test::engine_cfg(512, 2048));
  try {
    e.add_request(bad);
    BOOST_FAIL("accepted");
  } catch (const input_error& err) {
    BOOST_TEST(std::string(err.what()).find("generated token 0 does not follow its json_schema constraint") != std::string::npos,
               err.what());
  }
}

BOOST_AUTO_TEST_CASE(the_mask_comes_before_logit_bias_and_ignore_eos_is_refused) {
  auto reqs = requests({kind::choice, R"(["yea","nay"])"}, 2, 10);
  const auto x = tok()->encode("x", false);
  for (auto& q : reqs) q.params.logit_bias = {{x[0], 100.0f}};  // all but forces x: the grammar still wins
  const auto r = run(reqs, test::engine_cfg(512, 2048));
  for (const auto& q : reqs) BOOST_TEST((r.text.at(q.id) == "yea" || r.text.at(q.id) == "nay"));
  auto e = engine::cpu_engine(kjv_model(), tok(), test::engine_cfg(512, 2048));
  auto q = reqs[0];
  q.params.ignore_eos = true;
  BOOST_CHECK_THROW(e.add_request(q), input_error);
}

// skip_special_tokens false: a special token's text is in the output, and the grammar sees it
// there (a Mistral model opens its calls with the special [TOOL_CALLS]); left true, a special
// token has no text, so a grammar that wants "<|user|>" gets it spelled by plain tokens. The
// token that stops the output adds no text either way, unless include_stop_str_in_output.
BOOST_AUTO_TEST_CASE(kept_special_tokens_are_text_the_grammar_sees_and_a_stop_token_adds_none) {
  const std::int32_t user = *tok()->token_id("<|user|>"), eos = 1, assistant = *tok()->token_id("<|assistant|>");
  BOOST_TEST_REQUIRE(tok()->is_special(user));
  auto reqs = requests({kind::choice, R"(["<|user|> yea","<|user|> nay"])"}, 2, 16);
  for (auto& q : reqs) q.params.logit_bias = {{user, 100.0f}};  // the special token, wherever the grammar allows it
  auto kept = reqs;
  for (auto& q : kept) q.id += "-kept", q.params.skip_special_tokens = false;
  reqs.insert(reqs.end(), kept.begin(), kept.end());

  // A stop token forced at once: by EOS, and by stop_token_ids (shown when asked to be).
  auto stopping = [&](const std::string& id, std::int32_t t, bool show) {
    engine::request r;
    r.id = id;
    r.prompt = tok()->encode("In the beginning");
    r.params.temperature = 0;
    r.params.max_tokens = 8;
    r.params.skip_special_tokens = false;
    r.params.logit_bias = {{t, 100.0f}};
    if (t != eos) r.params.stop_token_ids = {t};
    r.params.include_stop_str_in_output = show;
    return r;
  };
  reqs.push_back(stopping("eos", eos, false));
  reqs.push_back(stopping("stop-id", assistant, false));
  reqs.push_back(stopping("stop-id-shown", assistant, true));

  const auto r = run(reqs, test::engine_cfg(512, 2048));
  for (const std::string id : {"r0", "r1"}) {
    BOOST_TEST((r.text.at(id) == "<|user|> yea" || r.text.at(id) == "<|user|> nay"), id << ": " << r.text.at(id));
    BOOST_TEST(r.tokens.at(id)[0] != user, id << ": a skipped special token has no text to match");
    BOOST_TEST((r.text.at(id + "-kept") == "<|user|> yea" || r.text.at(id + "-kept") == "<|user|> nay"), r.text.at(id + "-kept"));
    BOOST_TEST(r.tokens.at(id + "-kept")[0] == user, id << "-kept: the biased special token is text the grammar takes");
    BOOST_TEST(r.reason.at(id + "-kept") == "stop");
  }
  for (const std::string id : {"eos", "stop-id", "stop-id-shown"}) {
    BOOST_TEST(r.tokens.at(id).size() == 1u, id);
    BOOST_TEST(r.reason.at(id) == "stop", id);
  }
  BOOST_TEST(r.text.at("eos") == "");
  BOOST_TEST(r.text.at("stop-id") == "");
  BOOST_TEST(r.text.at("stop-id-shown") == "<|assistant|>");
}
