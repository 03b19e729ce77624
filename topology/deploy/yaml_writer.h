// JSON values written as YAML, the form Kubernetes manifests are read and reviewed in. Every
// string is double-quoted (JSON's escapes are YAML's), so no value can turn into a number, a
// boolean or a null the way plain YAML scalars do ("on", "0755", "1e3"); text of several lines
// (a topology file, a PEM certificate) is written as a literal block so it reads as it was.
// No packaged YAML library writes this way (yaml-cpp's emitter leaves scalars plain), and the
// whole writer is one small recursive function.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace troupe::topology::deploy {

// One YAML document holding `v`, ending with a newline.
std::string to_yaml(const nlohmann::json& v);

// Several documents, separated by "---" lines.
std::string to_yaml_documents(const std::vector<nlohmann::json>& docs);

}  // namespace troupe::topology::deploy
