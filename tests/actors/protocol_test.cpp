// The value types that cross between processes keep what they carry, through CAF's binary
// serializer as the middleman sends them: every KV dtype in a cache's geometry (a rank in
// another process builds its cache from it), a layout (a disaggregated handoff or a store pull
// checks it) and a KV-event batch (a router in another process reads it).
#define BOOST_TEST_MODULE protocol
#include <boost/test/unit_test.hpp>

#include <caf/all.hpp>

#include "actors/protocol/admin_protocol.h"
#include "actors/protocol/engine_protocol.h"
#include "actors/protocol/serve_error.h"
#include "actors/protocol/worker_protocol.h"

using namespace troupe;
using kernels::dtype;

namespace {

template <class T>
T round_trip(T x) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  BOOST_TEST_REQUIRE(!sink(x));
  T y;
  caf::binary_deserializer source{nullptr, buf};
  const caf::error e = source(y);
  BOOST_TEST_REQUIRE(!e, caf::to_string(e));
  return y;
}

const dtype every_dtype[] = {dtype::f32, dtype::f16, dtype::bf16, dtype::int8};

}  // namespace

BOOST_AUTO_TEST_CASE(a_cache_geometry_keeps_its_dtype) {
  for (dtype t : every_dtype) {
    const auto got = round_trip(kv::kv_cache_config{100, 16, t, false});
    BOOST_TEST(kernels::dtype_name(got.type) == kernels::dtype_name(t));
    BOOST_TEST(got.num_blocks == 100);
  }
}

BOOST_AUTO_TEST_CASE(a_kv_layout_keeps_its_dtype) {
  for (dtype t : every_dtype) {
    kv::transfer::kv_layout l;
    l.type = t;
    l.num_layers = 4;
    l.n_kv_heads = 2;
    l.head_dim = 64;
    l.model_key = "m@1";
    l.ranks = {{0, 2}, {2, 4}};
    const auto got = round_trip(l);
    BOOST_TEST(kernels::dtype_name(got.type) == kernels::dtype_name(t));
    BOOST_TEST(!kv::transfer::layout_mismatch(l, got).has_value());
  }
}

BOOST_AUTO_TEST_CASE(a_kv_event_batch_keeps_its_dtype) {
  for (dtype t : every_dtype) {
    kv::kv_event_batch b;
    b.replica = replica_id(3);
    b.seq = 9;
    b.kv_type = t;
    b.events.push_back({kv::kv_event_kind::stored, {11, 12}, 0, false, {1, 2}, 1});
    const auto got = round_trip(b);
    BOOST_TEST(kernels::dtype_name(got.kv_type) == kernels::dtype_name(t));
    BOOST_TEST(got.seq == 9u);
    BOOST_TEST_REQUIRE(got.events.size() == 1u);
    BOOST_TEST(got.events[0].hashes == (std::vector<kv::block_hash>{11, 12}));
  }
}

BOOST_AUTO_TEST_CASE(a_dtype_byte_past_the_last_is_refused) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  kv::transfer::kv_layout l;
  BOOST_TEST_REQUIRE(!sink(l));
  buf[0] = char(static_cast<std::uint8_t>(kernels::last_dtype) + 1);  // the dtype is the first field
  kv::transfer::kv_layout y;
  caf::binary_deserializer source{nullptr, buf};
  BOOST_TEST(static_cast<bool>(source(y)));
}

// An error that crosses to another process keeps the code its receiver acts on and, for an
// overload, the seconds to wait: the frontend answers 429, 503 or 400 from the code alone.
BOOST_AUTO_TEST_CASE(a_serve_error_keeps_its_code_and_wait) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  caf::error sent = actors::make_serve_error(actors::serve_errc::overloaded, "overloaded (retry after 7 s): queue full", 7.5);
  BOOST_TEST_REQUIRE(!sink(sent));
  caf::error got;
  caf::binary_deserializer source{sys, buf};
  BOOST_TEST_REQUIRE(!source(got));
  BOOST_TEST((actors::serve_code(got) == actors::serve_errc::overloaded));
  BOOST_TEST(actors::serve_retry_after(got) == 7.5);
  BOOST_TEST(got.context().get_as<std::string>(0) == "overloaded (retry after 7 s): queue full");
  const caf::error other = caf::make_error(caf::sec::invalid_argument, "overloaded (retry after 7 s)");
  BOOST_TEST(!actors::serve_code(other));  // the text alone classifies nothing
  BOOST_TEST(actors::serve_retry_after(other) == 0.0);
  BOOST_TEST(actors::serve_retry_after(actors::make_serve_error(actors::serve_errc::unavailable, "no replica", 3)) == 0.0);
}

// The console's autoscaler command crosses as a value; a verb byte past the last is refused.
BOOST_AUTO_TEST_CASE(an_autoscaler_command_keeps_its_verb_and_settings) {
  autoscale::command c;
  c.what = autoscale::command::verb::set;
  c.settings = {{"queue_up", 6}, {"kv_down", 0.25}};
  const auto got = round_trip(c);
  BOOST_TEST((got.what == autoscale::command::verb::set));
  BOOST_TEST_REQUIRE(got.settings.size() == 2u);
  BOOST_TEST(got.settings[1].first == "kv_down");
  BOOST_TEST(got.settings[1].second == 0.25);

  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  BOOST_TEST_REQUIRE(!sink(c));
  buf[0] = char(static_cast<std::uint8_t>(autoscale::command::verb::set) + 1);  // the verb is the first field
  autoscale::command y;
  caf::binary_deserializer source{nullptr, buf};
  BOOST_TEST(static_cast<bool>(source(y)));
}
