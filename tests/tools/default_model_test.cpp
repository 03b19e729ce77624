// The default model (models/kjv, trained by tools/train/train_kjv.py on the King James Bible and
// committed) as a new user meets it: configs/local.toml serves it, a greedy completion of "In the
// beginning" reads as KJV text, and its held-out perplexity, computed by troupe, is the figure
// PyTorch recorded when it was trained (metrics.json), within 1%. The draft model (same
// tokenizer, for speculative decoding) keeps its figure too. It holds a conversation's worth of
// context (1,024 tokens), beats the draft trained on the text alone by at least 15% and the
// draft distilled from it (committed) outright; a chat with the model's own
// sampling defaults (generation_config.json) reads as KJV English.
#define BOOST_TEST_MODULE default_model
#include <boost/test/unit_test.hpp>

#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <map>
#include <set>
#include <sstream>

#include "tests/support/http_client.h"
#include "tests/support/process.h"

using namespace troupe;

namespace {

// Runs troupe in the source tree (the configs name models/ relative to it); stdout only.
test::command_result troupe_in_source(const std::string& args) {
  return test::run_command("cd " + std::string(TROUPE_SOURCE_DIR) + " && " + std::string(TROUPE_BINARY_DIR) + "/troupe " + args +
                           " 2>/dev/null");
}

nlohmann::json json_of(const std::string& path) {
  std::ifstream in(path);
  BOOST_TEST_REQUIRE(bool(in), "cannot read " << path);
  return nlohmann::json::parse(in);
}

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> out;
  std::string w;
  for (char c : text + " ") {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      w += char(std::tolower(static_cast<unsigned char>(c)));
    } else if (!w.empty()) {
      out.push_back(w);
      w.clear();
    }
  }
  return out;
}

