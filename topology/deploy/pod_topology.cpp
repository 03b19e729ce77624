// plan_pods and pod_topology (topology/deploy/kubernetes.h): which StatefulSet runs each process
// of a topology, and the topology file those processes read.
#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "runtime/common/error.h"
#include "topology/deploy/objects.h"

namespace troupe::topology::deploy {

namespace {

[[noreturn]] void refuse(const topology_config& t, int line, const std::string& key, const std::string& why) {
  throw input_error(t.source + (line > 0 ? ":" + std::to_string(line) : "") + ": " + key + ": " + why);
}

// What a topology says that pods cannot do, or that would put a secret in the ConfigMap.
void refuse_what_pods_cannot_run(const topology_config& t, const kubernetes_options& o) {
  for (const auto& p : t.pools)
    if (!p.rank_nodes.empty())
      refuse(t, p.line, "pools.rank_nodes",
             "pool \"" + p.name + "\" places its ranks on other nodes, which in Kubernetes are other pods, off loopback; ranks "
             "join their collectives over Gloo's TCP, which has no authentication, so a group's ranks cannot span pods "
             "(drop rank_nodes: the ranks then run in the replica's own pod)");
  if (t.frontend.api_key_on_all_routes)
    refuse(t, 0, "frontend.api_key_routes",
           "\"all\" puts /health behind the API key, and a kubelet's probes cannot present a key from a Secret");
  if (!t.frontend.api_keys.empty())
    refuse(t, 0, "frontend.api_keys",
           "keys written in the topology would be stored in a ConfigMap, readable by anyone who can read the namespace's "
           "configuration; remove them (the deployment's API key is generated into a Secret)");
  if (t.kv_events.curve())
    refuse(t, 0, "kv_events.secret_key", "names a key file on this machine, which the pods do not have; publish KV events on loopback "
                                        "(inside the head's pod) or without [kv_events]");
  auto need_file = [&](const model_spec& m) {
    if (!m.chat_template.empty() && !o.files.count(m.chat_template))
      refuse(t, m.line, m.label() + " chat_template", m.chat_template + " cannot be read here, so it cannot go into the ConfigMap");
  };
  for (const auto* m : t.models()) need_file(*m);
}

std::vector<std::string> pools_on(const topology_config& t, const std::string& node) {
  std::vector<std::string> out;
  for (const auto& p : t.pools)
    if (std::find(p.nodes.begin(), p.nodes.end(), node) != p.nodes.end()) out.push_back(p.name);
  return out;
}

// A group's pods are one pool's replicas when they host that pool alone, one replica slot each,
// with room to scale and no autoscaler of Troupe's own moving the same pool.
void mark_scaled_pool(const topology_config& t, pod_group& g) {
  if (g.heads || g.pools.size() != 1 || t.autoscaler.cfg.enabled) return;
  const pool_spec& p = *t.pool_named(g.pools.front());
  const std::set<std::string> mine(g.nodes.begin(), g.nodes.end()), its(p.nodes.begin(), p.nodes.end());
  if (mine != its || its.size() != p.nodes.size() || p.max_replicas != int(p.nodes.size()) || p.min_replicas >= p.max_replicas) return;
  g.scaled_pool = p.name;
  g.nodes = p.nodes;  // pod K holds replica K
  g.replicas = p.replicas;
}

}  // namespace

std::vector<pod_group> plan_pods(const topology_config& t, const kubernetes_options& o) {
  refuse_what_pods_cannot_run(t, o);
  std::vector<pod_group> groups;
  pod_group heads{o.name + "-head", true};
  for (const auto* h : t.heads()) heads.nodes.push_back(h->name);
  for (const auto& h : heads.nodes)
    for (auto& p : pools_on(t, h))
      if (std::find(heads.pools.begin(), heads.pools.end(), p) == heads.pools.end()) heads.pools.push_back(p);
  heads.replicas = int(heads.nodes.size());
  groups.push_back(heads);
  for (const auto& n : t.nodes) {
    if (t.is_head(n.name)) continue;
    const auto pools = pools_on(t, n.name);
    auto same = std::find_if(groups.begin() + 1, groups.end(), [&](const pod_group& g) { return g.pools == pools; });
    if (same == groups.end()) {
      std::string name = o.name;
      for (const auto& p : pools) name += "-" + p;
      if (pools.empty()) name += "-idle";
      // A StatefulSet's name leaves room for its pods' ordinals and controller-revision-hash.
      if (name.size() > 48) name = o.name + "-nodes-" + std::to_string(groups.size());
      groups.push_back({name, false, {}, pools});
      same = groups.end() - 1;
    }
    same->nodes.push_back(n.name);
    same->replicas = int(same->nodes.size());
  }
  for (auto& g : groups) mark_scaled_pool(t, g);
  return groups;
}

namespace {

// "/models/NAME" for a folder or file the topology names: the models volume holds each one
// under its own name.
void to_models_volume(toml::table& tbl, const char* key) {
  if (auto* v = tbl.get_as<std::string>(key); v && !v->get().empty()) *v = "/models/" + detail::base_name(v->get());
}

struct pod_names {
  std::map<std::string, std::string> pod;  // node -> pod
  std::string host(const std::string& node, const kubernetes_options& o) const { return detail::pod_host(o, pod.at(node)); }
};

void rewrite_nodes(toml::table& root, const topology_config& t, const pod_names& names, const kubernetes_options& o) {
  for (auto&& e : *root.get_as<toml::array>("nodes")) {
    toml::table& nt = *e.as_table();
    const std::string node = nt.get_as<std::string>("name")->get();
    const int port = t.is_head(node) ? registry_port : 0;
    nt.insert_or_assign("name", names.pod.at(node));
    nt.insert_or_assign("address", names.host(node, o) + ":" + std::to_string(port));
    // Every head's admin endpoint is at the same ports of its own pod; those after the first
    // must name theirs.
    nt.erase("admin");
    nt.erase("admin_events");
    if (t.is_head(node) && t.heads().front()->name != node) {
      nt.insert_or_assign("admin", "tcp://0.0.0.0:" + std::to_string(admin_port));
      nt.insert_or_assign("admin_events", "tcp://0.0.0.0:" + std::to_string(admin_port + 1));
    }
  }
}

void rewrite_pools(toml::table& root, const std::vector<pod_group>& groups, const pod_names& names) {
  auto* pools = root.get_as<toml::array>("pools");
  if (!pools) return;
  for (auto&& e : *pools) {
    toml::table& pt = *e.as_table();
    if (auto* nodes = pt.get_as<toml::array>("nodes"))
      for (auto&& n : *nodes) *n.as_string() = names.pod.at(n.as_string()->get());
    const std::string name = pt.get_as<std::string>("name")->get();
    for (const auto& g : groups)
      if (g.scaled_pool == name) {
        // Every replica that has a pod serves; Kubernetes decides how many pods there are.
        pt.insert_or_assign("replicas", std::int64_t(g.nodes.size()));
        pt.insert_or_assign("warm_replicas", std::int64_t(0));
      }
  }
}

void rewrite_models(toml::table& root) {
  auto model = [&](toml::table& m) {
    to_models_volume(m, "path");
    if (auto* ct = m.get_as<std::string>("chat_template")) *ct = "/etc/troupe/config/files/" + detail::base_name(ct->get());
  };
  if (auto* m = root.get_as<toml::table>("model")) model(*m);
  if (auto* more = root.get_as<toml::table>("models"))
    for (auto&& [k, v] : *more)
      if (v.is_table()) model(*v.as_table());
  if (auto* lora = root.get_as<toml::table>("lora"))
    if (auto* adapters = lora->get_as<toml::array>("adapters"))
      for (auto&& a : *adapters)
        if (a.is_table()) to_models_volume(*a.as_table(), "path");
}

void rewrite_endpoints(toml::table& root, const topology_config& t, const kubernetes_secrets& s) {
  toml::table& fe = *root.insert("frontend", toml::table{}).first->second.as_table();
  fe.insert_or_assign("address", "0.0.0.0:" + std::to_string(t.frontend.port));
  if (auto* trace = fe.get_as<std::string>("request_trace")) *trace = "/var/lib/troupe/" + detail::base_name(trace->get());
  toml::table& cl = *root.insert("cluster", toml::table{}).first->second.as_table();
  cl.erase("token");       // the pods read TROUPE_CLUSTER_TOKEN from a Secret
  cl.erase("token_file");
  cl.insert_or_assign("tls_certificate", "/etc/troupe/tls/tls.crt");
  cl.insert_or_assign("tls_key", "/etc/troupe/tls/tls.key");
  cl.insert_or_assign("tls_ca", "/etc/troupe/tls/ca.crt");
  toml::table& ad = *root.insert("admin", toml::table{}).first->second.as_table();
  ad.insert_or_assign("endpoint", "tcp://0.0.0.0:" + std::to_string(admin_port));
  ad.insert_or_assign("events", "tcp://0.0.0.0:" + std::to_string(admin_port + 1));
  ad.insert_or_assign("secret_key", "/etc/troupe/admin/server.key");
  toml::array keys;
  for (const auto& k : t.admin.authorized_keys) keys.push_back(k);
  keys.push_back(s.admin_client_public);
  ad.insert_or_assign("authorized_keys", keys);
  if (auto* store = root.get_as<toml::table>("kv_store"); store && store->get("disk")) store->insert_or_assign("disk", "/var/lib/troupe/kv");
}

}  // namespace

std::string pod_topology(const topology_config& t, const std::string& text, const std::vector<pod_group>& groups,
                         const kubernetes_options& o, const kubernetes_secrets& s) {
  toml::table root;
  try {
    root = toml::parse(text, t.source);
  } catch (const toml::parse_error& e) {
    throw input_error(t.source + ": " + std::string(e.description()));
  }
  pod_names names;
  for (const auto& g : groups)
    for (std::size_t k = 0; k < g.nodes.size(); ++k) names.pod[g.nodes[k]] = g.pod(k);
  rewrite_nodes(root, t, names, o);
  rewrite_pools(root, groups, names);
  rewrite_models(root);
  rewrite_endpoints(root, t, s);
  std::ostringstream out;
  out << "# " << t.source << " as the pods of `troupe deploy kubernetes` read it: nodes named after their pods and\n"
      << "# addressed by DNS, TLS between pods, the API and admin endpoint authenticated (docs/deploy.md).\n"
      << root << "\n";
  return out.str();
}

}  // namespace troupe::topology::deploy
