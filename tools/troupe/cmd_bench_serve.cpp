// troupe bench serve: a load generator for any OpenAI-compatible server, reporting TTFT, TPOT,
// ITL and E2E latency, throughput and goodput like vLLM's benchmark_serving.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <fstream>
#include <sstream>

#include "runtime/common/error.h"
#include "runtime/metrics/metrics.h"
#include "runtime/sim/step_fit.h"
#include "tools/troupe/args.h"
#include "tools/troupe/bench_serve/client.h"
#include "tools/troupe/bench_serve/dataset.h"
#include "tools/troupe/bench_serve/report.h"
#include "tools/troupe/bench_serve/workload.h"
#include "tools/troupe/commands.h"

namespace troupe::cli {

namespace {

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

}  // namespace

namespace {

// A server-side error as the bench reports it ("HTTP 400: prompt: ...").
std::string first_errors(const std::vector<bench::request_result>& results, std::size_t max_kinds) {
  std::vector<std::pair<std::string, int>> kinds;
  for (const auto& r : results) {
    if (r.ok) continue;
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == r.error; });
    if (it != kinds.end()) ++it->second;
    else if (kinds.size() < max_kinds) kinds.emplace_back(r.error, 1);
  }
  std::string out;
  for (const auto& [e, n] : kinds) out += "  " + std::to_string(n) + " x " + e + "\n";
  return out;
}

struct planned_workload {
  std::vector<bench::planned_request> plan;
  long long ideal_hits = 0;  // shared-prefix workloads: prompt tokens an ideal cache would reuse
  std::string note;          // how prompts were made, for the header line
};

// The requests' lengths when not given: vLLM's 200 and 64, shrunk to fit a smaller context.
void default_lengths(const args& a, const bench::server_info& info, int overhead, bench::workload_options& w) {
  w.prompt_len = int(a.get_int("prompt-len", 200));
  w.output_len = int(a.get_int("output-len", 64));
  if (info.max_model_len <= 0) return;
  const int room = info.max_model_len - overhead;
  if (w.prompt_len + w.output_len + w.prefix_len <= room) return;
  if (a.has("prompt-len") && a.has("output-len"))
    throw input_error("--prompt-len " + std::to_string(w.prompt_len) + " + --output-len " + std::to_string(w.output_len) +
                      (w.prefix_len ? " + a shared prefix of " + std::to_string(w.prefix_len) : std::string()) +
                      (overhead ? " + " + std::to_string(overhead) + " tokens of chat template" : std::string()) +
                      " do not fit the server's context of " + std::to_string(info.max_model_len) +
                      " tokens (its max_model_len); ask for less");
  if (!a.has("output-len")) w.output_len = std::max(1, std::min(w.output_len, room / 4));
  if (!a.has("prompt-len")) w.prompt_len = std::max(1, room - w.output_len - w.prefix_len);
  if (w.prompt_len + w.output_len + w.prefix_len > room)
    throw input_error("the asked lengths do not fit the server's context of " + std::to_string(info.max_model_len) + " tokens");
}

// ShareGPT: each request's prompt is a conversation's first human turn and its output length the
// reply's token count (or --output-len); conversations that do not fit the context are skipped.
void sharegpt_prompts(const args& a, const bench::client_options& co, const bench::server_info& info, int overhead,
                      std::vector<bench::planned_request>& plan) {
  if (!info.tokenizes) throw input_error("--dataset-name sharegpt needs the server's /tokenize: " + info.tokenize_error);
  const auto turns = bench::read_sharegpt(a.get("dataset-path", ""));
  const std::uint64_t seed = std::uint64_t(a.get_int("seed", 0));
  std::size_t next = std::size_t(seed % turns.size());
  for (auto& r : plan) {
    for (std::size_t tries = 0;; ++tries, next = (next + 1) % turns.size()) {
      if (tries == turns.size()) throw input_error(a.get("dataset-path", "") + ": no conversation fits the server's context");
      const auto& t = turns[next];
      const int p = bench::count_tokens(co, t.prompt);
      const int o = a.has("output-len") ? int(a.get_int("output-len", 64)) : bench::count_tokens(co, t.reply);
      if (p < 4 || o < 4 || (info.max_model_len > 0 && p + o + overhead > info.max_model_len)) continue;
      r.prompt_ids.clear();
      r.prompt_text = t.prompt;
      r.prompt_len = p;
      r.output_len = o;
      next = (next + 1) % turns.size();
      break;
    }
  }
}

