#include "topology/topology.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <toml++/toml.h>

#include "runtime/common/error.h"
#include "topology/toml_reader.h"

namespace troupe::topology {

const char* backend_name(backend_kind b) {
  switch (b) {
    case backend_kind::cpu: return "cpu";
    case backend_kind::cuda: return "cuda";
    case backend_kind::sim: return "sim";
  }
  return "?";
}

const char* role_name(pool_role r) {
  switch (r) {
    case pool_role::prefill: return "prefill";
    case pool_role::decode: return "decode";
    case pool_role::both: return "both";
  }
  return "?";
}

const node_spec* topology_config::node(const std::string& name) const {
  for (auto& n : nodes)
    if (n.name == name) return &n;
  return nullptr;
}

const pool_spec* topology_config::pool_named(const std::string& name) const {
  for (auto& p : pools)
    if (p.name == name) return &p;
  return nullptr;
}

std::vector<const node_spec*> topology_config::heads() const {
  std::vector<const node_spec*> out;
  for (auto& n : nodes)
    if (n.head) out.push_back(&n);
  if (out.empty() && !nodes.empty()) out.push_back(&nodes.front());
  return out;
}

bool topology_config::is_head(const std::string& name) const {
  for (auto* h : heads())
    if (h->name == name) return true;
  return false;
}

namespace {

// A name as an error may quote it: control characters escaped, at most 40 characters.
std::string quoted(const std::string& name) {
  std::string out = "\"";
  for (std::size_t i = 0; i < name.size() && i < 40; ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += char(c);
    }
  }
  return out + (name.size() > 40 ? "...\"" : "\"");
}

}  // namespace

std::optional<std::string> dns_label_problem(const std::string& name, std::size_t max) {
  if (name.empty()) return std::string("a name cannot be empty");
  if (name.size() > max) return quoted(name) + " has " + std::to_string(name.size()) + " characters; at most " + std::to_string(max);
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  for (char c : name)
    if (!alnum(c) && c != '-')
      return quoted(name) + " is not an RFC 1123 name: only lower-case letters, digits and '-' (it reaches DNS names, "
             "file names and generated scripts)";
  if (!alnum(name.front()) || !alnum(name.back())) return quoted(name) + " is not an RFC 1123 name: it must start and end with a letter or digit";
  return std::nullopt;
}

std::optional<std::string> served_name_problem(const std::string& name, std::size_t max) {
  if (name.empty() || name.size() > max) return "expected a name of 1 to " + std::to_string(max) + " characters";
  for (char c : name)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return quoted(name) + " holds a control character";
  return std::nullopt;
}

namespace detail {  // the control plane's sections: [admission], [autoscaler], [admin], [kv_events] (read_control.cpp)
void read_admission(const reader& r, const toml::table& root, topology_config& t);
void read_autoscaler(const reader& r, const toml::table& root, topology_config& t);
void read_admin(const reader& r, const toml::table& root, topology_config& t);
void read_kv_events(const reader& r, const toml::table& root, topology_config& t);
void read_lora(const reader& r, const toml::table& root, topology_config& t);  // read_lora.cpp
void read_models(const reader& r, const toml::table& root, topology_config& t);  // read_models.cpp
void read_pool_model(const reader& r, const toml::table& pt, const topology_config& t, pool_spec& p);
void check_models_served(const reader& r, const toml::table& root, const topology_config& t);
void check_fallback_triggers(const reader& r, const topology_config& t);
}  // namespace detail

