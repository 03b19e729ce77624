// What `troupe admin` prints for people (runtime/admin/console_text.h): every command's reply
// as a table or a sentence, never the reply's JSON; top's screen within the terminal's width.
#define BOOST_TEST_MODULE console_text
#include <boost/test/unit_test.hpp>

#include <sstream>

#include "runtime/admin/admin_message.h"
#include "runtime/admin/console_text.h"

using namespace troupe;
using json = nlohmann::json;

namespace {

json status_reply() {
  json r = {{"nodes", json::array({{{"name", "head"}, {"replicas", 0}, {"replicas_alive", 0}},
                                   {{"name", "node-a"}, {"replicas", 1}, {"replicas_alive", 1}}})},
            {"tokens_per_s", 512.5},
            {"replicas", json::array()}};
  for (int i = 0; i < 3; ++i)
    r["replicas"].push_back({{"name", "decode-" + std::to_string(i)}, {"pool", "decode"}, {"role", "both"}, {"node", "node-a"},
                             {"state", i == 2 ? "stopped" : "running"}, {"generation", 1}, {"running", 3}, {"waiting", 1},
                             {"kv_used_blocks", 40}, {"kv_total_blocks", 100}, {"kv_usage", 0.4 * i}, {"tokens_per_s", 250.0}});
  return r;
}

std::size_t widest_line(const std::string& text) {
  std::istringstream in(text);
  std::size_t w = 0;
  for (std::string line; std::getline(in, line);) w = std::max(w, line.size());
  return w;
}

}  // namespace

// A reply of each command the server answers, as the admin actor builds it.
BOOST_AUTO_TEST_CASE(every_command_prints_a_table_or_a_sentence_not_json) {
  const std::vector<std::pair<std::string, json>> replies = {
      {"status", status_reply()},
      {"topology", {{"source", "configs/admin.toml"},
                    {"nodes", json::array({{{"name", "head"}, {"address", "127.0.0.1:7700"}, {"head", true}}})},
                    {"pools", json::array({{{"name", "decode"}, {"role", "both"}, {"replicas", 2}, {"nodes", {"node-a", "node-b"}}}})},
                    {"router", {{"policy", "least_loaded"}}},
                    {"model", {{"path", "models/kjv"}, {"name", "kjv"}, {"architecture", "LlamaForCausalLM"}, {"layers", 6},
                               {"max_model_len", 1024}, {"vocab_size", 4096}, {"backend", "cpu"}}}}},
      {"kv", {{"replicas", json::array({{{"name", "decode-0"}, {"state", "running"}, {"used_blocks", 4}, {"total_blocks", 64},
                                          {"cached_blocks", 9}, {"prefix_hit_rate", 0.25}}})}}},
      {"requests", {{"requests", json::array({{{"id", "cmpl-1"}, {"replica", "decode-0"}, {"prompt_tokens", 12}, {"output_tokens", 3},
                                               {"migrations", 0}, {"priority", 0}, {"age_seconds", 1.5}}})},
                    {"listed_at_most", 1000}}},
      {"help", {{"commands", json::array({{{"command", "status"}, {"does", "nodes and replicas"}}})}}},
      {"scale", {{"pool", "decode"}, {"replicas", 3}, {"added", {"decode-2"}}}},
      {"set-policy", {{"router", {{"policy", "prefix_aware"}, {"params", {{"load_weight", 0.5}}}}}}},
      {"autoscaler", {{"paused", false}, {"pinned", json::array({"decode"})}, {"last_decisions", {{"decode", "2 -> 3: queue"}}},
                      {"policy", {{"queue_up", 4.0}, {"kv_up", 0.8}}}}},
      {"log-level", {{"level", "debug"}, {"applies_to", "the head"}, {"nodes", 2}}},
      {"drain", {{"replica", "decode-0"}, {"state", "drained"}, {"safe_to_remove", true}}},
      {"resume", {{"replica", "decode-0"}, {"state", "running"}}},
      {"kill", {{"replica", "decode-1"}, {"killed", true}}},
      {"kill", {{"node", "node-b"}, {"killed", true}}},
  };
  for (const auto& [cmd, reply] : replies) {
    const std::string text = admin::result_text(cmd, reply);
    BOOST_TEST(!text.empty(), cmd);
    BOOST_TEST(text.back() == '\n', cmd);
    BOOST_TEST(text.find('{') == std::string::npos, cmd << ":\n" << text);
    BOOST_TEST(text.find('"') == std::string::npos, cmd << ":\n" << text);
  }
  const std::string topo = admin::result_text("topology", replies[1].second);
  BOOST_TEST(topo.find("model   models/kjv (served as kjv, LlamaForCausalLM, 6 layers, context 1024") != std::string::npos, topo);
  BOOST_TEST(topo.find("node-a, node-b") != std::string::npos, topo);
  BOOST_TEST(admin::result_text("scale", replies[5].second) == "pool decode: 3 replicas serving; joined: decode-2\n");
  BOOST_TEST(admin::result_text("set-policy", replies[6].second) == "router: policy prefix_aware (load_weight=0.5)\n");
  const std::string st = admin::result_text("status", replies[0].second);
  BOOST_TEST(st.find("decode-2") != std::string::npos);
  BOOST_TEST(st.find("40/100") != std::string::npos, st);
}

