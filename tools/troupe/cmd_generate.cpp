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
  if (auto p = a.get("prompt")) texts.push_back(*p);
  if (auto p = a.get("prompt-ids")) id_prompts.push_back(parse_ids(*p, "--prompt-ids"));
  if (auto f = a.get("prompts-file")) {
    std::ifstream in(*f);
    if (!in) throw input_error(*f + ": cannot open");
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) texts.push_back(line);
  }
  if (texts.empty() && id_prompts.empty()) texts.push_back("The scheduler decides which requests run at every step, and");

  engine::engine_config cfg;
  if (topo) cfg = topology::engine_config_of(*topo);
  if (auto kv = a.get("kv-dtype")) cfg.kv_type = parse_kv_dtype(*kv);  // model_folder.h
  cfg.sched.max_num_batched_tokens = int(a.get_int("max-batched-tokens", cfg.sched.max_num_batched_tokens));
  cfg.sched.long_prefill_chunk = int(a.get_int("chunk", cfg.sched.long_prefill_chunk));
  cfg.num_blocks = int(a.get_int("kv-blocks", 0));
  if (topo) {  // flags override the topology's limits for every replica
    topo->scheduler.limits = cfg.sched;
    topo->scheduler.kv_dtype = cfg.kv_type;
    if (cfg.num_blocks > 0) throw input_error("--kv-blocks applies without --config; set scheduler.kv_memory in the topology");
  }

  sampling::sampling_params sp;
  sp.max_tokens = int(a.get_int("max-tokens", 32));
  sp.temperature = float(a.get_double("temperature", 0.0));
  sp.top_k = int(a.get_int("top-k", 0));
  sp.top_p = float(a.get_double("top-p", 1.0));
  sp.min_p = float(a.get_double("min-p", 0.0));
  sp.repetition_penalty = float(a.get_double("repetition-penalty", 1.0));
  if (a.has("seed")) sp.seed = std::uint64_t(a.get_int("seed", 0));
  if (auto s = a.get("stop")) sp.stop.push_back(*s);
  // Every flag is read before the model loads: a bad one fails at once, whatever the folder.
  opened_model m = open_model(dir);
  sp.ignore_eos = a.has("ignore-eos");

  std::vector<engine::request> reqs;
  for (auto& t : texts) {
    if (!m.tok) {
      id_prompts.push_back(parse_ids(t, "prompt (the model has no tokenizer.json, so prompts are token ids)"));
      continue;
    }
    reqs.push_back({std::to_string(reqs.size()), m.tok->encode(t), {}, sp, 0});
  }
  for (auto& ids : id_prompts) reqs.push_back({std::to_string(reqs.size()), ids, {}, sp, 0});

  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < reqs.size(); ++i) index[reqs[i].id] = i;
  std::vector<std::vector<std::int32_t>> out(reqs.size());
  std::vector<std::string> text(reqs.size()), reason(reqs.size());
  const auto t0 = std::chrono::steady_clock::now();
  double first_token_s = -1;
  auto take = [&](const std::string& id, const std::vector<std::int32_t>& tokens, const std::string& delta,
                  bool finished, const std::string& why) {
    std::size_t i = index.at(id);
    out[i].insert(out[i].end(), tokens.begin(), tokens.end());
    text[i] += delta;
    if (first_token_s < 0 && !tokens.empty())
      first_token_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (finished) reason[i] = why;
  };
  engine::engine_stats st;
  if (topo) {
    // Through the runtime: request owner -> router -> the replicas' scheduler actors.
    runtime_config rcfg;
    caf::actor_system sys{rcfg};
    actors::local_cluster cluster(sys, *topo, m.model, m.tok);
    caf::scoped_actor self{sys};
    for (auto& r : reqs) {
      bool ok = false;
      std::string err;
      self->request(cluster.owner(), topo->timeouts.request, actors::submit_atom::value, r,
                    caf::actor_cast<actors::token_sink>(self))
          .receive([&](bool accepted) { ok = accepted; }, [&](caf::error& e) { err = sys.render(e); });
      if (!ok) throw input_error("request " + r.id + " was refused: " + err);
    }
    std::size_t done = 0;
    while (done < reqs.size()) {
      self->receive(
          [&](actors::token_batch& b) {
            ++st.steps;
            for (auto& u : b.updates) {
              take(u.id, u.tokens, u.text, u.finished, u.reason == engine::finish_reason::error ? "error: " + u.error : engine::finish_reason_name(u.reason));
              done += u.finished ? 1 : 0;
            }
          },
          caf::after(std::chrono::duration_cast<std::chrono::milliseconds>(topo->timeouts.request)) >> [&] {
            throw input_error("no tokens from the runtime for " + std::to_string(topo->timeouts.request.count()) + " ms");
          });
    }
  } else {
    auto e = engine::cpu_engine(m.model, m.tok, cfg);
    for (auto& r : reqs) e.add_request(r);
    while (e.has_unfinished())
      for (auto& o : e.step()) take(o.id, o.new_tokens, o.text_delta, o.finished, engine::finish_reason_name(o.reason));
    st = e.stats();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::size_t prompt_tokens = 0, generated = 0;
  for (std::size_t i = 0; i < reqs.size(); ++i) prompt_tokens += reqs[i].prompt.size(), generated += out[i].size();

  if (a.has("json")) {
    nlohmann::json j;
    j["model"] = dir;
    for (std::size_t i = 0; i < reqs.size(); ++i)
      j["outputs"].push_back({{"id", reqs[i].id}, {"prompt_tokens", reqs[i].prompt.size()}, {"output_ids", out[i]},
                              {"text", text[i]}, {"finish_reason", reason[i]}});
    j["stats"] = {{"requests", reqs.size()}, {"prompt_tokens", prompt_tokens}, {"generated_tokens", generated},
                  {"seconds", secs}, {"first_token_seconds", first_token_s}, {"steps", st.steps},
                  {"preemptions", st.preemptions}, {"tokens_per_second", (prompt_tokens + generated) / secs},
                  {"generated_tokens_per_second", generated / secs}};
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    std::printf("[%s] prompt: %zu tokens", reqs[i].id.c_str(), reqs[i].prompt.size());
    if (i < texts.size() && m.tok) std::printf(" \"%s\"", texts[i].c_str());
    std::printf("\n    output (%zu tokens, %s): ", out[i].size(), reason[i].c_str());
    if (m.tok) {
      std::printf("\"%s\"\n", text[i].c_str());
    } else {
      for (std::size_t k = 0; k < out[i].size(); ++k) std::printf("%s%d", k ? "," : "", out[i][k]);
      std::printf("\n");
    }
  }
  std::printf("\n%zu request(s): %zu prompt + %zu generated tokens in %.3f s (%d steps, %llu preemptions)\n",
              reqs.size(), prompt_tokens, generated, secs, int(st.steps), (unsigned long long)st.preemptions);
  std::printf("throughput: %.1f generated tok/s, %.1f total tok/s; first token after %.3f s\n", generated / secs,
              (prompt_tokens + generated) / secs, first_token_s);
  return 0;
}

}  // namespace troupe::cli
