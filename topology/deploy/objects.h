// Internal to topology/deploy: the parts every object shares, and the StatefulSets.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "topology/deploy/kubernetes.h"

namespace troupe::topology::deploy::detail {

using nlohmann::json;

// The labels every object of the deployment carries, and `component`'s.
json labels(const kubernetes_options& o, const std::string& component);
json metadata(const kubernetes_options& o, const std::string& name, const std::string& component);
// "troupe.dev/pool-NAME": the label of pods that hold pool NAME's replicas (pool names are RFC
// 1123 labels of at most max_pool_name characters, so the key is valid as it is).
std::string pool_label(const std::string& pool);
// A path's last component ("models/kjv/" -> "kjv"): what a file or folder is called in the pods.
std::string base_name(const std::string& path);
// The DNS name of a pod under the deployment's headless Service.
std::string pod_host(const kubernetes_options& o, const std::string& pod);

// The files of the config volume the preStop hooks read, by ConfigMap key: "drain.<pod>" (the
// replicas pod <pod> of group g drains, a line each) and "drain.heads" (the heads' hosts), or
// none when no pod of g has a replica other pods can take over.
std::map<std::string, std::string> drain_files(const topology_config& t, const std::vector<pod_group>& groups, const pod_group& g,
                                               const kubernetes_options& o);

// Seconds a replica's drain may take before the preStop hook gives up on it.
int drain_seconds(const topology_config& t);

json statefulset(const topology_config& t, const std::vector<pod_group>& groups, const pod_group& g, const kubernetes_options& o);

}  // namespace troupe::topology::deploy::detail