BOOST_AUTO_TEST_CASE(a_reply_of_an_unknown_shape_is_printed_not_dropped) {
  BOOST_TEST(admin::result_text("future", {{"a", 1}, {"b", "x"}}) == "a:  1\nb:  x\n");
  const json nested = {{"a", {{"deep", 1}}}};
  BOOST_TEST(admin::result_text("future", nested) == nested.dump(2) + "\n");
}

BOOST_AUTO_TEST_CASE(top_fits_the_terminal_width) {
  const json s = status_reply();
  std::size_t last_bar = 0;
  for (int width : {40, 60, 80, 100, 120, 200}) {
    const std::string screen = admin::top_text(s, "troupe top  tcp://127.0.0.1:7600  12:00:00  (Ctrl-C quits)", width);
    BOOST_TEST(widest_line(screen) <= std::size_t(width), width << ":\n" << screen);
    BOOST_TEST(screen.find("decode-1") != std::string::npos, width);
    const auto open = screen.find("[", screen.find("decode-0")), close = screen.find("]", open);
    if (width >= 60) {  // narrower, even the smallest bar is cut off
      BOOST_TEST_REQUIRE(close != std::string::npos, width << ":\n" << screen);
      const std::size_t bar = close - open - 1;
      if (width > 80) BOOST_TEST(bar >= last_bar, width);  // with every column shown, the bar takes the room left
      last_bar = bar;
      BOOST_TEST(screen.find("250.0") != std::string::npos, width << ":\n" << screen);  // tokens/s is never cut
    }
    BOOST_TEST((screen.find("node-a") != std::string::npos) == (width >= 80), width << ":\n" << screen);
  }
  BOOST_TEST(last_bar == 30u);
  BOOST_TEST(admin::top_text(s, "t", 120).find("ACCEPT") == std::string::npos);  // nobody speculates
  json spec = s;
  spec["replicas"][0]["spec_acceptance"] = 0.625;
  const std::string screen = admin::top_text(spec, "t", 100);
  BOOST_TEST(screen.find("ACCEPT") != std::string::npos, screen);
  BOOST_TEST(screen.find("62%") != std::string::npos, screen);
  BOOST_TEST(widest_line(screen) <= 100u, screen);
  BOOST_TEST(admin::result_text("status", spec).find("62%") != std::string::npos);
}

// The server's command list is the one `help` answers with and `troupe admin --help` prints.
BOOST_AUTO_TEST_CASE(the_command_list_has_every_command_the_server_answers) {
  std::vector<std::string> names;
  for (const auto& [name, what] : admin::server_commands()) names.push_back(name.substr(0, name.find(' ')));
  for (const char* cmd : {"status", "topology", "kv", "requests", "set-policy", "scale", "autoscaler", "log-level", "drain", "resume",
                          "kill", "help"})
    BOOST_TEST((std::find(names.begin(), names.end(), cmd) != names.end()), cmd);
}
