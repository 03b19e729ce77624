// troupe serve (the head) and troupe node (a process hosting replicas for the head).
#include <cmath>
#include <csignal>
#include <cstdio>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "actors/control/admin_endpoint.h"
#include "actors/api/frontend.h"
#include "actors/cluster/local_cluster.h"
#include "actors/cluster/node.h"
#include "runtime/common/error.h"
#include "runtime/kv/transfer/registry.h"
#include "runtime/model/generation_config.h"
#include "tools/troupe/args.h"
#include "tools/troupe/cluster_auth.h"
#include "tools/troupe/commands.h"
#include "runtime/model/gguf_import.h"
#include "tools/troupe/model_folder.h"
#include "tools/troupe/signals.h"
#include "runtime/model/model_source.h"
#include "runtime/model/model_tokenizer.h"

namespace troupe::cli {

namespace {

struct cluster_config : caf::actor_system_config {
  explicit cluster_config(const topology::topology_config& t) {
    actors::register_protocols(*this);
    actors::configure_workers(*this);
    actors::configure_network(*this, t.timeouts, t.cluster);
  }
};

// --tls-certificate/--tls-key/--tls-ca (what `troupe launch --netns` passes) replace the
// topology's [cluster] TLS files.
void apply_tls_flags(const args& a, topology::topology_config& topo) {
  const int given = a.has("tls-certificate") + a.has("tls-key") + a.has("tls-ca");
  if (given == 0) return;
  if (given != 3) throw input_error("--tls-certificate, --tls-key and --tls-ca go together");
  topo.cluster.tls_certificate = *a.get("tls-certificate");
  topo.cluster.tls_key = *a.get("tls-key");
  topo.cluster.tls_ca = *a.get("tls-ca");
}

std::pair<std::string, std::uint16_t> split_address(const std::string& a, const std::string& what) {
  const auto colon = a.rfind(':');
  try {
    if (colon != std::string::npos && colon > 0) return {a.substr(0, colon), std::uint16_t(std::stoi(a.substr(colon + 1)))};
  } catch (const std::exception&) {
  }
  throw input_error(what + ": expected HOST:PORT, got '" + a + "'");
}

// The folder model `name` is read from here: [model]'s may be replaced by --model (or the
// positional argument); the others are their [models.NAME] path.
std::string folder_of(const topology::topology_config& topo, const std::string& name, const std::string& primary_dir) {
  return name.empty() ? primary_dir : topo.model_named(name)->path;
}

// The models the replicas placed on `node` serve, loaded (none in a sim topology).
actors::loaded_models open_models_for(const topology::topology_config& topo, const std::string& node, const std::string& primary_dir) {
  actors::loaded_models out;
  if (topo.model.backend == topology::backend_kind::sim) return out;
  for (const auto& p : topology::place_replicas(topo)) {
    if (p.node != node || out.count(p.model)) continue;
    opened_model m = open_model(folder_of(topo, p.model, primary_dir));
    out[p.model] = {m.model, m.tok};
  }
  return out;
}

}  // namespace

namespace {

// --status-file: one word a probe reads (loading, ready, draining, parked, joining,
// unresponsive, stopping), replaced whole so a reader never sees half of it. The serving
// thread's words until the stop writes its own, which stays.
class status_file {
 public:
  explicit status_file(std::optional<std::string> path) : path_(std::move(path)) { put("loading"); }
  void report(const std::string& word) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stopping_ && word != last_) put(word);
  }
  void stopping() {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    put("stopping");
  }

 private:
  void put(const std::string& word) {
    last_ = word;
    if (!path_) return;
    const std::string tmp = *path_ + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << word << "\n";
      if (!out) throw input_error("--status-file: cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), path_->c_str()) != 0) throw input_error("--status-file: cannot replace " + *path_);
  }
  std::optional<std::string> path_;
  std::mutex mutex_;
  bool stopping_ = false;
  std::string last_;
};

}  // namespace

