// troupe bench tokenizer: encode and decode throughput of a tokenizer on one thread, in MB of
// text per second, over a corpus of strings (tests/tokenizer/make_corpus.py writes the one the
// tokenizer tests use). tools/bench/tokenizers.sh runs it beside the Hugging Face library
// (@huggingface/tokenizers from npm) on the same files and strings.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/common/json.h"
#include "runtime/model/model_tokenizer.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/troupe/args.h"
#include "tools/troupe/commands.h"

namespace troupe::cli {

namespace {

using clock_type = std::chrono::steady_clock;

std::vector<std::string> read_corpus(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw input_error(path + ": cannot read the corpus");
  const std::string text{std::istreambuf_iterator<char>(in), {}};
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    const nlohmann::json j = parse_json(text, path);
    if (!j.is_array()) throw input_error(path + ": expected a JSON array of strings");
    std::vector<std::string> out;
    for (const auto& s : j) {
      if (!s.is_string()) throw input_error(path + ": expected a JSON array of strings");
      out.push_back(s.get<std::string>());
    }
    return out;
  }
  std::vector<std::string> lines;  // any other file: its lines
  std::size_t start = 0;
  for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) lines.push_back(text.substr(start, nl - start + 1));
  if (start < text.size()) lines.push_back(text.substr(start));
  return lines;
}

// Runs `pass` over the corpus until `seconds` have gone by (at least twice): passes per second.
template <class F>
double passes_per_second(double seconds, F pass) {
  pass();  // warm: caches, first-use tables
  int n = 0;
  const auto t = clock_type::now();
  double elapsed = 0;
  do {
    pass();
    ++n;
    elapsed = std::chrono::duration<double>(clock_type::now() - t).count();
  } while (elapsed < seconds || n < 2);
  return n / elapsed;
}

}  // namespace

int cmd_bench_tokenizer(const args& a) {
  const std::string path = a.get("tokenizer", "");
  if (path.empty()) throw input_error("--tokenizer: required (a tokenizer.json, a model folder or a .gguf file)");
  const std::string corpus_path = a.get("corpus", "");
  if (corpus_path.empty()) throw input_error("--corpus: required (a JSON array of strings, or a text file read line by line)");
  const double seconds = a.get_double("seconds", 2.0);
  if (!(seconds > 0 && seconds <= 600)) throw input_error("--seconds: expected more than 0 and at most 600");
  std::unique_ptr<tokenizer::tokenizer> tok;
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) tok = tokenizer::tokenizer::load(path);
  else tok = model::load_tokenizer(path);
  if (!tok) throw input_error(path + ": no tokenizer found");
  const auto texts = read_corpus(corpus_path);
  std::size_t bytes = 0, tokens = 0;
  std::vector<std::vector<std::int32_t>> ids;
  for (const auto& s : texts) {
    bytes += s.size();
    ids.push_back(tok->encode(s, false));
    tokens += ids.back().size();
  }
  std::size_t sink = 0;  // kept, so the work is not optimized away
  const double encode = passes_per_second(seconds, [&] {
    for (const auto& s : texts) sink += tok->encode(s, false).size();
  });
  const double decode = passes_per_second(seconds, [&] {
    for (const auto& x : ids) sink += tok->decode(x, false).size();
  });
  const nlohmann::json j = {{"tokenizer", path},         {"strings", texts.size()},
                            {"bytes", bytes},            {"tokens", tokens},
                            {"encode_mb_per_s", encode * double(bytes) / 1e6},
                            {"decode_mb_per_s", decode * double(bytes) / 1e6},
                            {"encode_tokens_per_s", encode * double(tokens)}, {"checksum", sink}};
  if (a.has("json")) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s: %zu strings, %.2f MB, %zu tokens (%.2f bytes a token), one thread\n", path.c_str(), texts.size(),
              double(bytes) / 1e6, tokens, double(bytes) / double(std::max<std::size_t>(tokens, 1)));
  std::printf("encode %.2f MB/s (%.0f tokens/s), decode %.2f MB/s\n", j["encode_mb_per_s"].get<double>(),
              j["encode_tokens_per_s"].get<double>(), j["decode_mb_per_s"].get<double>());
  return 0;
}

}  // namespace troupe::cli