void check_recorded_perplexity(const std::string& dir) {
  const auto recorded = json_of(std::string(TROUPE_SOURCE_DIR) + "/" + dir + "/metrics.json");
  const auto r = troupe_in_source("eval perplexity --model " + dir + " --text " + dir + "/heldout.txt --json");
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  const auto got = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  const double want = recorded["heldout_perplexity"].get<double>();
  BOOST_TEST(got["tokens"].get<std::size_t>() == recorded["heldout_tokens_scored"].get<std::size_t>());
  BOOST_TEST(got["perplexity"].get<double>() == want, boost::test_tools::tolerance(0.01));
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_default_config_serves_the_trained_model_and_it_speaks_kjv) {
  std::ifstream cfg(std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml");
  std::stringstream ss;
  ss << cfg.rdbuf();
  BOOST_TEST(ss.str().find("path = \"models/kjv\"") != std::string::npos);
  const auto r = troupe_in_source("generate --config configs/local.toml --prompt \"In the beginning\" --max-tokens 32 --temperature 0 --json");
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  const std::string text = j["outputs"][0]["text"].get<std::string>();
  BOOST_TEST_MESSAGE("In the beginning" << text);
  const auto words = words_of(text);
  BOOST_TEST_REQUIRE(words.size() >= 10u, text);
  // The commonest words of the KJV (a small model's greedy text is plain, and may repeat itself).
  for (const char* w : {"the", "and", "of"}) BOOST_TEST((std::find(words.begin(), words.end(), w) != words.end()), w << " in: " << text);
  // And it writes English words: most of them occur in the held-out books too.
  std::ifstream held(std::string(TROUPE_SOURCE_DIR) + "/models/kjv/heldout.txt");
  std::stringstream hs;
  hs << held.rdbuf();
  const auto vocab_words = words_of(hs.str());
  const std::set<std::string> known(vocab_words.begin(), vocab_words.end());
  std::size_t found = 0;
  for (const auto& w : words) found += known.count(w);
  BOOST_TEST(found * 10 >= words.size() * 7, found << " of " << words.size() << " words known: " << text);
}

BOOST_AUTO_TEST_CASE(the_held_out_perplexity_is_the_recorded_figure) { check_recorded_perplexity("models/kjv"); }

// Issue 24's bar for the default model: a context of at least 1,024 tokens, and a held-out
// perplexity at least 15% under the draft's, in 256-token windows (so the longer context is not
// what wins it) and in 1,024-token windows. The bar is the draft as issue 24 measured it, trained
// on the text alone (41.48 and 43.01, models/kjv-draft/README.md); the draft committed now is
// distilled from models/kjv for speculative decoding, so it learned from the model it is measured
// against, and the default model must still beat it.
BOOST_AUTO_TEST_CASE(the_default_model_holds_1024_tokens_and_beats_the_draft_by_15_percent) {
  const std::string root = std::string(TROUPE_SOURCE_DIR) + "/models/";
  const auto config = json_of(root + "kjv/config.json");
  BOOST_TEST(config["max_position_embeddings"].get<int>() >= 1024);
  const auto kjv = json_of(root + "kjv/metrics.json"), draft = json_of(root + "kjv-draft/metrics.json");
  constexpr double text_only_draft = 41.48, text_only_draft_window_256 = 43.01;
  const double bar = 0.85 * text_only_draft_window_256;
  BOOST_TEST(kjv["heldout_perplexity"].get<double>() < 0.85 * text_only_draft);
  BOOST_TEST(kjv["heldout_perplexity_window_256"].get<double>() < bar);
  BOOST_TEST(kjv["heldout_perplexity"].get<double>() < draft["heldout_perplexity"].get<double>());
  BOOST_TEST(kjv["heldout_perplexity_window_256"].get<double>() < draft["heldout_perplexity_window_256"].get<double>());
  const auto r = troupe_in_source("eval perplexity --model models/kjv --text models/kjv/heldout.txt --window 256 --json");
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  const auto got = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  // Troupe's own figure in 256-token windows is PyTorch's too. They were 1.06% apart: the training
  // script divided the 256-window NLL by the 1,024-window token count (8,177, not 8,153).
  BOOST_TEST(got["perplexity"].get<double>() < bar);
  BOOST_TEST(got["tokens"].get<long>() == kjv["heldout_tokens_scored_window_256"].get<long>());
  BOOST_TEST(got["perplexity"].get<double>() == kjv["heldout_perplexity_window_256"].get<double>(), boost::test_tools::tolerance(0.001));
}

// The quickstart's chat: no sampling parameters, so the model's generation_config.json decides
// (greedy decoding of a model this small loops). Seeded, so the test sees one fixed text.
BOOST_AUTO_TEST_CASE(a_chat_with_the_models_sampling_defaults_reads_as_kjv_english) {
  const auto gen = json_of(std::string(TROUPE_SOURCE_DIR) + "/models/kjv/generation_config.json");
  BOOST_TEST_REQUIRE(gen.contains("temperature"));
  BOOST_TEST(gen["temperature"].get<double>() > 0.0);
  test::serve_process serve({std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml", "--model", std::string(TROUPE_SOURCE_DIR) + "/models/kjv"});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  std::ifstream held(std::string(TROUPE_SOURCE_DIR) + "/models/kjv/heldout.txt");
  std::stringstream hs;
  hs << held.rdbuf();
  const auto vocab_words = words_of(hs.str());
  const std::set<std::string> known(vocab_words.begin(), vocab_words.end());
  for (int seed : {1, 2, 3}) {
    const auto r = test::post_json(serve.port(), "/v1/chat/completions",
                                   {{"messages", {{{"role", "user"}, {"content", "Who made the heaven and the earth?"}}}},
                                    {"max_tokens", 64}, {"seed", seed}});
    BOOST_TEST_REQUIRE(r.status == 200, r.body);
    const std::string text = nlohmann::json::parse(r.body)["choices"][0]["message"]["content"].get<std::string>();
    BOOST_TEST_MESSAGE("seed " << seed << ": " << text);
    const auto words = words_of(text);
    BOOST_TEST_REQUIRE(words.size() >= 8u, text);
    std::size_t found = 0;
    for (const auto& w : words) found += known.count(w);
    BOOST_TEST(found * 10 >= words.size() * 7, found << " of " << words.size() << " words known: " << text);
    // Not a loop: no run of three words comes back more than twice.
    std::map<std::string, int> runs;
    int most = 0;
    for (std::size_t i = 0; i + 2 < words.size(); ++i) most = std::max(most, ++runs[words[i] + " " + words[i + 1] + " " + words[i + 2]]);
    BOOST_TEST(most <= 2, text);
  }
}

// The draft drafts for models/kjv (configs/speculative-draft.toml): its figure, the target's
// tokenizer, and the target's whole context (a draft of 256 positions proposed nothing past them).
BOOST_AUTO_TEST_CASE(the_draft_model_keeps_its_figure_and_fits_the_target) {
  check_recorded_perplexity("models/kjv-draft");
  const std::string root = std::string(TROUPE_SOURCE_DIR) + "/models/";
  BOOST_TEST(json_of(root + "kjv-draft/config.json")["max_position_embeddings"].get<int>() >=
             json_of(root + "kjv/config.json")["max_position_embeddings"].get<int>());
  BOOST_TEST(json_of(root + "kjv-draft/tokenizer.json") == json_of(root + "kjv/tokenizer.json"));
}