namespace {

using detail::loopback;
using detail::reader;
using detail::type_name;

void read_nodes(const reader& r, const toml::table& root, topology_config& t) {
  const toml::node* n = root.get("nodes");
  if (!n) r.fail(&root, "nodes", "at least one [[nodes]] entry is required");
  if (!n->is_array_of_tables()) r.fail(n, "nodes", "expected [[nodes]] tables");
  std::set<std::string> names;
  for (auto&& e : *n->as_array()) {
    const toml::table& nt = *e.as_table();
    r.only_keys(nt, "nodes.", {"name", "address", "head", "admin", "admin_events"});
    node_spec s;
    s.name = r.string(nt, "name", "nodes.", std::nullopt);
    if (auto why = dns_label_problem(s.name)) r.fail(nt.get("name"), "nodes.name", *why);
    s.admin_endpoint = r.string(nt, "admin", "nodes.", std::string());
    s.admin_events = r.string(nt, "admin_events", "nodes.", std::string());
    s.line = int(nt.source().begin.line);
    if (!names.insert(s.name).second) r.fail(nt.get("name"), "nodes.name", "duplicate node name \"" + s.name + "\"");
    const std::string addr = r.string(nt, "address", "nodes.", std::string("127.0.0.1:0"));
    const auto colon = addr.rfind(':');
    int port = -1;
    if (colon != std::string::npos && colon > 0) {
      try {
        std::size_t used = 0;
        port = std::stoi(addr.substr(colon + 1), &used);
        if (used != addr.size() - colon - 1) port = -1;
      } catch (const std::exception&) {
      }
    }
    if (port < 0 || port > 65535) r.fail(nt.get("address"), "nodes.address", "expected \"host:port\", got \"" + addr + "\"");
    s.host = addr.substr(0, colon);
    s.port = std::uint16_t(port);
    if (const toml::node* h = nt.get("head")) {
      if (!h->is_boolean()) r.fail(h, "nodes.head", std::string("expected true or false, got ") + type_name(*h));
      s.head = h->value<bool>().value();
    }
    t.nodes.push_back(std::move(s));
  }
  const auto heads = t.heads();
  if (heads.size() > 1)
    for (auto* h : heads)
      if (h->port == 0)
        r.fail(n, "nodes.address", "head \"" + h->name + "\" needs a fixed port: nodes join every head at its address");
}

void read_rank_nodes(const reader& r, const toml::node& rn, const topology_config& t, pool_spec& p) {
  const int ranks = p.pipeline_parallel * std::max(p.tensor_parallel, p.expert_parallel);
  if (!rn.is_array()) r.fail(&rn, "pools.rank_nodes", std::string("expected an array of node names, got ") + type_name(rn));
  for (auto&& x : *rn.as_array()) {
    if (!x.is_string()) r.fail(&x, "pools.rank_nodes", std::string("expected node names, got ") + type_name(x));
    const std::string name = x.value<std::string>().value();
    const node_spec* n = t.node(name);
    if (!n) r.fail(&x, "pools.rank_nodes", "pool \"" + p.name + "\" places a rank on unknown node \"" + name + "\"");
    if (!loopback(n->host))
      r.fail(&x, "pools.rank_nodes", "node \"" + name + "\" is at " + n->host +
                                         ", off loopback; ranks join their collectives over Gloo's TCP, which has no authentication, so "
                                         "a group's ranks may only be on nodes at loopback addresses");
    p.rank_nodes.push_back(name);
  }
  if (int(p.rank_nodes.size()) != ranks)
    r.fail(&rn, "pools.rank_nodes", "pool \"" + p.name + "\" has " + std::to_string(ranks) + " ranks per replica (pipeline_parallel x " +
                                        "tensor_parallel), but rank_nodes names " + std::to_string(p.rank_nodes.size()));
  for (const auto& node : p.nodes)
    if (!t.is_head(node))
      r.fail(&rn, "pools.rank_nodes", "pool \"" + p.name + "\" has replicas on node \"" + node +
                                          "\", which is not a head; a group places ranks on other nodes only from a head's process");
}

speculative::speculative_config read_speculative(const reader& r, const toml::table& st, const pool_spec& p,
                                                 const topology_config& t) {
  const std::string at = "pools.speculative.";
  r.only_keys(st, at, {"method", "k", "ngram_min", "ngram_max", "ngram_window", "draft_model", "min_acceptance",
                       "probe_every", "max_running", "adaptive"});
  speculative::speculative_config c;
  c.how = r.choice(st, "method", at, speculative::method::off,
                   {{"off", speculative::method::off}, {"ngram", speculative::method::ngram}, {"draft", speculative::method::draft}});
  c.k = int(r.integer(st, "k", at, c.k, 1, speculative::max_proposals));
  c.ngram.min_n = int(r.integer(st, "ngram_min", at, c.ngram.min_n, 1, 16));
  c.ngram.max_n = int(r.integer(st, "ngram_max", at, c.ngram.max_n, 1, 16));
  c.ngram.search_window = int(r.integer(st, "ngram_window", at, c.ngram.search_window, 2, 1 << 20));
  c.draft_model = r.string(st, "draft_model", at, std::string());
  if (const toml::node* n = st.get("min_acceptance")) c.min_acceptance = r.number(*n, at + "min_acceptance");
  c.probe_every = int(r.integer(st, "probe_every", at, c.probe_every, 1, 1 << 20));
  c.max_running = int(r.integer(st, "max_running", at, c.max_running, 0, 1 << 20));
  c.adaptive = r.boolean(st, "adaptive", at, true);
  const std::string pool = "pool \"" + p.name + "\": ";
  auto where = [&](const char* key) { return st.get(key) ? st.get(key) : static_cast<const toml::node*>(&st); };
  if (c.ngram.min_n > c.ngram.max_n)
    r.fail(where("ngram_min"), at + "ngram_min", pool + std::to_string(c.ngram.min_n) + " is above ngram_max (" + std::to_string(c.ngram.max_n) + ")");
  if (c.ngram.search_window <= c.ngram.max_n)
    r.fail(where("ngram_window"), at + "ngram_window", pool + "must be longer than ngram_max (" + std::to_string(c.ngram.max_n) + ")");
  if (!(c.min_acceptance >= 0 && c.min_acceptance <= 1))
    r.fail(where("min_acceptance"), at + "min_acceptance", pool + "must be in [0, 1]");
  if (c.how == speculative::method::draft && c.draft_model.empty())
    r.fail(where("draft_model"), at + "draft_model", pool + "method \"draft\" needs the draft model's folder");
  if (c.how != speculative::method::draft && !c.draft_model.empty())
    r.fail(where("draft_model"), at + "draft_model", pool + "a draft model needs method = \"draft\"");
  if (auto why = c.invalid("pools.speculative")) r.fail(&st, "pools.speculative", pool + *why);  // what the checks above missed
  if (c.on() && t.model.backend == backend_kind::sim)
    r.fail(st.get("method"), at + "method", "pool \"" + p.name + "\": the sim backend has no logits to verify proposals with");
  return c;
}

void read_pools(const reader& r, const toml::table& root, topology_config& t) {
  const toml::node* n = root.get("pools");
  if (!n) r.fail(&root, "pools", "at least one [[pools]] entry is required");
  if (!n->is_array_of_tables()) r.fail(n, "pools", "expected [[pools]] tables");
  std::set<std::string> names;
  for (auto&& e : *n->as_array()) {
    const toml::table& pt = *e.as_table();
    r.only_keys(pt, "pools.", {"name", "model", "role", "replicas", "min_replicas", "max_replicas", "warm_replicas", "nodes",
                                 "pipeline_parallel", "tensor_parallel", "expert_parallel", "micro_batches", "rank_nodes",
                                 "speculative"});
    pool_spec p;
    p.name = r.string(pt, "name", "pools.", std::nullopt);
    if (auto why = dns_label_problem(p.name, max_pool_name)) r.fail(pt.get("name"), "pools.name", *why);
    p.line = int(pt.source().begin.line);
    if (!names.insert(p.name).second) r.fail(pt.get("name"), "pools.name", "duplicate pool name \"" + p.name + "\"");
    detail::read_pool_model(r, pt, t, p);
    p.role = r.choice(pt, "role", "pools.", pool_role::both,
                      {{"prefill", pool_role::prefill}, {"decode", pool_role::decode}, {"both", pool_role::both}});
    p.replicas = int(r.integer(pt, "replicas", "pools.", 1, 1, 4096));
    p.max_replicas = int(r.integer(pt, "max_replicas", "pools.", p.replicas, 1, 4096));
    p.min_replicas = int(r.integer(pt, "min_replicas", "pools.", p.replicas, 0, 4096));
    if (p.max_replicas < p.replicas)
      r.fail(pt.get("max_replicas"), "pools.max_replicas", std::to_string(p.max_replicas) + " is below replicas (" + std::to_string(p.replicas) + ")");
    if (p.min_replicas > p.replicas)
      r.fail(pt.get("min_replicas"), "pools.min_replicas", std::to_string(p.min_replicas) + " is above replicas (" + std::to_string(p.replicas) + ")");
    if (pt.get("warm_replicas")) {
      p.warm_replicas = int(r.integer(pt, "warm_replicas", "pools.", 0, 0, 4096));
      if (p.warm_replicas > p.max_replicas - p.replicas)
        r.fail(pt.get("warm_replicas"), "pools.warm_replicas",
               std::to_string(p.warm_replicas) + " is more than the slots beyond replicas (max_replicas - replicas = " +
                   std::to_string(p.max_replicas - p.replicas) + ")");
    }
    p.pipeline_parallel = int(r.integer(pt, "pipeline_parallel", "pools.", 1, 1, 1024));
    p.tensor_parallel = int(r.integer(pt, "tensor_parallel", "pools.", 1, 1, 64));
    p.expert_parallel = int(r.integer(pt, "expert_parallel", "pools.", 1, 1, 64));
    if (p.expert_parallel > 1 && p.tensor_parallel != 1 && p.tensor_parallel != p.expert_parallel)
      r.fail(pt.get("expert_parallel"), "pools.expert_parallel",
             "expert_parallel = " + std::to_string(p.expert_parallel) + " runs on the stage's ranks, so tensor_parallel must be 1 or " +
                 std::to_string(p.expert_parallel) + ", not " + std::to_string(p.tensor_parallel));
    p.micro_batches = int(r.integer(pt, "micro_batches", "pools.", p.pipeline_parallel, 1, 1024));
    if (const toml::node* nn = pt.get("nodes")) {
      if (!nn->is_array()) r.fail(nn, "pools.nodes", std::string("expected an array of node names, got ") + type_name(*nn));
      for (auto&& x : *nn->as_array()) {
        if (!x.is_string()) r.fail(&x, "pools.nodes", std::string("expected node names, got ") + type_name(x));
        std::string name = x.value<std::string>().value();
        if (!t.node(name)) r.fail(&x, "pools.nodes", "pool \"" + p.name + "\" is placed on unknown node \"" + name + "\"");
        p.nodes.push_back(name);
      }
      if (p.nodes.empty()) r.fail(nn, "pools.nodes", "pool \"" + p.name + "\" lists no nodes");
    } else {
      p.nodes.push_back(t.heads().front()->name);
    }
    if (const toml::node* rn = pt.get("rank_nodes")) read_rank_nodes(r, *rn, t, p);
    if (const toml::table* st = r.table(pt, "speculative", "pools.")) p.speculative = read_speculative(r, *st, p, t);
    t.pools.push_back(std::move(p));
  }
  detail::check_models_served(r, root, t);
}

void read_scheduler(const reader& r, const toml::table& root, topology_config& t) {
  const toml::table* s = r.table(root, "scheduler", "");
  if (!s) return;
  r.only_keys(*s, "scheduler.", {"max_batched_tokens", "max_seqs", "block_size", "chunk", "kv_memory", "kv_dtype", "order", "prefix_caching"});
  t.scheduler.prefix_caching = r.boolean(*s, "prefix_caching", "scheduler.", true);
  auto& l = t.scheduler.limits;
  l.max_num_batched_tokens = int(r.integer(*s, "max_batched_tokens", "scheduler.", l.max_num_batched_tokens, 1, 1 << 20));
  l.max_num_seqs = int(r.integer(*s, "max_seqs", "scheduler.", l.max_num_seqs, 1, 1 << 16));
  l.block_size = int(r.integer(*s, "block_size", "scheduler.", l.block_size, 1, 1024));
  l.long_prefill_chunk = int(r.integer(*s, "chunk", "scheduler.", l.long_prefill_chunk, 0, 1 << 20));
  l.order = r.choice(*s, "order", "scheduler.", l.order, {{"fcfs", sched::queue_order::fcfs}, {"priority", sched::queue_order::priority}});
  if (const toml::node* kv = s->get("kv_memory")) {
    double bytes = r.size(*kv, "scheduler.kv_memory");
    if (bytes < 1) r.fail(kv, "scheduler.kv_memory", "must be positive");
    if (bytes > double(std::size_t(1) << 60)) r.fail(kv, "scheduler.kv_memory", "is beyond any machine");
    t.scheduler.kv_memory_bytes = std::size_t(bytes);
    t.scheduler.kv_memory_line = int(kv->source().begin.line);
  }
  t.scheduler.kv_dtype = r.choice(*s, "kv_dtype", "scheduler.", kernels::dtype::f32,
                                  {{"f32", kernels::dtype::f32}, {"f16", kernels::dtype::f16}, {"bf16", kernels::dtype::bf16},
                                   {"int8", kernels::dtype::int8}});
}

void read_router(const reader& r, const toml::table& root, topology_config& t) {
  const toml::table* rt = r.table(root, "router", "");
  if (!rt) return;
  r.only_keys(*rt, "router.", {"policy", "params", "disaggregate_min_prompt", "disaggregate_queue_ratio"});
  t.router.policy = r.string(*rt, "policy", "router.", std::string("round_robin"));
  t.router.disaggregate_min_prompt = int(r.integer(*rt, "disaggregate_min_prompt", "router.", 0, 0, 1 << 24));
  if (const toml::node* q = rt->get("disaggregate_queue_ratio")) {
    t.router.disaggregate_queue_ratio = r.number(*q, "router.disaggregate_queue_ratio");
    if (t.router.disaggregate_queue_ratio < 0) r.fail(q, "router.disaggregate_queue_ratio", "must be 0 (no limit) or positive");
  }
  auto& reg = routing::registry::global();
  if (!reg.has(t.router.policy)) {
    std::string known;
    for (auto& n : reg.names()) known += (known.empty() ? "" : ", ") + n;
    r.fail(rt->get("policy"), "router.policy", "unknown policy \"" + t.router.policy + "\" (known: " + known + ")");
  }
  if (const toml::table* p = r.table(*rt, "params", "router.")) {
    const auto& allowed = reg.params_of(t.router.policy);
    for (auto&& [k, v] : *p) {
      const std::string key(k.str());
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
        r.fail(&v, "router.params." + key, "policy \"" + t.router.policy + "\" takes no parameter \"" + key + "\"");
      t.router.params[key] = r.number(v, "router.params." + key);
    }
  }
}

void read_cluster(const reader& r, const toml::table& root, topology_config& t) {
  const toml::table* c = r.table(root, "cluster", "");
  auto& cl = t.cluster;
  if (c) {
    r.only_keys(*c, "cluster.", {"token", "token_file", "tls_certificate", "tls_key", "tls_ca"});
    cl.line = int(c->source().begin.line);
    cl.token = r.string(*c, "token", "cluster.", std::string());
    cl.token_file = r.string(*c, "token_file", "cluster.", std::string());
    if (!cl.token.empty() && !cl.token_file.empty()) r.fail(c->get("token"), "cluster.token", "give token or token_file, not both");
    if (c->get("token") && cl.token.size() < 16) r.fail(c->get("token"), "cluster.token", "must be at least 16 characters");
    cl.tls_certificate = r.string(*c, "tls_certificate", "cluster.", std::string());
    cl.tls_key = r.string(*c, "tls_key", "cluster.", std::string());
    cl.tls_ca = r.string(*c, "tls_ca", "cluster.", std::string());
    const int given = !cl.tls_certificate.empty() + !cl.tls_key.empty() + !cl.tls_ca.empty();
    if (given != 0 && given != 3)
      r.fail(c, "cluster.tls_certificate", "TLS needs all three of tls_certificate, tls_key and tls_ca");
  }
  if (cl.tls()) return;
  for (const auto& n : t.nodes)
    if (!loopback(n.host))
      throw input_error(t.source + ":" + std::to_string(n.line) + ": nodes.address: node \"" + n.name + "\" listens on " +
                        n.host + ", off loopback: set [cluster] tls_certificate, tls_key and tls_ca so links are authenticated");
}

void read_timeouts(const reader& r, const toml::table& root, topology_config& t) {
  const toml::table* to = r.table(root, "timeouts", "");
  if (!to) return;
  r.only_keys(*to, "timeouts.", {"heartbeat", "suspect", "connection", "request", "migration_limit", "step",
                                       "group_restarts", "group_restart_window"});
  auto ms = [&](const char* key, std::chrono::milliseconds& out) {
    if (const toml::node* n = to->get(key)) {
      auto d = r.duration(*n, std::string("timeouts.") + key);
      if (d.count() <= 0) r.fail(n, std::string("timeouts.") + key, "must be positive");
      out = std::chrono::duration_cast<std::chrono::milliseconds>(d);
    }
  };
  ms("heartbeat", t.timeouts.heartbeat);
  ms("suspect", t.timeouts.suspect);
  ms("connection", t.timeouts.connection);
  ms("request", t.timeouts.request);
  ms("step", t.timeouts.step);
  ms("group_restart_window", t.timeouts.group_restart_window);
  t.timeouts.group_restarts = int(r.integer(*to, "group_restarts", "timeouts.", t.timeouts.group_restarts, 0, 1000));
  t.timeouts.migration_limit = int(r.integer(*to, "migration_limit", "timeouts.", t.timeouts.migration_limit, 0, 100));
  if (t.timeouts.connection <= t.timeouts.heartbeat)
    r.fail(to->get("connection") ? to->get("connection") : to, "timeouts.connection",
           "must be longer than timeouts.heartbeat, or a live link is declared dead between two heartbeats");
  if (!to->get("suspect")) {  // not given: the default, or half a shorter connection timeout
    t.timeouts.suspect = std::min(t.timeouts.suspect, t.timeouts.connection / 2);
  } else if (t.timeouts.connection <= t.timeouts.suspect) {
    r.fail(to->get("suspect"), "timeouts.suspect",
           "must be shorter than timeouts.connection: a replica is suspect before its link is declared dead");
  }
}

// frontend.model_name: a name, or a list of names whose first is the name answers carry and the
// rest aliases requests may use.
void read_model_names(const reader& r, const toml::table& f, frontend_spec& fe) {
  const toml::node* n = f.get("model_name");
  if (!n) return;
  if (!n->as_array()) {
    fe.model_name = r.string(f, "model_name", "frontend.", std::string());
    return;
  }
  std::vector<std::string> names;
  for (const toml::node& x : *n->as_array()) {
    if (!x.as_string()) r.fail(&x, "frontend.model_name", "expected names of 1 to 256 characters");
    names.push_back(x.as_string()->get());
  }
  if (auto e = assign_model_names(fe, names)) r.fail(n, "frontend.model_name", *e);
}

// [frontend] request_trace and request_trace_max: the request log and its bound.
void read_request_trace(const reader& r, const toml::table& f, frontend_spec& fe) {
  fe.request_trace = r.string(f, "request_trace", "frontend.", std::string());
  if (const toml::node* n = f.get("request_trace_max")) {
    if (fe.request_trace.empty()) r.fail(n, "frontend.request_trace_max", "needs frontend.request_trace");
    const double bytes = r.size(*n, "frontend.request_trace_max");
    if (bytes < 1) r.fail(n, "frontend.request_trace_max", "must be positive");
    fe.request_trace_max = std::size_t(bytes);
  }
}

// frontend.api_keys: strings, or { key, tenant } tables naming the tenant a key bills.
void read_api_keys(const reader& r, const toml::table& f, topology::frontend_spec& fe) {
  if (const toml::node* n = f.get("api_keys")) {
    const toml::array* keys = n->as_array();
    if (!keys) r.fail(n, "frontend.api_keys", std::string("expected an array of strings, got ") + type_name(*n));
    for (auto&& k : *keys) {
      if (const toml::table* kt = k.as_table()) {  // { key = "...", tenant = "..." }
        r.only_keys(*kt, "frontend.api_keys.", {"key", "tenant"});
        const std::string key = r.string(*kt, "key", "frontend.api_keys.", std::nullopt);
        const std::string tenant = r.string(*kt, "tenant", "frontend.api_keys.", std::string());
        if (key.empty()) r.fail(&k, "frontend.api_keys.key", "must not be empty");
        if (tenant.empty() || tenant.size() > 64) r.fail(&k, "frontend.api_keys.tenant", "expected a name of 1 to 64 characters");
        fe.api_keys.push_back(key);
        fe.api_key_tenants.push_back(tenant);
        continue;
      }
      if (!k.is_string() || k.value<std::string>()->empty())
        r.fail(&k, "frontend.api_keys", "expected non-empty strings or { key = \"...\", tenant = \"...\" } tables");
      fe.api_keys.push_back(*k.value<std::string>());
      fe.api_key_tenants.emplace_back();
    }
  }
}

void read_frontend(const reader& r, const toml::table& root, topology_config& t) {
  const toml::table* f = r.table(root, "frontend", "");
  if (!f) return;
  r.only_keys(*f, "frontend.",
              {"address", "model_name", "max_requests", "retry_after", "max_body", "metric_prefix", "api_keys", "api_key_routes", "public_prompts", "tenant_by_user",
               "shutdown_grace", "request_trace", "request_trace_max", "ttft_slo", "itl_slo", "header_timeout", "max_unread"});
  t.frontend.tenant_by_user = r.boolean(*f, "tenant_by_user", "frontend.", true);
  auto& fe = t.frontend;
  if (const toml::node* a = f->get("address")) {
    const std::string addr = r.string(*f, "address", "frontend.", std::string());
    const auto colon = addr.rfind(':');
    int port = -1;
    try {
      if (colon != std::string::npos && colon > 0) port = std::stoi(addr.substr(colon + 1));
    } catch (const std::exception&) {
    }
    if (port < 0 || port > 65535) r.fail(a, "frontend.address", "expected \"host:port\", got \"" + addr + "\"");
    fe.host = addr.substr(0, colon);
    fe.port = std::uint16_t(port);
  }
  read_model_names(r, *f, fe);
  fe.max_requests = int(r.integer(*f, "max_requests", "frontend.", fe.max_requests, 1, 1 << 20));
  if (const toml::node* n = f->get("retry_after")) {
    const auto d = r.duration(*n, "frontend.retry_after");
    fe.retry_after_s = std::max(1, int(std::chrono::duration_cast<std::chrono::seconds>(d).count()));
  }
  if (const toml::node* n = f->get("shutdown_grace"))
    fe.shutdown_grace = std::chrono::duration_cast<std::chrono::milliseconds>(r.duration(*n, "frontend.shutdown_grace"));
  for (auto [key, out] : {std::pair{"ttft_slo", &fe.ttft_slo}, std::pair{"itl_slo", &fe.itl_slo}})
    if (const toml::node* n = f->get(key)) {
      *out = std::chrono::duration_cast<std::chrono::milliseconds>(r.duration(*n, std::string("frontend.") + key));
      if (out->count() <= 0) r.fail(n, std::string("frontend.") + key, "must be positive");
    }
  if (const toml::node* n = f->get("header_timeout")) {
    fe.header_timeout = std::chrono::duration_cast<std::chrono::seconds>(r.duration(*n, "frontend.header_timeout"));
    if (fe.header_timeout.count() < 1) r.fail(n, "frontend.header_timeout", "must be at least 1s");
  }
  if (const toml::node* n = f->get("max_unread")) {
    const double bytes = r.size(*n, "frontend.max_unread");
    if (bytes < 1024) r.fail(n, "frontend.max_unread", "must be at least 1KiB");
    fe.max_unread = std::size_t(bytes);
  }
  if (const toml::node* n = f->get("max_body")) {
    const double bytes = r.size(*n, "frontend.max_body");
    if (bytes < 1024) r.fail(n, "frontend.max_body", "must be at least 1KiB");
    fe.max_body = std::size_t(bytes);
  }
  read_api_keys(r, *f, fe);
  if (const toml::node* n = f->get("public_prompts")) {
    const toml::array* list = n->as_array();
    if (!list) r.fail(n, "frontend.public_prompts", std::string("expected an array of tables, got ") + type_name(*n));
    for (auto&& e : *list) {
      const toml::table* pt = e.as_table();
      if (!pt) r.fail(&e, "frontend.public_prompts", "expected tables { name = \"...\", text = \"...\" }");
      r.only_keys(*pt, "frontend.public_prompts.", {"name", "text"});
      topology::frontend_spec::public_prompt p{r.string(*pt, "name", "frontend.public_prompts.", std::nullopt),
                                              r.string(*pt, "text", "frontend.public_prompts.", std::nullopt)};
      if (p.text.empty()) r.fail(&e, "frontend.public_prompts.text", "must not be empty");
      for (auto& q : fe.public_prompts)
        if (q.name == p.name) r.fail(&e, "frontend.public_prompts.name", "\"" + p.name + "\" is declared twice");
      fe.public_prompts.push_back(std::move(p));
    }
  }
  if (f->get("api_key_routes")) {
    const std::string routes = r.string(*f, "api_key_routes", "frontend.", std::string());
    if (routes != "openai" && routes != "all")
      r.fail(f->get("api_key_routes"), "frontend.api_key_routes", "expected \"openai\" or \"all\", got \"" + routes + "\"");
    if (fe.api_keys.empty()) r.fail(f->get("api_key_routes"), "frontend.api_key_routes", "needs frontend.api_keys");
    fe.api_key_on_all_routes = routes == "all";
  }
  fe.metric_prefix = r.string(*f, "metric_prefix", "frontend.", fe.metric_prefix);
  for (char c : fe.metric_prefix)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':'))
      r.fail(f->get("metric_prefix"), "frontend.metric_prefix", "may hold only letters, digits, '_' and ':'");
  read_request_trace(r, *f, fe);
}

