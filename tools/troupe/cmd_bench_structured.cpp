// troupe bench structured: what constrained decoding costs, over the JSON Schema corpus
// (tests/structured/corpus/schemas.json) on a real model and tokenizer. Compile time per schema
// (cold, no cache); the mask per token per sequence, replayed over the tokens the engine chose
// for each schema: new (the schema's first request in a process that has served the schemas
// before it: its states are new, the fragments they are made of mostly not), cold (the same in a
// new process: nothing walked yet) and cached (the same schema again); and output tokens per
// second of the engine with and without a schema at concurrency 1 and 16, measured in this
// process, in rounds that alternate the two, with the median of the rounds' ratios.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/common/json.h"
#include "runtime/engine/engine.h"
#include "runtime/structured/constraint.h"
#include "runtime/structured/json_schema.h"
#include "tools/troupe/args.h"
#include "tools/troupe/commands.h"
#include "tools/troupe/model_folder.h"

namespace troupe::cli {

namespace {

using clock_type = std::chrono::steady_clock;
using kind = sampling::output_constraint::kind;

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

double quantile(std::vector<double> v, double p) {  // nearest rank
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, std::size_t(p * double(v.size() - 1) + 0.5))];
}

engine::request constrained(const opened_model& m, const std::string& id, const std::string& schema, int max_tokens) {
  engine::request r;
  r.id = id;
  r.prompt = m.tok->encode("Write the record as JSON.");
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  if (!schema.empty()) r.params.constraint = {kind::json_schema, schema};
  return r;
}

engine::engine bench_engine(const opened_model& m) {
  engine::engine_config cfg;
  cfg.sched.max_num_batched_tokens = 2048;
  cfg.sched.long_prefill_chunk = 512;
  return engine::cpu_engine(m.model, m.tok, cfg);
}

// Output tokens per request id, and tokens per second, of running `reqs` `width` at a time.
std::pair<std::map<std::string, std::vector<std::int32_t>>, double> run(engine::engine& e, std::vector<engine::request> reqs,
                                                                      std::size_t width) {
  std::map<std::string, std::vector<std::int32_t>> out;
  std::size_t next = 0, live = 0, tokens = 0;
  const auto t0 = clock_type::now();
  while (next < reqs.size() || e.has_unfinished()) {
    for (; live < width && next < reqs.size(); ++live) e.add_request(reqs[next++]);
    for (auto& o : e.step()) {
      auto& t = out[o.id];
      t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
      tokens += o.new_tokens.size();
      if (o.finished) --live;
    }
  }
  return {out, double(tokens) / seconds_since(t0)};
}

// Each mask along the engine's tokens for every schema, timed three ways: a schema new to a
// served cache, a new process's cache, and the same cache again (us per mask).
struct mask_timings {
  std::vector<double> new_us, cold_us, warm_us;
};

template <class Vocab, class Outputs>
mask_timings mask_times(const Vocab& vocab, const std::vector<std::string>& schemas, const Outputs& outputs) {
  mask_timings out;
  auto& new_us = out.new_us;
  auto& cold_us = out.cold_us;
  auto& warm_us = out.warm_us;
  structured::grammar_cache served(vocab, 1);  // one grammar at a time; the fragments stay
  for (std::size_t i = 0; i < schemas.size(); ++i) {
    structured::constrained_output first(served.get({kind::json_schema, schemas[i]}));
    for (std::int32_t t : outputs.at("s" + std::to_string(i))) {
      const auto t0 = clock_type::now();
      std::vector<std::uint64_t> row = first.mask()->words();
      new_us.push_back(seconds_since(t0) * 1e6);
      if (!first.accept(t)) break;
    }
    structured::grammar_cache grammars(vocab);  // a fresh cache: a new process
    const auto c = grammars.get({kind::json_schema, schemas[i]});
    for (auto* times : {&cold_us, &warm_us}) {
      structured::constrained_output seq(c);
      for (std::int32_t t : outputs.at("s" + std::to_string(i))) {
        const auto t0 = clock_type::now();
        auto mask = seq.mask();
        std::vector<std::uint64_t> row = mask->words();  // what the engine copies into the sampling row
        times->push_back(seconds_since(t0) * 1e6);
        if (!seq.accept(t)) break;
      }
    }
  }
  return out;
}

// Throughput with and without a schema: the same prompts and, request by request, the same
// number of tokens (the unconstrained one runs to the length the constrained one stopped at),
// so the difference is what the constraint costs. Two cases: every request with the same
// schema (an application's usual traffic: after the first requests its masks are cached), and
// each request with a schema of its own (every grammar new: the worst case; no schema comes
// back in a later round). One engine per case, as a server has: its vocabulary's trie is built
// by a first request before the rounds.
nlohmann::json throughput_levels(const opened_model& m, const std::vector<std::string>& schemas, int rounds, int max_tokens) {
  nlohmann::json levels = nlohmann::json::array();
  for (const bool shared : {true, false})
    for (std::size_t c : {std::size_t(1), std::size_t(16)}) {
      auto e = bench_engine(m);
      run(e, {constrained(m, "warm", schemas.back(), 4)}, 1);
      const std::size_t count = std::max<std::size_t>(c * 4, 12);
      std::vector<double> ons, offs, ratios;
      for (int r = 0; r < rounds; ++r) {  // alternated: a slow spell of the machine hits both
        std::vector<engine::request> with, without;
        for (std::size_t i = 0; i < count; ++i) {
          const std::size_t schema = shared ? 0 : (std::size_t(r) * count + i) * 5 % std::max<std::size_t>(1, schemas.size() - 1);
          with.push_back(constrained(m, "w" + std::to_string(r) + "-" + std::to_string(i), schemas[schema], max_tokens));
        }
        // The API compiles a request's constraint before it is queued (runtime/api/structured_output.h):
        // the engine's compile is then a cache hit, as it is here.
        for (const auto& w : with) structured::compile_constraint(w.params.constraint);
        const auto [lengths, on] = run(e, with, c);
        for (const auto& w : with) {
          auto plain = constrained(m, w.id + "-plain", "", std::max<int>(1, int(lengths.at(w.id).size())));
          plain.params.ignore_eos = true;
          without.push_back(plain);
        }
        const double off = run(e, without, c).second;
        ons.push_back(on);
        offs.push_back(off);
        ratios.push_back(on / off);
      }
      levels.push_back({{"concurrency", c}, {"schemas", shared ? "one for all" : "one each"}, {"rounds", rounds},
                        {"unconstrained_tok_s", quantile(offs, 0.5)}, {"schema_tok_s", quantile(ons, 0.5)},
                        {"ratio", quantile(ratios, 0.5)}, {"ratio_min", quantile(ratios, 0)}, {"ratio_max", quantile(ratios, 1)}});
    }
  return levels;
}

}  // namespace

