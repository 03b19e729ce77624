// Continuous batching must not change what a request generates: alone, in a batch of 32 mixed
// lengths, with chunked prefill at 16/64/512, after preemption and recompute; and every KV block
// is free again when the requests end.
#define BOOST_TEST_MODULE engine
#include <boost/test/unit_test.hpp>

#include "runtime/common/error.h"
#include "runtime/engine/engine.h"
#include "runtime/eval/perplexity.h"
#include "runtime/kv/transfer/pull.h"
#include "runtime/kv/transfer/registry.h"
#include "tests/support/engine_factory.h"
#include "tests/support/models.h"

using namespace troupe;

namespace {

using test::small_model;

using outputs = std::vector<std::vector<std::int32_t>>;

outputs run_batched(const std::vector<engine::request>& reqs, engine::engine_config cfg, engine::engine_stats* stats = nullptr) {
  auto e = engine::cpu_engine(small_model(), nullptr, cfg);
  auto out = engine::generate_all(e, reqs);
  BOOST_TEST(e.blocks().num_free() == e.blocks().num_blocks());  // every block back
  if (stats) *stats = e.stats();
  return out;
}

outputs run_alone(const std::vector<engine::request>& reqs, kernels::dtype kv = kernels::dtype::f32) {
  outputs out;
  auto cfg = test::engine_cfg(512, 2048);
  cfg.kv_type = kv;
  auto e = engine::cpu_engine(small_model(), nullptr, cfg);
  for (auto& r : reqs) {
    out.push_back(engine::generate_all(e, {r})[0]);
    BOOST_TEST_REQUIRE(e.blocks().num_free() == e.blocks().num_blocks());
  }
  return out;
}

void check_invariance(bool greedy) {
  const auto reqs = test::mixed_requests(32, small_model()->config().vocab_size, greedy);
  const outputs alone = run_alone(reqs);
  for (std::size_t i = 0; i < reqs.size(); ++i) BOOST_TEST_REQUIRE(int(alone[i].size()) == reqs[i].params.max_tokens);
  for (int chunk : {16, 64, 512}) {
    engine::engine_stats st;
    const outputs batched = run_batched(reqs, test::engine_cfg(chunk, 256), &st);
    BOOST_TEST_MESSAGE("chunk " << chunk << ": " << st.steps << " steps");
    for (std::size_t i = 0; i < reqs.size(); ++i) BOOST_TEST(batched[i] == alone[i], "chunk " << chunk << " request " << i);
  }
  // 40 blocks of 16 tokens cannot hold 32 requests of up to 218 tokens: preemption must happen.
  engine::engine_stats st;
  const outputs squeezed = run_batched(reqs, test::engine_cfg(64, 256, 40), &st);
  BOOST_TEST_MESSAGE("preemptions: " << st.preemptions);
  BOOST_TEST(st.preemptions > 0u);
  for (std::size_t i = 0; i < reqs.size(); ++i) BOOST_TEST(squeezed[i] == alone[i], "preempted run, request " << i);
}

}  // namespace

BOOST_AUTO_TEST_CASE(greedy_tokens_do_not_depend_on_batching_chunking_or_preemption) { check_invariance(true); }

BOOST_AUTO_TEST_CASE(seeded_samples_do_not_depend_on_batching_chunking_or_preemption) { check_invariance(false); }

BOOST_AUTO_TEST_CASE(abort_frees_blocks_and_reports_the_request_once) {
  auto e = engine::cpu_engine(small_model(), nullptr, test::engine_cfg(64, 256));
  auto reqs = test::mixed_requests(4, small_model()->config().vocab_size, true);
  for (auto& r : reqs) e.add_request(r);
  e.step();
  e.step();
  BOOST_TEST(e.blocks().num_used() > 0);
  BOOST_TEST(e.abort("req-1"));
  BOOST_TEST(!e.abort("req-1"));
  int finished_1 = 0;
  while (e.has_unfinished())
    for (auto& o : e.step())
      if (o.id == "req-1") {
        BOOST_TEST(o.finished);
        BOOST_TEST(engine::finish_reason_name(o.reason) == std::string("abort"));
        ++finished_1;
      }
  BOOST_TEST(finished_1 == 1);
  BOOST_TEST(e.blocks().num_free() == e.blocks().num_blocks());
}

