// The KV-event payload has vLLM's layout, read back with msgpack-c's own unpacker: [ts,
// [events], data_parallel_rank], each event a tagged array, and after them the cache's dtype.
#define BOOST_TEST_MODULE kv_event_codec
#include <boost/test/unit_test.hpp>

#include <msgpack.hpp>

#include "runtime/kv/kv_event_codec.h"

using namespace troupe::kv;

BOOST_AUTO_TEST_CASE(a_batch_encodes_as_vllm_lays_it_out) {
  kv_event stored{kv_event_kind::stored, {0xfedcba9876543210ull, 7}, 42, true, {1, 2, 3, 4, 5, 6, 7, 8}, 4};
  kv_event first{kv_event_kind::stored, {9}, 0, false, {1, 2, 3, 4}, 4};
  kv_event removed{kv_event_kind::removed, {7}};
  kv_event cleared{kv_event_kind::cleared};
  const std::string bytes =
      encode_kv_event_batch({troupe::replica_id(3), 1, 1, 1.7e9, {stored, first, removed, cleared}, troupe::kernels::dtype::f16});
  msgpack::object_handle oh = msgpack::unpack(bytes.data(), bytes.size());
  const msgpack::object& o = oh.get();
  BOOST_TEST_REQUIRE(o.type == msgpack::type::ARRAY);
  BOOST_TEST_REQUIRE(o.via.array.size == 4u);
  BOOST_TEST(o.via.array.ptr[0].type == msgpack::type::FLOAT64);
  BOOST_TEST(o.via.array.ptr[0].as<double>() == 1.7e9);
  BOOST_TEST(o.via.array.ptr[2].as<int>() == 3);  // data_parallel_rank: the replica
  BOOST_TEST(o.via.array.ptr[3].as<std::string>() == "f16");  // the blocks' KV dtype
  const msgpack::object& evs = o.via.array.ptr[1];
  BOOST_TEST_REQUIRE(evs.via.array.size == 4u);
  const msgpack::object* e = evs.via.array.ptr[0].via.array.ptr;
  BOOST_TEST_REQUIRE(evs.via.array.ptr[0].via.array.size == 7u);
  BOOST_TEST(e[0].as<std::string>() == "BlockStored");
  BOOST_TEST(e[1].as<std::vector<std::uint64_t>>() == (std::vector<std::uint64_t>{0xfedcba9876543210ull, 7}));
  BOOST_TEST(e[2].as<std::uint64_t>() == 42u);
  BOOST_TEST(e[3].as<std::vector<int>>() == (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}));
  BOOST_TEST(e[4].as<int>() == 4);
  BOOST_TEST(e[5].is_nil());                      // lora_id
  BOOST_TEST(e[6].as<std::string>() == "GPU");   // medium
  BOOST_TEST(evs.via.array.ptr[1].via.array.ptr[2].is_nil());  // no parent: a chain's first block
  BOOST_TEST_REQUIRE(evs.via.array.ptr[2].via.array.size == 3u);
  BOOST_TEST(evs.via.array.ptr[2].via.array.ptr[0].as<std::string>() == "BlockRemoved");
  BOOST_TEST(evs.via.array.ptr[2].via.array.ptr[2].as<std::string>() == "GPU");
  BOOST_TEST_REQUIRE(evs.via.array.ptr[3].via.array.size == 1u);
  BOOST_TEST(evs.via.array.ptr[3].via.array.ptr[0].as<std::string>() == "AllBlocksCleared");
}

// Each dtype by its name: a consumer tells an int8 cache's blocks from an f16 one's.
BOOST_AUTO_TEST_CASE(the_batch_names_its_kv_dtype) {
  using troupe::kernels::dtype;
  for (const auto& [t, name] : {std::pair{dtype::f32, "f32"}, {dtype::f16, "f16"}, {dtype::bf16, "bf16"}, {dtype::int8, "int8"}}) {
    kv_event_batch b;
    b.kv_type = t;
    const std::string bytes = encode_kv_event_batch(b);
    msgpack::object_handle oh = msgpack::unpack(bytes.data(), bytes.size());
    BOOST_TEST_REQUIRE(oh.get().via.array.size == 4u);
    BOOST_TEST(oh.get().via.array.ptr[3].as<std::string>() == name);
  }
}
