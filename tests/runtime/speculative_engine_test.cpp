// Speculative decoding in the engine (issue 25): a verify step's rows are the logits one-token
// decode steps give, bit for bit, for every weight format and KV dtype; an engine that speculates
// gives exactly the tokens and logprobs of one that does not (greedy, seeded, with penalties, in
// a batch, with prefix hits and preemption); rejected proposals' KV never reaches the prefix
// cache; and the counters balance.
#define BOOST_TEST_MODULE speculative_engine
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "runtime/common/error.h"
#include "runtime/engine/engine.h"
#include "runtime/kv/kv_cache.h"
#include "runtime/model/quantize.h"
#include "tests/support/engine_factory.h"
#include "tests/support/models.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

using tokens = std::vector<std::int32_t>;

// The logits of `rows` of one forward over the given tokens of sequence 0 (blocks 0..7), with
// another sequence's tokens beside them when `crowd` (blocks 8..15, a chunk and a decode).
std::vector<float> forward_rows(const model::llama_model& m, kv::kv_cache& cache, const tokens& toks, int first_pos,
                                bool crowd, std::vector<int>* crowd_pos) {
  static const std::int32_t table_a[8] = {0, 1, 2, 3, 4, 5, 6, 7}, table_b[8] = {8, 9, 10, 11, 12, 13, 14, 15};
  model::forward_batch b;
  auto add_other = [&](int n) {
    for (int j = 0; j < n; ++j) {
      b.tokens.push_back(std::int32_t((*crowd_pos)[0] * 31 % m.config().vocab_size));
      b.positions.push_back((*crowd_pos)[0]++);
      b.tables.push_back(table_b);
    }
  };
  if (crowd) add_other(3);  // the other sequence's chunk before ours
  const std::size_t ours = b.tokens.size();
  for (std::size_t j = 0; j < toks.size(); ++j) {
    b.tokens.push_back(toks[j]);
    b.positions.push_back(first_pos + int(j));
    b.tables.push_back(table_a);
    b.logit_rows.push_back(std::int32_t(ours + j));
  }
  if (crowd) add_other(1);
  std::vector<float> logits(b.logit_rows.size() * std::size_t(m.config().vocab_size));
  model::forward_workspace ws;
  m.forward(b, cache, logits.data(), ws);
  return logits;
}