BOOST_AUTO_TEST_CASE(bad_requests_are_rejected_with_the_field_named) {
  auto e = engine::cpu_engine(small_model(), nullptr, test::engine_cfg(64, 256, 8));
  auto expect_error = [&](engine::request r, const std::string& needle) {
    try {
      e.add_request(r);
      BOOST_ERROR("accepted a bad request; expected: " << needle);
    } catch (const input_error& err) {
      BOOST_TEST(std::string(err.what()).find(needle) != std::string::npos, err.what());
    }
  };
  engine::request ok{"a", {1, 2, 3}, {}, {}, 0};
  expect_error({"b", {}, {}, {}, 0}, "prompt is empty");
  expect_error({"c", {1, 32000}, {}, {}, 0}, "outside the vocabulary");
  auto hot = ok;
  hot.id = "d";
  hot.params.temperature = -1;
  expect_error(hot, "'temperature'");
  auto topp = ok;
  topp.id = "e";
  topp.params.top_p = 0;
  expect_error(topp, "'top_p'");
  auto big = ok;
  big.id = "f";
  big.params.max_tokens = 500;  // 8 blocks hold 128 tokens
  expect_error(big, "KV blocks");
  e.add_request(ok);
  expect_error(ok, "already in use");
}

BOOST_AUTO_TEST_CASE(stop_token_ids_and_max_tokens_end_generation) {
  auto reqs = test::mixed_requests(1, small_model()->config().vocab_size, true);
  const outputs free_run = run_alone(reqs);
  BOOST_TEST_REQUIRE(free_run[0].size() >= 4u);
  auto r = reqs[0];
  r.params.stop_token_ids = {free_run[0][2]};
  auto e = engine::cpu_engine(small_model(), nullptr, {});
  e.add_request(r);
  std::vector<std::int32_t> got;
  engine::finish_reason why = engine::finish_reason::none;
  while (e.has_unfinished())
    for (auto& o : e.step()) {
      got.insert(got.end(), o.new_tokens.begin(), o.new_tokens.end());
      if (o.finished) why = o.reason;
    }
  // Ends at the first occurrence of the stop token, which is included.
  auto first = std::find(free_run[0].begin(), free_run[0].end(), free_run[0][2]);
  BOOST_TEST(got == std::vector<std::int32_t>(free_run[0].begin(), first + 1));
  BOOST_TEST(engine::finish_reason_name(why) == std::string("stop"));
}

BOOST_AUTO_TEST_CASE(f16_kv_cache_is_batch_invariant_too) {
  const auto reqs = test::mixed_requests(12, small_model()->config().vocab_size, false);
  const outputs alone = run_alone(reqs, kernels::dtype::f16);
  auto cfg = test::engine_cfg(16, 128);
  cfg.kv_type = kernels::dtype::f16;
  const outputs batched = run_batched(reqs, cfg);
  for (std::size_t i = 0; i < reqs.size(); ++i) BOOST_TEST(batched[i] == alone[i], "request " << i);
}