int cmd_node(const args& a) {
  apply_log_flags(a);
  status_file status(a.get("status-file"));
  stop_signals signals;  // before any thread starts: SIGTERM stops the node in order (its KV segments go)
  if (a.positional().size() != 1) throw input_error("usage: troupe node CONFIG --name NODE [--head HOST:PORT] [--model DIR]");
  auto topo = topology::load_topology(a.positional()[0]);
  apply_tls_flags(a, topo);
  auto name = a.get("name");
  if (!name) throw input_error("--name NODE is required");
  if (!topo.node(*name)) throw input_error(topo.source + ": no node named \"" + *name + "\"");
  // The heads to join: --head HOST:PORT[,HOST:PORT...], else every head of the topology.
  std::vector<actors::head_address> heads;
  if (auto list = a.get("head")) {
    for (std::size_t pos = 0; pos <= list->size();) {
      const std::size_t comma = std::min(list->find(',', pos), list->size());
      auto [host, port] = split_address(list->substr(pos, comma - pos), "--head");
      heads.push_back({host + ":" + std::to_string(port), host, port});
      pos = comma + 1;
    }
  } else {
    for (const auto* h : topo.heads()) heads.push_back({h->name, h->host, h->port});
  }
  for (const auto& h : heads)
    if (h.port == 0) throw input_error(topo.source + ": head " + h.name + " has port 0; give --head HOST:PORT");
  const std::string dir = a.get("model", topo.model.path);
  const actors::join_credentials credentials{cluster_token(topo, heads.front().port, false), served_fingerprint(topo, dir)};
  actors::loaded_models models = open_models_for(topo, *name, dir);
  if (!models.count("") && topo.model.backend != topology::backend_kind::sim) {  // ranks of [model]'s groups may be placed here
    opened_model m = open_model(dir);
    models[""] = {m.model, m.tok};
  }
  // KV leaves this process by pull: other processes of this host map its caches' segments, other
  // hosts read them over TCP on this node's address, presenting each cache's secret.
  kv::transfer::registry::global().set_tcp_host(topo.node(*name)->host);
  cluster_config cfg(topo);
  caf::actor_system sys{cfg};
  // The node serves on a thread of its own until a signal (or its own end) wakes this one.
  std::atomic<bool> stop{false};
  std::exception_ptr failed;
  std::thread serving([&] {
    try {
      actors::run_node(
          sys, topo, *name, heads, models, credentials,
          [&](std::size_t n) {
            std::printf("troupe node %s: ready, %zu replica(s) registered with %zu head(s)\n", name->c_str(), n, heads.size());
            std::fflush(stdout);
            status.report("ready");
          },
          [&](const std::string& event) {
            std::printf("troupe node %s: %s\n", name->c_str(), event.c_str());
            std::fflush(stdout);
          },
          &stop,
          [&](const std::string& word) { status.report(word); });
    } catch (...) {
      failed = std::current_exception();
    }
    signals.request_stop();
  });
  if (const int sig = signals.wait_for_stop(); sig != 0) std::fprintf(stderr, "troupe node %s: signal %d, stopping\n", name->c_str(), sig);
  status.stopping();
  stop = true;
  serving.join();
  if (failed) std::rethrow_exception(failed);
  return 0;
}

