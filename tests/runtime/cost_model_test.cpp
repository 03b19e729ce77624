#define BOOST_TEST_MODULE cost_model
#include <boost/test/unit_test.hpp>

#include "runtime/model/synth.h"
#include "runtime/sim/cost_model.h"

using namespace troupe;

namespace {
model::model_config preset_1b() {
  model::synth_options o;
  o.preset = "1b";
  return model::synth_config(o);
}
}  // namespace

BOOST_AUTO_TEST_CASE(decode_at_batch_one_is_bound_by_reading_the_weights) {
  const auto c = preset_1b();
  const double params = sim::parameter_count(c);
  BOOST_TEST(params > 1.0e9);
  BOOST_TEST(params < 1.2e9);
  sim::gpu_spec g;  // 3.35 TB/s, 989 TFLOP/s, 200 us overhead
  const double t = sim::step_seconds(c, g, {1, 128, 1});
  // Every matrix is read once; of the embedding table only the used rows (negligible).
  const double weights_time = (params - double(c.vocab_size) * c.hidden_size) * 2 / g.bandwidth;
  BOOST_TEST(t > weights_time + g.step_overhead_s);                 // plus a little KV
  BOOST_TEST(t < weights_time * 1.01 + g.step_overhead_s);
}

BOOST_AUTO_TEST_CASE(a_long_prefill_is_bound_by_compute) {
  const auto c = preset_1b();
  sim::gpu_spec g;
  const std::int64_t n = 8192;
  const double t = sim::step_seconds(c, g, {n, n * (n + 1) / 2, 1});
  const double compute = 2 * sim::parameter_count(c) * n / g.flops;
  BOOST_TEST(t > compute * 0.9);
  BOOST_TEST(sim::step_seconds(c, g, {0, 0, 0}) == 0.0);
  // More tokens never take less time.
  BOOST_TEST(sim::step_seconds(c, g, {64, 64 * 128, 64}) >= sim::step_seconds(c, g, {32, 32 * 128, 32}));
}