int cmd_bench_structured(const args& a) {
  const std::string dir = a.get("model", "models/kjv");
  const std::string corpus_path = a.get("corpus", "tests/structured/corpus/schemas.json");
  const int max_tokens = int(a.get_int("max-tokens", 128));
  const int rounds = int(a.get_int("rounds", 3));
  if (rounds < 1 || rounds > 3) throw input_error("--rounds: expected 1 to 3 (each round of one schema each takes new schemas)");
  const bool json_out = a.has("json");
  std::ifstream in(corpus_path);
  if (!in) throw input_error(corpus_path + ": cannot read the schema corpus");
  const nlohmann::json corpus = parse_json(std::string(std::istreambuf_iterator<char>(in), {}), corpus_path);
  if (!corpus.is_array() || corpus.empty()) throw input_error(corpus_path + ": expected an array of {name, schema}");
  opened_model m = open_model(dir);
  if (!m.tok) throw input_error(dir + ": structured output needs the model's tokenizer.json");
  std::vector<std::string> schemas;
  for (const auto& e : corpus) schemas.push_back(e.at("schema").dump());

  // Compile, cold: the grammar only (the vocabulary's trie is built once per engine).
  std::vector<double> compile_ms;
  for (const auto& s : schemas) {
    const auto t = clock_type::now();
    structured::compile_json_schema(s);
    compile_ms.push_back(seconds_since(t) * 1e3);
  }

  // The tokens the engine chooses for each schema, then each mask along them replayed and timed.
  std::vector<engine::request> reqs;
  for (std::size_t i = 0; i < schemas.size(); ++i) reqs.push_back(constrained(m, "s" + std::to_string(i), schemas[i], max_tokens));
  auto first = bench_engine(m);
  const auto [outputs, all_tok_s] = run(first, reqs, 16);
  const auto vocab = structured::vocabulary_of(*m.tok, m.model->config().vocab_size, m.model->config().eos_token_ids);
  const mask_timings mt = mask_times(vocab, schemas, outputs);
  const auto& new_us = mt.new_us;
  const auto& cold_us = mt.cold_us;
  const auto& warm_us = mt.warm_us;

  const nlohmann::json levels = throughput_levels(m, schemas, rounds, max_tokens);

  nlohmann::json j = {{"model", dir}, {"schemas", schemas.size()}, {"vocab", vocab->size()}, {"trie_nodes", vocab->trie.nodes()},
                      {"compile_ms", {{"p50", quantile(compile_ms, 0.5)}, {"p99", quantile(compile_ms, 0.99)}}},
                      {"mask_us_new", {{"p50", quantile(new_us, 0.5)}, {"p99", quantile(new_us, 0.99)}, {"mean", mean(new_us)}}},
                      {"mask_us_cold", {{"p50", quantile(cold_us, 0.5)}, {"p99", quantile(cold_us, 0.99)}, {"mean", mean(cold_us)}, {"n", cold_us.size()}}},
                      {"mask_us_warm", {{"p50", quantile(warm_us, 0.5)}, {"p99", quantile(warm_us, 0.99)}, {"n", warm_us.size()}}},
                      {"throughput", levels}};
  if (json_out) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%zu schemas, vocabulary %zu tokens (trie %zu nodes), model %s\n", schemas.size(), vocab->size(), vocab->trie.nodes(),
              dir.c_str());
  std::printf("compile            p50 %8.2f ms   p99 %8.2f ms\n", quantile(compile_ms, 0.5), quantile(compile_ms, 0.99));
  std::printf("mask, new schema   p50 %8.1f us   p99 %8.1f us   mean %6.1f us   (%zu tokens)\n", quantile(new_us, 0.5),
              quantile(new_us, 0.99), mean(new_us), new_us.size());
  std::printf("mask, new process  p50 %8.1f us   p99 %8.1f us   mean %6.1f us\n", quantile(cold_us, 0.5), quantile(cold_us, 0.99),
              mean(cold_us));
  std::printf("mask, cached       p50 %8.1f us   p99 %8.1f us\n", quantile(warm_us, 0.5), quantile(warm_us, 0.99));
  for (const auto& l : levels)
    std::printf("concurrency %2d, %-11s %8.1f tok/s with a schema, %8.1f without: %.3fx (rounds %.3f-%.3f)\n",
                l["concurrency"].get<int>(), l["schemas"].get<std::string>().c_str(), l["schema_tok_s"].get<double>(),
                l["unconstrained_tok_s"].get<double>(), l["ratio"].get<double>(), l["ratio_min"].get<double>(),
                l["ratio_max"].get<double>());
  return 0;
}

}  // namespace troupe::cli