BOOST_AUTO_TEST_CASE(stop_strings_cut_the_text_and_are_never_streamed_in_part) {
  const std::string dir = test::synth_model("small-llama-f32", test::preset("small"));
  auto tok = std::shared_ptr<const tokenizer::tokenizer>(tokenizer::tokenizer::load(dir + "/tokenizer.json"));
  engine::request r{"s", tok->encode("The scheduler decides which requests run"), {}, {}, 0};
  r.params.temperature = 0;
  r.params.max_tokens = 40;
  r.params.ignore_eos = true;
  auto run = [&](const engine::request& req, std::string& text, std::vector<std::string>& deltas) {
    auto e = engine::cpu_engine(small_model(), tok, {});
    e.add_request(req);
    engine::finish_reason why = engine::finish_reason::none;
    while (e.has_unfinished())
      for (auto& o : e.step()) {
        text += o.text_delta;
        deltas.push_back(o.text_delta);
        if (o.finished) why = o.reason;
      }
    BOOST_TEST(e.blocks().num_free() == e.blocks().num_blocks());
    return why;
  };
  std::string full;
  std::vector<std::string> unused;
  run(r, full, unused);
  BOOST_TEST_REQUIRE(full.size() > 30u);
  const std::string stop = full.substr(full.size() / 2, 4);  // a 4-byte piece of the free-run text
  const std::size_t first = full.find(stop);
  r.params.stop = {stop};
  std::string text;
  std::vector<std::string> deltas;
  const auto why = run(r, text, deltas);
  BOOST_TEST(engine::finish_reason_name(why) == std::string("stop"));
  BOOST_TEST(text == full.substr(0, first));
  std::string streamed;
  for (auto& d : deltas) {
    streamed += d;
    BOOST_TEST_REQUIRE(streamed.find(stop.substr(0, 1), first) == std::string::npos, "stop string streamed in part");
  }
}

BOOST_AUTO_TEST_CASE(a_request_resumed_from_its_generated_tokens_continues_exactly) {
  // What a migration does: the new replica gets prompt + tokens so far and must produce the
  // rest exactly as the first replica would have.
  for (bool greedy : {true, false}) {
    auto reqs = test::mixed_requests(6, small_model()->config().vocab_size, greedy);
    const outputs full = run_alone(reqs);
    std::vector<engine::request> resumed;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      auto r = reqs[i];
      const std::size_t k = 1 + i % (full[i].size() - 1);
      r.generated.assign(full[i].begin(), full[i].begin() + long(k));
      resumed.push_back(r);
    }
    const outputs rest = run_batched(resumed, test::engine_cfg(64, 256));
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      std::vector<std::int32_t> joined = resumed[i].generated;
      joined.insert(joined.end(), rest[i].begin(), rest[i].end());
      BOOST_TEST(joined == full[i], (greedy ? "greedy" : "seeded") << " request " << i);
    }
  }
}

namespace {

// The forward of a pipeline of `ranks` stages, each with its own cache of its layers only, as
// the worker actors run it, behind the executor interface. `fail_every` N: every Nth step fails
// with its KV lost (a rank died) and the caches start empty again; `defer`: a step waits until
// complete() (a step in flight on remote ranks).
struct pipeline : engine::executor {
  std::shared_ptr<const model::llama_model> m;
  std::vector<std::shared_ptr<kv::kv_cache>> caches;  // exposed for pulls, as the group's are
  std::vector<kv::transfer::kv_source> sources;
  std::vector<std::pair<int, int>> ranges;
  model::forward_workspace ws;
  std::vector<float> logits;
  int num_blocks, fail_every = 0, steps = 0;
  bool defer = false;
  std::optional<std::pair<engine::forward_plan, step_done>> waiting;

