#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include <caf/all.hpp>

#include "actors/cluster/local_cluster.h"
#include "runtime/common/error.h"
#include "runtime/engine/engine.h"
#include "tools/troupe/args.h"
#include "tools/troupe/commands.h"
#include "tools/troupe/model_folder.h"
#include "topology/topology.h"

namespace troupe::cli {

namespace {

std::vector<std::int32_t> parse_ids(const std::string& s, const std::string& what) {
  std::vector<std::int32_t> ids;
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t comma = s.find(',', pos);
    std::string part = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    try {
      std::size_t used = 0;
      long v = std::stol(part, &used);
      if (used != part.size()) throw std::invalid_argument("x");
      ids.push_back(std::int32_t(v));
    } catch (const std::exception&) {
      throw input_error(what + ": '" + part + "' is not a token id");
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return ids;
}

struct runtime_config : caf::actor_system_config {
  runtime_config() {
    actors::register_protocols(*this);
    actors::configure_workers(*this);
  }
};

}  // namespace

namespace {

// --prompt, --prompt-ids and --prompts-file; the default prompt when none is given.
void read_prompts(const args& a, std::vector<std::string>& texts, std::vector<std::vector<std::int32_t>>& id_prompts) {
  if (auto p = a.get("prompt")) texts.push_back(*p);
  if (auto p = a.get("prompt-ids")) id_prompts.push_back(parse_ids(*p, "--prompt-ids"));
  if (auto f = a.get("prompts-file")) {
    std::ifstream in(*f);
    if (!in) throw input_error(*f + ": cannot open");
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) texts.push_back(line);
  }
  if (texts.empty() && id_prompts.empty()) texts.push_back("The scheduler decides which requests run at every step, and");
}

// The engine's settings: the topology's, then the flags (which override it for every replica).
engine::engine_config engine_config_for(const args& a, std::optional<topology::topology_config>& topo) {
  engine::engine_config cfg;
  if (topo) cfg = topology::engine_config_of(*topo);
  if (auto kv = a.get("kv-dtype")) cfg.kv_type = parse_kv_dtype(*kv);  // model_folder.h
  cfg.sched.max_num_batched_tokens = int(a.get_int("max-batched-tokens", cfg.sched.max_num_batched_tokens));
  cfg.sched.long_prefill_chunk = int(a.get_int("chunk", cfg.sched.long_prefill_chunk));
  cfg.num_blocks = int(a.get_int("kv-blocks", 0));
  if (topo) {
    topo->scheduler.limits = cfg.sched;
    topo->scheduler.kv_dtype = cfg.kv_type;
    if (cfg.num_blocks > 0) throw input_error("--kv-blocks applies without --config; set scheduler.kv_memory in the topology");
  }
  return cfg;
}

sampling::sampling_params sampling_of(const args& a) {
  sampling::sampling_params sp;
  sp.max_tokens = int(a.get_int("max-tokens", 32));
  sp.temperature = float(a.get_double("temperature", 0.0));
  sp.top_k = int(a.get_int("top-k", 0));
  sp.top_p = float(a.get_double("top-p", 1.0));
  sp.min_p = float(a.get_double("min-p", 0.0));
  sp.repetition_penalty = float(a.get_double("repetition-penalty", 1.0));
  if (a.has("seed")) sp.seed = std::uint64_t(a.get_int("seed", 0));
  if (auto s = a.get("stop")) sp.stop.push_back(*s);
  sp.ignore_eos = a.has("ignore-eos");
  return sp;
}

// The requests' outputs as they arrive, and when the first token came.
struct generation {
  explicit generation(const std::vector<engine::request>& reqs) : out(reqs.size()), text(reqs.size()), reason(reqs.size()) {
    for (std::size_t i = 0; i < reqs.size(); ++i) index[reqs[i].id] = i;
  }
  void take(const std::string& id, const std::vector<std::int32_t>& tokens, const std::string& delta, bool finished,
            const std::string& why) {
    std::size_t i = index.at(id);
    out[i].insert(out[i].end(), tokens.begin(), tokens.end());
    text[i] += delta;
    if (first_token_s < 0 && !tokens.empty())
      first_token_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (finished) reason[i] = why;
  }
  std::map<std::string, std::size_t> index;
  std::vector<std::vector<std::int32_t>> out;
  std::vector<std::string> text, reason;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  double first_token_s = -1;
  engine::engine_stats stats;
};

// Through the runtime: request owner -> router -> the replicas' scheduler actors.
void run_in_runtime(const topology::topology_config& topo, const opened_model& m, const std::vector<engine::request>& reqs,
                    generation& g) {
  runtime_config rcfg;
  caf::actor_system sys{rcfg};
  actors::local_cluster cluster(sys, topo, m.model, m.tok);
  caf::scoped_actor self{sys};
  for (auto& r : reqs) {
    bool ok = false;
    std::string err;
    self->request(cluster.owner(), topo.timeouts.request, actors::submit_atom::value, r, caf::actor_cast<actors::token_sink>(self))
        .receive([&](bool accepted) { ok = accepted; }, [&](caf::error& e) { err = sys.render(e); });
    if (!ok) throw input_error("request " + r.id + " was refused: " + err);
  }
  std::size_t done = 0;
  while (done < reqs.size()) {
    self->receive(
        [&](actors::token_batch& b) {
          ++g.stats.steps;
          for (auto& u : b.updates) {
            g.take(u.id, u.tokens, u.text, u.finished,
                   u.reason == engine::finish_reason::error ? "error: " + u.error : engine::finish_reason_name(u.reason));
            done += u.finished ? 1 : 0;
          }
        },
        caf::after(std::chrono::duration_cast<std::chrono::milliseconds>(topo.timeouts.request)) >> [&] {
          throw input_error("no tokens from the runtime for " + std::to_string(topo.timeouts.request.count()) + " ms");
        });
  }
}

void run_in_process(const opened_model& m, const engine::engine_config& cfg, const std::vector<engine::request>& reqs,
                    generation& g) {
  auto e = engine::cpu_engine(m.model, m.tok, cfg);
  for (auto& r : reqs) e.add_request(r);
  while (e.has_unfinished())
    for (auto& o : e.step()) g.take(o.id, o.new_tokens, o.text_delta, o.finished, engine::finish_reason_name(o.reason));
  g.stats = e.stats();
}

void print_json(const std::string& dir, const std::vector<engine::request>& reqs, const generation& g, double secs,
                std::size_t prompt_tokens, std::size_t generated) {
  nlohmann::json j;
  j["model"] = dir;
  for (std::size_t i = 0; i < reqs.size(); ++i)
    j["outputs"].push_back({{"id", reqs[i].id}, {"prompt_tokens", reqs[i].prompt.size()}, {"output_ids", g.out[i]},
                            {"text", g.text[i]}, {"finish_reason", g.reason[i]}});
  j["stats"] = {{"requests", reqs.size()}, {"prompt_tokens", prompt_tokens}, {"generated_tokens", generated},
                {"seconds", secs}, {"first_token_seconds", g.first_token_s}, {"steps", g.stats.steps},
                {"preemptions", g.stats.preemptions}, {"tokens_per_second", (prompt_tokens + generated) / secs},
                {"generated_tokens_per_second", generated / secs}};
  std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

void print_text(const std::vector<std::string>& texts, bool tokenizer, const std::vector<engine::request>& reqs,
                const generation& g, double secs, std::size_t prompt_tokens, std::size_t generated) {
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    std::printf("[%s] prompt: %zu tokens", reqs[i].id.c_str(), reqs[i].prompt.size());
    if (i < texts.size() && tokenizer) std::printf(" \"%s\"", texts[i].c_str());
    std::printf("\n    output (%zu tokens, %s): ", g.out[i].size(), g.reason[i].c_str());
    if (tokenizer) {
      std::printf("\"%s\"\n", g.text[i].c_str());
    } else {
      for (std::size_t k = 0; k < g.out[i].size(); ++k) std::printf("%s%d", k ? "," : "", g.out[i][k]);
      std::printf("\n");
    }
  }
  std::printf("\n%zu request(s): %zu prompt + %zu generated tokens in %.3f s (%d steps, %llu preemptions)\n",
              reqs.size(), prompt_tokens, generated, secs, int(g.stats.steps), (unsigned long long)g.stats.preemptions);
  std::printf("throughput: %.1f generated tok/s, %.1f total tok/s; first token after %.3f s\n", generated / secs,
              (prompt_tokens + generated) / secs, g.first_token_s);
}

}  // namespace

int cmd_generate(const args& a) {
  // A topology supplies the model and the scheduler's limits; flags override it.
  std::optional<topology::topology_config> topo;
  if (auto c = a.get("config")) {
    topo = topology::load_topology(*c);
    if (topo->model.backend != topology::backend_kind::cpu)
      throw input_error(*c + ": generate runs the engine in this process on the CPU; backend \"" +
                        topology::backend_name(topo->model.backend) + "\" needs the distributed runtime");
  }
  const std::string dir = a.get("model", topo ? topo->model.path : default_model_dir());
  std::vector<std::string> texts;
  std::vector<std::vector<std::int32_t>> id_prompts;
  read_prompts(a, texts, id_prompts);
  const engine::engine_config cfg = engine_config_for(a, topo);
  const sampling::sampling_params sp = sampling_of(a);
  // Every flag is read before the model loads: a bad one fails at once, whatever the folder.
  opened_model m = open_model(dir);

  std::vector<engine::request> reqs;
  for (auto& t : texts) {
    if (!m.tok) {
      id_prompts.push_back(parse_ids(t, "prompt (the model has no tokenizer.json, so prompts are token ids)"));
      continue;
    }
    reqs.push_back({std::to_string(reqs.size()), m.tok->encode(t), {}, sp, 0});
  }
  for (auto& ids : id_prompts) reqs.push_back({std::to_string(reqs.size()), ids, {}, sp, 0});

  generation g(reqs);
  if (topo)
    run_in_runtime(*topo, m, reqs, g);
  else
    run_in_process(m, cfg, reqs, g);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - g.t0).count();
  std::size_t prompt_tokens = 0, generated = 0;
  for (std::size_t i = 0; i < reqs.size(); ++i) prompt_tokens += reqs[i].prompt.size(), generated += g.out[i].size();
  if (a.has("json"))
    print_json(dir, reqs, g, secs, prompt_tokens, generated);
  else
    print_text(texts, m.tok != nullptr, reqs, g, secs, prompt_tokens, generated);
  return 0;
}

}  // namespace troupe::cli
