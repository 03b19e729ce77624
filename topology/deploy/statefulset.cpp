// The StatefulSet of one pod group (topology/deploy/kubernetes.h): the pod's command, its
// Secrets and volumes, probes that say whether it serves, a preStop hook that drains its
// replicas through the admin endpoint, and the memory its replicas need.
#include <algorithm>
#include <cmath>
#include <set>

#include "topology/deploy/objects.h"

namespace troupe::topology::deploy::detail {

namespace {

constexpr const char* config_dir = "/etc/troupe/config";
constexpr std::uint64_t process_overhead = std::uint64_t(512) << 20;  // code, tokenizer, buffers, HTTP

// The replicas a pod of `g` runs as `node`: those started at start, and in a group whose pods are
// its pool's replicas, the pod's own slot (the pods' topology starts every slot that has a pod).
std::vector<replica_placement> started_on(const topology_config& t, const pod_group& g, const std::string& node) {
  std::vector<replica_placement> out;
  for (auto& r : place_replicas(t))
    if (r.node == node && (r.started || r.pool == g.scaled_pool)) out.push_back(r);
  return out;
}

bool uses_models_volume(const topology_config& t) {
  for (const auto* m : t.models())
    if (!m->path.empty()) return true;
  return !t.lora.adapters.empty();
}

// What one process of the group holds: the weights of each model it serves, the KV of each
// replica it starts (shared-memory segments, so /dev/shm must hold them) and the KV store.
struct pod_memory {
  std::uint64_t weights = 0, kv = 0, store = 0;
  std::uint64_t total() const { return weights + kv + store + process_overhead; }
};

pod_memory memory_of(const topology_config& t, const pod_group& g, const kubernetes_options& o) {
  pod_memory most;
  const bool sim = t.model.backend == backend_kind::sim;
  for (const auto& node : g.nodes) {
    pod_memory m;
    std::set<std::string> models;
    for (auto& r : started_on(t, g, node)) {
      models.insert(r.model);
      if (!sim) m.kv += t.scheduler.kv_memory_bytes;
    }
    for (const auto& name : models)
      if (auto w = o.weight_bytes.find(name); w != o.weight_bytes.end()) m.weights += w->second;
    m.store = models.empty() ? 0 : t.kv_store.capacity_bytes;
    if (m.total() > most.total()) most = m;
  }
  return most;
}

std::string mebibytes(std::uint64_t bytes) { return std::to_string((bytes + (std::uint64_t(1) << 20) - 1) >> 20) + "Mi"; }

int gpus_of(const topology_config& t, const pod_group& g) {
  if (t.model.backend != backend_kind::cuda) return 0;
  int most = 0;
  for (const auto& node : g.nodes) {
    int n = 0;
    for (auto& r : started_on(t, g, node)) n += r.pipeline_parallel * std::max(r.tensor_parallel, r.expert_parallel);
    most = std::max(most, n);
  }
  return most;
}

json resources(const topology_config& t, const pod_group& g, const kubernetes_options& o) {
  const std::uint64_t bytes = memory_of(t, g, o).total();
  json r = {{"requests", {{"cpu", "1"}, {"memory", mebibytes(bytes)}}}, {"limits", {{"memory", mebibytes(bytes + bytes / 4)}}}};
  if (const int gpus = gpus_of(t, g)) r["limits"]["nvidia.com/gpu"] = gpus;
  return r;
}

json env_from_secret(const std::string& name, const std::string& secret, const std::string& key) {
  return {{"name", name}, {"valueFrom", {{"secretKeyRef", {{"name", secret}, {"key", key}}}}}};
}

json container_env(const pod_group& g, const kubernetes_options& o) {
  json env = json::array();
  env.push_back({{"name", "POD_NAME"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}});
  env.push_back(env_from_secret("TROUPE_CLUSTER_TOKEN", o.name + "-cluster", "token"));
  if (g.heads) env.push_back(env_from_secret("TROUPE_API_KEY", o.name + "-api-key", "api-key"));
  return env;
}

json command_args(const pod_group& g) {
  const std::string topo = std::string(config_dir) + "/topology.toml";
  if (g.heads) return {"serve", topo, "--name", "$(POD_NAME)", "--listen", "0.0.0.0", "--api-key", "$(TROUPE_API_KEY)"};
  return {"node", topo, "--name", "$(POD_NAME)", "--status-file", "/var/lib/troupe/status"};
}

json http_probe(const std::string& path, int period, int failures) {
  return {{"httpGet", {{"path", path}, {"port", "http"}}}, {"periodSeconds", period}, {"timeoutSeconds", 5}, {"failureThreshold", failures}};
}

json status_probe(int period, int failures) {
  return {{"exec", {{"command", {"grep", "-qx", "ready", "/var/lib/troupe/status"}}}}, {"periodSeconds", period}, {"failureThreshold", failures}};
}

// Heads: /health is 503 while no replica serves and while the head shuts down; /metrics answers
// while the frontend does. Nodes: the status file says loading, ready or stopping. A model may
// take long to load: the startup probe waits up to an hour before the others begin.
void add_probes(json& c, const pod_group& g) {
  if (g.heads) {
    c["startupProbe"] = http_probe("/health", 5, 720);
    c["readinessProbe"] = http_probe("/health", 5, 2);
    c["livenessProbe"] = http_probe("/metrics", 20, 6);
  } else {
    c["startupProbe"] = status_probe(5, 720);
    c["readinessProbe"] = status_probe(5, 2);
  }
}

// The replicas of `node` that other pods can take the requests of.
std::vector<std::string> drainable(const topology_config& t, const pod_group& g, const std::string& node) {
  std::vector<std::string> out;
  const auto all = place_replicas(t);
  for (auto& r : started_on(t, g, node)) {
    const bool elsewhere = std::any_of(all.begin(), all.end(), [&](const replica_placement& q) { return q.pool == r.pool && q.node != node; });
    if (elsewhere) out.push_back(r.name);
  }
  return out;
}

// The preStop hook: a drain of each replica this pod holds through the first head that answers.
// A drain that fails leaves the rest to the process's own stop. Names never enter the script:
// the pod's replicas and the heads' hosts are files of the config volume (drain_files), read
// by the pod's own name, which Kubernetes sets.
std::string prestop_script(const topology_config& t) {
  return "f=" + std::string(config_dir) + "/drain/\"$POD_NAME\"\n[ -f \"$f\" ] || exit 0\nfor r in $(cat \"$f\"); do\n"
         "  for h in $(cat " + config_dir + "/drain/heads); do\n    troupe admin --endpoint \"tcp://$h:" + std::to_string(admin_port) +
         "\" --server-key /etc/troupe/admin/server.pub --key /etc/troupe/admin/client.key --timeout " + std::to_string(drain_seconds(t)) +
         " drain \"$r\" && break\n  done\ndone\nexit 0\n";
}

// Long enough for every drain the preStop hook may try (each replica, at each head in turn) and
// then the process's own stop: a head's shutdown grace for requests in flight.
int grace_seconds(const topology_config& t, const std::vector<pod_group>& groups, const pod_group& g) {
  std::size_t most = 0;
  for (const auto& node : g.nodes) most = std::max(most, drainable(t, g, node).size());
  const int heads = int(groups.front().nodes.size());
  const int own = g.heads ? int(std::ceil(double(t.frontend.shutdown_grace.count()) / 1000.0)) : 10;
  return int(most) * heads * drain_seconds(t) + own + 15;
}

json volume_mounts(const topology_config& t) {
  json m = {{{"name", "config"}, {"mountPath", config_dir}, {"readOnly", true}},
            {{"name", "tls"}, {"mountPath", "/etc/troupe/tls"}, {"readOnly", true}},
            {{"name", "admin"}, {"mountPath", "/etc/troupe/admin"}, {"readOnly", true}},
            {{"name", "work"}, {"mountPath", "/var/lib/troupe"}},
            {{"name", "tmp"}, {"mountPath", "/tmp"}},
            {{"name", "shm"}, {"mountPath", "/dev/shm"}}};
  if (uses_models_volume(t)) m.push_back({{"name", "models"}, {"mountPath", "/models"}, {"readOnly", true}});
  return m;
}

json volumes(const topology_config& t, const std::vector<pod_group>& groups, const pod_group& g, const kubernetes_options& o) {
  json items = {{{"key", "topology.toml"}, {"path", "topology.toml"}}};
  for (const auto& [path, text] : o.files) items.push_back({{"key", "file." + base_name(path)}, {"path", "files/" + base_name(path)}});
  for (const auto& [key, text] : drain_files(t, groups, g, o)) items.push_back({{"key", key}, {"path", "drain/" + key.substr(6)}});
  const pod_memory mem = memory_of(t, g, o);
  json v = {{{"name", "config"}, {"configMap", {{"name", o.name + "-topology"}, {"items", items}}}},
            {{"name", "tls"}, {"secret", {{"secretName", o.tls_secret.empty() ? o.name + "-tls" : o.tls_secret}, {"defaultMode", 0440}}}},
            {{"name", "admin"}, {"secret", {{"secretName", o.name + "-admin"}, {"defaultMode", 0440}}}},
            {{"name", "work"}, {"emptyDir", json::object()}},
            {{"name", "tmp"}, {"emptyDir", json::object()}},
            // KV caches live in shared-memory segments; a container's own /dev/shm is 64 MiB.
            {{"name", "shm"}, {"emptyDir", {{"medium", "Memory"}, {"sizeLimit", mebibytes(mem.kv + mem.store + (std::uint64_t(64) << 20))}}}}};
  if (uses_models_volume(t))
    v.push_back({{"name", "models"}, {"persistentVolumeClaim", {{"claimName", o.models_claim.empty() ? o.name + "-models" : o.models_claim}, {"readOnly", true}}}});
  return v;
}

json container(const topology_config& t, const std::vector<pod_group>& groups, const pod_group& g, const kubernetes_options& o) {
  json c = {{"name", "troupe"},
            {"image", o.image},
            {"imagePullPolicy", "IfNotPresent"},
            {"command", {"troupe"}},
            {"args", command_args(g)},
            {"env", container_env(g, o)},
            {"volumeMounts", volume_mounts(t)},
            {"resources", resources(t, g, o)},
            {"securityContext", {{"allowPrivilegeEscalation", false}, {"readOnlyRootFilesystem", true}, {"capabilities", {{"drop", {"ALL"}}}}}}};
  if (g.heads)
    c["ports"] = {{{"name", "http"}, {"containerPort", t.frontend.port}},
                  {{"name", "registry"}, {"containerPort", registry_port}},
                  {{"name", "admin"}, {"containerPort", admin_port}},
                  {{"name", "admin-events"}, {"containerPort", admin_port + 1}}};
  add_probes(c, g);
  if (!drain_files(t, groups, g, o).empty()) c["lifecycle"] = {{"preStop", {{"exec", {{"command", {"sh", "-c", prestop_script(t)}}}}}}};
  return c;
}

json pod_labels(const pod_group& g, const kubernetes_options& o) {
  json l = labels(o, g.heads ? "head" : "node");
  l["troupe.dev/group"] = g.statefulset;
  for (const auto& p : g.pools) l[pool_label(p)] = "serves";
  return l;
}

}  // namespace

std::map<std::string, std::string> drain_files(const topology_config& t, const std::vector<pod_group>& groups, const pod_group& g,
                                               const kubernetes_options& o) {
  std::map<std::string, std::string> out;
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    std::string list;
    for (auto& r : drainable(t, g, g.nodes[k])) list += r + "\n";
    if (!list.empty()) out["drain." + g.pod(k)] = list;
  }
  if (out.empty()) return out;
  std::string heads;
  for (std::size_t k = 0; k < groups.front().nodes.size(); ++k) heads += pod_host(o, groups.front().pod(k)) + "\n";
  out["drain.heads"] = heads;
  return out;
}