// The dataset a run draws from: --dataset-name, else sharegpt for a .json path, random ids for
// a server that does not tokenize but says its vocabulary, text otherwise.
std::string dataset_of(const args& a, const bench::server_info& info, int vocab) {
  const std::string d = a.get("dataset-name", a.has("dataset-path") && a.get("dataset-path", "").ends_with(".json") ? "sharegpt"
                                              : !info.tokenizes && vocab > 0 && !a.has("dataset-path")    ? "random"
                                                                                                          : "text");
  if (d != "text" && d != "sharegpt" && d != "random") throw input_error("--dataset-name: expected text, sharegpt or random, got '" + d + "'");
  if (d == "sharegpt" && !a.has("dataset-path")) throw input_error("--dataset-name sharegpt needs --dataset-path FILE.json");
  if (d == "random" && vocab <= 0) throw input_error("--dataset-name random needs --vocab N (the server does not say its vocabulary size)");
  if (d == "text" && !info.tokenizes)
    throw input_error("the server does not tokenize (" + info.tokenize_error + "), and says no vocabulary size; give --vocab N for random token ids");
  return d;
}

// The text prompts are cut from (--dataset-path, or the built-in text) in the server's tokens.
std::vector<std::int32_t> text_corpus(const args& a, const bench::client_options& co, std::string& note) {
  std::string text;
  if (auto path = a.get("dataset-path")) {
    std::ifstream in(*path);
    if (!in) throw input_error("cannot read --dataset-path " + *path);
    text.assign(std::istreambuf_iterator<char>(in), {});
    if (text.size() > (64u << 20)) text.resize(64u << 20);
  } else {
    text = std::string(bench::default_text());
  }
  auto corpus = bench::tokenize_text(co, text);
  if (corpus.empty()) throw input_error("the text to draw prompts from has no tokens");
  note = "prompts from " + a.get("dataset-path", "the built-in text") + " (" + std::to_string(corpus.size()) + " tokens)";
  return corpus;
}

// The workload the options describe (arrivals, lengths, shared prefixes), its prompts drawn
// from `corpus` when there is one.
planned_workload generated_workload(const args& a, const bench::server_info& info, int overhead, int vocab,
                                    const std::vector<std::int32_t>& corpus) {
  planned_workload out;
  bench::workload_options w;
  w.requests = int(a.get_int("requests", 64));
  w.rate = a.get_double("rate", 0);
  w.process = a.has("arrival") ? bench::parse_arrival(*a.get("arrival")) : w.rate > 0 ? bench::arrival::poisson : bench::arrival::burst;
  if (w.process != bench::arrival::burst && w.rate <= 0) throw input_error("--arrival poisson|fixed needs --rate R");
  w.prompt_dist = bench::parse_length_dist(a.get("prompt-dist", "fixed"));
  w.output_dist = bench::parse_length_dist(a.get("output-dist", "fixed"));
  if (auto sp = a.get("shared-prefix")) {  // SYSTEMS:USERS:PREFIX_TOKENS
    if (std::sscanf(sp->c_str(), "%d:%d:%d", &w.systems, &w.users, &w.prefix_len) != 3 || w.systems < 1 || w.users < 1 || w.prefix_len < 1)
      throw input_error("--shared-prefix: expected SYSTEMS:USERS:PREFIX_TOKENS, e.g. 4:16:512, got '" + *sp + "'");
    if (!a.has("requests")) w.requests = w.systems * w.users;
  }
  default_lengths(a, info, overhead, w);
  w.vocab = vocab > 0 ? vocab : 32000;
  w.corpus = &corpus;
  w.seed = std::uint64_t(a.get_int("seed", 0));
  w.shuffle = a.has("shuffle");
  if (w.requests < 1 || w.prompt_len < 1 || w.output_len < 1) throw input_error("--requests, --prompt-len and --output-len must be positive");
  out.plan = bench::plan_workload(w);
  if (w.systems > 0) {  // every request after its system prompt's first reuses its whole blocks
    const int block = int(a.get_int("block-size", 16));
    if (block < 1) throw input_error("--block-size: must be positive");
    const long long used = std::min<long long>(w.systems, (w.requests + w.users - 1) / std::max(w.users, 1));
    out.ideal_hits = (w.requests - used) * (w.prefix_len / block) * block;
  }
  return out;
}