  pipeline(std::shared_ptr<const model::llama_model> model, int ranks, int blocks) : m(std::move(model)), num_blocks(blocks) {
    const int L = m->num_layers();
    for (int r = 0; r < ranks; ++r) ranges.emplace_back(L * r / ranks, L * (r + 1) / ranks);
    reset();
  }
  ~pipeline() override { withdraw(); }
  void withdraw() {
    for (auto& s : sources) kv::transfer::registry::global().withdraw(s.key);
    sources.clear();
  }
  void reset() {  // a group restart: fresh, empty caches
    withdraw();
    caches.clear();
    const auto& c = m->config();
    for (auto [a, b] : ranges) {
      caches.push_back(std::make_shared<kv::kv_cache>(kv::kv_cache_config{num_blocks, 16, kernels::dtype::f32}, b - a,
                                                      c.num_key_value_heads, c.head_dim));
      sources.push_back(kv::transfer::registry::global().expose(caches.back()));
    }
  }
  engine::step_result run(const engine::forward_plan& p) {
    const auto b = engine::view(p);
    const auto& c = m->config();
    m->embed(b, ws);
    for (std::size_t r = 0; r < ranges.size(); ++r) {
      model::forward_workspace stage;  // each rank has its own; only the hidden state travels
      stage.x = ws.x;
      m->run_layers(b, ranges[r].first, ranges[r].second, *caches[r], stage);
      ws.x = std::move(stage.x);
    }
    logits.resize(p.logit_rows.size() * std::size_t(c.vocab_size));
    m->head(b, ws, logits.data());
    return {sampling::sample_rows(logits, p.sampling, c.vocab_size, c.eos_token_ids), 0};
  }
  void execute(engine::forward_plan plan, step_done done) override {
    if (fail_every > 0 && ++steps % fail_every == 0) {
      reset();
      return done(std::nullopt);
    }
    if (defer) {
      waiting.emplace(std::move(plan), std::move(done));
      return;
    }
    done(run(plan));
  }
  void complete() {
    auto w = std::move(*waiting);
    waiting.reset();
    w.second(run(w.first));
  }
  std::vector<std::pair<int, int>> kv_ranks() const override { return ranges; }
  std::vector<kv::transfer::kv_source> kv_sources() const override { return sources; }
  void pull_kv(kv::transfer::kv_handle from, kv::transfer::kv_layout mine, std::vector<std::int32_t> table,
               kv::transfer::backend how, std::chrono::steady_clock::time_point deadline, pull_done done) override {
    engine::pull_outcome out;
    try {  // each rank pulls its own layers, from whichever of the sender's ranks hold them
      for (std::size_t r = 0; r < ranges.size(); ++r)
        out.bytes += kv::transfer::pull(from, {caches[r].get(), ranges[r].first, mine, table}, how, deadline).bytes;
    } catch (const kv::transfer::transfer_error& e) {
      out.error = e.what();
    }
    done(out);
  }
};

// An engine over a pipeline executor it owns; `pipe` is left pointing at that executor.
engine::engine pipeline_engine(engine::engine_config cfg, int ranks, pipeline*& pipe) {
  auto p = std::make_unique<pipeline>(small_model(), ranks, cfg.num_blocks);
  pipe = p.get();
  return engine::engine(small_model()->config(), nullptr, cfg, std::move(p));
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_pipeline_split_forward_with_lost_kv_gives_the_same_tokens) {
  // The worker path: the engine plans, a 2-stage pipeline computes and samples, and every
  // fifth step the pipeline's KV is lost (a rank died) before the step finishes.
  for (bool greedy : {true, false}) {
    const auto reqs = test::mixed_requests(12, small_model()->config().vocab_size, greedy);
    const outputs alone = run_alone(reqs);
    pipeline* pipe = nullptr;
    auto e = pipeline_engine(test::engine_cfg(64, 256, 200), 2, pipe);
    pipe->fail_every = 5;
    const outputs got = engine::generate_all(e, reqs);
    BOOST_TEST(e.stats().kv_losses > 0u);
    BOOST_TEST(e.blocks().num_free() == e.blocks().num_blocks());
    for (std::size_t i = 0; i < reqs.size(); ++i) BOOST_TEST(got[i] == alone[i], (greedy ? "greedy" : "seeded") << " request " << i);
  }
}

BOOST_AUTO_TEST_CASE(an_abort_during_a_step_in_flight_ends_the_request_after_it) {
  auto reqs = test::mixed_requests(3, small_model()->config().vocab_size, true);
  pipeline* pipe = nullptr;
  auto e = pipeline_engine(test::engine_cfg(512, 2048, 100), 1, pipe);
  pipe->defer = true;
  for (auto& r : reqs) e.add_request(r);
  std::vector<engine::request_output> outs;
  auto take = [&](std::vector<engine::request_output> o) { outs.insert(outs.end(), o.begin(), o.end()); };
  e.step(take);
  BOOST_TEST(e.step_in_flight());
  BOOST_TEST(e.abort("req-1"));  // its prompt is in the plan the workers are running
  pipe->complete();
  BOOST_TEST(!e.step_in_flight());
  pipe->defer = false;
  while (e.has_unfinished()) e.step(take);
  int ends = 0, tokens = 0;
  for (auto& o : outs)
    if (o.id == "req-1") {
      tokens += int(o.new_tokens.size());
      if (o.finished) {
        ++ends;
        BOOST_TEST(engine::finish_reason_name(o.reason) == std::string("abort"));
      }
    }
  BOOST_TEST(ends == 1);
  BOOST_TEST(tokens <= 1);  // at most the token of the step that was already running
  BOOST_TEST(e.blocks().num_free() == e.blocks().num_blocks());
}

BOOST_AUTO_TEST_CASE(a_prefill_handed_off_with_its_kv_decodes_to_the_same_tokens) {
  // Disaggregated serving in miniature: engine P only prefills (each request ends after its
  // first token, its blocks held), its 2-stage pipeline exports the KV, and engine D, with a
  // 3-stage pipeline of its own, imports it and decodes the rest without recomputing the prompt.
  for (bool greedy : {true, false}) {
    const auto reqs = test::mixed_requests(10, small_model()->config().vocab_size, greedy);
    const outputs alone = run_alone(reqs);
    auto cfg = test::engine_cfg(64, 256, 200);
    pipeline *pp = nullptr, *dp = nullptr;
    auto p = pipeline_engine(cfg, 2, pp);
    auto d = pipeline_engine(cfg, 3, dp);
    std::vector<engine::request> prefill = reqs;
    for (auto& r : prefill) r.prefill_only = true;
    std::map<std::string, std::size_t> index;
    for (std::size_t i = 0; i < reqs.size(); ++i) index[reqs[i].id] = i;
    outputs got(reqs.size());
    for (auto& r : prefill) p.add_request(r);
    // D pulls each request's KV from P's caches, then P may free the blocks it held for it.
    std::size_t released = 0;
    d.on_transfer([&](const engine::transfer_record& rec) {
      BOOST_TEST(rec.outcome.error == "");
      released += p.release_handoff(rec.id);
    });
    while (p.has_unfinished())
      for (auto& o : p.step()) {
        BOOST_TEST_REQUIRE(o.finished);
        BOOST_TEST(engine::finish_reason_name(o.reason) == std::string("handoff"));
        const std::size_t i = index.at(o.id);
        got[i] = o.new_tokens;
        BOOST_TEST(o.kv.positions == int(reqs[i].prompt.size()));
        engine::request next = reqs[i];
        next.generated = o.new_tokens;
        next.kv_from = o.kv;
        d.add_request(next);
      }
    BOOST_TEST(p.num_handoffs_held() == reqs.size());  // held until pulled
    BOOST_TEST(p.stats().generated_tokens == reqs.size());  // one token each, then handed off
    // D's pipeline pulls into its own caches; its ranks split the layers differently.
    while (d.has_unfinished())
      for (auto& o : d.step()) {
        auto& t = got[index.at(o.id)];
        t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
      }
    BOOST_TEST(d.stats().prompt_tokens_computed == 0u);  // every prompt came as KV
    BOOST_TEST(d.stats().kv_pulls == reqs.size());
    BOOST_TEST(released == reqs.size());
    BOOST_TEST(p.blocks().num_free() == p.blocks().num_blocks());
    BOOST_TEST(d.blocks().num_free() == d.blocks().num_blocks());
    for (std::size_t i = 0; i < reqs.size(); ++i) BOOST_TEST(got[i] == alone[i], (greedy ? "greedy" : "seeded") << " request " << i);
  }
}

namespace {

// The prompt logprobs of request "scored" in a run of `reqs` (it must be among them).
std::vector<sampling::token_logprobs> prompt_logprobs_of(engine::engine& e, const std::vector<engine::request>& reqs) {
  for (const auto& r : reqs) e.add_request(r);
  std::vector<sampling::token_logprobs> got;
  int deliveries = 0;
  while (e.has_unfinished())
    for (auto& o : e.step())
      if (o.id == "scored" && !o.prompt_logprobs.empty()) {
        got = std::move(o.prompt_logprobs);
        ++deliveries;
      }
  BOOST_TEST(deliveries == 1);
  BOOST_TEST(e.blocks().num_free() == e.blocks().num_blocks());
  return got;
}

}  // namespace

// prompt_logprobs: every prompt token after the first, scored teacher-forced, summing to the
// NLL `troupe eval perplexity` computes over the same tokens; the same values whether the prompt
// is computed whole or in chunks, after a cached prefix (which it must not reuse), or in a
// crowded pool that preempts.
BOOST_AUTO_TEST_CASE(prompt_logprobs_are_the_teacher_forced_ones_however_the_prompt_is_computed) {
  const int vocab = small_model()->config().vocab_size;
  engine::request scored{"scored", {}, {}, {}, 0};
  for (int i = 0; i < 150; ++i) scored.prompt.push_back((i * 37 + 11) % vocab);
  scored.params.temperature = 0;
  scored.params.max_tokens = 4;
  scored.params.prompt_logprobs = 3;
  eval::perplexity_config pc;
  pc.window = int(scored.prompt.size());
  const auto ref = eval::perplexity(*small_model(), scored.prompt, pc);

  auto e = engine::cpu_engine(small_model(), nullptr, test::engine_cfg(512, 2048));
  const auto whole = prompt_logprobs_of(e, {scored});
  BOOST_TEST_REQUIRE(whole.size() == scored.prompt.size() - 1);
  double sum = 0;
  for (std::size_t k = 0; k < whole.size(); ++k) {
    sum += whole[k].logprob;
    BOOST_TEST(whole[k].top_ids.size() == 3u);
    BOOST_TEST(whole[k].rank >= 1);
    BOOST_TEST((whole[k].rank == 1) == (whole[k].logprob >= whole[k].top_logprobs[0]));
  }
  BOOST_TEST(-sum == ref.nll, boost::test_tools::tolerance(1e-4));

  auto same = [&](const std::vector<sampling::token_logprobs>& got, const char* how) {
    BOOST_TEST_REQUIRE(got.size() == whole.size(), how);
    for (std::size_t k = 0; k < got.size(); ++k) {
      BOOST_TEST(std::abs(got[k].logprob - whole[k].logprob) < 1e-4, how << " token " << k + 1);
      BOOST_TEST(got[k].top_ids == whole[k].top_ids, how << " token " << k + 1);
    }
  };
  auto chunked = engine::cpu_engine(small_model(), nullptr, test::engine_cfg(16, 64));
  same(prompt_logprobs_of(chunked, {scored}), "chunks of 16");
  auto warm = engine::cpu_engine(small_model(), nullptr, test::engine_cfg(512, 2048));
  engine::request plain = scored;
  plain.id = "plain";
  plain.params.prompt_logprobs = -1;
  engine::generate_all(warm, {plain});  // its blocks are cached now
  same(prompt_logprobs_of(warm, {scored}), "after the same prompt was cached");
  auto crowd = test::mixed_requests(31, vocab, true);
  crowd.push_back(scored);
  auto squeezed = engine::cpu_engine(small_model(), nullptr, test::engine_cfg(64, 256, 40));
  same(prompt_logprobs_of(squeezed, crowd), "in a pool that preempts");
  BOOST_TEST(squeezed.stats().preemptions > 0u);
}
