// The parts every object of a deployment shares (topology/deploy/objects.h).
#include "topology/deploy/objects.h"

#include <cctype>

namespace troupe::topology::deploy::detail {

json labels(const kubernetes_options& o, const std::string& component) {
  return {{"app.kubernetes.io/name", "troupe"}, {"app.kubernetes.io/instance", o.name}, {"app.kubernetes.io/component", component}};
}

json metadata(const kubernetes_options& o, const std::string& name, const std::string& component) {
  return {{"name", name}, {"namespace", o.ns}, {"labels", labels(o, component)}};
}

std::string pool_label(const std::string& pool) { return "troupe.dev/pool-" + pool; }

std::string base_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string pod_host(const kubernetes_options& o, const std::string& pod) {
  return pod + "." + o.name + "-cluster." + o.ns + ".svc.cluster.local";
}

}  // namespace troupe::topology::deploy::detail
