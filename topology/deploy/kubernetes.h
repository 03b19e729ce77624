// The Kubernetes objects a topology means (`troupe deploy kubernetes`, docs/deploy.md): pure
// code from a parsed topology, its file's text and the material the command generated to the
// objects, so a test checks them without a cluster.
//
// How a topology maps:
// - Every process of the topology is a pod of a StatefulSet, named after it for good: the heads
//   are "<name>-head-K", and the other nodes, grouped by the pools they host, "<name>-<pools>-K".
//   In the topology the pods read (a ConfigMap) each node is named after its pod and addressed by
//   its DNS name under a headless Service, so `--name $(POD_NAME)` is the same command in every
//   pod of a set.
// - The links between pods are TLS (Secret; generated, or an existing one named) and the nodes
//   join with the cluster token (Secret). The OpenAI API (a Service over the heads) needs an API
//   key (Secret); the admin endpoint is CURVE-authenticated (keys in a Secret) and reached by the
//   preStop hooks, which drain a pod's replicas through it before the pod stops.
// - A pool whose replicas are pods (its own nodes, one replica slot each) is scaled by
//   Kubernetes: its StatefulSet starts with `replicas` pods, and a KEDA ScaledObject on the pool's
//   queue moves it between min_replicas and max_replicas. Other pools keep Troupe's own scaling.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "topology/topology.h"

namespace troupe::topology::deploy {

struct kubernetes_options {
  std::string name = "troupe";                // every object's name starts with it
  std::string ns = "default";                 // namespace
  std::string image = "troupe:latest";
  std::string models_claim;                   // PersistentVolumeClaim holding the model folders; default "<name>-models"
  std::string tls_secret;                     // an existing Secret (tls.crt, tls.key, ca.crt); empty: the generated one
  std::string prometheus = "http://prometheus-operated.monitoring.svc:9090";  // what KEDA queries
  std::map<std::string, std::uint64_t> weight_bytes;  // model name ("": [model]) -> its weights' bytes on disk
  std::map<std::string, std::string> files;           // a path the topology names -> its text (chat templates)
};

// What the command generated: secrets that go into Secret objects (never the ConfigMap).
struct kubernetes_secrets {
  std::string cluster_token;
  std::string api_key;
  std::string tls_certificate, tls_key;  // PEM, self-signed: also the CA (unused with tls_secret)
  std::string admin_server_secret, admin_server_public;  // CURVE, Z85
  std::string admin_client_secret, admin_client_public;
};

// One object and the file `-o DIR` writes it to.
struct manifest {
  std::string file;
  nlohmann::json object;
};

// One StatefulSet: processes of the topology that run the same way.
struct pod_group {
  std::string statefulset;
  bool heads = false;
  std::vector<std::string> nodes;  // the topology's node names, in ordinal order
  std::vector<std::string> pools;  // pools with replicas on them
  std::string scaled_pool;         // set when the group's pods are this pool's replicas
  int replicas = 0;                // pods at start
  std::string pod(std::size_t ordinal) const { return statefulset + "-" + std::to_string(ordinal); }
};

// The topology's processes as StatefulSets. Throws input_error "SOURCE: KEY: why" for what a
// topology says that cannot run as pods (ranks of one group in several pods, keys in the file
// that belong in Secrets, probes that would need an API key).
std::vector<pod_group> plan_pods(const topology_config& t, const kubernetes_options& o);

// The topology file the pods read: `text` (t's source) with the nodes renamed and addressed as
// their pods, the frontend and admin endpoint listening on the pod's addresses with
// authentication, TLS files and work folders where the pods mount them, and pods-as-replicas
// pools serving every replica that has a pod.
std::string pod_topology(const topology_config& t, const std::string& text, const std::vector<pod_group>& groups,
                         const kubernetes_options& o, const kubernetes_secrets& s);

// Every object, in the order `kubectl apply` should create them.
std::vector<manifest> kubernetes_manifests(const topology_config& t, const std::string& text, const kubernetes_options& o,
                                           const kubernetes_secrets& s);

// The Grafana dashboard (deploy/grafana/troupe-dashboard.json), as JSON text.
std::string_view grafana_dashboard();

// Ports every pod uses (the same in each: pods have addresses of their own).
inline constexpr std::uint16_t registry_port = 7700;  // a head's node registry
inline constexpr std::uint16_t health_port = 7702;    // a node's /health (`troupe node --health-port`)
inline constexpr std::uint16_t admin_port = 7600;     // a head's admin endpoint; its events on 7601

}  // namespace troupe::topology::deploy
