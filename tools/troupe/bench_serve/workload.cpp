#include "tools/troupe/bench_serve/workload.h"

#include <cmath>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/common/json.h"
#include "runtime/common/splitmix.h"

namespace troupe::bench {

namespace {

std::uint64_t mix(std::uint64_t x) { return splitmix64(x); }

// A uniform draw in (0, 1) for (seed, stream, index).
double uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t i) {
  return (double(mix(mix(seed ^ (stream * 0x632be59bd9b4e019ull)) + i) >> 11) + 0.5) / 9007199254740992.0;
}

std::vector<std::int32_t> random_ids(int n, int vocab, std::uint64_t seed, std::uint64_t stream) {
  std::vector<std::int32_t> ids(std::size_t(std::max(n, 0)));
  const int span = std::max(1, vocab - 200);
  for (int i = 0; i < n; ++i) ids[std::size_t(i)] = 100 + std::int32_t(uniform(seed, stream, std::uint64_t(i)) * span);
  return ids;
}

// A prompt's tokens: a window of the corpus when there is one, else random ids.
std::vector<std::int32_t> prompt_tokens(const workload_options& o, int n, std::uint64_t stream) {
  if (o.corpus && !o.corpus->empty()) return corpus_window(*o.corpus, n, o.seed, stream);
  return random_ids(n, o.vocab, o.seed, stream);
}

}  // namespace

std::vector<std::int32_t> corpus_window(const std::vector<std::int32_t>& corpus, int n, std::uint64_t seed, std::uint64_t stream) {
  std::vector<std::int32_t> out;
  if (corpus.empty() || n <= 0) return out;
  out.reserve(std::size_t(n));
  std::size_t at = std::size_t(uniform(seed, stream, 0) * double(corpus.size())) % corpus.size();
  for (int i = 0; i < n; ++i, at = (at + 1) % corpus.size()) out.push_back(corpus[at]);
  return out;
}

int fit_to_context(std::vector<planned_request>& plan, int max_model_len, int overhead) {
  int changed = 0;
  for (auto& r : plan) {
    const int room = max_model_len - overhead;  // for prompt + output
    if (r.prompt_len + r.output_len <= room) continue;
    ++changed;
    // The prompt keeps its length while it leaves an output of min(asked, room / 4); past that
    // it is cut to leave exactly that; the output then takes what room is left.
    const int prompt = std::max(1, std::min(r.prompt_len, room - std::min(r.output_len, room / 4)));
    if (prompt < r.prompt_len) {
      r.prompt_len = prompt;
      if (!r.prompt_ids.empty()) r.prompt_ids.resize(std::size_t(prompt));
    }
    r.output_len = std::max(1, std::min(r.output_len, room - r.prompt_len));
  }
  return changed;
}

std::vector<conversation_turn> read_sharegpt(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw input_error("cannot read " + path);
  const std::string text(std::istreambuf_iterator<char>(in), {});
  const nlohmann::json j = parse_json(text, path);  // errors name the file; nesting is bounded
  if (!j.is_array()) throw input_error(path + ": expected a JSON array of conversations (ShareGPT format)");
  std::vector<conversation_turn> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const auto& c = j[i];
    if (!c.is_object() || !c.contains("conversations") || !c["conversations"].is_array())
      throw input_error(path + ": entry " + std::to_string(i) + ": expected {\"conversations\": [...]}");
    const auto& turns = c["conversations"];
    for (std::size_t t = 0; t + 1 < turns.size(); ++t) {
      const auto& a = turns[t];
      const auto& b = turns[t + 1];
      if (!a.is_object() || !b.is_object() || !a.contains("value") || !b.contains("value") || !a["value"].is_string() ||
          !b["value"].is_string())
        throw input_error(path + ": entry " + std::to_string(i) + ": each turn needs \"from\" and a string \"value\"");
      if (a.value("from", "") == "human" && b.value("from", "") == "gpt") {
        out.push_back({a["value"].get<std::string>(), b["value"].get<std::string>()});
        break;
      }
    }
  }
  if (out.empty()) throw input_error(path + ": no conversation has a human turn answered by a gpt turn");
  return out;
}

int draw_length(length_dist d, int mean, std::uint64_t seed, std::uint64_t index) {
  if (mean <= 1 || d == length_dist::fixed) return std::max(mean, 1);
  const double u = uniform(seed, 7, index);
  if (d == length_dist::uniform) return std::max(1, int(std::lround(mean * (0.5 + u))));
  // Log-normal with sigma 1 has mean exp(mu + 1/2): mu = ln(mean) - 1/2.
  const double u2 = uniform(seed, 8, index);
  const double z = std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * M_PI * u2);
  const double x = std::exp(std::log(double(mean)) - 0.5 + z);
  return int(std::clamp(std::lround(x), 1l, long(16) * mean));
}