planned_workload plan_requests(const args& a, const bench::client_options& co, const bench::server_info& info) {
  const std::uint64_t seed = std::uint64_t(a.get_int("seed", 0));
  const int overhead = co.chat ? info.chat_overhead + 8 : 0;  // 8: text re-tokenized at a window's edges
  const int vocab = int(a.get_int("vocab", info.vocab_size));
  const std::string dataset = dataset_of(a, info, vocab);
  std::string note = dataset == "random" ? "random token ids below " + std::to_string(vocab) : "";
  const std::vector<std::int32_t> corpus = dataset == "text" ? text_corpus(a, co, note) : std::vector<std::int32_t>{};
  planned_workload out;
  if (auto trace = a.get("trace")) {
    out.plan = bench::read_trace(*trace, vocab > 0 ? vocab : 32000, seed);
    for (std::size_t i = 0; i < out.plan.size(); ++i)  // token-count entries take real text where there is some
      if (!corpus.empty() && !out.plan[i].prompt_ids.empty())
        out.plan[i].prompt_ids = bench::corpus_window(corpus, out.plan[i].prompt_len, seed, 4000000 + i);
  } else {
    out = generated_workload(a, info, overhead, vocab, corpus);
    if (dataset == "sharegpt") sharegpt_prompts(a, co, info, overhead, out.plan);
  }
  out.note = dataset == "sharegpt" ? "prompts from the ShareGPT file " + a.get("dataset-path", "") : note;
  if (info.max_model_len > 0) {
    const int cut = bench::fit_to_context(out.plan, info.max_model_len, overhead);
    if (cut > 0) out.note += "; " + std::to_string(cut) + " request(s) shortened to the context of " + std::to_string(info.max_model_len);
  }
  if (co.chat)  // chat sends text: the planned tokens as the server decodes them
    for (auto& r : out.plan)
      if (r.prompt_text.empty() && !r.prompt_ids.empty()) r.prompt_text = bench::detokenize(co, r.prompt_ids);
  return out;
}

bench::client_options client_options_of(const args& a, const std::string& url) {
  bench::client_options co = bench::parse_url(url);
  co.chat = a.has("chat");
  co.ignore_eos = !a.has("no-ignore-eos");
  co.max_concurrency = int(a.get_int("concurrency", 0));
  co.request_timeout_s = a.get_double("timeout", 1800);
  co.api_key = a.get("api-key", std::getenv("OPENAI_API_KEY") ? std::getenv("OPENAI_API_KEY") : "");
  return co;
}

// Per request, in plan order (vLLM's --save-detailed): seconds.
void add_detailed(const std::vector<bench::request_result>& results, nlohmann::json& j) {
  nlohmann::json starts = nlohmann::json::array(), ttfts = nlohmann::json::array(), e2els = nlohmann::json::array(),
                 outs = nlohmann::json::array(), models = nlohmann::json::array();
  for (const auto& r : results) {
    starts.push_back(r.start);
    ttfts.push_back(r.ok ? nlohmann::json(r.ttft) : nlohmann::json(nullptr));
    e2els.push_back(r.ok ? nlohmann::json(r.e2e) : nlohmann::json(nullptr));
    outs.push_back(r.output_tokens);
    models.push_back(r.model);  // which model answered: a fallback under overload
  }
  j["starts"] = starts;
  j["ttfts"] = ttfts;
  j["e2els"] = e2els;
  j["output_lens"] = outs;
  j["models"] = models;
}

// The server's /metrics before and after the run, read as troupe names them (either
// metric_prefix); a line of the text report for each figure found.
struct server_scrape {
  std::string before, after;
  std::optional<double> delta(const std::string& name) const {  // after - before; absent before is zero (a histogram's first observation)
    auto read = [&](const std::string& text) {
      auto v = metrics::sum_samples(text, "troupe:" + name);
      return v ? v : metrics::sum_samples(text, "troupe_" + name);
    };
    const auto a = read(after);
    if (!a) return std::nullopt;
    return *a - read(before).value_or(0);
  }
};