// "tcp://127.0.0.1:PORT" (or localhost / [::1]): nothing listens off loopback without
// authentication, and the events sockets have none yet.
// "tcp://HOST:PORT": returns HOST; anything else fails naming the key.
void read_kv_transfer(const reader& r, const toml::table& root, topology_config& t) {
  const toml::table* k = r.table(root, "kv_transfer", "");
  if (!k) return;
  r.only_keys(*k, "kv_transfer.", {"backend", "timeout", "hold", "on_failure", "shared_memory"});
  auto& x = t.kv_transfer;
  x.backend = r.choice(*k, "backend", "kv_transfer.", x.backend,
                       {{"auto", kv::transfer::backend::automatic}, {"inproc", kv::transfer::backend::inproc},
                        {"shm", kv::transfer::backend::shm}, {"tcp", kv::transfer::backend::tcp}});
  auto positive = [&](const char* key, std::chrono::milliseconds& out) {
    const toml::node* n = k->get(key);
    if (!n) return;
    const auto d = std::chrono::duration_cast<std::chrono::milliseconds>(r.duration(*n, std::string("kv_transfer.") + key));
    if (d.count() <= 0) r.fail(n, std::string("kv_transfer.") + key, "must be positive");
    out = d;
  };
  positive("timeout", x.timeout);
  positive("hold", x.hold);
  // A receiver's pull must end before the sender stops holding the blocks it reads.
  if (x.hold <= x.timeout)
    r.fail(k->get("hold") ? k->get("hold") : k->get("timeout"), "kv_transfer.hold",
           "must be longer than kv_transfer.timeout (" + std::to_string(x.timeout.count()) + " ms): a pull must end before the sender frees what it reads");
  x.retry_on_failure = r.choice(*k, "on_failure", "kv_transfer.", false, {{"recompute", false}, {"retry", true}});
  x.shared_memory = r.boolean(*k, "shared_memory", "kv_transfer.", true);
}

