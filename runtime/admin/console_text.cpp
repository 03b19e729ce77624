#include "runtime/admin/console_text.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace troupe::admin {

namespace {

using json = nlohmann::json;

// A field as text: strings as they are, anything else as JSON, a missing field as "-".
std::string str(const json& j, const char* k) {
  if (!j.is_object() || !j.contains(k) || j[k].is_null()) return "-";
  return j[k].is_string() ? j[k].get<std::string>() : j[k].dump();
}

double num(const json& j, const char* k) { return j.is_object() && j.contains(k) && j[k].is_number() ? j[k].get<double>() : 0.0; }

std::string join(const json& list) {
  std::string out;
  if (!list.is_array()) return list.is_null() ? "-" : (list.is_string() ? list.get<std::string>() : list.dump());
  for (const auto& x : list) out += (out.empty() ? "" : ", ") + (x.is_string() ? x.get<std::string>() : x.dump());
  return out.empty() ? "-" : out;
}

// Rows as columns padded to their widest cell (the last column unpadded).
std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> w;
  for (const auto& r : rows)
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (w.size() <= i) w.push_back(0);
      w[i] = std::max(w[i], r[i].size());
    }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i) line += i + 1 < r.size() ? r[i] + std::string(w[i] - r[i].size() + 2, ' ') : r[i];
    out += line + "\n";
  }
  return out;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// A replica's speculative acceptance as a percentage, "-" when it proposed nothing.
std::string acceptance(const json& x) {
  const auto it = x.find("spec_acceptance");
  return it == x.end() || !it->is_number() ? "-" : fmt("%.0f%%", 100 * it->get<double>());
}

std::string status_text(const json& r) {
  std::vector<std::vector<std::string>> nodes{{"NODE", "REPLICAS ALIVE"}};
  for (const auto& n : r.value("nodes", json::array())) nodes.push_back({str(n, "name"), str(n, "replicas_alive") + "/" + str(n, "replicas")});
  std::vector<std::vector<std::string>> reps{{"REPLICA", "POOL", "ROLE", "NODE", "STATE", "GEN", "RUN", "WAIT", "KV BLOCKS", "TOK/S", "ACCEPT"}};
  for (const auto& x : r.value("replicas", json::array()))
    reps.push_back({str(x, "name"), str(x, "pool"), str(x, "role"), str(x, "node"), str(x, "state"), str(x, "generation"),
                    str(x, "running"), str(x, "waiting"), str(x, "kv_used_blocks") + "/" + str(x, "kv_total_blocks"),
                    fmt("%.1f", num(x, "tokens_per_s")), acceptance(x)});
  return table(nodes) + "\n" + table(reps);
}

std::string kv_text(const json& r) {
  std::vector<std::vector<std::string>> rows{{"REPLICA", "STATE", "USED/TOTAL", "CACHED", "HIT RATE"}};
  for (const auto& x : r["replicas"])
    rows.push_back({str(x, "name"), str(x, "state"), str(x, "used_blocks") + "/" + str(x, "total_blocks"), str(x, "cached_blocks"),
                    fmt("%.1f%%", 100 * num(x, "prefix_hit_rate"))});
  return table(rows);
}

std::string requests_text(const json& r) {
  std::vector<std::vector<std::string>> rows{{"REQUEST", "REPLICA", "PROMPT", "OUTPUT", "MIGR", "PRIO", "AGE (s)"}};
  for (const auto& x : r["requests"])
    rows.push_back({str(x, "id"), str(x, "replica"), str(x, "prompt_tokens"), str(x, "output_tokens"), str(x, "migrations"),
                    str(x, "priority"), fmt("%.1f", num(x, "age_seconds"))});
  return table(rows) + std::to_string(r["requests"].size()) + " in progress\n";
}

std::string help_text(const json& r) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : r["commands"]) rows.push_back({"  " + str(c, "command"), str(c, "does")});
  rows.push_back({"  watch", "follow the event stream (this console's own command)"});
  rows.push_back({"  top", "a live view of replicas, queues, KV use and throughput (this console's own)"});
  return table(rows);
}

