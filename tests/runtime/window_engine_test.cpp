// A model with sliding-window and global layers (Gemma 3's five to one) keeps its windowed
// layers' KV only for the window (kv/window_groups.h), and that changes nothing it computes:
// the same tokens and log-probabilities as with every position kept, batched, chunked below the
// window, preempted, from the prefix cache and with speculation; its memory stops growing with
// the context; every page back at the end.
#define BOOST_TEST_MODULE window_engine
#include <boost/test/unit_test.hpp>

#include <map>

#include "runtime/engine/engine.h"
#include "tests/support/engine_factory.h"
#include "tests/support/models.h"

using namespace troupe;

namespace {

std::shared_ptr<const model::llama_model> gemma3() {
  static auto m = [] {
    auto o = test::preset("tiny", "gemma3");
    o.layers = 6;  // five windowed layers (32 positions) and a global one
    return std::shared_ptr<const model::llama_model>(model::llama_model::load(test::synth_model("tiny-gemma3-6-layers-f32", o)));
  }();
  return m;
}

struct run_result {
  std::map<std::string, std::vector<std::int32_t>> tokens;
  std::map<std::string, std::vector<float>> logprobs;  // each token's, then its top two's
  engine::engine_stats stats;
  int drafted = 0, cached = 0;
};

std::vector<engine::request> requests(int n, int shared_prefix = 0) {
  auto reqs = test::mixed_requests(n, gemma3()->config().vocab_size, true);
  for (auto& r : reqs) {
    r.params.max_tokens = 40;  // past the window while decoding, too
    r.params.logprobs = 2;
    for (int p = 0; p < shared_prefix && p < int(r.prompt.size()); ++p) r.prompt[std::size_t(p)] = (p * 31 + 5) % 200;
  }
  return reqs;
}

// Runs `reqs` to the end `passes` times in one engine (later passes find the first's prefixes).
run_result run(engine::engine_config cfg, const std::vector<engine::request>& reqs, int passes = 1) {
  auto e = engine::cpu_engine(gemma3(), nullptr, cfg);
  BOOST_TEST_REQUIRE(e.kv().pages_per_block() == (cfg.free_windows ? 6 : 1));
  run_result out;
  for (int pass = 0; pass < passes; ++pass) {
    for (auto r : reqs) {
      r.id += "/" + std::to_string(pass);
      e.add_request(std::move(r));
    }
    while (e.has_unfinished())
      for (auto& o : e.step()) {
        const std::string id = o.id.substr(0, o.id.find('/'));
        auto& t = out.tokens[id + (pass ? "'" : "")];
        t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
        auto& lp = out.logprobs[id + (pass ? "'" : "")];
        for (const auto& l : o.logprobs) {
          lp.push_back(l.logprob);
          lp.insert(lp.end(), l.top_logprobs.begin(), l.top_logprobs.end());
        }
        if (o.finished) out.drafted += o.draft_tokens, out.cached += o.cached_tokens;
      }
    BOOST_TEST(e.kv().num_free() == e.kv().num_blocks());  // every page back
    BOOST_TEST(e.kv().num_window_pages_held() == 0);
  }
  out.stats = e.stats();
  return out;
}

engine::engine_config config(bool free_windows, int chunk = 512, int num_blocks = 0) {
  auto c = test::engine_cfg(chunk, 256, num_blocks);
  c.free_windows = free_windows;
  return c;
}

void same_outputs(const run_result& got, const run_result& want, const std::string& what) {
  BOOST_TEST_REQUIRE(got.tokens.size() == want.tokens.size());
  for (const auto& [id, t] : want.tokens) {
    BOOST_TEST(got.tokens.at(id) == t, what << ": " << id);
    BOOST_TEST(got.logprobs.at(id) == want.logprobs.at(id), what << ": " << id);  // bit for bit
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(window_pages_compute_what_every_position_kept_computes) {
  const auto reqs = requests(16);
  const run_result kept = run(config(false), reqs);
  BOOST_TEST_REQUIRE(kept.tokens.size() == reqs.size());
  same_outputs(run(config(true), reqs), kept, "batched");
  same_outputs(run(config(true, 24), reqs), kept, "chunks of 24 (blocks leave the window mid-prompt)");
  const run_result squeezed = run(config(true, 64, 150), reqs);
  BOOST_TEST(squeezed.stats.preemptions > 0u);
  same_outputs(squeezed, kept, "preempted");
}

BOOST_AUTO_TEST_CASE(prefix_hits_use_the_window_pages_that_are_left) {
  const auto reqs = requests(8, 70);  // 70 tokens in common, then each its own
  const run_result kept = run(config(false), reqs, 2);
  const run_result windows = run(config(true), reqs, 2);
  BOOST_TEST(windows.cached > 0);  // the second pass found the first's blocks
  BOOST_TEST_MESSAGE("cached tokens: " << windows.cached << " (every position kept: " << kept.cached << ")");
  same_outputs(windows, kept, "prefix cache");
}

BOOST_AUTO_TEST_CASE(speculation_rejects_into_the_window_exactly) {
  auto reqs = requests(6);
  for (auto& r : reqs) r.params.max_tokens = 80;
  auto spec = [](bool free_windows) {
    auto c = config(free_windows);
    c.speculative.how = speculative::method::ngram;
    c.speculative.adaptive = false;
    return c;
  };
  const run_result kept = run(config(false), reqs);
  const run_result windows = run(spec(true), reqs);
  BOOST_TEST(windows.drafted > 0);
  same_outputs(windows, kept, "ngram speculation");
}

BOOST_AUTO_TEST_CASE(windowed_memory_stops_growing_with_the_context) {
  engine::request r;
  r.id = "long";
  for (int p = 0; p < 600; ++p) r.prompt.push_back((p * 7919 + 3) % gemma3()->config().vocab_size);
  r.params.max_tokens = 2;  // still running once its prompt is in
  r.params.ignore_eos = true;
  auto used_after_prefill = [&](bool free_windows) {
    auto e = engine::cpu_engine(gemma3(), nullptr, config(free_windows, 128));
    e.add_request(r);
    std::size_t most = 0;  // pages in use, the most after any step
    while (e.has_unfinished()) {
      e.step();
      most = std::max(most, std::size_t(e.kv().num_used()));
    }
    return most;
  };
  // A page holds one layer's block split (a global layer's slot), six layers' unsplit.
  const std::size_t split = used_after_prefill(true), kept = used_after_prefill(false) * 6;
  BOOST_TEST_MESSAGE("layer-blocks held after a 600-token prompt: " << split << " with window pages, " << kept << " without");
  // 38 global blocks, and the windowed layers' pages of the window's 3 blocks (568..599).
  BOOST_TEST(split <= 38 + 5 * 3);
  BOOST_TEST(split * 3 < kept);
}