void read_kv_store(const reader& r, const toml::table& root, topology_config& t) {
  const toml::table* k = r.table(root, "kv_store", "");
  if (!k) return;
  r.only_keys(*k, "kv_store.", {"capacity", "disk", "disk_capacity"});
  const toml::node* c = k->get("capacity");
  if (!c) r.fail(k, "kv_store.capacity", "is required (host memory per process, e.g. \"1GiB\")");
  const double bytes = r.size(*c, "kv_store.capacity");
  if (bytes < 1) r.fail(c, "kv_store.capacity", "must be positive");
  if (bytes > double(std::size_t(1) << 50)) r.fail(c, "kv_store.capacity", "is beyond any machine");
  if (t.model.backend == backend_kind::sim) r.fail(c, "kv_store.capacity", "the sim backend has no KV bytes to store");
  if (!t.scheduler.prefix_caching) r.fail(c, "kv_store.capacity", "needs scheduler.prefix_caching (blocks are found by their prefix hash)");
  t.kv_store.capacity_bytes = std::size_t(bytes);
  const toml::node* dir = k->get("disk");
  const toml::node* dcap = k->get("disk_capacity");
  if (bool(dir) != bool(dcap))
    r.fail(dir ? dir : dcap, dir ? "kv_store.disk" : "kv_store.disk_capacity", "kv_store.disk and kv_store.disk_capacity go together");
  if (dir) {
    t.kv_store.disk_dir = r.string(*k, "disk", "kv_store.", std::nullopt);
    std::error_code ec;
    if (!std::filesystem::is_directory(t.kv_store.disk_dir, ec))
      r.fail(dir, "kv_store.disk", "\"" + t.kv_store.disk_dir + "\" is not a directory here");
    const double d = r.size(*dcap, "kv_store.disk_capacity");
    if (d < 1) r.fail(dcap, "kv_store.disk_capacity", "must be positive");
    if (d > double(std::size_t(1) << 50)) r.fail(dcap, "kv_store.disk_capacity", "is beyond any disk");
    t.kv_store.disk_bytes = std::size_t(d);
  }
}

