// The admin protocol's messages: requests and replies round-trip; what another msgpack library
// (Python's, through /usr/bin/python3) writes decodes and what this one writes is read there;
// every malformed message is refused naming what is wrong. And the status shapes: replica
// states and the JSON fields the console and docs/admin.md promise.
#define BOOST_TEST_MODULE admin_message
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <fstream>

#include "runtime/admin/admin_message.h"
#include "runtime/admin/cluster_status.h"

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