std::string topology_text(const json& r) {
  std::string out = "source  " + str(r, "source") + "\n";
  if (r.contains("model") && r["model"].is_object()) {
    const auto& m = r["model"];
    out += "model   " + str(m, "path");
    std::vector<std::string> facts;
    if (m.contains("name")) facts.push_back("served as " + str(m, "name"));
    if (m.contains("architecture")) facts.push_back(str(m, "architecture"));
    if (m.contains("layers")) facts.push_back(str(m, "layers") + " layers");
    if (m.contains("max_model_len")) facts.push_back("context " + str(m, "max_model_len"));
    if (m.contains("vocab_size")) facts.push_back("vocabulary " + str(m, "vocab_size"));
    if (m.contains("backend")) facts.push_back("backend " + str(m, "backend"));
    std::string list;
    for (const auto& f : facts) list += (list.empty() ? "" : ", ") + f;
    out += list.empty() ? "\n" : " (" + list + ")\n";
  }
  if (r.contains("router")) out += "router  " + str(r["router"], "policy") + "\n";
  std::vector<std::vector<std::string>> nodes{{"NODE", "ADDRESS", "HEAD"}};
  for (const auto& n : r.value("nodes", json::array()))
    nodes.push_back({str(n, "name"), str(n, "address"), n.value("head", false) ? "yes" : "no"});
  std::vector<std::vector<std::string>> pools{{"POOL", "ROLE", "REPLICAS", "NODES"}};
  for (const auto& p : r.value("pools", json::array())) pools.push_back({str(p, "name"), str(p, "role"), str(p, "replicas"), join(p.value("nodes", json::array()))});
  return out + "\n" + table(nodes) + "\n" + table(pools);
}

std::string autoscaler_text(const json& r) {
  std::string out = std::string("autoscaler: ") + (r.value("paused", false) ? "paused" : "running");
  out += "; pinned pools: " + join(r.value("pinned", json::array())) + "\n";
  if (r.contains("policy") && r["policy"].is_object()) {
    std::vector<std::vector<std::string>> rows{{"THRESHOLD", "VALUE"}};
    for (auto it = r["policy"].begin(); it != r["policy"].end(); ++it) rows.push_back({it.key(), it.value().dump()});
    out += "\n" + table(rows);
  }
  if (r.contains("last_decisions") && r["last_decisions"].is_object() && !r["last_decisions"].empty()) {
    std::vector<std::vector<std::string>> rows{{"POOL", "LAST DECISION"}};
    for (auto it = r["last_decisions"].begin(); it != r["last_decisions"].end(); ++it)
      rows.push_back({it.key(), it.value().is_string() ? it.value().get<std::string>() : it.value().dump()});
    out += "\n" + table(rows);
  }
  return out;
}

// Any other object: one "key: value" line per field when every value is a scalar or a list of
// scalars; indented JSON otherwise.
std::string generic_text(const json& r) {
  if (!r.is_object()) return r.dump(2) + "\n";
  std::vector<std::vector<std::string>> rows;
  for (auto it = r.begin(); it != r.end(); ++it) {
    const auto& v = it.value();
    if (v.is_object()) return r.dump(2) + "\n";
    if (v.is_array())
      for (const auto& x : v)
        if (x.is_structured()) return r.dump(2) + "\n";
    rows.push_back({it.key() + ":", v.is_array() ? join(v) : (v.is_string() ? v.get<std::string>() : v.dump())});
  }
  return table(rows);
}

}  // namespace

std::string result_text(const std::string& cmd, const nlohmann::json& r) {
  if (!r.is_object()) return generic_text(r);
  if (cmd == "status" && r.contains("replicas")) return status_text(r);
  if (cmd == "kv" && r.contains("replicas") && r["replicas"].is_array()) return kv_text(r);
  if (cmd == "requests" && r.contains("requests") && r["requests"].is_array()) return requests_text(r);
  if (cmd == "help" && r.contains("commands") && r["commands"].is_array()) return help_text(r);
  if (cmd == "topology" && r.contains("pools")) return topology_text(r);
  if ((cmd == "autoscaler" || cmd == "set-policy") && r.contains("policy") && r.contains("paused")) return autoscaler_text(r);
  if (cmd == "drain" && r.contains("replica")) return "replica " + str(r, "replica") + ": drained, safe to remove\n";
  if (cmd == "resume" && r.contains("replica")) return "replica " + str(r, "replica") + ": " + str(r, "state") + "\n";
  if (cmd == "kill" && r.contains("replica")) return "replica " + str(r, "replica") + ": killed (its node agent restarts it)\n";
  if (cmd == "kill" && r.contains("node")) return "node " + str(r, "node") + ": killed (launch restarts its process)\n";
  if (cmd == "scale" && r.contains("pool")) {
    std::string out = "pool " + str(r, "pool") + ": " + str(r, "replicas") + " replicas serving";
    if (r.contains("added") && !r["added"].empty()) out += "; joined: " + join(r["added"]);
    if (r.contains("removed") && !r["removed"].empty()) out += "; drained and kept warm: " + join(r["removed"]);
    return out + "\n";
  }
  if (cmd == "set-policy" && r.contains("router") && r["router"].is_object()) {
    std::string params;
    if (r["router"].contains("params") && r["router"]["params"].is_object())
      for (auto it = r["router"]["params"].begin(); it != r["router"]["params"].end(); ++it)
        params += (params.empty() ? "" : " ") + it.key() + "=" + it.value().dump();
    return "router: policy " + str(r["router"], "policy") + (params.empty() ? "" : " (" + params + ")") + "\n";
  }
  if (cmd == "log-level" && r.contains("level")) {
    std::string out = "log level " + str(r, "level");
    if (r.contains("applies_to")) out += ", set on " + str(r, "applies_to");
    if (r.contains("nodes")) out += " and " + str(r, "nodes") + " node(s)";
    if (r.contains("nodes_error")) out += "; the nodes were not told: " + str(r, "nodes_error");
    return out + "\n";
  }
  return generic_text(r);
}