namespace {

// What the frontend needs of a model: its name, context, vocabulary, tokenizer and chat
// template (also on a head that hosts no replica, so it reads only the small files).
struct served_model {
  std::string name;
  std::vector<std::string> aliases;
  int max_model_len = 0, vocab_size = 0;
  std::optional<model::pooling_config> pooling;  // an embedding model's (modules.json)
  int hidden_size = 0;
  std::shared_ptr<const tokenizer::tokenizer> tok;
  std::optional<chat::chat_template> chat;
  sampling::sampling_params sampling_defaults;
  nlohmann::json card;  // what `troupe admin topology` shows of it
};

// Model `spec` of the topology, read from `dir` (its path, or --model's for [model]); `tok` the
// tokenizer of the copy this process loaded, if it did.
served_model describe_model(const topology::topology_config& topo, const topology::model_spec& spec, const std::string& dir,
                            std::shared_ptr<const tokenizer::tokenizer> tok, const std::string& chat_template_file) {
  served_model s;
  model::model_config mc;
  if (spec.backend == topology::backend_kind::sim) {
    mc = topology::sim_shape(spec);
  } else {
    ensure_model(dir);  // a head that hosts no replica still reads the model's small files
    mc = model::load_model_config(dir);
  }
  const std::string at = spec.label() + " ";
  if (spec.max_model_len > mc.max_position_embeddings && mc.max_position_embeddings > 0)
    throw input_error(at + "max_model_len " + std::to_string(spec.max_model_len) + " is beyond the model's " +
                      std::to_string(mc.max_position_embeddings) + " positions (max_position_embeddings of " +
                      (dir.empty() ? spec.preset : dir) + ")");
  s.max_model_len = spec.max_model_len > 0 ? spec.max_model_len : mc.max_position_embeddings;
  s.vocab_size = mc.vocab_size;
  s.pooling = mc.pooling;
  s.hidden_size = mc.hidden_size;
  s.tok = std::move(tok);
  if (!s.tok && !dir.empty()) s.tok = load_tokenizer(dir);
  if (!dir.empty() && std::filesystem::exists(dir)) {
    s.chat = load_chat_template(dir, chat_template_file);
    if (!model::is_gguf_path(dir)) s.sampling_defaults = model::load_generation_config(dir).defaults;
  } else if (!chat_template_file.empty()) {
    s.chat = chat::chat_template::load("", chat_template_file);
  }
  if (spec.name.empty()) {
    s.name = topo.frontend.model_name;
    s.aliases = topo.frontend.model_aliases;
  } else {
    s.name = spec.served_names.front();
    s.aliases.assign(spec.served_names.begin() + 1, spec.served_names.end());
  }
  if (s.name.empty()) s.name = !dir.empty() ? std::filesystem::path(dir).filename().string() : spec.preset;
  if (s.name.empty()) s.name = "troupe";
  s.card = {{"path", dir.empty() ? "preset " + spec.preset : dir}, {"name", s.name}, {"architecture", mc.architecture},
            {"layers", mc.num_hidden_layers}, {"max_model_len", s.max_model_len}, {"vocab_size", s.vocab_size},
            {"backend", topology::backend_name(spec.backend)}};
  if (!spec.revision.empty()) s.card["revision"] = spec.revision;
  if (s.pooling) s.card["pooling"] = {{"method", model::pooling_method_name(s.pooling->method)}, {"normalize", s.pooling->normalize}};
  return s;
}

// A fallback answers the same token ids as the model it stands in for: the same vocabulary and
// tokenizer (the prompt was tokenized for the model asked), else the topology is refused.
void check_fallback_tokenizers(const topology::topology_config& topo, const std::vector<served_model>& served) {
  const auto specs = topo.models();
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (specs[i]->fallback.empty()) continue;
    const served_model& from = served[i];
    const served_model& to = served[topo.model_index(specs[i]->fallback)];
    if (!model::same_token_ids(from.tok.get(), from.vocab_size, to.tok.get(), to.vocab_size))
      throw input_error(topo.source + ": " + specs[i]->label() + " fallback: \"" + to.name + "\" has another tokenizer or vocabulary than \"" +
                        from.name + "\"; a fallback must read the same token ids");
  }
}

// What `troupe admin topology` shows of the models: [model]'s card, and with [models.NAME]
// tables {"model": that card, "models": {NAME: card}}.
nlohmann::json model_cards(const topology::topology_config& topo, const std::vector<served_model>& served) {
  if (served.size() == 1) return served.front().card;
  nlohmann::json out{{"model", served.front().card}};
  for (std::size_t i = 1; i < served.size(); ++i) out["models"][topo.more_models[i - 1].name] = served[i].card;
  return out;
}

