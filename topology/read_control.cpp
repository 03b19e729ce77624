// The control plane's sections of a topology: [admission], [autoscaler], [admin] (per head and
// shared), [kv_events], and the endpoints they bind (loopback unless authenticated). Called by
// parse_topology (topology.cpp, which declares them) with the rest of the file's sections.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "topology/toml_reader.h"
#include "topology/topology.h"

namespace troupe::topology::detail {

std::string endpoint_host(const reader& r, const toml::node* n, const std::string& key, const std::string& ep) {
  const std::string scheme = "tcp://";
  const auto colon = ep.rfind(':');
  if (ep.compare(0, scheme.size(), scheme) != 0 || colon == std::string::npos || colon <= scheme.size())
    r.fail(n, key, "expected \"tcp://127.0.0.1:PORT\", got \"" + ep + "\"");
  const std::string host = ep.substr(scheme.size(), colon - scheme.size());
  int port = -1;
  try {
    std::size_t used = 0;
    port = std::stoi(ep.substr(colon + 1), &used);
    if (used != ep.size() - colon - 1) port = -1;
  } catch (const std::exception&) {
  }
  if (port < 1 || port > 65535) r.fail(n, key, "expected a port in [1, 65535] in \"" + ep + "\"");
  return host;
}

bool loopback_endpoint_host(const std::string& host) { return loopback(host) || host == "[::1]"; }

void check_loopback_endpoint(const reader& r, const toml::node* n, const std::string& key, const std::string& ep) {
  const std::string host = endpoint_host(r, n, key, ep);
  if (!loopback_endpoint_host(host))
    r.fail(n, key, "\"" + host + "\" is not a loopback address: off loopback KV events need CURVE keys (kv_events.secret_key, kv_events.authorized_keys)");
}

void read_admission(const reader& r, const toml::table& root, topology_config& t) {
  const toml::table* a = r.table(root, "admission", "");
  if (!a) return;
  r.only_keys(*a, "admission.", {"max_queued", "priority_step", "min_share", "max_tracked_tenants", "tenants"});
  auto& ad = t.admission;
  ad.line = int(a->source().begin.line);
  auto& c = ad.cfg;
  auto number = [&](const toml::table& tb, const char* k, const std::string& prefix, double fallback) {
    const toml::node* n = tb.get(k);
    return n ? r.number(*n, prefix + k) : fallback;
  };
  c.max_queued = int(r.integer(*a, "max_queued", "admission.", 0, 0, 1 << 20));
  c.priority_step = number(*a, "priority_step", "admission.", c.priority_step);
  if (c.priority_step < 0 || c.priority_step > 1) r.fail(a->get("priority_step"), "admission.priority_step", "must be in [0, 1]");
  c.min_share = number(*a, "min_share", "admission.", c.min_share);
  if (c.min_share <= 0 || c.min_share > 1) r.fail(a->get("min_share"), "admission.min_share", "must be in (0, 1]");
  c.max_tracked_tenants = std::size_t(r.integer(*a, "max_tracked_tenants", "admission.", 4096, 1, 1 << 20));
  if (const toml::node* n = a->get("tenants")) {
    const toml::table* ts = n->as_table();
    if (!ts) r.fail(n, "admission.tenants", "expected tables [admission.tenants.NAME]");
    if (ts->size() > 1024) r.fail(n, "admission.tenants", "at most 1024 tenants");
    for (auto&& [name, v] : *ts) {
      const std::string key = "admission.tenants." + std::string(name.str());
      const toml::table* tt = v.as_table();
      if (!tt) r.fail(&v, key, "expected a table with requests_per_second, burst, tokens_per_minute");
      r.only_keys(*tt, key + ".", {"requests_per_second", "burst", "tokens_per_minute"});
      admission::tenant_limits l;
      l.requests_per_second = number(*tt, "requests_per_second", key + ".", 0);
      l.burst_requests = number(*tt, "burst", key + ".", 0);
      l.tokens_per_minute = number(*tt, "tokens_per_minute", key + ".", 0);
      if (l.requests_per_second < 0 || l.burst_requests < 0 || l.tokens_per_minute < 0) r.fail(&v, key, "limits must not be negative");
      c.tenants[std::string(name.str())] = l;
    }
  }
}

void read_autoscaler(const reader& r, const toml::table& root, topology_config& t) {
  const toml::table* a = r.table(root, "autoscaler", "");
  if (!a) return;
  r.only_keys(*a, "autoscaler.", {"enabled", "interval", "queue_up", "queue_down", "kv_up", "kv_down", "busy_down", "ttft_slo", "itl_slo",
                                  "up_for", "down_for", "cooldown"});
  auto& c = t.autoscaler.cfg;
  t.autoscaler.line = int(a->source().begin.line);
  c.enabled = true;
  if (const toml::node* n = a->get("enabled")) {
    if (!n->is_boolean()) r.fail(n, "autoscaler.enabled", std::string("expected true or false, got ") + type_name(*n));
    c.enabled = n->value<bool>().value();
  }
  auto number = [&](const char* k, double& out) {
    if (const toml::node* n = a->get(k)) out = r.number(*n, std::string("autoscaler.") + k);
    if (out < 0) r.fail(a->get(k), std::string("autoscaler.") + k, "must not be negative");
  };
  number("queue_up", c.queue_up);
  number("queue_down", c.queue_down);
  number("kv_up", c.kv_up);
  number("kv_down", c.kv_down);
  number("busy_down", c.busy_down);
  if (c.queue_down >= c.queue_up) r.fail(a->get("queue_down"), "autoscaler.queue_down", "must be below queue_up (hysteresis)");
  if (c.kv_down >= c.kv_up) r.fail(a->get("kv_down"), "autoscaler.kv_down", "must be below kv_up (hysteresis)");
  auto ms = [&](const char* k, std::chrono::milliseconds& out) {
    if (const toml::node* n = a->get(k)) {
      const auto d = r.duration(*n, std::string("autoscaler.") + k);
      if (d.count() <= 0) r.fail(n, std::string("autoscaler.") + k, "must be positive");
      out = std::chrono::duration_cast<std::chrono::milliseconds>(d);
    }
  };
  ms("interval", c.interval);
  ms("up_for", c.up_for);
  ms("down_for", c.down_for);
  ms("cooldown", c.cooldown);
  for (auto [k, out] : {std::pair{"ttft_slo", &c.ttft_slo_s}, std::pair{"itl_slo", &c.itl_slo_s}})
    if (const toml::node* n = a->get(k)) *out = std::chrono::duration<double>(r.duration(*n, std::string("autoscaler.") + k)).count();
}

// A head's own admin addresses (nodes.admin, nodes.admin_events): each head of several serves
// the admin protocol for the whole cluster, so each after the first names where.
void read_head_admin(const reader& r, const toml::table& root, const toml::table* a, topology_config& t) {
  const toml::array* nodes = root.get("nodes")->as_array();
  const auto heads = t.heads();
  for (std::size_t i = 0; i < nodes->size(); ++i) {
    const toml::table& nt = *(*nodes)[i].as_table();
    const node_spec& n = t.nodes[i];
    for (const char* key : {"admin", "admin_events"}) {
      const toml::node* v = nt.get(key);
      if (!v) continue;
      const std::string k = std::string("nodes.") + key;
      if (!a) r.fail(v, k, "needs an [admin] table (its keys, and the first head's addresses)");
      if (!t.is_head(n.name)) r.fail(v, k, "node \"" + n.name + "\" is not a head; only heads serve the admin protocol");
      const std::string& ep = std::string(key) == "admin" ? n.admin_endpoint : n.admin_events;
      const std::string host = endpoint_host(r, v, k, ep);
      if (!t.admin.curve() && !loopback_endpoint_host(host))
        r.fail(v, k, "\"" + host + "\" is not a loopback address: off loopback the admin endpoint needs CURVE keys (admin.secret_key, admin.authorized_keys)");
    }
    if (!n.admin_events.empty() && n.admin_endpoint.empty())
      r.fail(nt.get("admin_events"), "nodes.admin_events", "needs nodes.admin too");
    if (a && !t.admin.endpoint.empty() && heads.size() > 1 && t.is_head(n.name) && &n != heads.front() && n.admin_endpoint.empty())
      r.fail(&nt, "nodes.admin",
             "head \"" + n.name + "\" needs its own admin endpoint: with several heads each serves the admin protocol for the whole cluster");
  }
}

// authorized_keys of [admin] or [kv_events]: Z85 public keys of 40 characters, at most 1024.
std::vector<std::string> read_authorized_keys(const reader& r, const toml::table& tbl, const std::string& prefix) {
  std::vector<std::string> out;
  const toml::node* n = tbl.get("authorized_keys");
  if (!n) return out;
  const toml::array* keys = n->as_array();
  if (!keys) r.fail(n, prefix + "authorized_keys", std::string("expected an array of strings, got ") + type_name(*n));
  if (keys->size() > 1024) r.fail(n, prefix + "authorized_keys", "at most 1024 keys");
  for (auto&& k : *keys) {
    if (!k.is_string() || k.value<std::string>()->size() != 40)
      r.fail(&k, prefix + "authorized_keys", "expected Z85 public keys of 40 characters (troupe admin keygen writes them)");
    out.push_back(*k.value<std::string>());
  }
  return out;
}

void read_admin(const reader& r, const toml::table& root, topology_config& t) {
  const toml::table* a = r.table(root, "admin", "");
  if (!a) return read_head_admin(r, root, a, t);
  r.only_keys(*a, "admin.", {"endpoint", "events", "secret_key", "authorized_keys"});
  auto& ad = t.admin;
  ad.line = int(a->source().begin.line);
  ad.endpoint = r.string(*a, "endpoint", "admin.", std::nullopt);
  ad.events = r.string(*a, "events", "admin.", std::string());
  ad.secret_key = r.string(*a, "secret_key", "admin.", std::string());
  ad.authorized_keys = read_authorized_keys(r, *a, "admin.");
  if (ad.curve() != !ad.authorized_keys.empty())
    r.fail(a, "admin.secret_key", "CURVE needs both secret_key (the server's) and authorized_keys (the clients')");
  for (const char* key : {"endpoint", "events"}) {
    const std::string& ep = std::string(key) == "endpoint" ? ad.endpoint : ad.events;
    if (ep.empty()) continue;
    const std::string host = endpoint_host(r, a->get(key), std::string("admin.") + key, ep);
    if (!ad.curve() && !loopback_endpoint_host(host))
      r.fail(a->get(key), std::string("admin.") + key,
             "\"" + host + "\" is not a loopback address: off loopback the admin endpoint needs CURVE keys (secret_key, authorized_keys)");
  }
  if (!ad.events.empty() && ad.events == ad.endpoint) r.fail(a->get("events"), "admin.events", "must differ from admin.endpoint");
  read_head_admin(r, root, a, t);
}

void read_kv_events(const reader& r, const toml::table& root, topology_config& t) {
  const toml::table* k = r.table(root, "kv_events", "");
  if (!k) return;
  r.only_keys(*k, "kv_events.", {"endpoint", "replay_endpoint", "topic", "buffer", "secret_key", "authorized_keys", "token_ids"});
  auto& ev = t.kv_events;
  ev.secret_key = r.string(*k, "secret_key", "kv_events.", std::string());
  ev.authorized_keys = read_authorized_keys(r, *k, "kv_events.");
  if (ev.curve() != !ev.authorized_keys.empty())
    r.fail(k, "kv_events.secret_key", "CURVE needs both secret_key (the server's) and authorized_keys (the subscribers')");
  // Token ids tell any subscriber every tenant's prompt: only to subscribers that hold a key.
  ev.token_ids = r.boolean(*k, "token_ids", "kv_events.", false);
  if (ev.token_ids && !ev.curve())
    r.fail(k->get("token_ids"), "kv_events.token_ids",
           "publishing token ids needs CURVE (secret_key and authorized_keys): without it any local process reads every tenant's prompt");
  ev.endpoint = r.string(*k, "endpoint", "kv_events.", std::nullopt);
  if (!ev.curve()) check_loopback_endpoint(r, k->get("endpoint"), "kv_events.endpoint", ev.endpoint);
  ev.replay_endpoint = r.string(*k, "replay_endpoint", "kv_events.", std::string());
  if (!ev.replay_endpoint.empty()) {
    if (!ev.curve()) check_loopback_endpoint(r, k->get("replay_endpoint"), "kv_events.replay_endpoint", ev.replay_endpoint);
    if (ev.replay_endpoint == ev.endpoint) r.fail(k->get("replay_endpoint"), "kv_events.replay_endpoint", "must differ from kv_events.endpoint");
  }
  ev.topic = r.string(*k, "topic", "kv_events.", std::string());
  ev.buffer = int(r.integer(*k, "buffer", "kv_events.", ev.buffer, 1, 1 << 20));
}

}  // namespace troupe::topology::detail