void add_line(std::string& text, const char* label, const char* format, double value) {
  char b[200];
  std::snprintf(b, sizeof b, "%-40s ", label);
  text += b;
  std::snprintf(b, sizeof b, format, value);
  text += b;
  text += "\n";
}

// The prefix-cache hit rate over the run (troupe's counters, in tokens as vLLM's), beside the
// ideal one for a workload with shared prefixes.
void cache_figures(const server_scrape& m, const std::vector<bench::planned_request>& plan, long long ideal_hits, nlohmann::json& j,
                   std::string& text) {
  const auto queries = m.delta("prefix_cache_queries_total"), hits = m.delta("prefix_cache_hits_total");
  if (!queries || !hits || !(*queries > 0)) return;
  j["prefix_cache_hit_rate"] = *hits / *queries;
  add_line(text, "Prefix cache hit rate (server):", "%.3f", *hits / *queries);
  if (ideal_hits <= 0) return;
  long long prompt_tokens = 0;
  for (const auto& r : plan) prompt_tokens += r.prompt_len;
  j["prefix_cache_hit_rate_ideal"] = double(ideal_hits) / double(prompt_tokens);
  add_line(text, "Prefix cache hit rate (ideal):", "%.3f", double(ideal_hits) / double(prompt_tokens));
}

// Disaggregated serving: the KV transfer phase (decode replica's reservation to KV in place).
void transfer_figures(const server_scrape& m, nlohmann::json& j, std::string& text) {
  const auto sum = m.delta("request_kv_transfer_time_seconds_sum"), n = m.delta("request_kv_transfer_time_seconds_count");
  if (!sum || !n || !(*n > 0)) return;
  j["kv_transfers"] = *n;
  j["mean_kv_transfer_ms"] = *sum / *n * 1e3;
  add_line(text, "KV transfers (server):", "%.0f", *n);
  add_line(text, "Mean KV transfer time (server, ms):", "%.2f", *sum / *n * 1e3);
}

// The server's own CPU per streamed token, where it exports it (troupe does).
void cpu_figures(const server_scrape& m, const bench::summary& s, nlohmann::json& j, std::string& text) {
  const auto frontend = m.delta("frontend_cpu_seconds_total");
  if (!frontend || s.output_tokens <= 0) return;
  j["server_frontend_cpu_us_per_token"] = *frontend * 1e6 / double(s.output_tokens);
  add_line(text, "Server frontend CPU per token (us):", "%.2f", *frontend * 1e6 / double(s.output_tokens));
  const auto p0 = metrics::sum_samples(m.before, "process_cpu_seconds_total"), p1 = metrics::sum_samples(m.after, "process_cpu_seconds_total");
  if (!p0 || !p1) return;
  j["server_process_cpu_us_per_token"] = (*p1 - *p0) * 1e6 / double(s.output_tokens);
  add_line(text, "Server process CPU per token (us):", "%.2f", (*p1 - *p0) * 1e6 / double(s.output_tokens));
}

std::optional<std::string> scrape_metrics(const bench::client_options& co) {
  try {
    auto [status, body] = bench::http_get(co, "/metrics");
    if (status == 200) return body;
  } catch (const input_error&) {
  }
  return std::nullopt;
}

// A recorded request log's lines name their model and endpoint: --model sends every request to
// one model instead (a canary, another server); an endpoint the run does not use is refused.
void use_trace_fields(const args& a, const bench::client_options& co, std::vector<bench::planned_request>& plan) {
  const std::string endpoint = co.chat ? "chat" : "completions";
  for (std::size_t i = 0; i < plan.size(); ++i) {
    auto& r = plan[i];
    if (a.has("model") || a.has("baseline")) r.model.clear();
    if (!r.endpoint.empty() && r.endpoint != endpoint)
      throw input_error("--trace: request " + std::to_string(i + 1) + " (in time order) was sent to " + r.endpoint + ", and this run sends " + endpoint +
                        (co.chat ? " (drop --chat, or keep only the trace's chat lines)" : " (add --chat, or keep only the trace's completions lines)"));
  }
}

// One run of the plan against co's server and model, summarized.
struct run_outcome {
  std::vector<bench::request_result> results;
  bench::summary s;
  bool stopped = false;
};