// --admin-port N: the admin endpoint at port N and its events at N + 1, on the topology's [admin]
// host (its keys kept), or on loopback when the topology has no [admin].
topology::admin_spec admin_at_port(topology::admin_spec spec, std::uint16_t port) {
  if (port == 0 || port == 65535) throw input_error("--admin-port: " + std::to_string(port) + " leaves no port for the events (N + 1)");
  auto host_of = [](const std::string& endpoint) {
    const auto from = endpoint.find("://"), colon = endpoint.rfind(':');
    if (from == std::string::npos || colon == std::string::npos || colon <= from + 3) return std::string("127.0.0.1");
    return endpoint.substr(from + 3, colon - from - 3);
  };
  const std::string host = spec.enabled() ? host_of(spec.endpoint) : "127.0.0.1";
  spec.endpoint = "tcp://" + host + ":" + std::to_string(port);
  spec.events = "tcp://" + host + ":" + std::to_string(port + 1);
  return spec;
}

// What `troupe serve`'s positional argument names: a topology (*.toml), or, as `vllm serve`
// takes it, a model folder or .gguf file served by the embedded default topology.
struct serve_target {
  std::string config = "configs/local.toml";
  std::optional<std::string> model;
};

serve_target serve_positional(const args& a) {
  namespace fs = std::filesystem;
  serve_target t;
  if (a.positional().empty()) return t;
  const std::string& p = a.positional()[0];
  if (p.ends_with(".toml")) {
    t.config = p;
    return t;
  }
  std::error_code ec;
  if (!fs::is_directory(p, ec) && !model::is_gguf_path(p))
    throw input_error(p + ": not a topology (*.toml), a model folder or a .gguf file");
  if (a.has("model")) throw input_error("the model is given twice: as " + p + " and as --model " + *a.get("model"));
  t.model = p;
  return t;
}

// vLLM's flags, mapped onto the topology: --served-model-name, --max-model-len and
// --tensor-parallel-size (every pool whose group runs in one process).
// vLLM's LoRA flags onto [lora]: --enable-lora, --lora-modules NAME=PATH[,NAME=PATH...],
// --max-loras N (adapters loaded at once per replica), and VLLM_ALLOW_RUNTIME_LORA_UPDATING=true
// for the load/unload routes (runtime_loading).
void apply_lora_flags(const args& a, topology::topology_config& topo) {
  const char* env = std::getenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING");
  const bool runtime = env && (std::string(env) == "true" || std::string(env) == "True" || std::string(env) == "1");
  if (!a.has("enable-lora")) {
    for (const char* f : {"lora-modules", "max-loras"})
      if (a.has(f)) throw input_error(std::string("--") + f + ": needs --enable-lora (as in vLLM)");
  } else {
    if (auto why = topology::lora_unsupported(topo)) throw input_error("--enable-lora: " + *why);
    if (auto m = a.get("lora-modules")) {
      std::stringstream in(*m);
      for (std::string item; std::getline(in, item, ',');) {
        const auto eq = item.find('=');
        if (eq == std::string::npos) throw input_error("--lora-modules: expected NAME=PATH, got \"" + item + "\"");
        if (auto why = topology::add_lora_adapter(topo, {item.substr(0, eq), item.substr(eq + 1)}))
          throw input_error("--lora-modules: " + *why);
      }
    }
    const long long most =
        a.get_int("max-loras", std::max({(long long)topo.lora.max_adapters, 8LL, (long long)topo.lora.adapters.size()}));
    if (most < 1 || most > 64 || most < (long long)topo.lora.adapters.size())
      throw input_error("--max-loras: expected 1 to 64, and at least the " + std::to_string(topo.lora.adapters.size()) + " adapters given");
    topo.lora.max_adapters = int(most);
  }
  if (runtime) {
    if (!topo.lora.enabled()) throw input_error("VLLM_ALLOW_RUNTIME_LORA_UPDATING: needs --enable-lora or [lora]");
    topo.lora.runtime_loading = true;
  }
  if (topo.lora.enabled())
    if (auto why = topology::lora_unsupported(topo)) throw input_error("[lora]: " + *why + " (after the flags)");
}

