// The admin protocol's messages: requests and replies round-trip; what another msgpack library
// (Python's, through /usr/bin/python3) writes decodes and what this one writes is read there;
// every malformed message is refused naming what is wrong. And the status shapes: replica
// states and the JSON fields the console and docs/admin.md promise. And a swap's plan: its
// arguments, and which replica it replaces next, how.
#define BOOST_TEST_MODULE admin_message
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "runtime/admin/admin_message.h"
#include "runtime/admin/cluster_status.h"
#include "runtime/admin/quality_gate.h"
#include "runtime/admin/rollout.h"
#include "runtime/admin/rollout_record.h"
#include "runtime/admin/swap_plan.h"

using namespace troupe;
using namespace troupe::admin;

namespace {

std::string hex(const std::string& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) {
    s += d[c >> 4];
    s += d[c & 15];
  }
  return s;
}

std::string python(const std::string& code) {
  const std::string path = std::string(TROUPE_BINARY_DIR) + "/admin_message_test.py";
  std::ofstream(path) << code;
  std::string out;
  if (std::FILE* p = ::popen(("/usr/bin/python3 " + path).c_str(), "r")) {
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    ::pclose(p);
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string refusal(const std::string& bytes) {
  try {
    decode_request(bytes);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(requests_and_replies_round_trip) {
  const request r{42, "drain", {"decode-0"}};
  const request back = decode_request(encode(r));
  BOOST_TEST(back.id == 42u);
  BOOST_TEST(back.cmd == "drain");
  BOOST_TEST(back.args == std::vector<std::string>{"decode-0"});
  reply ok{7, true, {{"replicas", {{{"name", "a"}, {"kv_usage", 0.5}, {"running", -1}}}}}, ""};
  const reply ok_back = decode_reply(encode(ok));
  BOOST_TEST(ok_back.ok);
  BOOST_TEST(ok_back.id == 7u);
  BOOST_TEST(ok_back.result == ok.result);
  const reply err_back = decode_reply(encode(reply{8, false, nullptr, "no replica named 'x'"}));
  BOOST_TEST(!err_back.ok);
  BOOST_TEST(err_back.error == "no replica named 'x'");
  const auto e = decode_event(encode_event(3, 1.5, "replica_state", {{"replica", "a"}, {"to", "dead"}}));
  BOOST_TEST(e["seq"] == 3);
  BOOST_TEST(e["kind"] == "replica_state");
  BOOST_TEST(e["to"] == "dead");
}

BOOST_AUTO_TEST_CASE(another_msgpack_library_reads_and_writes_the_same_messages) {
  // Python's msgpack writes a request; this decoder reads it.
  const std::string written = python(
      "import msgpack\n"
      "print(msgpack.packb({'v': 1, 'id': 9, 'cmd': 'kv', 'args': ['decode-1']}).hex())\n");
  BOOST_TEST_REQUIRE(!written.empty(), "python3-msgpack missing?");
  std::string bytes;
  for (std::size_t i = 0; i + 1 < written.size(); i += 2) bytes += char(std::stoi(written.substr(i, 2), nullptr, 16));
  const request r = decode_request(bytes);
  BOOST_TEST(r.id == 9u);
  BOOST_TEST(r.cmd == "kv");
  BOOST_TEST(r.args == std::vector<std::string>{"decode-1"});
  // This encoder writes a reply; Python reads it.
  const std::string rep = encode(reply{5, true, {{"state", "drained"}, {"safe_to_remove", true}, {"usage", 0.25}}, ""});
  const std::string read = python("import msgpack\nm = msgpack.unpackb(bytes.fromhex('" + hex(rep) +
                                  "'))\nprint(m['v'], m['id'], m['ok'], m['result']['state'], m['result']['safe_to_remove'], m['result']['usage'])\n");
  BOOST_TEST(read == "1 5 True drained True 0.25");
}

BOOST_AUTO_TEST_CASE(malformed_requests_are_refused_naming_what_is_wrong) {
  BOOST_TEST(refusal("") .find("empty message") != std::string::npos);
  BOOST_TEST(refusal("\xc1").find("not valid msgpack") != std::string::npos);
  BOOST_TEST(refusal(std::string("\x82\xa1v\x01", 4)).find("truncated") != std::string::npos);
  BOOST_TEST(refusal(to_msgpack({{"v", 1}, {"cmd", "status"}}) + "x").find("1 bytes after the message") != std::string::npos);
  BOOST_TEST(refusal(to_msgpack("status")).find("not a msgpack map") != std::string::npos);
  BOOST_TEST(refusal(to_msgpack({{"cmd", "status"}})).find("no protocol version") != std::string::npos);
  BOOST_TEST(refusal(to_msgpack({{"v", 2}, {"cmd", "status"}})).find("protocol version 2; this server speaks 1") != std::string::npos);
  BOOST_TEST(refusal(to_msgpack({{"v", 1}, {"cmd", 3}})).find("no command") != std::string::npos);
  BOOST_TEST(refusal(to_msgpack({{"v", 1}, {"cmd", "x"}, {"id", -1}})).find("\"id\" must be an unsigned integer") != std::string::npos);
  BOOST_TEST(refusal(to_msgpack({{"v", 1}, {"cmd", "x"}, {"args", {1}}})).find("array of strings") != std::string::npos);
  BOOST_TEST(refusal(to_msgpack({{"v", 1}, {"cmd", "x"}, {"args", std::vector<std::string>(65, "a")}})).find("65 arguments; at most 64") !=
             std::string::npos);
  BOOST_TEST(refusal(to_msgpack({{"v", 1}, {"cmd", std::string(70000, 'x')}})).find("exceeds the limit of 65536") != std::string::npos);
  // A map claiming 2^32-1 entries in 6 bytes is refused before anything is allocated for it.
  BOOST_TEST(!refusal(std::string("\xdf\xff\xff\xff\xff\x01", 6)).empty());
  // Nesting past the limit.
  std::string deep(40, '\x91');
  deep += '\x01';
  BOOST_TEST(!refusal(deep).empty());
}

BOOST_AUTO_TEST_CASE(replica_states_and_status_fields) {
  replica_status r;
  r.name = "decode-0";
  r.pool = "decode";
  r.role = "both";
  r.node = "node-a";
  BOOST_TEST(state_of(r) == "starting");
  r.registered = true;
  BOOST_TEST(state_of(r) == "dead");
  r.alive = true;
  BOOST_TEST(state_of(r) == "running");
  r.draining = true;
  r.load.running = 1;
  r.has_load = true;
  BOOST_TEST(state_of(r) == "draining");
  r.load.running = 0;
  r.load.handoffs_held = 1;
  BOOST_TEST(state_of(r) == "draining");  // still holds KV someone will pull
  r.load.handoffs_held = 0;
  BOOST_TEST(state_of(r) == "drained");
  r.load.used_blocks = 3;
  r.load.total_blocks = 12;
  const auto s = status_json({r}, {"node-a"});
  for (const char* k : {"name", "pool", "role", "node", "state", "generation", "running", "waiting", "kv_usage", "tokens_per_s"})
    BOOST_TEST(s["replicas"][0].contains(k), k);
  BOOST_TEST(s["replicas"][0]["kv_usage"] == 0.25);
  BOOST_TEST(s["nodes"][0]["replicas_alive"] == 1);
  r.load.prefix_queries = 8;
  r.load.prefix_hits = 2;
  BOOST_TEST(kv_json({r})["replicas"][0]["prefix_hit_rate"] == 0.25);
  // A stopped slot, and one asked to start: counted per pool beside the warm target.
  replica_status stopped = r, starting = r;
  stopped.name = "decode-1";
  stopped.stopped = true;
  BOOST_TEST(state_of(stopped) == "stopped");
  starting.name = "decode-2";
  starting.registered = false;
  starting.starting = true;
  BOOST_TEST(state_of(starting) == "starting");
  r.draining = false;
  const auto p = status_json({r, stopped, starting}, {"node-a"}, {{"decode", 1, 3, 8, 0}})["pools"][0];
  BOOST_TEST(p["replicas"] == 1);
  BOOST_TEST(p["stopped"] == 1);
  BOOST_TEST(p["warm"] == 0);
  BOOST_TEST(p["warm_target"] == 0);
  BOOST_TEST(p["slots"] == 8);
  BOOST_TEST(find_replica({r}, "decode-0").value() == 0u);
  BOOST_TEST(!find_replica({r}, "decode-9").has_value());
}

BOOST_AUTO_TEST_CASE(key_number_settings_parse_or_name_the_bad_one) {
  std::vector<std::pair<std::string, double>> out;
  BOOST_TEST(!parse_key_numbers({"router", "kv_aware", "prefix_weight=2", "token_weight=0.004"}, 2, out).has_value());
  BOOST_TEST_REQUIRE(out.size() == 2u);
  BOOST_TEST(out[0].first == "prefix_weight");
  BOOST_TEST(out[1].second == 0.004);
  for (const std::string bad : {"=1", "k", "k=", "k=x", "k=1x"}) {
    std::vector<std::pair<std::string, double>> none;
    const auto err = parse_key_numbers({bad}, 0, none);
    BOOST_TEST_REQUIRE(err.has_value(), bad);
    BOOST_TEST(*err == "expected KEY=NUMBER, got '" + bad + "'");
  }
  // NaN, infinities and negative weights were accepted; a key given twice too.
  for (const std::string bad : {"k=nan", "k=inf", "k=-1"}) {
    std::vector<std::pair<std::string, double>> none;
    const auto err = parse_key_numbers({bad}, 0, none);
    BOOST_TEST_REQUIRE(err.has_value(), bad);
    BOOST_TEST(err->find("a weight must be a finite number >= 0") != std::string::npos, *err);
  }
  std::vector<std::pair<std::string, double>> twice;
  BOOST_TEST(parse_key_numbers({"k=1", "k=2"}, 0, twice).value_or("") == "'k' is given twice");
}

BOOST_AUTO_TEST_CASE(a_map_key_given_twice_is_refused) {
  // {"v": 1, "cmd": "status", "cmd": "kill"}: which command was meant is a guess.
  std::string m = "\x83";
  m += "\xa1v\x01";
  m += "\xa3" "cmd" "\xa6" "status";
  m += "\xa3" "cmd" "\xa4" "kill";
  BOOST_TEST(refusal(m).find("the map key \"cmd\" appears twice") != std::string::npos, refusal(m));
}

namespace {

replica_status member(const std::string& name, const std::string& pool, const std::string& state, const std::string& key) {
  replica_status r;
  r.name = name;
  r.pool = pool;
  r.registered = state != "stopped";
  r.alive = state == "running" || state == "warm";
  r.parked = state == "warm";
  r.stopped = state == "stopped";
  r.has_load = r.alive && !key.empty();
  r.load.model_key = key;
  return r;
}

}  // namespace

BOOST_AUTO_TEST_CASE(swap_arguments_are_parsed_or_refused_by_name) {
  auto ok = parse_swap({"decode", "--model", "/m/r2", "--revision", "r2"});
  BOOST_TEST_REQUIRE(std::holds_alternative<swap_request>(ok));
  BOOST_TEST(std::get<swap_request>(ok).pool == "decode");
  BOOST_TEST(std::get<swap_request>(ok).dir == "/m/r2");
  BOOST_TEST(std::get<swap_request>(ok).revision == "r2");
  auto flags_first = parse_swap({"decode", "--revision", "x", "--model", "/m"});
  BOOST_TEST(std::get<swap_request>(flags_first).dir == "/m");
  auto refused = [](std::vector<std::string> a) {
    auto r = parse_swap(a);
    return std::holds_alternative<std::string>(r) ? std::get<std::string>(r) : std::string();
  };
  BOOST_TEST(refused({}).find("expected POOL") != std::string::npos);
  BOOST_TEST(refused({"decode"}).find("--model DIR is required") != std::string::npos);
  BOOST_TEST(refused({"decode", "--model"}).find("--model needs a value") != std::string::npos);
  BOOST_TEST(refused({"decode", "--weights", "x"}).find("unknown argument '--weights'") != std::string::npos);
  BOOST_TEST(refused({"decode", "--model", "a", "--model", "b"}).find("given twice") != std::string::npos);
  BOOST_TEST(refused({"--model", "a"}).find("expected POOL") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_swap_replaces_through_a_spare_slot_first_then_in_place_then_warm_ones) {
  using kind = swap_step::kind;
  // A spare (stopped) slot: the new replica serves before the old one drains.
  std::vector<replica_status> rs{member("d-0", "d", "running", "old"), member("d-1", "d", "running", "old"),
                                 member("d-2", "d", "stopped", ""), member("p-0", "p", "running", "old")};
  auto s = next_swap_step(rs, "d", "new");
  BOOST_TEST(int(s.what) == int(kind::replace_via_spare));
  BOOST_TEST(s.old_replica == 0u);
  BOOST_TEST(s.spare == 2u);
  // No spare but another serving replica: in place.
  rs[2] = member("d-2", "d", "running", "new");
  s = next_swap_step(rs, "d", "new");
  BOOST_TEST(int(s.what) == int(kind::replace_in_place));
  BOOST_TEST(s.old_replica == 0u);
  // A replica with no load report counts as the old revision.
  rs[0] = member("d-0", "d", "running", "new");
  rs[1].has_load = false;
  BOOST_TEST(next_swap_step(rs, "d", "new").old_replica == 1u);
  // Warm ones of the old revision restart warm; then it is done (other pools untouched).
  rs[1] = member("d-1", "d", "warm", "old");
  s = next_swap_step(rs, "d", "new");
  BOOST_TEST(int(s.what) == int(kind::restart_warm));
  BOOST_TEST(s.old_replica == 1u);
  rs[1] = member("d-1", "d", "warm", "new");
  BOOST_TEST(int(next_swap_step(rs, "d", "new").what) == int(kind::done));
}

// Under load on a busy machine a swap drained the last old replica while the new ones, on one
// node whose link had been declared dead, were not alive: 16 requests ended in "no replica can
// take it". A drain that leaves its pool with no other serving replica is undone.
BOOST_AUTO_TEST_CASE(a_swap_undoes_a_drain_that_leaves_its_pool_nothing_serving) {
  std::vector<replica_status> rs{member("d-0", "d", "dead", "new"), member("d-1", "d", "running", "old"),
                                 member("d-2", "d", "dead", "new"), member("p-0", "p", "running", "old")};
  rs[1].draining = true;
  BOOST_TEST(drains_to_undo(rs, {1}) == std::vector<std::size_t>{1}, boost::test_tools::per_element());
  rs[2] = member("d-2", "d", "running", "new");  // a new replica serves: the drain goes on
  BOOST_TEST(drains_to_undo(rs, {1}).empty());
  rs[2] = member("d-2", "d", "warm", "new");  // warm (parked) does not take requests
  BOOST_TEST(drains_to_undo(rs, {1}).size() == 1u);
  BOOST_TEST(drains_to_undo(rs, {}).empty());
}

BOOST_AUTO_TEST_CASE(a_swap_of_a_lone_replica_without_a_spare_slot_is_refused) {
  const std::vector<replica_status> rs{member("d-0", "d", "running", "old")};
  const auto s = next_swap_step(rs, "d", "new");
  BOOST_TEST(int(s.what) == int(swap_step::kind::refuse));
  BOOST_TEST(s.why.find("one serving replica and no stopped slot") != std::string::npos, s.why);
}

BOOST_AUTO_TEST_CASE(a_canary_replaces_old_replicas_while_another_serves_and_keeps_the_last) {
  using kind = swap_step::kind;
  std::vector<replica_status> rs{member("d-0", "d", "running", "old"), member("d-1", "d", "running", "old"),
                                 member("d-2", "d", "stopped", "")};
  auto s = next_swap_step(rs, "d", "new", 1);
  BOOST_TEST(int(s.what) == int(kind::replace_via_spare));  // one canary of two: capacity stays
  rs[2] = member("d-2", "d", "running", "new");
  rs[0] = member("d-0", "d", "stopped", "");
  BOOST_TEST(int(next_swap_step(rs, "d", "new", 1).what) == int(kind::done));
  s = next_swap_step(rs, "d", "new", 2);  // the last old one stays; the canary's second starts beside it
  BOOST_TEST(int(s.what) == int(kind::add_spare));
  BOOST_TEST(s.spare == 0u);
  rs[0] = member("d-0", "d", "running", "new");
  BOOST_TEST(int(next_swap_step(rs, "d", "new", 3).what) == int(kind::refuse));
}

BOOST_AUTO_TEST_CASE(rollout_arguments_make_rising_steps_and_a_gate) {
  auto ok = parse_rollout({"decode", "--model", "/m", "--revision", "r2", "--canary", "25%", "--step", "25%:30s", "--max-ttft-ratio", "2",
                           "--min-requests", "8"});
  BOOST_TEST_REQUIRE(std::holds_alternative<rollout_request>(ok));
  const auto& r = std::get<rollout_request>(ok);
  BOOST_TEST_REQUIRE(r.steps.size() == 3u);  // 25%, 50%, 75%; promotion after the last
  BOOST_TEST(r.steps[0].share == 0.25);
  BOOST_TEST(r.steps[2].share == 0.75);
  BOOST_TEST(r.steps[1].hold_s == 30.0);
  BOOST_TEST(r.gate.max_ttft_ratio == 2.0);
  BOOST_TEST(r.gate.min_requests == 8);
  const auto defaults = std::get<rollout_request>(parse_rollout({"decode", "--model", "/m"}));
  BOOST_TEST(defaults.steps.size() == 9u);  // 10% to 90% by 10%, five minutes each
  BOOST_TEST(defaults.steps[0].hold_s == 300.0);
  auto refused = [](std::vector<std::string> a) {
    auto r = parse_rollout(a);
    return std::holds_alternative<std::string>(r) ? std::get<std::string>(r) : std::string();
  };
  BOOST_TEST(refused({"decode"}).find("--model DIR is required") != std::string::npos);
  BOOST_TEST(refused({"decode", "--model", "/m", "--canary", "100%"}).find("below 100%") != std::string::npos);
  BOOST_TEST(refused({"decode", "--model", "/m", "--step", "10%"}).find("SHARE:DURATION") != std::string::npos);
  BOOST_TEST(refused({"decode", "--model", "/m", "--step", "10%:5y"}).find("SHARE:DURATION") != std::string::npos);
  BOOST_TEST(refused({"decode", "--model", "/m", "--max-itl-ratio", "fast"}).find("expected a number") != std::string::npos);
  BOOST_TEST(refused({"decode", "--model", "/m", "--speed", "1"}).find("unknown argument '--speed'") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_gate_names_the_first_breach_and_judges_only_with_enough_requests) {
  rollout_gate g;
  g.min_requests = 4;
  side_figures canary, baseline;
  canary.finished = 3;
  canary.ttft_s = {0.9, 0.9, 0.9};
  baseline.finished = 10;
  baseline.ttft_s = std::vector<double>(10, 0.1);
  BOOST_TEST(!breach(canary, baseline, g));  // three requests: too few to judge
  canary.finished = 4;
  canary.ttft_s.push_back(0.9);
  auto b = breach(canary, baseline, g);
  BOOST_TEST_REQUIRE(b.has_value());
  BOOST_TEST(b->find("TTFT p50 900.0 ms against the baseline's 100.0 ms (9.00x") != std::string::npos, *b);
  canary.ttft_s = std::vector<double>(4, 0.12);  // within 1.5x
  BOOST_TEST(!breach(canary, baseline, g));
  canary.failed = 1;  // one of five failed, none of the baseline's
  b = breach(canary, baseline, g);
  BOOST_TEST_REQUIRE(b.has_value());
  BOOST_TEST(b->find("error rate 20.0%") != std::string::npos, *b);
  canary.failed = 0;
  canary.itl_s = std::vector<double>(4, 0.05);
  baseline.itl_s = std::vector<double>(10, 0.01);
  BOOST_TEST(breach(canary, baseline, g)->find("ITL p50") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_rollout_holds_each_step_then_advances_promotes_or_rolls_back) {
  rollout_request r;
  r.steps = {{0.1, 60}, {0.5, 60}};
  using kind = rollout_decision::kind;
  BOOST_TEST(int(decide(r, 0, 30, std::nullopt).what) == int(kind::hold));
  BOOST_TEST(int(decide(r, 0, 61, std::nullopt).what) == int(kind::advance));
  BOOST_TEST(int(decide(r, 1, 61, std::nullopt).what) == int(kind::promote));
  const auto back = decide(r, 1, 5, std::string("TTFT p99 too high"));
  BOOST_TEST(int(back.what) == int(kind::roll_back));
  BOOST_TEST(back.why == "TTFT p99 too high");
  // A step whose quality gate has not answered is held past its time, never advanced.
  BOOST_TEST(int(decide(r, 0, 600, std::nullopt, true).what) == int(kind::hold));
  BOOST_TEST(int(decide(r, 1, 600, std::nullopt, true).what) == int(kind::hold));
  BOOST_TEST(int(decide(r, 1, 5, std::string("quality: x"), true).what) == int(kind::roll_back));
}

BOOST_AUTO_TEST_CASE(quality_gate_flags_make_the_probe_set) {
  auto r = std::get<rollout_request>(parse_rollout({"decode", "--model", "/m", "--held-out", "/t.txt", "--prompts", "/p.txt",
                                                    "--max-ppl-ratio", "1.2", "--min-greedy-match", "90%", "--greedy-tokens", "4"}));
  BOOST_TEST(r.quality.on());
  BOOST_TEST(r.quality.held_out == "/t.txt");
  BOOST_TEST(r.quality.max_ppl_ratio == 1.2);
  BOOST_TEST(r.quality.min_greedy_match == 0.9);
  BOOST_TEST(r.quality.greedy_tokens == 4);
  BOOST_TEST(!std::get<rollout_request>(parse_rollout({"decode", "--model", "/m"})).quality.on());
  auto refused = std::get<std::string>(parse_rollout({"decode", "--model", "/m", "--greedy-tokens", "0"}));
  BOOST_TEST(refused.find("--greedy-tokens") != std::string::npos, refused);
  refused = std::get<std::string>(parse_rollout({"decode", "--model", "/m", "--min-greedy-match", "150%"}));
  BOOST_TEST(refused.find("--min-greedy-match") != std::string::npos, refused);

  r.quality.window = 4;
  r.quality.max_windows = 2;
  r.quality.max_prompts = 2;
  std::vector<std::int32_t> ids(11);
  for (int i = 0; i < 11; ++i) ids[std::size_t(i)] = i;
  const auto set = make_quality_set(ids, {{1, 2}, {}, {3}, {4}}, r.quality);
  BOOST_TEST_REQUIRE(set.windows.size() == 2u);  // whole windows only, at most two
  BOOST_TEST((set.windows[1] == std::vector<std::int32_t>{4, 5, 6, 7}));
  BOOST_TEST_REQUIRE(set.prompts.size() == 2u);  // the empty prompt skipped
  BOOST_TEST((set.prompts[1] == std::vector<std::int32_t>{3}));
  BOOST_TEST(set.greedy_tokens == 4);
  BOOST_TEST(make_quality_set({7, 8, 9}, {}, r.quality).windows.size() == 1u);  // shorter than a window: one, whole
  BOOST_TEST((prompt_lines("a\r\n\n  \nb c\nd", 2) == std::vector<std::string>{"a", "b c"}));
}

BOOST_AUTO_TEST_CASE(the_quality_gate_compares_perplexity_and_greedy_answers_with_the_baseline) {
  quality_gate g;
  quality_sample baseline{20.0, 10, {{1, 2, 3, 4}, {5, 6, 7, 8}}};
  quality_sample same = baseline;
  BOOST_TEST(baseline.perplexity() == std::exp(2.0), boost::test_tools::tolerance(1e-12));
  BOOST_TEST(greedy_match(same.answers, baseline.answers) == 1.0);
  BOOST_TEST(!quality_breach(same, baseline, g));
  quality_sample worse = baseline;
  worse.nll = 21.0;  // perplexity e^2.1: 1.105x the baseline's
  auto b = quality_breach(worse, baseline, g);
  BOOST_TEST_REQUIRE(b.has_value());
  BOOST_TEST(b->find("held-out perplexity 8.166 against the baseline's 7.389 (1.105x, bound 1.050x)") != std::string::npos, *b);
  quality_sample other = baseline;
  other.answers = {{1, 2, 9, 9}, {5, 6, 7, 8}};  // half of the first answer, all of the second
  BOOST_TEST(greedy_match(other.answers, baseline.answers) == 0.75);
  b = quality_breach(other, baseline, g);
  BOOST_TEST_REQUIRE(b.has_value());
  BOOST_TEST(b->find("greedy answers agree with the baseline's on 75% of their tokens (2 prompts, bound 80%)") != std::string::npos, *b);
  g.min_greedy_match = 0.7;
  BOOST_TEST(!quality_breach(other, baseline, g));
  BOOST_TEST(greedy_match({{1}}, {{1, 2}}) == 0.5);  // a shorter answer misses the rest
  BOOST_TEST(quality_summary(same, baseline).find("agree on 100%") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_rollout_record_survives_the_trip_through_the_nodes_and_says_who_takes_over) {
  rollout_record r;
  r.pool = "decode";
  r.args = {"decode", "--model", "/m2", "--canary", "25%"};
  r.model = "draft";
  r.key = "fp@r2";
  r.baseline_dir = "/m1";
  r.phase = rollout_phase::paused;
  r.step = 1;
  r.share = 0.5;
  r.held_s = 12.5;
  r.serving_before = 4;
  r.decisions = nlohmann::json::array({{{"decision", "step"}}});
  r.owner = "head-a";
  r.owner_start = 77;
  r.updated_at = 1000;
  const auto back = record_from(to_json(r).dump());
  BOOST_TEST_REQUIRE(back.has_value());
  BOOST_TEST((back->args == r.args));
  BOOST_TEST(back->key == "fp@r2");
  BOOST_TEST(int(back->phase) == int(rollout_phase::paused));
  BOOST_TEST(back->share == 0.5);
  BOOST_TEST(back->owner_start == 77u);
  BOOST_TEST(back->decisions.size() == 1u);
  BOOST_TEST(!record_from("not json"));
  BOOST_TEST(!record_from(R"({"pool": "decode"})"));  // fields missing: not a record

  using A = record_action;
  BOOST_TEST(int(act_on(r, "head-b", 5, false, 1002, 5)) == int(A::follow));     // its owner spoke 2 s ago
  BOOST_TEST(int(act_on(r, "head-b", 5, false, 1006, 5)) == int(A::take_over));  // silent past the bound
  BOOST_TEST(int(act_on(r, "head-a", 78, false, 1001, 5)) == int(A::take_over)); // head-a restarted: its own, at once
  BOOST_TEST(int(act_on(r, "head-a", 77, true, 1100, 5)) == int(A::ignore));     // running it here
  r.phase = rollout_phase::rolled_back;
  BOOST_TEST(int(act_on(r, "head-b", 5, false, 1100, 5)) == int(A::end_split));

  rollout_record older = r, other = r;
  older.updated_at = 900;
  older.key = "old";
  other.pool = "prefill";
  const auto newest = newest_per_pool({to_json(older).dump(), to_json(r).dump(), "garbage", to_json(other).dump()});
  BOOST_TEST_REQUIRE(newest.size() == 2u);
  for (const auto& n : newest) BOOST_TEST(n.key == "fp@r2");
}