void read_sim(const reader& r, const toml::table& root, topology_config& t) {
  const toml::table* s = r.table(root, "sim", "");
  if (!s) {
    if (t.model.backend == backend_kind::sim) t.sim = sim_spec{};
    return;
  }
  r.only_keys(*s, "sim.", {"flops", "bandwidth", "step_overhead"});
  sim_spec spec;
  if (const toml::node* n = s->get("flops")) spec.flops = r.number(*n, "sim.flops");
  if (const toml::node* n = s->get("bandwidth")) spec.bandwidth = r.size(*n, "sim.bandwidth", true);
  if (const toml::node* n = s->get("step_overhead"))
    spec.step_overhead = std::chrono::duration_cast<std::chrono::microseconds>(r.duration(*n, "sim.step_overhead"));
  if (spec.flops <= 0) r.fail(s->get("flops"), "sim.flops", "must be positive");
  if (spec.bandwidth <= 0) r.fail(s->get("bandwidth"), "sim.bandwidth", "must be positive");
  t.sim = spec;
}

}  // namespace

std::optional<std::string> assign_model_names(frontend_spec& fe, const std::vector<std::string>& names) {
  if (names.empty()) return "expected at least one name";
  if (names.size() > 16) return "at most 16 names";
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (auto why = served_name_problem(names[i])) return *why;
    if (std::find(names.begin(), names.begin() + std::ptrdiff_t(i), names[i]) != names.begin() + std::ptrdiff_t(i))
      return "\"" + names[i] + "\" is named twice";
  }
  fe.model_name = names.front();
  fe.model_aliases.assign(names.begin() + 1, names.end());
  return std::nullopt;
}