void apply_vllm_flags(const args& a, topology::topology_config& topo) {
  if (auto n = a.get("served-model-name")) {  // NAME or NAME,ALIAS,...: the first is the name answers carry
    std::vector<std::string> names;
    std::stringstream in(*n);
    for (std::string x; std::getline(in, x, ',');) names.push_back(x);
    if (auto e = topology::assign_model_names(topo.frontend, names)) throw input_error("--served-model-name: " + *e);
  }
  if (a.has("max-model-len")) {
    const long long len = a.get_int("max-model-len", 0);
    if (len < 1 || len > (1 << 30)) throw input_error("--max-model-len: expected a positive number of tokens");
    topo.model.max_model_len = int(len);
  }
  if (a.has("tensor-parallel-size")) {
    const long long tp = a.get_int("tensor-parallel-size", 1);
    if (tp < 1 || tp > 64) throw input_error("--tensor-parallel-size: expected 1 to 64");
    for (auto& pool : topo.pools) {
      if (!pool.rank_nodes.empty())
        throw input_error("--tensor-parallel-size: pool " + pool.name + " places its ranks with rank_nodes; set tensor_parallel in " + topo.source);
      pool.tensor_parallel = int(tp);
    }
  }
  apply_lora_flags(a, topo);
}

// --shutdown-grace, else [frontend] shutdown_grace.
std::chrono::milliseconds shutdown_grace(const args& a, const topology::topology_config& topo) {
  return a.get_duration("shutdown-grace").value_or(topo.frontend.shutdown_grace);
}

// The OpenAI API off loopback needs an API key: there is nothing else between it and the network.
void check_http_exposure(const args& a, const actors::frontend_config& fc) {
  const std::string& h = fc.http.host;
  if (h == "localhost" || h.rfind("127.", 0) == 0 || h == "::1" || !fc.api_keys.empty() || a.has("allow-unauthenticated")) return;
  throw input_error("--host " + h + ": the OpenAI API would listen off loopback with no authentication; give --api-key KEY "
                    "(or api_keys in [frontend]), or --allow-unauthenticated to accept that");
}

// What the frontend serves of one model.
actors::served_model_spec served_spec(const topology::model_spec& spec, const served_model& served) {
  actors::served_model_spec m;
  m.key = spec.name;
  m.model_name = served.name;
  m.model_aliases = served.aliases;
  if (!spec.tool_call_parser.empty()) m.tool_call_parser = chat::tool_format_named(spec.tool_call_parser);
  m.max_model_len = served.max_model_len;
  m.vocab_size = served.vocab_size;
  m.pooling = served.pooling;
  m.embedding_size = served.hidden_size;
  m.sampling_defaults = served.sampling_defaults;
  m.tok = served.tok;
  m.chat = served.chat;
  return m;
}

