// kubernetes_manifests (topology/deploy/kubernetes.h): the ConfigMap, Secrets, Services,
// StatefulSets, PodDisruptionBudgets, ServiceMonitor and KEDA ScaledObjects of a topology.
#include "topology/deploy/objects.h"

namespace troupe::topology::deploy {

namespace {

using namespace detail;

json config_map(const topology_config& t, const std::string& text, const std::vector<pod_group>& groups, const kubernetes_options& o,
                const kubernetes_secrets& s) {
  json data = {{"topology.toml", pod_topology(t, text, groups, o, s)}};
  for (const auto& [path, content] : o.files) data["file." + base_name(path)] = content;
  for (const auto& g : groups)
    for (const auto& [key, text] : drain_files(t, groups, g, o)) data[key] = text;
  return {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", metadata(o, o.name + "-topology", "config")}, {"data", data}};
}

json secret(const kubernetes_options& o, const std::string& name, const std::string& type, json data) {
  return {{"apiVersion", "v1"}, {"kind", "Secret"}, {"metadata", metadata(o, name, "secret")}, {"type", type}, {"stringData", data}};
}

std::vector<manifest> secrets(const kubernetes_options& o, const kubernetes_secrets& s) {
  std::vector<manifest> out;
  out.push_back({"secret-cluster.yaml", secret(o, o.name + "-cluster", "Opaque", {{"token", s.cluster_token}})});
  out.push_back({"secret-api-key.yaml", secret(o, o.name + "-api-key", "Opaque", {{"api-key", s.api_key}})});
  out.push_back({"secret-admin.yaml", secret(o, o.name + "-admin", "Opaque",
                                             {{"server.key", s.admin_server_secret + "\n"},
                                              {"server.pub", s.admin_server_public + "\n"},
                                              {"client.key", s.admin_client_secret + "\n"}})});
  if (o.tls_secret.empty())
    out.push_back({"secret-tls.yaml", secret(o, o.name + "-tls", "kubernetes.io/tls",
                                             {{"tls.crt", s.tls_certificate}, {"tls.key", s.tls_key}, {"ca.crt", s.tls_certificate}})});
  return out;
}

// The headless Service that gives every pod its DNS name (also before it is ready: nodes find
// their heads while both start), and the Service over the heads' OpenAI API.
std::vector<manifest> services(const topology_config& t, const kubernetes_options& o) {
  json cluster = {{"apiVersion", "v1"},
                  {"kind", "Service"},
                  {"metadata", metadata(o, o.name + "-cluster", "cluster")},
                  {"spec",
                   {{"clusterIP", "None"},
                    {"publishNotReadyAddresses", true},
                    {"selector", {{"app.kubernetes.io/instance", o.name}}},
                    {"ports", {{{"name", "registry"}, {"port", registry_port}}}}}}};
  json api_meta = metadata(o, o.name + "-api", "api");
  api_meta["labels"]["troupe.dev/service"] = "api";
  json api = {{"apiVersion", "v1"},
              {"kind", "Service"},
              {"metadata", api_meta},
              {"spec",
               {{"selector", {{"app.kubernetes.io/instance", o.name}, {"app.kubernetes.io/component", "head"}}},
                {"ports", {{{"name", "http"}, {"port", t.frontend.port}, {"targetPort", "http"}}}}}}};
  return {{"service-cluster.yaml", cluster}, {"service-api.yaml", api}};
}

json disruption_budget(const kubernetes_options& o, const std::string& pool) {
  return {{"apiVersion", "policy/v1"},
          {"kind", "PodDisruptionBudget"},
          {"metadata", metadata(o, o.name + "-" + pool, "pool")},
          {"spec", {{"maxUnavailable", 1}, {"selector", {{"matchLabels", {{"app.kubernetes.io/instance", o.name}, {pool_label(pool), "serves"}}}}}}}};
}

// The dashboard for Grafana's sidecar (it loads ConfigMaps labelled grafana_dashboard), its
// metric names under the topology's [frontend] metric_prefix.
json dashboard_config_map(const topology_config& t, const kubernetes_options& o) {
  std::string text(grafana_dashboard());
  if (t.frontend.metric_prefix != "troupe:")
    for (std::size_t at = 0; (at = text.find("troupe:", at)) != std::string::npos; at += t.frontend.metric_prefix.size())
      text.replace(at, 7, t.frontend.metric_prefix);
  json meta = metadata(o, o.name + "-dashboard", "dashboard");
  meta["labels"]["grafana_dashboard"] = "1";
  return {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", meta}, {"data", {{"troupe-dashboard.json", text}}}};
}

json service_monitor(const kubernetes_options& o) {
  return {{"apiVersion", "monitoring.coreos.com/v1"},
          {"kind", "ServiceMonitor"},
          {"metadata", metadata(o, o.name, "metrics")},
          {"spec",
           {{"selector", {{"matchLabels", {{"app.kubernetes.io/instance", o.name}, {"troupe.dev/service", "api"}}}}},
            {"endpoints", {{{"port", "http"}, {"path", "/metrics"}, {"interval", "15s"}}}}}}};
}

// KEDA moves a pods-as-replicas pool's StatefulSet on the requests waiting on its replicas: one
// pod per autoscaler queue_up waiting requests, the figure Troupe's own autoscaler scales on.
json scaled_object(const topology_config& t, const pod_group& g, const kubernetes_options& o) {
  const pool_spec& p = *t.pool_named(g.scaled_pool);
  const std::string query = "sum(" + t.frontend.metric_prefix + "replica_num_requests_waiting{replica=~\"" + p.name + "-[0-9]+\"}) or vector(0)";
  char threshold[32];
  std::snprintf(threshold, sizeof threshold, "%g", t.autoscaler.cfg.queue_up);
  return {{"apiVersion", "keda.sh/v1alpha1"},
          {"kind", "ScaledObject"},
          {"metadata", metadata(o, g.statefulset, "autoscaler")},
          {"spec",
           {{"scaleTargetRef", {{"apiVersion", "apps/v1"}, {"kind", "StatefulSet"}, {"name", g.statefulset}}},
            {"minReplicaCount", p.min_replicas},
            {"maxReplicaCount", p.max_replicas},
            {"pollingInterval", 15},
            {"cooldownPeriod", 300},
            {"triggers", {{{"type", "prometheus"}, {"metadata", {{"serverAddress", o.prometheus}, {"query", query}, {"threshold", threshold}}}}}}}}};
}

}  // namespace

std::vector<manifest> kubernetes_manifests(const topology_config& t, const std::string& text, const kubernetes_options& o,
                                           const kubernetes_secrets& s) {
  const auto groups = plan_pods(t, o);
  std::vector<manifest> out;
  out.push_back({"configmap-topology.yaml", config_map(t, text, groups, o, s)});
  for (auto& m : secrets(o, s)) out.push_back(std::move(m));
  for (auto& m : services(t, o)) out.push_back(std::move(m));
  for (const auto& g : groups) out.push_back({"statefulset-" + g.statefulset + ".yaml", statefulset(t, groups, g, o)});
  for (const auto& p : t.pools) out.push_back({"pdb-" + p.name + ".yaml", disruption_budget(o, p.name)});
  out.push_back({"servicemonitor.yaml", service_monitor(o)});
  out.push_back({"configmap-dashboard.yaml", dashboard_config_map(t, o)});
  for (const auto& g : groups)
    if (!g.scaled_pool.empty()) out.push_back({"scaledobject-" + g.statefulset + ".yaml", scaled_object(t, g, o)});
  return out;
}

}  // namespace troupe::topology::deploy
