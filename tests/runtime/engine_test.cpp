// Continuous batching must not change what a request generates: alone, in a batch of 32 mixed
// lengths, with chunked prefill at 16/64/512, after preemption and recompute; and every KV block
// is free again when the requests end.
#define BOOST_TEST_MODULE engine
#include <boost/test/unit_test.hpp>

#include "runtime/common/error.h"
#include "runtime/engine/engine.h"
#include "tests/support/engine_factory.h"
#include "tests/support/models.h"

using namespace troupe;

namespace {

using test::small_model;

using outputs = std::vector<std::vector<std::int32_t>>;

outputs run_batched(const std::vector<engine::request>& reqs, engine::engine_config cfg, engine::engine_stats* stats = nullptr) {
  engine::engine e(small_model(), nullptr, cfg);
  auto out = engine::generate_all(e, reqs);
  BOOST_TEST(e.blocks().num_free() == e.blocks().num_blocks());  // every block back
  if (stats) *stats = e.stats();
  return out;
}

outputs run_alone(const std::vector<engine::request>& reqs, kernels::dtype kv = kernels::dtype::f32) {
  outputs out;
  auto cfg = test::engine_cfg(512, 2048);
  cfg.kv_type = kv;
  engine::engine e(small_model(), nullptr, cfg);
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
  engine::engine e(small_model(), nullptr, test::engine_cfg(64, 256));
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
  engine::engine e(small_model(), nullptr, test::engine_cfg(64, 256, 8));
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
  engine::engine e(small_model(), nullptr, {});
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
    engine::engine e(small_model(), tok, {});
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
// the worker actors run it.
struct pipeline {
  std::shared_ptr<const model::llama_model> m;
  std::vector<std::unique_ptr<kv::kv_cache>> caches;
  std::vector<std::pair<int, int>> ranges;
  model::forward_workspace ws;
  std::vector<float> logits;

  pipeline(std::shared_ptr<const model::llama_model> model, int ranks, int num_blocks) : m(std::move(model)) {
    const int L = m->num_layers();
    for (int r = 0; r < ranks; ++r) ranges.emplace_back(L * r / ranks, L * (r + 1) / ranks);
    reset(num_blocks);
  }
  void reset(int num_blocks) {  // a group restart: fresh, empty caches
    caches.clear();
    const auto& c = m->config();
    for (auto [a, b] : ranges)
      caches.push_back(std::make_unique<kv::kv_cache>(kv::kv_cache_config{num_blocks, 16, kernels::dtype::f32}, b - a,
                                                      c.num_key_value_heads, c.head_dim));
  }
  std::span<const float> run(const engine::forward_plan& p) {
    const auto b = engine::view(p);
    const std::size_t kvd = std::size_t(m->config().kv_dim());
    for (const auto& imp : p.imports)  // each rank writes its own layers of the payload
      for (std::size_t r = 0; r < ranges.size(); ++r)
        caches[r]->import_kv(p.tables[std::size_t(imp.seq)].data(), imp.positions,
                             imp.data.data() + std::size_t(ranges[r].first) * imp.positions * 2 * kvd);
    m->embed(b, ws);
    for (std::size_t r = 0; r < ranges.size(); ++r) {
      model::forward_workspace stage;  // each rank has its own; only the hidden state travels
      stage.x = ws.x;
      m->run_layers(b, ranges[r].first, ranges[r].second, *caches[r], stage);
      ws.x = std::move(stage.x);
    }
    logits.resize(p.logit_rows.size() * std::size_t(m->config().vocab_size));
    m->head(b, ws, logits.data());
    return logits;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_pipeline_split_forward_with_lost_kv_gives_the_same_tokens) {
  // The worker path: the scheduling half of the engine plans, a 2-stage pipeline computes,
  // and every fifth step the pipeline's KV is lost (a rank died) before the step finishes.
  for (bool greedy : {true, false}) {
    const auto reqs = test::mixed_requests(12, small_model()->config().vocab_size, greedy);
    const outputs alone = run_alone(reqs);
    auto cfg = test::engine_cfg(64, 256, 200);
    engine::engine e(small_model()->config(), nullptr, cfg);
    pipeline pipe(small_model(), 2, 200);
    std::map<std::string, std::size_t> index;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      index[reqs[i].id] = i;
      e.add_request(reqs[i]);
    }
    outputs got(reqs.size());
    int step = 0;
    while (e.has_unfinished()) {
      const auto& plan = e.begin_step();
      BOOST_TEST(e.step_in_flight());
      if (++step % 5 == 0 && !plan.empty()) {
        e.lose_kv();
        pipe.reset(200);
        continue;
      }
      const auto logits = plan.empty() ? std::span<const float>() : pipe.run(plan);
      for (auto& o : e.finish_step(logits, 0)) {
        auto& t = got[index.at(o.id)];
        t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
      }
    }
    BOOST_TEST(e.stats().kv_losses > 0u);
    BOOST_TEST(e.blocks().num_free() == e.blocks().num_blocks());
    for (std::size_t i = 0; i < reqs.size(); ++i) BOOST_TEST(got[i] == alone[i], (greedy ? "greedy" : "seeded") << " request " << i);
  }
}

BOOST_AUTO_TEST_CASE(an_abort_during_a_step_in_flight_ends_the_request_after_it) {
  auto reqs = test::mixed_requests(3, small_model()->config().vocab_size, true);
  engine::engine e(small_model()->config(), nullptr, test::engine_cfg(512, 2048, 100));
  pipeline pipe(small_model(), 1, 100);
  for (auto& r : reqs) e.add_request(r);
  const auto& plan = e.begin_step();
  BOOST_TEST(e.abort("req-1"));  // its prompt is in the plan the workers are running
  std::vector<engine::request_output> outs = e.finish_step(pipe.run(plan), 0);
  while (e.has_unfinished()) {
    const auto& p = e.begin_step();
    for (auto& o : e.finish_step(p.empty() ? std::span<const float>() : pipe.run(p), 0)) outs.push_back(o);
  }
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
    engine::engine p(small_model()->config(), nullptr, cfg), d(small_model()->config(), nullptr, cfg);
    pipeline pp(small_model(), 2, 200), dp(small_model(), 3, 200);
    auto drive = [](engine::engine& e, pipeline& pipe, auto on_output) {
      while (e.has_unfinished()) {
        const auto& plan = e.begin_step();
        const auto logits = plan.empty() ? std::span<const float>() : pipe.run(plan);
        for (auto& o : e.finish_step(logits, 0)) on_output(o);
      }
    };
    for (auto r : reqs) {
      r.prefill_only = true;
      p.add_request(r);
    }
    std::map<std::string, std::size_t> index;
    for (std::size_t i = 0; i < reqs.size(); ++i) index[reqs[i].id] = i;
    outputs got(reqs.size());
    drive(p, pp, [&](engine::request_output& o) {
      BOOST_TEST_REQUIRE(o.finished);
      BOOST_TEST(engine::finish_reason_name(o.reason) == std::string("handoff"));
      const std::size_t i = index.at(o.id);
      got[i] = o.new_tokens;
      BOOST_TEST(o.kv_positions == int(reqs[i].prompt.size()));
      // Each rank exports its own layers into its part of the whole model's payload.
      const auto& c = small_model()->config();
      auto kv = std::make_shared<std::vector<float>>(std::size_t(c.num_hidden_layers) * o.kv_positions * 2 * c.kv_dim());
      for (std::size_t r = 0; r < pp.ranges.size(); ++r)
        pp.caches[r]->export_kv(o.held_blocks.data(), o.kv_positions,
                                kv->data() + std::size_t(pp.ranges[r].first) * o.kv_positions * 2 * c.kv_dim());
      p.release_held(o.id);
      engine::request next = reqs[i];
      next.generated = o.new_tokens;
      next.kv = kv;
      d.add_request(next);
    });
    BOOST_TEST(p.blocks().num_free() == p.blocks().num_blocks());
    BOOST_TEST(p.stats().generated_tokens == reqs.size());  // one token each, then handed off
    // D's pipeline imports into its own caches; its ranks split the layers differently.
    drive(d, dp, [&](engine::request_output& o) {
      auto& t = got[index.at(o.id)];
      t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
    });
    BOOST_TEST(d.stats().prompt_tokens_computed == 0u);  // every prompt came as KV
    BOOST_TEST(d.blocks().num_free() == d.blocks().num_blocks());
    for (std::size_t i = 0; i < reqs.size(); ++i) BOOST_TEST(got[i] == alone[i], (greedy ? "greedy" : "seeded") << " request " << i);
  }
}