// The HTTP face's settings: the topology's [frontend], the served models ([model]'s first), and
// the flags.
actors::frontend_config frontend_config_of(const args& a, const topology::topology_config& topo, const std::vector<served_model>& served) {
  actors::frontend_config fc;
  fc.http.host = a.get("host", topo.frontend.host);
  fc.http.port = a.get_port("port", topo.frontend.port);
  fc.http.max_body = topo.frontend.max_body;
  fc.http.header_timeout_s = int(topo.frontend.header_timeout.count());
  fc.http.max_unsent_bytes = topo.frontend.max_unread;
  fc.models.clear();
  const auto specs = topo.models();
  for (std::size_t i = 0; i < specs.size(); ++i) {
    fc.models.push_back(served_spec(*specs[i], served[i]));
    if (!specs[i]->fallback.empty()) fc.models.back().fallback = served[topo.model_index(specs[i]->fallback)].name;
  }
  for (const auto& p : topology::place_replicas(topo)) fc.replica_models[p.replica.value] = served[topo.model_index(p.model)].name;
  fc.max_requests = topo.frontend.max_requests;
  fc.retry_after_s = topo.frontend.retry_after_s;
  fc.ttft_slo = topo.frontend.ttft_slo;
  fc.itl_slo = topo.frontend.itl_slo;
  fc.admission = topo.admission.cfg;
  fc.replica_names = topology::names_of(topo);
  for (const auto& p : topology::place_replicas(topo))
    if (p.started) fc.started_replicas.insert(p.replica.value);
  fc.metric_prefix = topo.frontend.metric_prefix;
  fc.request_timeout = topo.timeouts.request;
  fc.api_keys = topo.frontend.api_keys;
  fc.api_key_tenants = topo.frontend.api_key_tenants;
  fc.tenant_by_user = topo.frontend.tenant_by_user;
  if (auto key = a.get("api-key")) {
    if (key->empty()) throw input_error("--api-key: must not be empty");
    fc.api_keys.push_back(*key);
    fc.api_key_tenants.emplace_back();
  }
  for (const auto& p : topo.frontend.public_prompts) fc.public_prompts.emplace_back(p.name, p.text);
  fc.api_key_on_all_routes = topo.frontend.api_key_on_all_routes;
  if (!topo.frontend.request_trace.empty())
    fc.request_trace = std::make_shared<workload::request_trace>(topo.frontend.request_trace, topo.frontend.request_trace_max);
  check_http_exposure(a, fc);
  return fc;
}

// What `troupe serve` says once it listens: where, and how to try it.
void print_banner(std::uint16_t port, const actors::frontend_config& fc, const std::string& config,
                  const std::string& listen, std::uint16_t bound, std::uint32_t live, const topology::admin_spec& admin,
                  bool admin_up) {
  const std::string url = "http://" + fc.http.host + ":" + std::to_string(port);
  std::string names;
  for (const auto& m : fc.models) names += (names.empty() ? "\"" : ", \"") + m.model_name + "\"";
  std::printf("troupe serve: listening on %s (OpenAI API, model%s %s, %s); node registry on %s:%u; %u replica(s) live here\n",
              url.c_str(), fc.models.size() > 1 ? "s" : "", names.c_str(), config.c_str(), listen.c_str(), unsigned(bound), live);
  std::printf("try:  curl %s/v1/completions -H 'Content-Type: application/json' \\\n"
              "        -d '{\"prompt\": \"The actor model\", \"max_tokens\": 32}'\n"
              "      curl %s/v1/chat/completions -H 'Content-Type: application/json' \\\n"
              "        -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], \"stream\": true}'\n"
              "      curl %s/metrics\n",
              url.c_str(), url.c_str(), url.c_str());
  if (admin_up && admin.enabled())
    std::printf("admin endpoint on %s%s%s (troupe admin --config %s status)\n", admin.endpoint.c_str(),
                admin.events.empty() ? "" : ", events on ", admin.events.c_str(), config.c_str());
}

}  // namespace

