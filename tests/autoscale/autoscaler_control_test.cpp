// The console's `autoscaler ...` words parsed into a command once, the settings applied all or
// none, and the autoscaler's state shaped for `autoscaler status`; and each pool's signals from
// the replicas' states, loads and latencies, as the autoscaler receives them.
#define BOOST_TEST_MODULE autoscaler_control
#include <boost/test/unit_test.hpp>

#include "runtime/autoscale/autoscaler_control.h"
#include "runtime/autoscale/signals.h"

using namespace troupe;
using namespace troupe::autoscale;

namespace {

command parsed(const std::vector<std::string>& args) {
  auto r = parse_command(args);
  BOOST_TEST_REQUIRE(std::holds_alternative<command>(r), (std::holds_alternative<std::string>(r) ? std::get<std::string>(r) : ""));
  return std::get<command>(r);
}

std::string refused(const std::vector<std::string>& args) {
  auto r = parse_command(args);
  BOOST_TEST_REQUIRE(std::holds_alternative<std::string>(r));
  return std::get<std::string>(r);
}

admin::replica_status replica(std::uint32_t id, const std::string& pool, bool draining = false, bool parked = false) {
  admin::replica_status r;
  r.id = id;
  r.pool = pool;
  r.registered = r.alive = r.has_load = true;
  r.draining = draining;
  r.parked = parked;
  return r;
}

}  // namespace

BOOST_AUTO_TEST_CASE(each_console_form_parses_to_its_command) {
  BOOST_TEST((parsed({}).what == command::verb::status));
  BOOST_TEST((parsed({"status"}).what == command::verb::status));
  BOOST_TEST((parsed({"pause"}).what == command::verb::pause));
  BOOST_TEST((parsed({"resume"}).what == command::verb::resume));
  const command pin = parsed({"pin", "decode"});
  BOOST_TEST((pin.what == command::verb::pin));
  BOOST_TEST(pin.pool == "decode");
  BOOST_TEST((parsed({"unpin", "decode"}).what == command::verb::unpin));
  const command set = parsed({"set", "queue_up=6", "kv_down=0.2"});
  BOOST_TEST((set.what == command::verb::set));
  BOOST_TEST_REQUIRE(set.settings.size() == 2u);
  BOOST_TEST(set.settings[0].first == "queue_up");
  BOOST_TEST(set.settings[0].second == 6.0);
  BOOST_TEST(set.settings[1].second == 0.2);
}

BOOST_AUTO_TEST_CASE(a_malformed_command_is_refused_with_what_was_expected) {
  BOOST_TEST(refused({"scale"}).find("expected status, pause, resume") != std::string::npos);
  BOOST_TEST(refused({"pin"}).find("pin POOL") != std::string::npos);  // a pool is missing
  BOOST_TEST(refused({"pause", "now"}).find("expected") != std::string::npos);
  BOOST_TEST(refused({"set"}).find("set KEY=VALUE") != std::string::npos);
  BOOST_TEST(refused({"set", "queue_up"}).find("queue_up") != std::string::npos);  // not KEY=VALUE
}

BOOST_AUTO_TEST_CASE(settings_apply_all_or_none) {
  autoscale_config cfg;
  BOOST_TEST(!apply_settings(cfg, {{"queue_up", 8}, {"ttft_slo", 1.5}, {"busy_down", 0.5}}));
  BOOST_TEST(cfg.queue_up == 8.0);
  BOOST_TEST(cfg.ttft_slo_s == 1.5);
  BOOST_TEST(cfg.busy_down == 0.5);

  const autoscale_config before = cfg;
  auto unknown = apply_settings(cfg, {{"queue_up", 9}, {"speed", 2}});
  BOOST_TEST_REQUIRE(unknown.has_value());
  BOOST_TEST(unknown->find("'speed'") != std::string::npos);
  BOOST_TEST(cfg.queue_up == before.queue_up);  // the good key before it was not applied

  auto crossed = apply_settings(cfg, {{"queue_down", 9}});
  BOOST_TEST_REQUIRE(crossed.has_value());
  BOOST_TEST(crossed->find("queue_down must stay below queue_up") != std::string::npos);
  BOOST_TEST(cfg.queue_down == before.queue_down);

  auto negative = apply_settings(cfg, {{"kv_up", -1}});
  BOOST_TEST_REQUIRE(negative.has_value());
  BOOST_TEST(negative->find("kv_up must not be negative") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_view_shows_state_and_policy) {
  view v;
  v.paused = true;
  v.pinned = {"prefill"};
  v.last = {{"decode", "1 -> 2: queue 5.0 per replica"}};
  v.cfg.queue_up = 7;
  v.cfg.cooldown = std::chrono::milliseconds(2500);
  const auto j = view_json(v);
  BOOST_TEST(j["paused"].get<bool>());
  BOOST_TEST(j["pinned"][0].get<std::string>() == "prefill");
  BOOST_TEST(j["last_decisions"]["decode"].get<std::string>() == "1 -> 2: queue 5.0 per replica");
  BOOST_TEST(j["policy"]["queue_up"].get<double>() == 7.0);
  BOOST_TEST(j["policy"]["cooldown_ms"].get<long>() == 2500);
}

BOOST_AUTO_TEST_CASE(signals_sum_the_running_replicas_of_each_pool) {
  std::vector<admin::replica_status> rs = {replica(0, "decode"), replica(1, "decode"), replica(2, "decode", true),
                                           replica(3, "decode", false, true), replica(4, "prefill")};
  rs[0].load = {.running = 4, .waiting = 3, .used_blocks = 50, .total_blocks = 100};
  rs[1].load = {.running = 2, .waiting = 1, .used_blocks = 10, .total_blocks = 100};
  rs[2].load = {.running = 1, .waiting = 9, .used_blocks = 90, .total_blocks = 100};  // draining: serving, not a signal
  rs[4].alive = false;                                                                 // dead: neither
  const std::vector<admin::pool_bounds> pools = {{"decode", 1, 4, 8, 1}, {"prefill", 1, 2, 4, 0}};
  const auto s = signals_of(rs, pools, {}, std::chrono::seconds(5));
  BOOST_TEST_REQUIRE(s.size() == 2u);
  const pool_signals& d = s.at("decode");
  BOOST_TEST(d.serving == 3);
  BOOST_TEST(d.warm == 1);
  BOOST_TEST(d.waiting == 4.0);
  BOOST_TEST(d.running == 6.0);
  BOOST_TEST(d.kv_usage == 0.3);
  BOOST_TEST(d.max == 4);
  BOOST_TEST(d.slots == 8);
  BOOST_TEST(s.at("prefill").serving == 0);
  BOOST_TEST(s.at("prefill").kv_usage == 0.0);
}

BOOST_AUTO_TEST_CASE(a_latency_older_than_fresh_is_no_signal) {
  const std::vector<admin::pool_bounds> pools = {{"decode", 1, 4, 8, 0}, {"prefill", 1, 2, 4, 0}};
  const std::vector<admission::pool_latency> lat = {{"decode", 2.0, 0.1, 1.0, 30.0}, {"prefill", 3.0, 0, -1, -1}, {"gone", 9, 9, 0, 0}};
  const auto s = signals_of({}, pools, lat, std::chrono::seconds(5));
  BOOST_TEST(s.size() == 2u);  // a pool the topology does not have is not invented
  BOOST_TEST(s.at("decode").ttft_s == 2.0);
  BOOST_TEST(s.at("decode").itl_s == 0.0);    // 30 s old
  BOOST_TEST(s.at("prefill").ttft_s == 0.0);  // never measured
}
