#define BOOST_TEST_MODULE topology
#include <boost/test/unit_test.hpp>

#include <filesystem>

#include "runtime/common/error.h"
#include "topology/engine_settings.h"
#include "topology/topology.h"

using namespace troupe;
using namespace troupe::topology;

namespace {

const std::string minimal = R"(
[model]
path = "models/small"

[[nodes]]
name = "head"

[[pools]]
name = "main"
)";

// Parses `text` expecting an error; returns its message.
std::string error_of(const std::string& text) {
  try {
    parse_topology(text, "t.toml");
  } catch (const input_error& e) {
    return e.what();
  }
  BOOST_FAIL("accepted: " << text);
  return {};
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_file_in_configs_loads) {
  int loaded = 0;
  for (auto& f : std::filesystem::directory_iterator(std::string(TROUPE_SOURCE_DIR) + "/configs")) {
    if (f.path().extension() != ".toml") continue;
    BOOST_TEST_CONTEXT(f.path()) {
      topology_config t = load_topology(f.path().string());
      BOOST_TEST(!t.nodes.empty());
      BOOST_TEST(!t.pools.empty());
      ++loaded;
    }
  }
  BOOST_TEST(loaded >= 2);
}

BOOST_AUTO_TEST_CASE(local_toml_is_one_process_on_the_cpu) {
  topology_config t = load_topology(std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml");
  BOOST_TEST(t.model.path == "models/kjv");  // the trained default model, committed
  BOOST_TEST(backend_name(t.model.backend) == std::string("cpu"));
  BOOST_TEST(t.nodes.size() == 1u);
  BOOST_TEST(t.pools.at(0).replicas == 1);
  BOOST_TEST(t.scheduler.kv_memory_bytes == std::size_t(512) << 20);
  BOOST_TEST(t.router.policy == "least_loaded");
  BOOST_TEST(t.router.params.at("token_weight") == 0.004);
  // A peer silent 3 s is suspect, 15 s dead: the defaults that do not flap on a busy host.
  BOOST_TEST(t.timeouts.heartbeat.count() == 1000);
  BOOST_TEST(t.timeouts.suspect.count() == 3000);
  BOOST_TEST(t.timeouts.connection.count() == 15000);
}

BOOST_AUTO_TEST_CASE(defaults_fill_what_a_minimal_file_leaves_out) {
  topology_config t = parse_topology(minimal, "t.toml");
  BOOST_TEST(t.pools[0].nodes == std::vector<std::string>{"head"});
  BOOST_TEST(role_name(t.pools[0].role) == std::string("both"));
  BOOST_TEST(t.router.policy == "round_robin");
  BOOST_TEST(t.nodes[0].host == "127.0.0.1");
}

BOOST_AUTO_TEST_CASE(wrong_type_names_file_line_and_key) {
  std::string e = error_of(minimal + "\n[scheduler]\nblock_size = \"sixteen\"\n");
  BOOST_TEST(e == "t.toml:12: scheduler.block_size: expected an integer, got a string");
}

BOOST_AUTO_TEST_CASE(unknown_keys_are_errors) {
  std::string e = error_of(minimal + "\n[scheduler]\nblocksize = 16\n");
  BOOST_TEST(e.find("t.toml:12: scheduler.blocksize: unknown key") == 0, e);
  BOOST_TEST(e.find("block_size") != std::string::npos, e);  // the allowed keys are listed
  e = error_of(minimal + "\n[cache]\nsize = 1\n");
  BOOST_TEST(e.find("cache: unknown key") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(missing_pools_and_model_are_reported) {
  std::string e = error_of("[model]\npath = \"m\"\n[[nodes]]\nname = \"head\"\n");
  BOOST_TEST(e.find("pools: at least one [[pools]] entry is required") != std::string::npos, e);
  e = error_of("[[nodes]]\nname = \"head\"\n[[pools]]\nname = \"p\"\n");
  BOOST_TEST(e.find("model: required table [model] is missing") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(duplicate_names_point_at_the_second_one) {
  std::string e = error_of(minimal + "\n[[pools]]\nname = \"main\"\n");
  BOOST_TEST(e == "t.toml:12: pools.name: duplicate pool name \"main\"");
  e = error_of("[model]\npath = \"m\"\n[[nodes]]\nname = \"a\"\n[[nodes]]\nname = \"a\"\n[[pools]]\nname = \"p\"\n");
  BOOST_TEST(e == "t.toml:6: nodes.name: duplicate node name \"a\"");
}

BOOST_AUTO_TEST_CASE(pool_on_unknown_node) {
  std::string e = error_of("[model]\npath = \"m\"\n[[nodes]]\nname = \"a\"\n[[pools]]\nname = \"p\"\nnodes = [\"b\"]\n");
  BOOST_TEST(e.find("t.toml:7: pools.nodes: pool \"p\" is placed on unknown node \"b\"") == 0, e);
}

BOOST_AUTO_TEST_CASE(unknown_policy_and_parameter) {
  std::string e = error_of(minimal + "\n[router]\npolicy = \"random\"\n");
  BOOST_TEST(e.find("t.toml:12: router.policy: unknown policy \"random\" (known:") == 0, e);
  BOOST_TEST(e.find("least_loaded") != std::string::npos, e);
  e = error_of(minimal + "\n[router]\npolicy = \"least_loaded\"\n[router.params]\nalpha = 2\n");
  BOOST_TEST(e.find("router.params.alpha: policy \"least_loaded\" takes no parameter \"alpha\"") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(sizes_durations_and_syntax) {
  topology_config t = parse_topology(minimal + "\n[scheduler]\nkv_memory = \"2GiB\"\n[timeouts]\nheartbeat = \"250ms\"\nconnection = \"2s\"\n", "t.toml");
  BOOST_TEST(t.scheduler.kv_memory_bytes == std::size_t(2) << 30);
  BOOST_TEST(t.timeouts.heartbeat.count() == 250);
  BOOST_TEST(t.timeouts.suspect.count() == 1000);  // not given: half the connection timeout
  BOOST_TEST(error_of(minimal + "\n[timeouts]\nsuspect = \"20s\"\n").find("timeouts.suspect: must be shorter than timeouts.connection") !=
             std::string::npos);
  BOOST_TEST(error_of(minimal + "\n[timeouts]\nheartbeat = \"soon\"\n").find("timeouts.heartbeat: expected a duration") != std::string::npos);
  BOOST_TEST(error_of(minimal + "\n[timeouts]\nheartbeat = \"5s\"\nconnection = \"1s\"\n").find("must be longer") != std::string::npos);
  BOOST_TEST(error_of("[model\npath = 1").find("t.toml:1:") == 0);
}

BOOST_AUTO_TEST_CASE(pipeline_parallel_and_group_timeouts) {
  topology_config t = parse_topology(minimal + "pipeline_parallel = 2\n[timeouts]\nstep = \"90s\"\ngroup_restarts = 5\n"
                                                 "group_restart_window = \"2m\"\n", "t.toml");
  BOOST_TEST(t.pools[0].pipeline_parallel == 2);
  BOOST_TEST(place_replicas(t)[0].pipeline_parallel == 2);
  BOOST_TEST(t.timeouts.step.count() == 90000);
  BOOST_TEST(t.timeouts.group_restarts == 5);
  BOOST_TEST(t.timeouts.group_restart_window.count() == 120000);
  BOOST_TEST(parse_topology(minimal, "t.toml").pools[0].pipeline_parallel == 1);
  const std::string e = error_of(minimal + "pipeline_parallel = 0\n");
  BOOST_TEST(e.find("t.toml:10: pools.pipeline_parallel:") == 0, e);
}

BOOST_AUTO_TEST_CASE(tensor_parallel_and_micro_batches) {
  topology_config t = parse_topology(minimal + "pipeline_parallel = 3\ntensor_parallel = 2\n", "t.toml");
  BOOST_TEST(t.pools[0].tensor_parallel == 2);
  BOOST_TEST(place_replicas(t)[0].tensor_parallel == 2);
  BOOST_TEST(place_replicas(t)[0].micro_batches == 3);  // default: one per stage
  t = parse_topology(minimal + "pipeline_parallel = 2\nmicro_batches = 1\n", "t.toml");
  BOOST_TEST(place_replicas(t)[0].micro_batches == 1);
  BOOST_TEST(place_replicas(parse_topology(minimal, "t.toml"))[0].tensor_parallel == 1);
  BOOST_TEST(error_of(minimal + "tensor_parallel = 0\n").find("t.toml:10: pools.tensor_parallel:") == 0);
  BOOST_TEST(error_of(minimal + "micro_batches = 0\n").find("t.toml:10: pools.micro_batches:") == 0);
  BOOST_TEST(place_replicas(parse_topology(minimal + "expert_parallel = 2\n", "t.toml"))[0].expert_parallel == 2);
  const std::string e = error_of(minimal + "expert_parallel = 2\ntensor_parallel = 4\n");
  BOOST_TEST(e.find("pools.expert_parallel: expert_parallel = 2 runs on the stage's ranks, so tensor_parallel must be 1 or 2, not 4") !=
                 std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(frontend_table) {
  topology_config t = parse_topology(minimal + "[frontend]\naddress = \"0.0.0.0:9001\"\nmax_requests = 7\nretry_after = \"3s\"\n"
                                                 "max_body = \"1MiB\"\nmetric_prefix = \"troupe_\"\nmodel_name = \"m\"\n", "t.toml");
  BOOST_TEST(t.frontend.host == "0.0.0.0");
  BOOST_TEST(t.frontend.port == 9001);
  BOOST_TEST(t.frontend.max_requests == 7);
  BOOST_TEST(t.frontend.retry_after_s == 3);
  BOOST_TEST(t.frontend.max_body == std::size_t(1) << 20);
  BOOST_TEST(t.frontend.metric_prefix == "troupe_");
  BOOST_TEST(t.frontend.model_name == "m");
  BOOST_TEST(t.frontend.model_aliases.empty());
  // Several names: the first is the name answers carry, the rest aliases.
  t = parse_topology(minimal + "[frontend]\nmodel_name = [\"kjv\", \"bible\", \"kjv-1\"]\n", "t.toml");
  BOOST_TEST(t.frontend.model_name == "kjv");
  BOOST_TEST(t.frontend.model_aliases == (std::vector<std::string>{"bible", "kjv-1"}), boost::test_tools::per_element());
  std::string names = error_of(minimal + "[frontend]\nmodel_name = [\"a\", \"a\"]\n");
  BOOST_TEST(names.find("frontend.model_name: \"a\" is named twice") != std::string::npos, names);
  names = error_of(minimal + "[frontend]\nmodel_name = []\n");
  BOOST_TEST(names.find("frontend.model_name: expected at least one name") != std::string::npos, names);
  names = error_of(minimal + "[frontend]\nmodel_name = [\"a\", 3]\n");
  BOOST_TEST(names.find("frontend.model_name: expected names of 1 to 256 characters") != std::string::npos, names);
  BOOST_TEST(parse_topology(minimal, "t.toml").frontend.port == 8000);
  std::string e = error_of(minimal + "[frontend]\naddress = \"nowhere\"\n");
  BOOST_TEST(e.find("t.toml:11: frontend.address: expected \"host:port\"") == 0, e);
  e = error_of(minimal + "[frontend]\nmetric_prefix = \"a-b\"\n");
  BOOST_TEST(e.find("frontend.metric_prefix") != std::string::npos, e);
  e = error_of(minimal + "[frontend]\nport = 1\n");
  BOOST_TEST(e.find("frontend.port: unknown key") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(a_prefill_pool_needs_a_pool_to_hand_off_to) {
  const std::string e = error_of(minimal + "role = \"prefill\"\n");
  BOOST_TEST(e.find("pools.role: pool \"main\" only prefills") != std::string::npos, e);
  const auto t = parse_topology(minimal + "role = \"prefill\"\n[[pools]]\nname = \"d\"\nrole = \"decode\"\n", "t.toml");
  const auto placed = place_replicas(t);
  BOOST_TEST(role_name(placed[0].role) == std::string("prefill"));
  BOOST_TEST(role_name(placed[1].role) == std::string("decode"));
}

BOOST_AUTO_TEST_CASE(conditional_disaggregation_threshold) {
  BOOST_TEST(parse_topology(minimal + "[router]\ndisaggregate_min_prompt = 256\n", "t.toml").router.disaggregate_min_prompt == 256);
  BOOST_TEST(parse_topology(minimal, "t.toml").router.disaggregate_min_prompt == 0);
  const std::string e = error_of(minimal + "[router]\ndisaggregate_min_prompt = -1\n");
  BOOST_TEST(e.find("router.disaggregate_min_prompt") != std::string::npos, e);
  BOOST_TEST(parse_topology(minimal + "[router]\ndisaggregate_queue_ratio = 2.5\n", "t.toml").router.disaggregate_queue_ratio == 2.5);
  const std::string q = error_of(minimal + "[router]\ndisaggregate_queue_ratio = -1\n");
  BOOST_TEST(q.find("router.disaggregate_queue_ratio") != std::string::npos, q);
}

BOOST_AUTO_TEST_CASE(kv_store_settings_are_read_and_checked) {
  BOOST_TEST(!parse_topology(minimal, "t.toml").kv_store.enabled());
  const auto t = parse_topology(minimal + "[kv_store]\ncapacity = \"1GiB\"\ndisk = \"/tmp\"\ndisk_capacity = \"2GiB\"\n", "t.toml").kv_store;
  BOOST_TEST(t.capacity_bytes == std::size_t(1) << 30);
  BOOST_TEST(t.disk_dir == "/tmp");
  BOOST_TEST(t.disk_bytes == std::size_t(2) << 30);
  for (auto [text, key] : std::vector<std::pair<std::string, std::string>>{
           {"disk = \"/tmp\"", "kv_store.capacity: is required"},
           {"capacity = \"1GiB\"\ndisk = \"/tmp\"", "kv_store.disk and kv_store.disk_capacity go together"},
           {"capacity = \"1GiB\"\ndisk = \"/no/such/dir\"\ndisk_capacity = \"1GiB\"", "kv_store.disk: \"/no/such/dir\" is not a directory"},
           {"capacity = 0", "kv_store.capacity: must be positive"},
           {"capacity = \"1GiB\"\nfile = \"x\"", "kv_store.file: unknown key"}}) {
    const std::string e = error_of(minimal + "[kv_store]\n" + text + "\n");
    BOOST_TEST(e.find(key) != std::string::npos, text << " -> " << e);
  }
  const std::string off = error_of(minimal + "[scheduler]\nprefix_caching = false\n[kv_store]\ncapacity = \"1GiB\"\n");
  BOOST_TEST(off.find("needs scheduler.prefix_caching") != std::string::npos, off);
}

BOOST_AUTO_TEST_CASE(lora_settings_are_read_and_checked) {
  BOOST_TEST(!parse_topology(minimal, "t.toml").lora.enabled());
  const std::string one = "[[lora.adapters]]\nname = \"psalms\"\npath = \"/tmp\"\n";
  const auto t = parse_topology(minimal + "[lora]\nruntime_loading = true\n" + one, "t.toml").lora;
  BOOST_TEST(t.enabled());
  BOOST_TEST(t.runtime_loading);
  BOOST_TEST(t.max_adapters == 8);
  BOOST_TEST_REQUIRE(t.adapters.size() == 1u);
  BOOST_TEST(t.adapters[0].name == "psalms");
  for (auto [text, key] : std::vector<std::pair<std::string, std::string>>{
           {"[lora]\nrank = 4\n", "lora.rank: unknown key"},
           {"[lora]\nmax_adapters = 0\n", "lora.max_adapters: 0 is out of range"},
           {"[lora]\nmax_adapters = 1\n" + one + "[[lora.adapters]]\nname = \"proverbs\"\npath = \"/tmp\"\n",
            "lora.max_adapters: 1 is fewer than the 2 adapters"},
           {"[lora]\n" + one + one, "lora.adapters[1].name: \"psalms\" is named twice"},
           {"[lora]\n[[lora.adapters]]\nname = \"x\"\npath = \"/no/such/dir\"\n", "lora.adapters[0].path: \"/no/such/dir\" is not a directory"},
           {"[lora]\n[[lora.adapters]]\npath = \"/tmp\"\n", "lora.adapters[0].name: required key is missing"},
           {"[frontend]\nmodel_name = \"psalms\"\n[lora]\n" + one, "lora.adapters[0].name: \"psalms\" is the base model's served name"}}) {
    const std::string e = error_of(minimal + text);
    BOOST_TEST(e.find(key) != std::string::npos, text << " -> " << e);
  }
  // Where adapters cannot run, refused by name rather than served without them.
  const std::string split = "[[nodes]]\nname = \"head\"\n[[pools]]\nname = \"big\"\ntensor_parallel = 2\n[lora]\n";
  const std::string e = error_of("[model]\npath = \"m\"\n" + split);
  BOOST_TEST(e.find("lora: pool \"big\" sets tensor_parallel") != std::string::npos, e);
  const std::string sim = error_of("[model]\npreset = \"tiny\"\nbackend = \"sim\"\n[[nodes]]\nname = \"head\"\n[[pools]]\nname = \"main\"\n[lora]\n");
  BOOST_TEST(sim.find("lora: adapters run on the cpu backend only, not sim") != std::string::npos, sim);
}

BOOST_AUTO_TEST_CASE(request_trace_settings) {
  const auto fe = parse_topology(minimal + "[frontend]\nrequest_trace = \"/tmp/r.jsonl\"\nrequest_trace_max = \"1MiB\"\n", "t.toml").frontend;
  BOOST_TEST(fe.request_trace == "/tmp/r.jsonl");
  BOOST_TEST(fe.request_trace_max == std::size_t(1) << 20);
  const std::string e = error_of(minimal + "[frontend]\nrequest_trace_max = \"1MiB\"\n");
  BOOST_TEST(e.find("frontend.request_trace_max: needs frontend.request_trace") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(kv_transfer_settings_are_read_and_checked) {
  const auto d = parse_topology(minimal, "t.toml").kv_transfer;
  BOOST_TEST(std::string(kv::transfer::backend_name(d.backend)) == "auto");
  BOOST_TEST(d.timeout.count() == 10000);
  BOOST_TEST(d.hold.count() == 60000);
  BOOST_TEST(!d.retry_on_failure);
  BOOST_TEST(d.shared_memory);
  const auto t = parse_topology(minimal + "[kv_transfer]\nbackend = \"tcp\"\ntimeout = \"2s\"\nhold = \"5s\"\non_failure = \"retry\"\n"
                                          "shared_memory = false\n", "t.toml").kv_transfer;
  BOOST_TEST(std::string(kv::transfer::backend_name(t.backend)) == "tcp");
  BOOST_TEST(t.timeout.count() == 2000);
  BOOST_TEST(t.hold.count() == 5000);
  BOOST_TEST(t.retry_on_failure);
  BOOST_TEST(!t.shared_memory);
  for (auto [text, key] : std::vector<std::pair<std::string, std::string>>{
           {"backend = \"udp\"", "kv_transfer.backend"},
           {"on_failure = \"ignore\"", "kv_transfer.on_failure"},
           {"timeout = \"20s\"\nhold = \"10s\"", "kv_transfer.hold: must be longer than kv_transfer.timeout"},
           {"timeout = \"0s\"", "kv_transfer.timeout: must be positive"},
           {"hops = 3", "kv_transfer.hops: unknown key"}}) {
    const std::string e = error_of(minimal + "[kv_transfer]\n" + text + "\n");
    BOOST_TEST(e.find(key) != std::string::npos, text << " -> " << e);
  }
}

BOOST_AUTO_TEST_CASE(kv_memory_is_checked_against_the_machine_per_node) {
  const std::string two_nodes =
      "[model]\npath = \"m\"\n[[nodes]]\nname = \"a\"\naddress = \"127.0.0.1:0\"\n[[nodes]]\nname = \"b\"\naddress = \"127.0.0.1:0\"\n"
      "[[pools]]\nname = \"p\"\nreplicas = 3\nnodes = [\"a\", \"b\"]\n[scheduler]\nkv_memory = \"4GiB\"\n";
  const topology_config t = parse_topology(two_nodes, "t.toml");
  const std::size_t gib = std::size_t(1) << 30;
  check_kv_memory(t, "b", 10 * gib);  // one replica on b: 4 of 10 GiB
  try {
    check_kv_memory(t, "a", 8 * gib);  // two on a: 8 GiB is more than 90% of 8
    BOOST_FAIL("accepted");
  } catch (const troupe::input_error& e) {
    BOOST_TEST(std::string(e.what()) ==
               "t.toml:14: scheduler.kv_memory: 4.0 GiB per replica x 2 replica(s) on node \"a\" is 8.0 GiB; "
               "this machine has 8.0 GiB (at most 90% of it can be KV)");
  }
  BOOST_CHECK_THROW(check_kv_memory(t, "", 10 * gib), troupe::input_error);  // all three in one process
  topology_config sim = t;
  sim.model.backend = backend_kind::sim;
  check_kv_memory(sim, "", gib);  // the sim backend allocates no KV
}

// A node off loopback without TLS would listen unauthenticated: refused, naming the node.
BOOST_AUTO_TEST_CASE(nodes_off_loopback_need_tls) {
  const std::string off =
      "[model]\npath = \"m\"\n[[nodes]]\nname = \"head\"\naddress = \"10.1.2.3:7700\"\n"
      "[[pools]]\nname = \"p\"\nreplicas = 1\nnodes = [\"head\"]\n";
  try {
    parse_topology(off, "t.toml");
    BOOST_FAIL("accepted");
  } catch (const troupe::input_error& e) {
    BOOST_TEST(std::string(e.what()).find("t.toml:3: nodes.address: node \"head\" listens on 10.1.2.3, off loopback") == 0u, e.what());
  }
  const auto t = parse_topology(off + "[cluster]\ntls_certificate = \"c\"\ntls_key = \"k\"\ntls_ca = \"a\"\n", "t.toml");
  BOOST_TEST(t.cluster.tls());
  BOOST_CHECK_THROW(parse_topology(off + "[cluster]\ntls_certificate = \"c\"\n", "t.toml"), troupe::input_error);
  BOOST_CHECK_THROW(parse_topology(off + "[cluster]\ntoken = \"short\"\ntls_certificate = \"c\"\ntls_key = \"k\"\ntls_ca = \"a\"\n", "t.toml"),
                    troupe::input_error);
}

BOOST_AUTO_TEST_CASE(kv_aware_toml_has_caching_routing_and_events_on_loopback) {
  topology_config t = load_topology(std::string(TROUPE_SOURCE_DIR) + "/configs/kv-aware.toml");
  BOOST_TEST(t.pools.at(0).replicas == 2);
  BOOST_TEST(t.scheduler.prefix_caching);
  BOOST_TEST(t.router.policy == "kv_aware");
  BOOST_TEST(t.router.params.at("prefix_weight") == 1.0);
  BOOST_TEST(t.kv_events.endpoint == "tcp://127.0.0.1:5557");
  BOOST_TEST(t.kv_events.replay_endpoint == "tcp://127.0.0.1:5558");
  BOOST_TEST(t.kv_events.topic == "kv-events");
  // Token ids told any local subscriber every tenant's prompt (64 ids from one BlockStored event
  // gave a victim's prompt back through /detokenize): hashes alone by default, ids only with CURVE.
  BOOST_TEST(!t.kv_events.token_ids);
  BOOST_TEST(error_of(minimal + "\n[kv_events]\nendpoint = \"tcp://127.0.0.1:5557\"\ntoken_ids = true\n").find(
                 "kv_events.token_ids: publishing token ids needs CURVE") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(prefix_caching_tenants_public_prompts_and_events_are_checked) {
  topology_config t = parse_topology(minimal, "t.toml");
  BOOST_TEST(t.scheduler.prefix_caching);  // on by default
  BOOST_TEST(!t.kv_events.enabled());
  t = parse_topology(minimal + "\n[scheduler]\nprefix_caching = false\n", "t.toml");
  BOOST_TEST(!t.scheduler.prefix_caching);
  BOOST_TEST(error_of(minimal + "\n[scheduler]\nprefix_caching = 1\n") ==
             "t.toml:12: scheduler.prefix_caching: expected true or false, got an integer");
  t = parse_topology(minimal + R"(
[frontend]
api_keys = ["plain", { key = "k-acme", tenant = "acme" }]
public_prompts = [{ name = "bot", text = "You are a helpful assistant." }]
)", "t.toml");
  BOOST_TEST(t.frontend.api_keys == (std::vector<std::string>{"plain", "k-acme"}));
  BOOST_TEST(t.frontend.api_key_tenants == (std::vector<std::string>{"", "acme"}));
  BOOST_TEST_REQUIRE(t.frontend.public_prompts.size() == 1u);
  BOOST_TEST(t.frontend.public_prompts[0].text == "You are a helpful assistant.");
  BOOST_TEST(error_of(minimal + "\n[frontend]\napi_keys = [{ key = \"k\", tenant = \"t\", role = \"x\" }]\n").find(
                 "frontend.api_keys.role: unknown key") != std::string::npos);
  BOOST_TEST(error_of(minimal + "\n[kv_events]\nendpoint = \"tcp://0.0.0.0:5557\"\n").find("is not a loopback address") !=
             std::string::npos);
  BOOST_TEST(error_of(minimal + "\n[kv_events]\nendpoint = \"udp://127.0.0.1:5557\"\n").find("expected \"tcp://127.0.0.1:PORT\"") !=
             std::string::npos);
  BOOST_TEST(error_of(minimal + "\n[kv_events]\nendpoint = \"tcp://127.0.0.1:5557\"\nreplay_endpoint = \"tcp://127.0.0.1:5557\"\n")
                 .find("must differ") != std::string::npos);
  BOOST_TEST(error_of(minimal + "\n[router]\npolicy = \"kv_aware\"\n[router.params]\nprefix = 1\n").find(
                 "takes no parameter \"prefix\"") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_admin_endpoint_binds_loopback_unless_it_has_curve_keys) {
  topology_config t = load_topology(std::string(TROUPE_SOURCE_DIR) + "/configs/admin.toml");
  BOOST_TEST(t.admin.endpoint == "tcp://127.0.0.1:7600");
  BOOST_TEST(t.admin.events == "tcp://127.0.0.1:7601");
  BOOST_TEST(!t.admin.curve());
  BOOST_TEST(!parse_topology(minimal, "t.toml").admin.enabled());
  const std::string key(40, 'a');
  t = parse_topology(minimal + "\n[admin]\nendpoint = \"tcp://0.0.0.0:7600\"\nsecret_key = \"s.key\"\nauthorized_keys = [\"" + key + "\"]\n",
                     "t.toml");
  BOOST_TEST(t.admin.curve());
  BOOST_TEST(t.admin.authorized_keys == std::vector<std::string>{key});
  BOOST_TEST(error_of(minimal + "\n[admin]\nendpoint = \"tcp://0.0.0.0:7600\"\n").find(
                 "off loopback the admin endpoint needs CURVE keys") != std::string::npos);
  BOOST_TEST(error_of(minimal + "\n[admin]\nendpoint = \"tcp://127.0.0.1:7600\"\nevents = \"tcp://10.0.0.1:7601\"\n").find(
                 "admin.events: \"10.0.0.1\" is not a loopback address") != std::string::npos);
  BOOST_TEST(error_of(minimal + "\n[admin]\nendpoint = \"tcp://127.0.0.1:7600\"\nsecret_key = \"s.key\"\n").find(
                 "CURVE needs both secret_key") != std::string::npos);
  BOOST_TEST(error_of(minimal + "\n[admin]\nendpoint = \"tcp://127.0.0.1:7600\"\nsecret_key = \"s\"\nauthorized_keys = [\"short\"]\n")
                 .find("expected Z85 public keys of 40 characters") != std::string::npos);
  BOOST_TEST(error_of(minimal + "\n[admin]\nendpoint = \"tcp://127.0.0.1:7600\"\nevents = \"tcp://127.0.0.1:7600\"\n").find(
                 "must differ from admin.endpoint") != std::string::npos);
  BOOST_TEST(error_of(minimal + "\n[admin]\nendpoint = \"tcp://127.0.0.1:7600\"\nport = 3\n").find("admin.port: unknown key") !=
             std::string::npos);
  BOOST_TEST(error_of(minimal + "\n[admin]\nendpoint = \"127.0.0.1:7600\"\n").find("expected \"tcp://127.0.0.1:PORT\"") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(admission_has_a_queue_bound_priority_shares_and_tenant_limits) {
  topology_config t = parse_topology(minimal + R"(
[admission]
max_queued = 32
priority_step = 0.5
[admission.tenants.default]
requests_per_second = 5
[admission.tenants.acme]
requests_per_second = 50
burst = 100
tokens_per_minute = 200000
)", "t.toml");
  const auto& c = t.admission.cfg;
  BOOST_TEST(c.max_queued == 32);
  BOOST_TEST(c.priority_step == 0.5);
  BOOST_TEST(c.tenants.at("default").requests_per_second == 5.0);
  BOOST_TEST(c.tenants.at("acme").burst_requests == 100.0);
  BOOST_TEST(c.tenants.at("acme").tokens_per_minute == 200000.0);
  BOOST_TEST(!parse_topology(minimal, "t.toml").admission.cfg.enabled());
  BOOST_TEST(error_of(minimal + "\n[admission]\nmax_queue = 3\n").find("admission.max_queue: unknown key") != std::string::npos);
  BOOST_TEST(error_of(minimal + "\n[admission]\nmax_queued = -1\n").find("out of range") != std::string::npos);
  BOOST_TEST(error_of(minimal + "\n[admission]\nmin_share = 0\n").find("admission.min_share: must be in (0, 1]") != std::string::npos);
  BOOST_TEST(error_of(minimal + "\n[admission.tenants.x]\nrps = 3\n").find("admission.tenants.x.rps: unknown key") != std::string::npos);
  BOOST_TEST(error_of(minimal + "\n[admission.tenants.x]\nrequests_per_second = -3\n").find("must not be negative") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(pools_scale_between_bounds_and_the_autoscaler_has_hysteresis) {
  const std::string pool = "\n[[pools]]\nname = \"p\"\nreplicas = 2\nmin_replicas = 1\nmax_replicas = 4\n";
  const std::string head = "[model]\npath = \"m\"\n[[nodes]]\nname = \"head\"\naddress = \"127.0.0.1:0\"\n";
  topology_config t = parse_topology(head + pool, "t.toml");
  BOOST_TEST(t.pools[0].min_replicas == 1);
  BOOST_TEST(t.pools[0].max_replicas == 4);
  const auto placed = place_replicas(t);
  BOOST_TEST_REQUIRE(placed.size() == 4u);  // every slot is started; the ones past `replicas` wait warm
  BOOST_TEST(placed[1].active);
  BOOST_TEST(!placed[2].active);
  BOOST_TEST(placed[3].name == "p-3");
  BOOST_TEST(placed[3].started);
  // warm_replicas = 1: one slot past `replicas` started and idle, the last one stopped.
  const auto some = place_replicas(parse_topology(head + pool + "warm_replicas = 1\n", "t.toml"));
  BOOST_TEST(some[2].started);
  BOOST_TEST(!some[3].started);
  BOOST_TEST(!some[3].active);
  BOOST_TEST(error_of(head + pool + "warm_replicas = 3\n").find("pools.warm_replicas: 3 is more than the slots beyond replicas") !=
             std::string::npos);
  BOOST_TEST(error_of(head + "\n[[pools]]\nname = \"p\"\nreplicas = 3\nmax_replicas = 2\n").find("is below replicas") != std::string::npos);
  BOOST_TEST(error_of(head + "\n[[pools]]\nname = \"p\"\nreplicas = 1\nmin_replicas = 2\n").find("is above replicas") != std::string::npos);
  t = parse_topology(head + pool + "[autoscaler]\nqueue_up = 8\nup_for = \"3s\"\nttft_slo = \"500ms\"\nitl_slo = \"40ms\"\nbusy_down = 0.5\n",
                     "t.toml");
  BOOST_TEST(t.autoscaler.cfg.itl_slo_s == 0.04);
  BOOST_TEST(t.autoscaler.cfg.busy_down == 0.5);
  BOOST_TEST(t.autoscaler.cfg.enabled);
  BOOST_TEST(t.autoscaler.cfg.queue_up == 8.0);
  BOOST_TEST(t.autoscaler.cfg.up_for.count() == 3000);
  BOOST_TEST(t.autoscaler.cfg.ttft_slo_s == 0.5);
  BOOST_TEST(!parse_topology(head + pool, "t.toml").autoscaler.cfg.enabled);
  BOOST_TEST(error_of(head + pool + "[autoscaler]\nqueue_up = 1\nqueue_down = 2\n").find("must be below queue_up") != std::string::npos);
  BOOST_TEST(error_of(head + pool + "[autoscaler]\nscale = 1\n").find("autoscaler.scale: unknown key") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(rank_nodes_place_a_groups_ranks_on_nodes) {
  const std::string two = R"(
[model]
path = "models/small"

[[nodes]]
name = "head"

[[nodes]]
name = "r"
address = "127.0.0.1:0"

[[pools]]
name = "main"
nodes = ["head"]
tensor_parallel = 2
)";
  topology_config t = parse_topology(two + "rank_nodes = [\"head\", \"r\"]\n", "t.toml");
  BOOST_TEST(place_replicas(t)[0].rank_nodes == (std::vector<std::string>{"head", "r"}));
  BOOST_TEST(place_replicas(parse_topology(two, "t.toml"))[0].rank_nodes.empty());
  std::string e = error_of(two + "rank_nodes = [\"head\"]\n");
  BOOST_TEST(e.find("pools.rank_nodes: pool \"main\" has 2 ranks per replica") != std::string::npos, e);
  e = error_of(two + "rank_nodes = [\"head\", \"x\"]\n");
  BOOST_TEST(e.find("places a rank on unknown node \"x\"") != std::string::npos, e);
  e = error_of(two + "rank_nodes = \"r\"\n");
  BOOST_TEST(e.find("pools.rank_nodes: expected an array of node names") != std::string::npos, e);
  // Replicas on a node that is not a head: their supervisor has no directory of node agents.
  std::string on_node = two;
  on_node.replace(on_node.find("nodes = [\"head\"]"), 16, "nodes = [\"r\"]");
  e = error_of(on_node + "rank_nodes = [\"r\", \"r\"]\n");
  BOOST_TEST(e.find("which is not a head") != std::string::npos, e);
  // Gloo's TCP has no authentication: ranks only on loopback nodes.
  std::string far = two;
  far.replace(far.find("127.0.0.1:0"), 11, "10.1.2.3:7000");
  e = error_of(far + "rank_nodes = [\"head\", \"r\"]\n");
  BOOST_TEST(e.find("off loopback") != std::string::npos, e);
  BOOST_TEST(e.find("rank_nodes") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(tool_call_parser_is_one_of_the_formats) {
  auto with = [](const std::string& v) {
    std::string t = minimal;
    t.replace(t.find("[model]\n") + 8, 0, "tool_call_parser = \"" + v + "\"\n");
    return t;
  };
  BOOST_TEST(parse_topology(with("llama3_json"), "t.toml").model.tool_call_parser == "llama3_json");
  BOOST_TEST(parse_topology(minimal, "t.toml").model.tool_call_parser.empty());  // the template's
  BOOST_TEST(parse_topology(with("granite"), "t.toml").model.tool_call_parser == "granite");
  const std::string e = error_of(with("harmonic"));
  BOOST_TEST(e.find("model.tool_call_parser: \"harmonic\" is not one of hermes, llama3_json, mistral, granite, deepseek_v3, pythonic, none") != std::string::npos, e);
  // What forced choices write is not a model's own format.
  BOOST_TEST(error_of(with("json_array")).find("\"json_array\" is not one of") != std::string::npos);
}

// Several models (issue 29): [models.NAME] beside [model], a pool naming its model, each model's
// cache key from its files and revision, and what cannot be is refused by name.
BOOST_AUTO_TEST_CASE(several_models_are_read_keyed_apart_and_checked) {
  const std::string two = R"(
[model]
path = "models/a"
revision = "r1"

[models.draft]
path = "models/b"
served_names = ["kjv-draft", "draft"]
revision = "2026-11"

[[nodes]]
name = "head"

[[pools]]
name = "main"

[[pools]]
name = "small"
model = "draft"
replicas = 2
)";
  const auto t = parse_topology(two, "t.toml");
  BOOST_TEST_REQUIRE(t.more_models.size() == 1u);
  BOOST_TEST(t.more_models[0].name == "draft");
  BOOST_TEST(t.more_models[0].served_names == (std::vector<std::string>{"kjv-draft", "draft"}));
  BOOST_TEST(t.model_of(t.pools[1]).path == "models/b");
  BOOST_TEST(t.model_index("draft") == 1u);
  // A fallback named by a served name is that model's table name; it says when, too.
  const auto fb = parse_topology(std::string(two).replace(two.find("revision = \"r1\""), 15,
                                                          "fallback = \"kjv-draft\"\nfallback_queue_wait = \"250ms\"\nfallback_min_priority = 1"),
                                 "t.toml");
  BOOST_TEST(fb.model.fallback == "draft");
  BOOST_TEST(fb.model.fallback_queue_wait.count() == 250);
  BOOST_TEST(fb.model.fallback_min_priority == 1);
  const auto placed = place_replicas(t);
  BOOST_TEST(placed[0].model == "");
  BOOST_TEST(placed[2].model == "draft");
  // The key that roots each model's block hashes: its files, and its revision.
  const auto a = engine_config_of(t, ""), b = engine_config_of(t, "draft");
  BOOST_TEST(a.served_model == "");
  BOOST_TEST(b.served_model == "draft");
  BOOST_TEST(a.model_key != b.model_key);
  BOOST_TEST(b.model_key.ends_with("@2026-11"));
  auto other_revision = t;
  other_revision.more_models[0].revision = "2026-12";
  other_revision.more_models[0].path = "models/a";
  other_revision.model.revision = "";
  BOOST_TEST(engine_config_of(other_revision, "draft").model_key != engine_config_of(other_revision, "").model_key);

  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = two;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  const std::vector<std::pair<std::string, std::string>> refused = {
      {replace("model = \"draft\"", "model = \"drat\""), "pools.model: pool \"small\" serves \"drat\", which no [models.drat]"},
      {replace("model = \"draft\"", "role = \"both\""), "models.draft: no pool serves it"},
      {replace("served_names = [\"kjv-draft\", \"draft\"]", "served_names = [\"draft\", \"draft\"]"), "\"draft\" is named twice"},
      {replace("revision = \"2026-11\"", "backend = \"sim\""), "models.draft.backend: \"sim\" differs from [model]'s \"cpu\""},
      {replace("revision = \"2026-11\"", "rank = 4"), "models.draft.rank: unknown key"},
      {two + "[frontend]\nmodel_name = \"draft\"\n", "[models.draft] served_names: \"draft\" is already another model's name"},
      {two + "[lora]\nmax_adapters = 2\n", "adapters are served with [model] alone"},
      {replace("name = \"main\"\n", "name = \"main\"\nmodel = \"draft\"\n"), "no pool serves [model]"},
      {replace("revision = \"r1\"", "fallback = \"kjv\"\nfallback_queue_wait = \"1s\""), "model.fallback: \"kjv\" is no [models.NAME]"},
      {replace("revision = \"r1\"", "fallback = \"draft\""), "model.fallback: says where, but not when"},
      {replace("revision = \"r1\"", "fallback_queue_wait = \"1s\""), "model.fallback: fallback_queue_wait and fallback_min_priority need"},
      {replace("revision = \"2026-11\"", "fallback = \"draft\"\nfallback_queue_wait = \"1s\""), "a model cannot be its own fallback"},
  };
  for (const auto& [text, want] : refused) {
    const std::string e = error_of(text);
    BOOST_TEST(e.find(want) != std::string::npos, e << " (wanted: " << want << ")");
  }
}

BOOST_AUTO_TEST_CASE(frontend_slo_bounds_are_positive_durations) {
  const auto t = parse_topology(minimal + "[frontend]\nttft_slo = \"2s\"\nitl_slo = \"100ms\"\n", "t.toml");
  BOOST_TEST(t.frontend.ttft_slo.count() == 2000);
  BOOST_TEST(t.frontend.itl_slo.count() == 100);
  BOOST_TEST(parse_topology(minimal, "t.toml").frontend.ttft_slo.count() == 0);  // not set: no SLO series
  BOOST_TEST(error_of(minimal + "[frontend]\nttft_slo = \"0s\"\n").find("frontend.ttft_slo: must be positive") != std::string::npos);
  BOOST_TEST(error_of(minimal + "[frontend]\nitl_slo = \"fast\"\n").find("frontend.itl_slo") != std::string::npos);
}