int cmd_serve(const args& a) {
  apply_log_flags(a);
  stop_signals signals;  // before any thread starts
  a.get_port("port", 0);  // a bad port is refused before anything loads
  a.get_port("registry-port", 0);
  a.get_port("admin-port", 0);
  const serve_target target = serve_positional(a);
  const std::string& config = target.config;
  auto topo = load_config(config);
  apply_tls_flags(a, topo);
  apply_vllm_flags(a, topo);
  shutdown_grace(a, topo);  // a bad value is refused before anything loads
  const std::string head_name = a.get("name", topo.heads().front()->name);
  if (!topo.is_head(head_name)) throw input_error("--name " + head_name + ": not a head of " + topo.source);
  const auto& head = *topo.node(head_name);
  const std::uint16_t registry_port = a.get_port("registry-port", head.port);
  bool head_hosts = false;
  for (auto& p : topology::place_replicas(topo)) head_hosts = head_hosts || p.node == head.name;
  const std::string dir = target.model ? *target.model : a.get("model", topo.model.path);
  const actors::loaded_models models = open_models_for(topo, head_name, dir);
  if (head_hosts) kv::transfer::registry::global().set_tcp_host(head.host);  // as on a node (cmd_node)
  std::vector<served_model> served;
  for (const auto* spec : topo.models()) {
    auto loaded = models.find(spec->name);
    const std::string folder = spec->backend == topology::backend_kind::sim && spec->path.empty() ? "" : folder_of(topo, spec->name, dir);
    served.push_back(describe_model(topo, *spec, folder, loaded == models.end() ? nullptr : loaded->second.tok,
                                    spec->name.empty() ? a.get("chat-template", spec->chat_template) : spec->chat_template));
  }
  topo.frontend.model_name = served.front().name;  // what adapters and other models may not be named
  if (auto clash = topology::served_name_clash(topo)) throw input_error(topo.source + ": " + *clash);
  check_fallback_tokenizers(topo, served);
  cluster_config cfg(topo);
  caf::actor_system sys{cfg};
  actors::local_cluster cluster(sys, topo, models, actors::placement_mode::head_node_only, head_name);
  const std::string listen = a.get("listen", head.host);
  if (!topo.cluster.tls() && listen != "127.0.0.1" && listen.rfind("127.", 0) != 0 && listen != "localhost")
    throw input_error("--listen " + listen + ": the node registry listens off loopback only with TLS ([cluster] tls_* or --tls-*)");
  const std::uint16_t bound = cluster.publish(listen == "0.0.0.0" ? "" : listen, registry_port, topo.cluster.tls());
  cluster.admit({cluster_token(topo, bound, true), served_fingerprint(topo, dir)});
  const cluster_token_file token_file{bound};
  // The admin endpoint on every head (each at its own address, serving the whole cluster), and
  // the autoscaler on the first head only: one decision-maker.
  std::unique_ptr<actors::admin_endpoint> admin;
  topology::topology_config here = topo;
  here.admin = topology::admin_of(topo, head_name);
  if (a.has("admin-port")) here.admin = admin_at_port(here.admin, a.get_port("admin-port", 0));
  here.autoscaler.cfg.enabled = topo.autoscaler.cfg.enabled && head_name == topo.heads().front()->name;
  const actors::lora_serving lora{cluster.loras(), cluster.lora_manager(), topo.lora.runtime_loading};
  if (here.admin.enabled() || here.autoscaler.cfg.enabled)
    admin = std::make_unique<actors::admin_endpoint>(sys, here, cluster.router(), cluster.owner(), cluster.registry(), model_cards(topo, served), lora,
                                                     head_name);

  actors::frontend_config fc = frontend_config_of(a, topo, served);
  fc.lora = lora;
  std::unique_ptr<actors::frontend> fe;
  try {
    fe = std::make_unique<actors::frontend>(sys, cluster.owner(), cluster.router(), fc);
  } catch (const std::runtime_error& e) {
    throw input_error(std::string("the HTTP frontend ") + e.what());
  }
  print_banner(fe->port(), fc, config, listen, bound, cluster.live_replicas(), here.admin, admin != nullptr);
  std::fflush(stdout);
  const auto grace = shutdown_grace(a, topo);
  signals.set_grace(std::chrono::duration_cast<std::chrono::seconds>(grace) + std::chrono::seconds(10));
  const int sig = signals.wait_for_stop();
  std::fprintf(stderr, "troupe serve: signal %d, stopping: new requests get 503, those in flight have %.1f s to finish\n", sig,
               std::chrono::duration<double>(grace).count());
  const int cut = fe->drain(grace);
  if (cut > 0) std::fprintf(stderr, "troupe serve: %d request(s) still running at the end of the grace period were ended\n", cut);
  return 0;
}

}  // namespace troupe::cli