run_outcome run_plan(const bench::client_options& co, const std::vector<bench::planned_request>& plan, const bench::slo& goal, bool quiet) {
  run_outcome out;
  double duration = 0;
  out.results = bench::run_requests(
      co, plan, [&](std::size_t d, std::size_t t) { if (!quiet) progress_bar("bench serve", d, t, "requests"); }, &duration, &out.stopped);
  if (!quiet) std::fprintf(stderr, "\n");
  out.s = bench::summarize(out.results, duration, goal);
  return out;
}

// --baseline NAME [--baseline-url URL]: the same requests, replayed against the baseline once
// this run (the canary's) is done, reported beside it; --canary-split: this run went to the
// canary side of the model's rollout, the replay goes to its baseline side. Returns whether all
// of them succeeded.
bool against_baseline(const args& a, bench::client_options co, const std::vector<bench::planned_request>& plan, const bench::slo& goal,
                      bool quiet, const bench::summary& canary, nlohmann::json& j) {
  const bool split = a.has("canary-split");
  const std::string canary_name = split ? co.model + " (canary)" : co.model;
  if (auto url = a.get("baseline-url")) {
    const bench::client_options other = client_options_of(a, *url);
    co.host = other.host, co.port = other.port, co.prefix = other.prefix;
  }
  if (split) co.split = "baseline";
  else co.model = *a.get("baseline");
  const std::string baseline_name = split ? co.model + " (baseline)" : co.model;
  if (!quiet) std::fprintf(stderr, "bench serve: the same %zu requests against the baseline \"%s\"\n", plan.size(), baseline_name.c_str());
  const run_outcome b = run_plan(co, plan, goal, quiet);
  std::fputs(("baseline \"" + baseline_name + "\":\n" + bench::to_text(b.s)).c_str(), stdout);
  std::fputs(bench::versus_text(canary, b.s, canary_name, baseline_name).c_str(), stdout);
  j["baseline"] = bench::to_json(b.s);
  j["baseline"]["model_id"] = co.model;
  if (split) j["split"] = "canary", j["baseline"]["split"] = "baseline";
  j["versus_baseline"] = bench::versus_json(canary, b.s);
  if (b.s.failed > 0)
    std::fprintf(stderr, "bench serve: %d of %zu requests to the baseline failed; the server said:\n%s", b.s.failed, b.results.size(),
                 first_errors(b.results, 5).c_str());
  return b.s.failed == 0;
}

// The requests of two tokens or more that succeeded, as the profile's fits take them.
std::vector<sim::served_request> served_requests(const std::vector<bench::request_result>& results) {
  std::vector<sim::served_request> out;
  for (const auto& r : results)
    if (r.ok && r.output_tokens >= 2) out.push_back({r.prompt_tokens, r.output_tokens, r.ttft, r.e2e});
  if (out.empty()) throw input_error("--fit-profile: no request of two tokens or more succeeded");
  return out;
}

// --fit-profile FILE (at --concurrency 1, where nothing queues): what serving adds to the
// forward the profile prices (sim::fit_serving), added to FILE; when the server moved the
// requests' KV (`kv_moved`: disaggregated), what its handoff adds to the copy (sim::fit_handoff).
void add_serving_fit(const std::string& path, const bench::client_options& co, const std::vector<bench::request_result>& results,
                     bool kv_moved) {
  if (co.max_concurrency != 1) throw input_error("--fit-profile: measures a server with nothing queued: --concurrency 1");
  sim::profile_file p = sim::read_profile_file(path, "fit-profile");
  if (kv_moved && !p.serving)
    throw input_error("--fit-profile: " + path + " has no serving fit yet; a disaggregated server's handoff is measured on top of it: "
                      "run this against an aggregated server first");
  const auto served = served_requests(results);
  if (kv_moved) {
    p.serving->handoff_s = sim::fit_handoff(p, served, path);
    sim::write_profile_file(path, p, "fit-profile");
    std::fprintf(stderr, "handoff: %.3f ms beyond the KV copy -> %s\n", p.serving->handoff_s * 1e3, path.c_str());
    return;
  }
  p.serving = sim::fit_serving(p, served, "troupe bench serve --concurrency 1, " + std::to_string(served.size()) + " requests");
  sim::write_profile_file(path, p, "fit-profile");
  std::fprintf(stderr, "serving: %.3f ms per step, %.3f ms per first token, %.3f ms per stream beyond the forward -> %s\n",
               p.serving->step_s * 1e3, p.serving->first_token_s * 1e3, p.serving->stream_s * 1e3, path.c_str());
  if (!sim::tells_stream_apart(served))
    std::fprintf(stderr,
                 "serving: every answer had %d tokens, so a stream's cost is not told from a step's (the step's holds it); "
                 "--output-dist uniform gives answers of several lengths\n",
                 served.front().output_tokens);
}

}  // namespace

