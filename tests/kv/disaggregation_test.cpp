// Disaggregated prefill and decode on the transfer engine, engine to engine in one process: the
// decode side reserves its blocks before it pulls (a full pool makes handoffs wait, never fail),
// a failed pull releases them and then recomputes or hands the request back (the TOML's policy),
// and a handle from a replica of another layout is refused naming the difference.
#define BOOST_TEST_MODULE disaggregation
#include <boost/test/unit_test.hpp>

#include <map>

#include "runtime/common/error.h"
#include "runtime/engine/engine.h"
#include "runtime/kv/transfer/registry.h"
#include "tests/support/engine_factory.h"
#include "tests/support/models.h"

using namespace troupe;
using outputs = std::vector<std::vector<std::int32_t>>;

namespace {

outputs reference(const std::vector<engine::request>& reqs) {
  auto e = engine::cpu_engine(test::small_model(), nullptr, test::engine_cfg(64, 512));
  return engine::generate_all(e, reqs);
}

void all_blocks_free(const engine::engine& e) {
  BOOST_TEST(e.blocks().num_free() == e.blocks().num_blocks());
  BOOST_TEST(e.num_handoffs_held() == 0u);
}

// Runs `reqs` prefill-only on P; each handoff goes to D with the handle. `before_pull` may spoil
// the handle first; `seen` is shown every output (true: P's). Returns every request's tokens.
outputs prefill_then_decode(engine::engine& p, engine::engine& d, const std::vector<engine::request>& reqs,
                            const std::function<void(engine::request&)>& before_pull = {},
                            const std::function<void(engine::request_output&, bool)>& seen = {}) {
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    index[reqs[i].id] = i;
    auto r = reqs[i];
    r.prefill_only = true;
    p.add_request(r);
  }
  d.on_transfer([&](const engine::transfer_record& rec) { p.release_handoff(rec.id); });
  outputs got(reqs.size());
  std::map<std::string, bool> ended;
  while (p.has_unfinished() || d.has_unfinished()) {
    if (p.has_unfinished())
      for (auto& o : p.step()) {
        BOOST_TEST_REQUIRE(o.finished);
        if (seen) seen(o, true);
        const std::size_t i = index.at(o.id);
        got[i] = o.new_tokens;
        auto next = reqs[i];
        next.generated = o.new_tokens;
        next.kv_from = o.kv;
        if (before_pull) before_pull(next);
        d.add_request(next);
      }
    if (d.has_unfinished())
      for (auto& o : d.step()) {
        if (seen) seen(o, false);
        auto& t = got[index.at(o.id)];
        t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
        if (o.finished) ended[o.id] = true;
      }
  }
  BOOST_TEST(ended.size() == reqs.size());
  return got;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_full_decode_pool_makes_handoffs_wait_not_fail) {
  // D's pool holds about three of these requests at a time; P hands off all twelve at once.
  const auto reqs = test::mixed_requests(12, test::small_model()->config().vocab_size, false, 120);
  const outputs ref = reference(reqs);
  auto p = engine::cpu_engine(test::small_model(), nullptr, test::engine_cfg(64, 2048, 256));
  auto d = engine::cpu_engine(test::small_model(), nullptr, test::engine_cfg(64, 512, 24));
  std::size_t most_waiting = 0;
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < reqs.size(); ++i) index[reqs[i].id] = i;
  outputs got(reqs.size());
  for (auto r : reqs) {
    r.prefill_only = true;
    p.add_request(r);
  }
  d.on_transfer([&](const engine::transfer_record& rec) { p.release_handoff(rec.id); });
  while (p.has_unfinished())
    for (auto& o : p.step()) {
      auto next = reqs[index.at(o.id)];
      got[index.at(o.id)] = o.new_tokens;
      next.generated = o.new_tokens;
      next.kv_from = o.kv;
      d.add_request(next);
    }
  while (d.has_unfinished()) {
    most_waiting = std::max(most_waiting, d.num_waiting());
    for (auto& o : d.step()) {
      auto& t = got[index.at(o.id)];
      t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
    }
  }
  BOOST_TEST(most_waiting >= 6u, "handoffs queued for room: " << most_waiting);
  BOOST_TEST(d.stats().kv_pulls == reqs.size());
  BOOST_TEST(d.stats().kv_pull_failures == 0u);
  // Prompts are computed on D only after a preemption (decodes growing into a full pool), never
  // because a handoff found no room.
  BOOST_TEST((d.stats().prompt_tokens_computed == 0u) == (d.stats().preemptions == 0u));
  for (std::size_t i = 0; i < reqs.size(); ++i) BOOST_TEST(got[i] == ref[i], "request " << i);
  all_blocks_free(p);
  all_blocks_free(d);
}

