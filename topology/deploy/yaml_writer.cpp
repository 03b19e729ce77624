#include "topology/deploy/yaml_writer.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace troupe::topology::deploy {

namespace {

using nlohmann::json;

// A key that plain YAML reads back as the same string: names like "app.kubernetes.io/name".
bool plain_key(const std::string& k) {
  static const std::set<std::string> reserved = {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"};
  if (k.empty() || !(std::isalpha(static_cast<unsigned char>(k[0])) || k[0] == '_')) return false;
  for (char c : k)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/' || c == '-')) return false;
  std::string lower;
  for (char c : k) lower += char(std::tolower(static_cast<unsigned char>(c)));
  return !reserved.count(lower);
}

std::string key_text(const std::string& k) { return plain_key(k) ? k : json(k).dump(); }

// A literal block keeps every character of `s` when its first line does not start with a space
// (which would need an indentation indicator) and it has no carriage return.
bool as_block(const std::string& s) {
  return s.find('\n') != std::string::npos && s.find('\r') == std::string::npos && s[0] != ' ' && s[0] != '\t' && s[0] != '\n';
}

void block(const std::string& s, int indent, std::string& out) {
  std::size_t trailing = 0;
  while (trailing < s.size() && s[s.size() - 1 - trailing] == '\n') ++trailing;
  out += trailing == 0 ? "|-\n" : trailing == 1 ? "|\n" : "|+\n";
  const std::string pad(std::size_t(indent), ' ');
  const std::string body = s.substr(0, s.size() - trailing);
  for (std::size_t pos = 0; pos <= body.size();) {
    const std::size_t nl = std::min(body.find('\n', pos), body.size());
    const std::string line = body.substr(pos, nl - pos);
    out += (line.empty() ? "" : pad) + line + "\n";
    pos = nl + 1;
  }
  for (std::size_t i = 1; i < trailing; ++i) out += "\n";  // kept by "|+"
}

bool scalar_or_empty(const json& v) { return !v.is_structured() || v.empty(); }

void scalar(const json& v, int indent, std::string& out) {
  if (v.is_string() && as_block(v.get_ref<const std::string&>())) return block(v.get_ref<const std::string&>(), indent, out);
  out += v.dump() + "\n";
}

void value(const json& v, int indent, std::string& out);

// Keys in the order Kubernetes' own documents put them: what an object is and its name first.
std::vector<std::string> key_order(const json& v) {
  static const char* first[] = {"apiVersion", "kind", "metadata", "name"};
  std::vector<std::string> keys;
  for (const char* k : first)
    if (v.contains(k)) keys.emplace_back(k);
  for (auto it = v.begin(); it != v.end(); ++it)
    if (std::find(keys.begin(), keys.end(), it.key()) == keys.end()) keys.push_back(it.key());
  return keys;
}

void object(const json& v, int indent, std::string& out) {
  const std::string pad(std::size_t(indent), ' ');
  for (const auto& k : key_order(v)) {
    const json& item = v.at(k);
    out += pad + key_text(k) + ":";
    if (scalar_or_empty(item)) {
      out += " ";
      scalar(item, indent + 2, out);
    } else {
      out += "\n";
      value(item, item.is_array() ? indent : indent + 2, out);
    }
  }
}

void array(const json& v, int indent, std::string& out) {
  const std::string pad(std::size_t(indent), ' ');
  for (const auto& item : v) {
    if (scalar_or_empty(item)) {
      out += pad + "- ";
      scalar(item, indent + 2, out);
      continue;
    }
    // The item's lines at indent + 2, the first one's indentation turned into "- ".
    std::string inner;
    value(item, indent + 2, inner);
    out += pad + "- " + inner.substr(std::size_t(indent) + 2);
  }
}

void value(const json& v, int indent, std::string& out) {
  if (v.is_object() && !v.empty()) return object(v, indent, out);
  if (v.is_array() && !v.empty()) return array(v, indent, out);
  out += std::string(std::size_t(indent), ' ');
  scalar(v, indent, out);
}

}  // namespace

std::string to_yaml(const nlohmann::json& v) {
  std::string out;
  value(v, 0, out);
  return out;
}

std::string to_yaml_documents(const std::vector<nlohmann::json>& docs) {
  std::string out;
  for (std::size_t i = 0; i < docs.size(); ++i) out += (i ? "---\n" : "") + to_yaml(docs[i]);
  return out;
}

}  // namespace troupe::topology::deploy