int cmd_bench_serve(const args& a) {
  auto url = a.get("url");
  if (!url) throw input_error("usage: troupe bench serve --url http://HOST:PORT [options]; see troupe bench serve --help");
  if (a.has("baseline-url") && !a.has("baseline")) throw input_error("--baseline-url: only with --baseline NAME");
  if (a.has("canary-split") && a.has("baseline"))
    throw input_error("--canary-split compares the two sides of one model's rollout; --baseline compares two models: one or the other");
  bench::note_stops_until_run();
  bench::client_options co = client_options_of(a, *url);
  if (a.has("canary-split")) co.split = "canary";
  bench::server_info info = bench::discover(co);
  co.tokenize_field = info.tokenize_field;
  co.model = a.get("model", info.model);
  if (a.has("max-model-len")) info.max_model_len = int(a.get_int("max-model-len", 0));
  planned_workload pw = plan_requests(a, co, info);
  use_trace_fields(a, co, pw.plan);
  const auto& plan = pw.plan;
  const bench::slo goal = bench::parse_slo(words(a.get("goodput", "")));
  const bool quiet = a.has("quiet");

  const std::optional<std::string> before = scrape_metrics(co);
  if (!quiet)
    std::fprintf(stderr, "bench serve: %zu requests to %s (model \"%s\", context %s), concurrency %s; %s\n", plan.size(),
                 url->c_str(), co.model.c_str(), info.max_model_len > 0 ? std::to_string(info.max_model_len).c_str() : "unknown",
                 co.max_concurrency > 0 ? std::to_string(co.max_concurrency).c_str() : "unlimited", pw.note.c_str());
  const run_outcome run = run_plan(co, plan, goal, quiet);
  const auto& results = run.results;
  const bool stopped = run.stopped;
  if (stopped)
    std::fprintf(stderr, "bench serve: stopped by a signal; %zu of the %zu planned requests were sent and are reported\n",
                 results.size(), plan.size());
  const bench::summary& s = run.s;
  nlohmann::json j = bench::to_json(s);
  j["planned_requests"] = plan.size();
  j["stopped_by_signal"] = stopped;
  j["max_concurrency"] = co.max_concurrency > 0 ? nlohmann::json(co.max_concurrency) : nlohmann::json(nullptr);
  j["model_id"] = co.model;
  if (a.has("detailed")) add_detailed(results, j);
  std::string text = bench::to_text(s);
  bool kv_moved = false;  // the server moved requests' KV between replicas: disaggregated
  if (before)
    if (auto after = scrape_metrics(co)) {
      const server_scrape m{*before, *after};
      kv_moved = m.delta("request_kv_transfer_time_seconds_count").value_or(0) > 0;
      cache_figures(m, plan, pw.ideal_hits, j, text);
      transfer_figures(m, j, text);
      cpu_figures(m, s, j, text);
    }
  std::fputs(text.c_str(), stdout);
  if (s.failed > 0)
    std::fprintf(stderr, "bench serve: %s of %zu requests failed; the server said:\n%s", s.completed == 0 ? "all" : std::to_string(s.failed).c_str(),
                 results.size(), first_errors(results, 5).c_str());
  if (auto fit = a.get("fit-profile")) add_serving_fit(*fit, co, results, kv_moved);
  const bool baseline_ok = !(a.has("baseline") || a.has("canary-split")) || stopped || against_baseline(a, co, plan, goal, quiet, s, j);
  if (auto out = a.get("json")) {
    std::ofstream(*out) << j.dump(2) << "\n";
    std::printf("wrote %s\n", out->c_str());
  }
  if (auto prefix = a.get("plot")) {
    if (s.completed == 0) std::fprintf(stderr, "bench serve: no plot: no request succeeded\n");
    else for (const auto& f : bench::plot(results, *prefix)) std::printf("wrote %s\n", f.c_str());
  }
  return s.failed == 0 && baseline_ok ? 0 : 1;
}

}  // namespace troupe::cli