BOOST_AUTO_TEST_CASE(a_failed_pull_releases_its_blocks_and_recomputes_by_default) {
  for (bool greedy : {true, false}) {
    const auto reqs = test::mixed_requests(8, test::small_model()->config().vocab_size, greedy, 120);
    const outputs ref = reference(reqs);
    auto p = engine::cpu_engine(test::small_model(), nullptr, test::engine_cfg(64, 2048, 256));
    auto d = engine::cpu_engine(test::small_model(), nullptr, test::engine_cfg(64, 512, 256));
    // Every other handle names a cache that is not there (its sender restarted meanwhile).
    int n = 0;
    const outputs got = prefill_then_decode(p, d, reqs, [&](engine::request& r) {
      if (n++ % 2 == 0) r.kv_from.sources[0].key = "gone";
    });
    BOOST_TEST(d.stats().kv_pull_failures == 4u);
    BOOST_TEST(d.stats().kv_pulls == 4u);
    BOOST_TEST(d.stats().prompt_tokens_computed > 0u);  // the failed ones, recomputed
    for (std::size_t i = 0; i < reqs.size(); ++i) BOOST_TEST(got[i] == ref[i], (greedy ? "greedy" : "seeded") << " request " << i);
    all_blocks_free(p);
    all_blocks_free(d);
  }
}

BOOST_AUTO_TEST_CASE(with_the_retry_policy_a_failed_pull_hands_the_request_back) {
  const auto reqs = test::mixed_requests(3, test::small_model()->config().vocab_size, true, 120);
  auto p = engine::cpu_engine(test::small_model(), nullptr, test::engine_cfg(64, 2048, 256));
  auto cfg = test::engine_cfg(64, 512, 256);
  cfg.on_transfer_failure = engine::engine_config::transfer_failure::retry;
  auto d = engine::cpu_engine(test::small_model(), nullptr, cfg);
  for (auto r : reqs) {
    r.prefill_only = true;
    p.add_request(r);
  }
  std::vector<engine::request_output> ends;
  while (p.has_unfinished())
    for (auto& o : p.step()) {
      auto next = reqs[std::size_t(o.id.back() - '0')];
      next.generated = o.new_tokens;
      next.kv_from = o.kv;
      next.kv_from.sources[0].key = "gone";
      d.add_request(next);
      p.release_handoff(o.id);
    }
  while (d.has_unfinished())
    for (auto& o : d.step())
      if (o.finished) ends.push_back(o);
  BOOST_TEST_REQUIRE(ends.size() == reqs.size());
  for (const auto& o : ends) {
    BOOST_TEST(engine::finish_reason_name(o.reason) == std::string("transfer_failed"));
    BOOST_TEST(o.new_tokens.empty());
  }
  BOOST_TEST(d.stats().prompt_tokens_computed == 0u);
  all_blocks_free(p);
  all_blocks_free(d);
}

BOOST_AUTO_TEST_CASE(int8_kv_hands_off_and_decodes_the_tokens_of_a_local_int8_run) {
  // Prefill on P, decode on D, both with int8 KV: the pulled blocks (quants and scales) are the
  // ones D would have written, so the tokens are a local int8 run's, greedy and seeded alike.
  auto cfg = test::engine_cfg(64, 512);
  cfg.kv_type = kernels::dtype::int8;
  auto reqs = test::mixed_requests(3, test::small_model()->config().vocab_size, true, 40);
  const auto seeded = test::mixed_requests(2, test::small_model()->config().vocab_size, false, 40);
  reqs.insert(reqs.end(), seeded.begin(), seeded.end());
  for (std::size_t i = 0; i < reqs.size(); ++i) reqs[i].id = "int8-" + std::to_string(i);
  auto local = engine::cpu_engine(test::small_model(), nullptr, cfg);
  const outputs ref = engine::generate_all(local, reqs);
  auto p = engine::cpu_engine(test::small_model(), nullptr, cfg);
  auto d = engine::cpu_engine(test::small_model(), nullptr, cfg);
  const outputs got = prefill_then_decode(p, d, reqs);
  for (std::size_t i = 0; i < reqs.size(); ++i) BOOST_TEST(got[i] == ref[i], "request " << i);
  BOOST_TEST(d.stats().kv_pulls == reqs.size());
  BOOST_TEST(d.stats().prompt_tokens_computed == 0u);  // every prompt's KV came from P
  // And int8 KV is not f32 KV: the f32 run differs somewhere, or the cache was not int8.
  BOOST_TEST(ref != reference(reqs));
  all_blocks_free(p);
  all_blocks_free(d);
}