topology_config parse_topology(const std::string& text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw input_error(source + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
  reader r(source);
  r.only_keys(root, "", {"model", "models", "nodes", "pools", "scheduler", "router", "timeouts", "frontend", "sim", "cluster", "kv_events",
                         "kv_transfer", "kv_store", "admin", "admission", "autoscaler", "lora"});
  topology_config t;
  t.source = source;
  detail::read_models(r, root, t);
  read_nodes(r, root, t);
  read_pools(r, root, t);
  read_scheduler(r, root, t);
  read_router(r, root, t);
  read_timeouts(r, root, t);
  read_sim(r, root, t);
  read_frontend(r, root, t);
  if (auto clash = served_name_clash(t)) r.fail(root.get("models"), "models", *clash);
  detail::read_kv_events(r, root, t);
  detail::read_admin(r, root, t);
  detail::read_admission(r, root, t);
  detail::check_fallback_triggers(r, t);
  detail::read_autoscaler(r, root, t);
  read_kv_transfer(r, root, t);
  read_kv_store(r, root, t);
  read_cluster(r, root, t);
  detail::read_lora(r, root, t);
  return t;
}

admin_spec admin_of(const topology_config& t, const std::string& head) {
  admin_spec a = t.admin;
  if (const node_spec* n = t.node(head); n && !n->admin_endpoint.empty()) {
    a.endpoint = n->admin_endpoint;
    a.events = n->admin_events;
  }
  return a;
}

topology_config load_topology(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw input_error(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_topology(ss.str(), path);
}

}  // namespace troupe::topology

namespace troupe::topology {

void check_kv_memory(const topology_config& t, const std::string& node, std::size_t machine_bytes, std::size_t available_bytes) {
  if (t.model.backend == backend_kind::sim) return;
  std::size_t replicas = 0;
  for (const auto& p : place_replicas(t)) replicas += node.empty() || node == "*" || p.node == node;
  const long double need = (long double)t.scheduler.kv_memory_bytes * replicas;
  const bool fits_machine = need <= (long double)machine_bytes * 0.9L, fits_free = need <= (long double)available_bytes;
  if (fits_machine && fits_free) return;
  const std::string where = node == "*" ? "this host (every process of the topology)" : node.empty() ? "this process" : "node \"" + node + "\"";
  char buf[320];
  if (!fits_machine)
    std::snprintf(buf, sizeof buf, "%.1f GiB per replica x %zu replica(s) on %s is %.1f GiB; this machine has %.1f GiB (at most 90%% of it can be KV)",
                  double(t.scheduler.kv_memory_bytes) / (1 << 30), replicas, where.c_str(), double(need / (1 << 30)),
                  double(machine_bytes) / (1 << 30));
  else
    std::snprintf(buf, sizeof buf, "%.1f GiB per replica x %zu replica(s) on %s is %.1f GiB; this machine has %.1f GiB free now",
                  double(t.scheduler.kv_memory_bytes) / (1 << 30), replicas, where.c_str(), double(need / (1 << 30)),
                  double(available_bytes) / (1 << 30));
  throw input_error(t.source + ":" + std::to_string(t.scheduler.kv_memory_line) + ": scheduler.kv_memory: " + buf);
}

std::vector<replica_placement> place_replicas(const topology_config& t) {
  std::vector<replica_placement> out;
  std::uint32_t next = 0;
  for (const auto& p : t.pools)
    for (int i = 0; i < std::max(p.replicas, p.max_replicas); ++i)  // code that sets replicas alone still gets them
      out.push_back({replica_id(next++), p.name, p.model, p.role, p.nodes[std::size_t(i) % p.nodes.size()], p.pipeline_parallel,
                     p.tensor_parallel, p.expert_parallel, p.micro_batches > 0 ? p.micro_batches : p.pipeline_parallel, p.name + "-" + std::to_string(i), i < p.replicas,
                     i < p.replicas + p.warm(), p.rank_nodes});
  return out;
}

replica_names names_of(const topology_config& t) {
  replica_names out;
  for (const auto& p : place_replicas(t)) out[p.replica.value] = p.name;
  return out;
}

std::string name_of(const replica_names& names, std::uint32_t id) {
  auto it = names.find(id);
  return it != names.end() ? it->second : "replica-" + std::to_string(id);
}

}  // namespace troupe::topology