std::vector<planned_request> plan_workload(const workload_options& o) {
  std::vector<planned_request> out;
  double t = 0;
  std::vector<std::vector<std::int32_t>> systems;
  for (int s = 0; s < o.systems; ++s) systems.push_back(prompt_tokens(o, o.prefix_len, 1000 + std::uint64_t(s)));
  std::vector<int> slot(std::size_t(std::max(o.requests, 0)));  // request i plays user slot[i]
  for (int i = 0; i < o.requests; ++i) slot[std::size_t(i)] = i;
  if (o.shuffle)  // Fisher-Yates with the workload's own draws
    for (int i = o.requests - 1; i > 0; --i)
      std::swap(slot[std::size_t(i)], slot[std::size_t(uniform(o.seed, 9, std::uint64_t(i)) * (i + 1)) % std::size_t(i + 1)]);
  for (int i = 0; i < o.requests; ++i) {
    planned_request r;
    const int k = slot[std::size_t(i)];
    if (o.process == arrival::poisson && o.rate > 0) t += -std::log(uniform(o.seed, 1, std::uint64_t(i))) / o.rate;
    else if (o.process == arrival::fixed && o.rate > 0) t = i / o.rate;
    r.at = o.process == arrival::burst ? 0 : t;
    const int user_len = draw_length(o.prompt_dist, o.prompt_len, o.seed ^ 0x11, std::uint64_t(i));
    if (!systems.empty()) {
      const auto& sys = systems[std::size_t((k / std::max(o.users, 1)) % o.systems)];
      r.prompt_ids = sys;
      r.tenant = "user-" + std::to_string(k % std::max(o.users, 1));
    }
    auto own = prompt_tokens(o, user_len, 2000000 + std::uint64_t(i));
    r.prompt_ids.insert(r.prompt_ids.end(), own.begin(), own.end());
    r.prompt_len = int(r.prompt_ids.size());
    r.output_len = draw_length(o.output_dist, o.output_len, o.seed ^ 0x22, std::uint64_t(i));
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<planned_request> read_trace(const std::string& path, int vocab, std::uint64_t seed) {
  std::ifstream in(path);
  if (!in) throw input_error("cannot read trace " + path);
  std::vector<planned_request> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n) + ": ";
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      throw input_error(where + "not JSON: " + e.what());
    }
    if (!j.is_object()) throw input_error(where + "expected a JSON object");
    planned_request r;
    const char* tkey = j.contains("timestamp") ? "timestamp" : "arrival";
    if (!j.contains(tkey) || !j[tkey].is_number()) throw input_error(where + "timestamp: a number of seconds is required");
    r.at = j[tkey].get<double>();
    if (j.contains("prompt")) {
      if (!j["prompt"].is_string()) throw input_error(where + "prompt: expected a string");
      r.prompt_text = j["prompt"].get<std::string>();
      r.prompt_len = j.value("prompt_len", 0);
    } else {
      const char* lkey = j.contains("prompt_len") ? "prompt_len" : "input_len";
      if (!j.contains(lkey) || !j[lkey].is_number_integer() || j[lkey].get<int>() < 1)
        throw input_error(where + "prompt or prompt_len (a positive integer) is required");
      r.prompt_len = j[lkey].get<int>();
      r.prompt_ids = random_ids(r.prompt_len, vocab, seed, 3000000 + std::uint64_t(n));
    }
    const char* okey = j.contains("output_len") ? "output_len" : "max_tokens";
    if (!j.contains(okey) || !j[okey].is_number_integer() || j[okey].get<int>() < 1)
      throw input_error(where + "output_len (a positive integer) is required");
    r.output_len = j[okey].get<int>();
    if (j.contains("tenant")) r.tenant = j["tenant"].is_string() ? j["tenant"].get<std::string>() : j["tenant"].dump();
    if (j.contains("model")) {  // troupe serve's request log names the model each request asked
      if (!j["model"].is_string()) throw input_error(where + "model: expected a string");
      r.model = j["model"].get<std::string>();
    }
    if (j.contains("endpoint")) {
      if (j["endpoint"] != "completions" && j["endpoint"] != "chat") throw input_error(where + "endpoint: expected \"completions\" or \"chat\"");
      r.endpoint = j["endpoint"].get<std::string>();
    }
    out.push_back(std::move(r));
  }
  std::stable_sort(out.begin(), out.end(), [](const planned_request& a, const planned_request& b) { return a.at < b.at; });
  if (out.empty()) throw input_error(path + ": the trace is empty");
  const double t0 = out.front().at;
  for (auto& r : out) r.at -= t0;
  return out;
}

length_dist parse_length_dist(const std::string& s) {
  if (s == "fixed") return length_dist::fixed;
  if (s == "uniform") return length_dist::uniform;
  if (s == "longtail") return length_dist::longtail;
  throw input_error("length distribution: expected fixed, uniform or longtail, got '" + s + "'");
}

arrival parse_arrival(const std::string& s) {
  if (s == "poisson") return arrival::poisson;
  if (s == "fixed") return arrival::fixed;
  if (s == "burst") return arrival::burst;
  throw input_error("arrival: expected poisson, fixed or burst, got '" + s + "'");
}

}  // namespace troupe::bench