std::string top_text(const nlohmann::json& status, const std::string& title, int width) {
  width = std::max(width, 20);
  auto cut = [&](std::string line) {
    if (int(line.size()) > width) line.resize(std::size_t(width));
    return line + "\n";
  };
  std::string out = cut(title) + "\n";
  int alive = 0, running = 0, waiting = 0;
  const json replicas = status.value("replicas", json::array());
  for (const auto& x : replicas) {
    alive += x.value("state", "") == "running" ? 1 : 0;
    running += x.value("running", 0);
    waiting += x.value("waiting", 0);
  }
  char line[512];
  std::snprintf(line, sizeof line, "replicas %d running of %zu   requests %d running, %d waiting   %.1f tokens/s", alive,
                replicas.size(), running, waiting, num(status, "tokens_per_s"));
  out += cut(line) + "\n";
  // Columns: REPLICA 14, ROLE 8, NODE 10, STATE 8, GEN 4, RUN 4, WAIT 4, the bar, a percentage
  // TOK/S 7 (and ACCEPT 6), a space between each (two before the bar). The bar takes what the others leave
  // (4 to 30); where even a 4-wide bar does not fit, NODE goes, then GEN, then ROLE.
  // ACCEPT only where some replica speculates.
  bool node_col = true, gen_col = true, role_col = true, accept_col = false;
  for (const auto& x : replicas) accept_col = accept_col || acceptance(x) != "-";
  auto fixed = [&] { return 15 + (role_col ? 9 : 0) + (node_col ? 11 : 0) + 9 + (gen_col ? 5 : 0) + 5 + 5 + 1 + 2 + 6 + 8 + (accept_col ? 7 : 0); };
  for (bool* col : {&node_col, &gen_col, &role_col})
    if (fixed() + 4 > width) *col = false;
  const int bar_w = std::clamp(width - fixed(), 4, 30);
  auto row = [&](const std::string& name, const std::string& role, const std::string& node, const std::string& state,
                 const std::string& gen, const std::string& run, const std::string& wait, const std::string& bar,
                 const std::string& pct, const std::string& toks, const std::string& accept) {
    std::string l;
    auto add = [&](const char* f, const std::string& v) {
      std::snprintf(line, sizeof line, f, v.c_str());
      l += line;
    };
    add("%-14s ", name);
    if (role_col) add("%-8s ", role);
    if (node_col) add("%-10s ", node);
    add("%-8s ", state);
    if (gen_col) add("%4s ", gen);
    std::snprintf(line, sizeof line, "%4s %4s  %-*s %5s %7s", run.c_str(), wait.c_str(), bar_w + 2, bar.c_str(), pct.c_str(),
                  toks.c_str());
    l += line;
    if (accept_col) add(" %6s", accept);
    return cut(l);
  };
  out += row("REPLICA", "ROLE", "NODE", "STATE", "GEN", "RUN", "WAIT", "KV USE", "", "TOK/S", "ACCEPT");
  for (const auto& x : replicas) {
    const double kv = std::clamp(num(x, "kv_usage"), 0.0, 1.0);
    const int n = int(kv * bar_w + 0.5);
    const std::string bar = "[" + std::string(std::size_t(n), '#') + std::string(std::size_t(bar_w - n), '.') + "]";
    out += row(str(x, "name"), str(x, "role"), str(x, "node"), str(x, "state"), str(x, "generation"), str(x, "running"),
               str(x, "waiting"), bar, fmt("%.0f%%", 100 * kv), fmt("%.1f", num(x, "tokens_per_s")), acceptance(x));
  }
  return out;
}

}  // namespace troupe::admin