int drain_seconds(const topology_config& t) { return std::max(30, int(2 * t.timeouts.request.count() / 1000)); }

json statefulset(const topology_config& t, const std::vector<pod_group>& groups, const pod_group& g, const kubernetes_options& o) {
  json selector = {{"app.kubernetes.io/instance", o.name}, {"troupe.dev/group", g.statefulset}};
  json pod = {{"metadata", {{"labels", pod_labels(g, o)}}},
              {"spec",
               {{"terminationGracePeriodSeconds", grace_seconds(t, groups, g)},
                {"securityContext", {{"runAsNonRoot", true}, {"runAsUser", 10001}, {"runAsGroup", 10001}, {"fsGroup", 10001}}},
                {"containers", {container(t, groups, g, o)}},
                {"volumes", volumes(t, groups, g, o)}}}};
  json spec = {{"serviceName", o.name + "-cluster"},
               {"replicas", g.replicas},
               // Pods start together: a node waits for its heads by itself, and a head serves
               // once any replica has joined.
               {"podManagementPolicy", "Parallel"},
               {"selector", {{"matchLabels", selector}}},
               {"template", pod}};
  json meta = metadata(o, g.statefulset, g.heads ? "head" : "node");
  return {{"apiVersion", "apps/v1"}, {"kind", "StatefulSet"}, {"metadata", meta}, {"spec", spec}};
}

}  // namespace troupe::topology::deploy::detail