BOOST_AUTO_TEST_CASE(a_handle_of_another_layout_is_refused_naming_the_difference) {
  auto p = engine::cpu_engine(test::small_model(), nullptr, test::engine_cfg(64, 512, 64));
  auto cfg = test::engine_cfg(64, 512, 64);
  cfg.kv_type = kernels::dtype::bf16;
  auto d = engine::cpu_engine(test::small_model(), nullptr, cfg);
  auto r = test::mixed_requests(1, test::small_model()->config().vocab_size, true)[0];
  r.prefill_only = true;
  p.add_request(r);
  auto o = p.step();
  while (o.empty() || !o[0].finished) o = p.step();
  r.prefill_only = false;
  r.generated = o[0].new_tokens;
  r.kv_from = o[0].kv;
  try {
    d.add_request(r);
    BOOST_ERROR("accepted KV of another dtype");
  } catch (const input_error& e) {
    BOOST_TEST(std::string(e.what()).find("the cache dtype is f32 on the sender and bf16 on the receiver") != std::string::npos, e.what());
  }
  BOOST_TEST(!d.has_unfinished());
  BOOST_TEST(p.release_handoff(r.id));
  all_blocks_free(p);
  all_blocks_free(d);
}

BOOST_AUTO_TEST_CASE(blocks_the_decode_replica_already_caches_are_not_pulled_again) {
  // D has served a request with the same 96-token prefix: a handoff of another one pulls only the
  // blocks after it (3 of 9), and decodes the tokens of a full recompute.
  const int vocab = test::small_model()->config().vocab_size;
  auto reqs = test::mixed_requests(2, vocab, false, 40);
  for (auto& r : reqs) {
    std::vector<std::int32_t> p;
    for (int i = 0; i < 96; ++i) p.push_back((i * 4513 + 11) % vocab);
    r.prompt.resize(40, 7);
    p.insert(p.end(), r.prompt.begin(), r.prompt.end());
    r.prompt = std::move(p);
  }
  const outputs ref = reference(reqs);
  auto p = engine::cpu_engine(test::small_model(), nullptr, test::engine_cfg(64, 2048, 256));
  auto d = engine::cpu_engine(test::small_model(), nullptr, test::engine_cfg(64, 512, 256));
  BOOST_TEST(engine::generate_all(d, {reqs[0]})[0] == ref[0]);
  const outputs got = prefill_then_decode(p, d, {reqs[1]});
  BOOST_TEST(got[0] == ref[1]);
  BOOST_TEST(d.stats().kv_pulls == 1u);
  const std::size_t per_block = 16 * std::size_t(2 * test::small_model()->config().num_hidden_layers) *
                                std::size_t(test::small_model()->config().kv_dim()) * 4;  // f32 K and V
  BOOST_TEST(d.stats().kv_pull_bytes == 3 * per_block);
  all_blocks_free(p);
  all_blocks_free(d);
}

// Prompt logprobs under disaggregation: the prefill replica scores the prompt and sends the list
// with the handoff's first token (the request owner relays it); the decode replica, which pulls
// the KV and computes no prompt, sends none. The values are a local run's.
BOOST_AUTO_TEST_CASE(prompt_logprobs_come_from_the_prefill_side_once) {
  auto reqs = test::mixed_requests(3, test::small_model()->config().vocab_size, true, 120);
  for (auto& r : reqs) r.params.prompt_logprobs = 1;
  std::map<std::string, std::vector<sampling::token_logprobs>> local;
  auto l = engine::cpu_engine(test::small_model(), nullptr, test::engine_cfg(64, 512));
  for (const auto& r : reqs) l.add_request(r);
  while (l.has_unfinished())
    for (auto& o : l.step())
      if (!o.prompt_logprobs.empty()) local[o.id] = std::move(o.prompt_logprobs);
  BOOST_TEST_REQUIRE(local.size() == reqs.size());

  auto p = engine::cpu_engine(test::small_model(), nullptr, test::engine_cfg(64, 2048));
  auto d = engine::cpu_engine(test::small_model(), nullptr, test::engine_cfg(64, 512));
  std::map<std::string, std::vector<sampling::token_logprobs>> from_prefill;
  int from_decode = 0;
  prefill_then_decode(p, d, reqs, {}, [&](engine::request_output& o, bool prefill) {
    if (prefill) from_prefill[o.id] = std::move(o.prompt_logprobs);
    else from_decode += int(o.prompt_logprobs.size());
  });
  BOOST_TEST(from_decode == 0);
  for (const auto& r : reqs) {
    const auto& got = from_prefill[r.id];
    const auto& want = local[r.id];
    BOOST_TEST_REQUIRE(got.size() == r.prompt.size() - 1, r.id);
    for (std::size_t k = 0; k < got.size(); ++k) {
      BOOST_TEST(std::abs(got[k].logprob - want[k].logprob) < 1e-5, r.id << " token " << k + 1);
      BOOST_TEST(got[k].rank == want[k].rank, r.id << " token " << k + 1);
    }
  }
  all_blocks_free(p);
  all_blocks_free(d);
}