void expect_verify_rows_equal_decode_rows(const std::string& dir, kernels::dtype kv) {
  auto m = model::llama_model::load(dir);
  const int vocab = m->config().vocab_size;
  const auto& mc = m->config();
  tokens prompt;
  for (int i = 0; i < 21; ++i) prompt.push_back((i * 7919 + 13) % vocab);
  const tokens proposed{5 % vocab, 77 % vocab, 3 % vocab, 120 % vocab, 9 % vocab};
  const tokens head(prompt.begin(), prompt.end() - 1);
  const kv::kv_cache_config cc{16, 16, kv, false};
  for (bool crowd : {false, true}) {
    // Decode: the prompt but its last token, then one token per step.
    kv::kv_cache a(cc, mc.num_hidden_layers, mc.num_key_value_heads, mc.head_dim);
    std::vector<int> other{0};
    forward_rows(*m, a, head, 0, false, &other);
    std::vector<float> decode;
    tokens steps{prompt.back()};
    steps.insert(steps.end(), proposed.begin(), proposed.end());
    for (std::size_t j = 0; j < steps.size(); ++j) {
      auto r = forward_rows(*m, a, {steps[j]}, int(head.size() + j), false, &other);
      decode.insert(decode.end(), r.begin(), r.end());
    }
    // Verify: the same prompt, then its last token and the proposals in one step, rows for all.
    kv::kv_cache b(cc, mc.num_hidden_layers, mc.num_key_value_heads, mc.head_dim);
    std::vector<int> crowd_pos{0};
    forward_rows(*m, b, head, 0, crowd, &crowd_pos);
    const auto verify = forward_rows(*m, b, steps, int(head.size()), crowd, &crowd_pos);
    BOOST_TEST_REQUIRE(verify.size() == decode.size());
    BOOST_TEST(std::memcmp(verify.data(), decode.data(), verify.size() * sizeof(float)) == 0,
               dir << " kv " << kernels::dtype_name(kv) << (crowd ? " in a batch" : " alone") << ": verify rows differ from decode rows");
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(verify_rows_are_decode_rows_bit_for_bit_for_every_format) {
  std::vector<std::string> dirs;
  for (auto t : {kernels::dtype::f32, kernels::dtype::f16, kernels::dtype::bf16})
    dirs.push_back(test::synth_model(std::string("tiny-llama-") + kernels::dtype_name(t), test::preset("tiny", "llama", t)));
  const fs::path scratch = fs::path(TROUPE_BINARY_DIR) / "test-scratch" / "speculative_engine";
  fs::create_directories(scratch);
  for (auto q : {kernels::quant_type::q8_0, kernels::quant_type::q4_0, kernels::quant_type::int8}) {
    const std::string out = (scratch / kernels::quant_name(q)).string();
    fs::remove_all(out);
    model::quantize_model({dirs[1], out, q});
    dirs.push_back(out);
  }
  dirs.push_back(test::synth_model("tiny-mixtral-f32", test::preset("tiny", "mixtral")));
  for (const auto& d : dirs)
    for (auto kv : {kernels::dtype::f32, kernels::dtype::f16, kernels::dtype::bf16}) expect_verify_rows_equal_decode_rows(d, kv);
}

namespace {

// The target of the engine tests: the tiny preset (a 512-token vocabulary), so that 32 requests
// run in a second; the verify-row test above covers the larger formats.
std::shared_ptr<const model::llama_model> target() {
  static auto m = std::shared_ptr<const model::llama_model>(model::llama_model::load(test::tiny_model_dir()));
  return m;
}

struct run_result {
  std::map<std::string, tokens> out;
  std::map<std::string, std::vector<sampling::token_logprobs>> logprobs;
  std::map<std::string, std::string> reason;
  engine::engine_stats stats;
  int draft_tokens = 0, accepted_tokens = 0;  // summed over the requests' final outputs
};

run_result run(const std::vector<engine::request>& reqs, engine::engine_config cfg) {
  auto e = engine::cpu_engine(target(), nullptr, cfg);
  for (const auto& r : reqs) e.add_request(r);
  run_result res;
  while (e.has_unfinished())
    for (auto& o : e.step()) {
      auto& t = res.out[o.id];
      t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
      auto& l = res.logprobs[o.id];
      l.insert(l.end(), o.logprobs.begin(), o.logprobs.end());
      if (o.finished) {
        res.reason[o.id] = engine::finish_reason_name(o.reason);
        res.draft_tokens += o.draft_tokens;
        res.accepted_tokens += o.accepted_tokens;
      }
    }
  BOOST_TEST(e.blocks().num_free() == e.blocks().num_blocks());  // every block back, rolled back ones too
  res.stats = e.stats();
  return res;
}

// Requests whose outputs repeat themselves (a random model falls into loops; some prompts quote
// a passage twice), so n-gram lookup has something to propose and sometimes gets it wrong.
std::vector<engine::request> requests(bool greedy, int n = 32) {
  auto reqs = test::mixed_requests(n, target()->config().vocab_size, greedy, 120);
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    auto& r = reqs[i];
    r.params.max_tokens = 24 + int(i % 5) * 4;
    if (i % 3 == 0) {  // quotes its own opening again
      const tokens again(r.prompt.begin(), r.prompt.begin() + std::min<std::ptrdiff_t>(12, std::ptrdiff_t(r.prompt.size())));
      r.prompt.insert(r.prompt.end(), again.begin(), again.end());
    }
    if (i % 4 == 1) r.params.logprobs = 3;
    if (i % 5 == 2) r.params.repetition_penalty = 1.2f, r.params.frequency_penalty = 0.3f;
    if (i % 7 == 3) r.params.min_tokens = 6, r.params.ignore_eos = false;
    if (i % 6 == 4) r.params.logit_bias = {{int(i % 50), 2.5f}};
    if (i % 8 == 5) r.params.stop_token_ids = {int((i * 13) % 50)}, r.params.ignore_eos = false;
  }
  return reqs;
}

engine::engine_config ngram_cfg(engine::engine_config c, int k = 4) {
  c.speculative.how = speculative::method::ngram;
  c.speculative.k = k;
  c.speculative.ngram.min_n = 1;
  c.speculative.ngram.max_n = 3;
  c.speculative.adaptive = false;  // propose whenever lookup finds something: the test wants rejections too
  return c;
}

void expect_same(const run_result& off, const run_result& on, const std::string& what) {
  BOOST_TEST_REQUIRE(off.out.size() == on.out.size());
  for (const auto& [id, t] : off.out) {
    BOOST_TEST(on.out.at(id) == t, what << ": tokens of " << id);
    BOOST_TEST(on.reason.at(id) == off.reason.at(id), what << ": finish reason of " << id);
    const auto &a = off.logprobs.at(id), &b = on.logprobs.at(id);
    BOOST_TEST_REQUIRE(a.size() == b.size(), what << ": logprobs of " << id);
    for (std::size_t j = 0; j < a.size(); ++j) {
      BOOST_TEST(a[j].logprob == b[j].logprob, what << ": logprob " << j << " of " << id);
      BOOST_TEST((a[j].top_ids == b[j].top_ids && a[j].top_logprobs == b[j].top_logprobs), what << ": top logprobs " << j << " of " << id);
    }
  }
}

void expect_balanced(const run_result& r, const std::string& what) {
  const auto& s = r.stats;
  BOOST_TEST(s.spec_accepted_tokens <= s.spec_draft_tokens, what);
  BOOST_TEST(r.draft_tokens == int(s.spec_draft_tokens), what);
  BOOST_TEST(r.accepted_tokens == int(s.spec_accepted_tokens), what);
  std::uint64_t per_pos = 0;
  for (std::size_t j = 0; j < s.spec_accepted_per_pos.size(); ++j) {
    per_pos += s.spec_accepted_per_pos[j];
    if (j > 0) BOOST_TEST(s.spec_accepted_per_pos[j] <= s.spec_accepted_per_pos[j - 1], what << ": position " << j);
  }
  BOOST_TEST(per_pos == s.spec_accepted_tokens, what);
  // Every output token came from a decode step (one each) or an accepted proposal.
  std::uint64_t outputs = 0;
  for (const auto& [id, t] : r.out) outputs += t.size();
  BOOST_TEST(outputs == s.generated_tokens, what);
  BOOST_TEST(s.spec_drafts > 0u, what << ": nothing was proposed");
  BOOST_TEST(s.spec_accepted_tokens > 0u, what << ": nothing was accepted");
  BOOST_TEST(s.spec_accepted_tokens < s.spec_draft_tokens, what << ": nothing was rejected (the test wants rollbacks)");
}

}  // namespace

BOOST_AUTO_TEST_CASE(ngram_speculation_gives_the_tokens_and_logprobs_of_plain_decoding) {
  for (bool greedy : {true, false}) {
    const auto reqs = requests(greedy);
    const std::string what = greedy ? "greedy" : "seeded";
    auto plain = test::engine_cfg(64, 512);
    const run_result off = run(reqs, plain);
    const run_result on = run(reqs, ngram_cfg(plain));
    expect_same(off, on, what + " batch of 32");
    expect_balanced(on, what + " batch of 32");
    BOOST_TEST_MESSAGE(what << ": " << off.stats.steps << " steps plain, " << on.stats.steps << " speculating; drafts "
                            << on.stats.spec_drafts << ", proposed " << on.stats.spec_draft_tokens << ", accepted "
                            << on.stats.spec_accepted_tokens);
    // Preemption: 48 blocks of 16 cannot hold them all; proposals never preempt, recompute
    // repeats the same tokens.
    const run_result squeezed = run(reqs, ngram_cfg(test::engine_cfg(64, 512, 48)));
    BOOST_TEST(squeezed.stats.preemptions > 0u);
    expect_same(off, squeezed, what + " preempted");
    // One at a time (no batch), k = 1 and k = 16.
    for (int k : {1, 16}) expect_same(off, run(reqs, ngram_cfg(test::engine_cfg(512, 2048), k)), what + " k " + std::to_string(k));
  }
}

// A request that quotes a passage of its prompt back (a random model's greedy output falls into a
// loop, which lookup then predicts): speculating, it takes fewer steps than it has tokens.
BOOST_AUTO_TEST_CASE(a_request_that_repeats_itself_takes_fewer_steps) {
  auto r = requests(true, 1)[0];
  r.params.max_tokens = 64;
  const run_result off = run({r}, test::engine_cfg(64, 512));
  const run_result on = run({r}, ngram_cfg(test::engine_cfg(64, 512)));
  expect_same(off, on, "one request");
  BOOST_TEST_MESSAGE("one request: " << off.stats.steps << " steps plain, " << on.stats.steps << " speculating");
  BOOST_TEST(on.stats.steps < off.stats.steps);
}

BOOST_AUTO_TEST_CASE(a_request_can_opt_out_and_then_never_proposes) {
  auto reqs = requests(true, 8);
  for (auto& r : reqs) r.speculate = false;
  const run_result r = run(reqs, ngram_cfg(test::engine_cfg(64, 512)));
  BOOST_TEST(r.stats.spec_drafts == 0u);
  BOOST_TEST(r.draft_tokens == 0);
}

// A rejected proposal's KV is written into the sequence's blocks; it must never be findable as a
// cached prefix. Requests that share their prompt and continue the same way find, through the
// prefix cache, only blocks whose tokens are what the first one kept.
BOOST_AUTO_TEST_CASE(rejected_proposals_never_reach_the_prefix_cache_or_kv_events) {
  auto reqs = requests(true, 16);
  auto cfg = ngram_cfg(test::engine_cfg(64, 512));
  cfg.sched.block_size = 4;  // many blocks filled by verify steps
  auto e = engine::cpu_engine(target(), nullptr, cfg);
  std::map<std::string, tokens> out;
  for (const auto& r : reqs) e.add_request(r);
  std::vector<kv::kv_event> events;
  while (e.has_unfinished()) {
    for (auto& o : e.step()) out[o.id].insert(out[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
    auto ev = e.kv().take_events();
    events.insert(events.end(), ev.begin(), ev.end());
  }
  BOOST_TEST_REQUIRE(e.stats().spec_accepted_tokens < e.stats().spec_draft_tokens);
  // Every block stored is a block of some request's prompt + kept output, under that prefix's hash.
  std::set<kv::block_hash> real;
  for (const auto& r : reqs) {
    tokens all = r.prompt;
    all.insert(all.end(), out[r.id].begin(), out[r.id].end());
    std::vector<kv::block_hash> hashes;
    kv::extend_block_hashes(hashes, all, cfg.sched.block_size, {kv::root_hash(cfg.model_key), kv::salt_key(""), 0});
    real.insert(hashes.begin(), hashes.end());
  }
  std::size_t stored = 0;
  for (const auto& ev : events)
    if (ev.kind == kv::kv_event_kind::stored)
      for (auto h : ev.hashes) {
        ++stored;
        BOOST_TEST(real.count(h) == 1u, "a stored block is not a prefix of any request's kept tokens");
      }
  BOOST_TEST(stored > 0u);
  for (auto h : e.kv().cached_hashes()) BOOST_TEST(real.count(h) == 1u, "a cached block is not a prefix of kept tokens");
}

BOOST_AUTO_TEST_CASE(prefix_hits_and_speculation_together_change_nothing) {
  auto reqs = requests(false, 12);
  for (auto& r : reqs) {  // one shared system prompt
    tokens sys;
    for (int i = 0; i < 40; ++i) sys.push_back((i * 31 + 7) % target()->config().vocab_size);
    r.prompt.insert(r.prompt.begin(), sys.begin(), sys.end());
  }
  const run_result off = run(reqs, test::engine_cfg(64, 512));
  auto on = ngram_cfg(test::engine_cfg(64, 512));
  auto e = engine::cpu_engine(target(), nullptr, on);
  std::map<std::string, tokens> out;
  for (const auto& r : reqs) {  // one after another: each finds the ones before in the cache
    auto t = engine::generate_all(e, {r});
    BOOST_TEST(t[0] == off.out.at(r.id), r.id);
  }
  BOOST_TEST(e.kv().stats().hits > 0u);
  BOOST_TEST(e.stats().spec_drafts > 0u);
}

namespace {

// The draft: the target quantized to q4_0 (its tokenizer, tokens it often but not always agrees on).
std::string draft_dir() {
  const fs::path out = fs::path(TROUPE_BINARY_DIR) / "test-scratch" / "speculative_engine" / "tiny-q4_0-draft";
  if (!fs::exists(out / "model.safetensors")) {
    fs::remove_all(out);
    model::quantize_model({test::tiny_model_dir(), out.string(), kernels::quant_type::q4_0});
  }
  return out.string();
}

engine::engine_config draft_cfg(engine::engine_config c, int k = 4) {
  c.speculative.how = speculative::method::draft;
  c.speculative.k = k;
  c.speculative.draft_model = draft_dir();
  c.speculative.adaptive = false;  // k every step: the test wants many proposals, accepted and rejected
  return c;
}

}  // namespace

BOOST_AUTO_TEST_CASE(draft_speculation_gives_the_tokens_and_logprobs_of_plain_decoding) {
  for (bool greedy : {true, false}) {
    const auto reqs = requests(greedy);
    const std::string what = std::string("draft, ") + (greedy ? "greedy" : "seeded");
    const run_result off = run(reqs, test::engine_cfg(64, 512));
    const run_result on = run(reqs, draft_cfg(test::engine_cfg(64, 512)));
    BOOST_TEST_MESSAGE(what << ": " << off.stats.steps << " steps plain, " << on.stats.steps << " speculating; drafts "
                            << on.stats.spec_drafts << ", proposed " << on.stats.spec_draft_tokens << ", accepted "
                            << on.stats.spec_accepted_tokens);
    expect_same(off, on, what + " batch of 32");
    expect_balanced(on, what + " batch of 32");
    const run_result squeezed = run(reqs, draft_cfg(test::engine_cfg(64, 512, 48)));
    BOOST_TEST(squeezed.stats.preemptions > 0u);
    expect_same(off, squeezed, what + " preempted");
  }
}

BOOST_AUTO_TEST_CASE(a_draft_that_cannot_serve_the_target_is_refused_naming_both) {
  auto c = draft_cfg(test::engine_cfg(64, 512));
  c.speculative.draft_model = test::synth_model("small-llama-f32", test::preset("small"));  // 32,000 tokens, the target 512
  try {
    auto e = engine::cpu_engine(target(), nullptr, c);
    BOOST_FAIL("accepted");
  } catch (const input_error& e) {
    const std::string m = e.what();
    BOOST_TEST(m.find("small-llama-f32") != std::string::npos, m);
    BOOST_TEST(m.find("tiny-llama-f32") != std::string::npos, m);
    BOOST_TEST(m.find("vocabulary") != std::string::npos, m);
  }
  c.speculative.draft_model = "/nonexistent/draft";
  try {
    auto e = engine::cpu_engine(target(), nullptr, c);
    BOOST_FAIL("accepted");
  } catch (const input_error& e) {
    BOOST_TEST(std::string(e.what()).find("/nonexistent/draft") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(a_bad_speculative_configuration_is_refused_by_name) {
  auto expect_error = [](engine::engine_config c, const std::string& part) {
    try {
      auto e = engine::cpu_engine(target(), nullptr, c);
      BOOST_FAIL("accepted");
    } catch (const input_error& e) {
      BOOST_TEST(std::string(e.what()).find(part) != std::string::npos, e.what());
    }
  };
  auto c = ngram_cfg(test::engine_cfg(64, 512));
  c.speculative.k = 0;
  expect_error(c, "speculative.k: 0 is not in 1..16");
  c = ngram_cfg(test::engine_cfg(64, 512));
  c.speculative.how = speculative::method::draft;
  expect_error(c, "draft_model");
}
