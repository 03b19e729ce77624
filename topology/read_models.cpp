// A topology's models: [model], the one every pool serves unless it names another, and
// [models.NAME] tables beside it, each with the names requests give it and a revision. A pool
// names its model with `model = "NAME"`. Called by parse_topology (topology.cpp): read_models
// before [[nodes]], read_pool_model for each pool, check_models_served after the pools.
#include <algorithm>
#include <set>
#include <string>

#include "runtime/chat/tool_calls.h"
#include "topology/toml_reader.h"
#include "topology/topology.h"

namespace troupe::topology {

std::vector<const model_spec*> topology_config::models() const {
  std::vector<const model_spec*> out{&model};
  for (const auto& m : more_models) out.push_back(&m);
  return out;
}

const model_spec* topology_config::model_named(const std::string& name) const {
  if (name.empty()) return &model;
  for (const auto& m : more_models)
    if (m.name == name) return &m;
  return nullptr;
}

std::size_t topology_config::model_index(const std::string& name) const {
  if (name.empty()) return 0;
  for (std::size_t i = 0; i < more_models.size(); ++i)
    if (more_models[i].name == name) return i + 1;
  return 0;
}

std::optional<std::string> served_name_clash(const topology_config& t) {
  std::set<std::string> seen;
  for (const model_spec* m : t.models()) {
    std::vector<std::string> names = m->served_names;
    if (m->name.empty()) {
      names = {t.frontend.model_name};
      names.insert(names.end(), t.frontend.model_aliases.begin(), t.frontend.model_aliases.end());
    }
    for (const auto& n : names)
      if (!n.empty() && !seen.insert(n).second) return m->label() + " served_names: \"" + n + "\" is already another model's name";
  }
  return std::nullopt;
}

}  // namespace troupe::topology

namespace troupe::topology::detail {

namespace {

// One model table: [model] (prefix "model.") or [models.NAME] ("models.NAME."). The backend is
// the cluster's: a [models.NAME] may repeat [model]'s, not name another.
model_spec read_model_table(const reader& r, const toml::table& m, const std::string& prefix, const std::string& name,
                            const model_spec* first) {
  if (name.empty())
    r.only_keys(m, prefix, {"path", "preset", "backend", "max_model_len", "chat_template", "tool_call_parser", "revision", "fallback",
                            "fallback_queue_wait", "fallback_min_priority"});
  else
    r.only_keys(m, prefix, {"path", "preset", "backend", "max_model_len", "chat_template", "tool_call_parser", "revision", "served_names",
                            "fallback", "fallback_queue_wait", "fallback_min_priority"});
  model_spec s;
  s.name = name;
  s.line = int(m.source().begin.line);
  s.backend = r.choice(m, "backend", prefix, first ? first->backend : backend_kind::cpu,
                       {{"cpu", backend_kind::cpu}, {"cuda", backend_kind::cuda}, {"sim", backend_kind::sim}});
  if (first && s.backend != first->backend)
    r.fail(m.get("backend"), prefix + "backend",
           std::string("\"") + backend_name(s.backend) + "\" differs from [model]'s \"" + backend_name(first->backend) +
               "\"; every model of a topology runs on one backend");
  s.path = r.string(m, "path", prefix, std::string());
  s.preset = r.string(m, "preset", prefix, std::string());
  if (s.path.empty() && !(s.backend == backend_kind::sim && !s.preset.empty()))
    r.fail(&m, prefix + "path", "required key is missing (only the sim backend may name a preset instead)");
  if (!s.preset.empty() && s.preset != "tiny" && s.preset != "small" && s.preset != "1b")
    r.fail(m.get("preset"), prefix + "preset", "\"" + s.preset + "\" is not one of tiny, small, 1b");
  s.max_model_len = int(r.integer(m, "max_model_len", prefix, 0, 0, 1 << 24));
  s.chat_template = r.string(m, "chat_template", prefix, std::string());
  s.tool_call_parser = r.string(m, "tool_call_parser", prefix, std::string());
  s.revision = r.string(m, "revision", prefix, std::string());
  s.fallback = r.string(m, "fallback", prefix, std::string());
  if (const toml::node* w = m.get("fallback_queue_wait"))
    s.fallback_queue_wait = std::chrono::duration_cast<std::chrono::milliseconds>(r.duration(*w, prefix + "fallback_queue_wait"));
  s.fallback_min_priority = int(r.integer(m, "fallback_min_priority", prefix, s.fallback_min_priority, -1000000, 1000000));
  if (s.revision.size() > 128) r.fail(m.get("revision"), prefix + "revision", "at most 128 characters");
  // json_array is what forced tool choices write, not a model's own format.
  if (!s.tool_call_parser.empty()) {
    const auto f = chat::tool_format_named(s.tool_call_parser);
    if (!f || *f == chat::tool_format::json_array)
      r.fail(m.get("tool_call_parser"), prefix + "tool_call_parser",
             "\"" + s.tool_call_parser + "\" is not one of " + chat::model_tool_formats());
  }
  if (name.empty()) return s;
  s.served_names = {name};
  if (const toml::node* n = m.get("served_names")) {
    const toml::array* a = n->as_array();
    if (!a || a->empty()) r.fail(n, prefix + "served_names", "expected a list of 1 to 16 names");
    frontend_spec names;  // the same rules as [frontend] model_name's
    std::vector<std::string> given;
    for (const toml::node& x : *a) {
      if (!x.as_string()) r.fail(&x, prefix + "served_names", "expected names of 1 to 256 characters");
      given.push_back(x.as_string()->get());
    }
    if (auto e = assign_model_names(names, given)) r.fail(n, prefix + "served_names", *e);
    s.served_names = given;
  }
  return s;
}

}  // namespace

// A model's `fallback` names another model: a [models.NAME] by NAME or a served name, resolved
// to NAME here.
void resolve_fallback(const reader& r, const toml::table& table, const std::string& prefix, model_spec& m,
                      const topology_config& t) {
  if (m.fallback.empty()) {
    if (m.fallback_queue_wait.count() > 0 || table.get("fallback_min_priority"))
      r.fail(&table, prefix + "fallback", "fallback_queue_wait and fallback_min_priority need a fallback model");
    return;
  }
  const model_spec* to = nullptr;
  for (const auto& other : t.more_models)
    if (other.name == m.fallback || std::find(other.served_names.begin(), other.served_names.end(), m.fallback) != other.served_names.end())
      to = &other;
  if (!to) r.fail(table.get("fallback"), prefix + "fallback", "\"" + m.fallback + "\" is no [models.NAME] table's name or served name");
  if (to->name == m.name) r.fail(table.get("fallback"), prefix + "fallback", "a model cannot be its own fallback");
  m.fallback = to->name;
}

void read_models(const reader& r, const toml::table& root, topology_config& t) {
  const toml::table* m = r.table(root, "model", "");
  if (!m) r.fail(&root, "model", "required table [model] is missing");
  t.model = read_model_table(r, *m, "model.", "", nullptr);
  const toml::table* more = r.table(root, "models", "");
  if (more)
    for (auto&& [key, value] : *more) {
      const std::string name(key.str());
      const std::string prefix = "models." + name + ".";
      if (!value.is_table()) r.fail(&value, "models." + name, std::string("expected a [models.NAME] table, got ") + type_name(value));
      if (auto why = served_name_problem(name, 64)) r.fail(&value, "models", "a model's name: " + *why);
      t.more_models.push_back(read_model_table(r, *value.as_table(), prefix, name, &t.model));
    }
  resolve_fallback(r, *m, "model.", t.model, t);
  for (auto& spec : t.more_models) resolve_fallback(r, *more->get(spec.name)->as_table(), "models." + spec.name + ".", spec, t);
}

void read_pool_model(const reader& r, const toml::table& pt, const topology_config& t, pool_spec& p) {
  p.model = r.string(pt, "model", "pools.", std::string());
  if (!p.model.empty() && !t.model_named(p.model)) {
    std::string known;
    for (const auto& m : t.more_models) known += (known.empty() ? "" : ", ") + m.name;
    r.fail(pt.get("model"), "pools.model",
           "pool \"" + p.name + "\" serves \"" + p.model + "\", which no [models." + p.model + "] table defines" +
               (known.empty() ? std::string(" (there is none: leave model out to serve [model])") : " (defined: " + known + ")"));
  }
}

// A fallback applies when something says the pool is overloaded: a bound on its queue, or a
// queue-wait target.
void check_fallback_triggers(const reader& r, const topology_config& t) {
  for (const model_spec* m : t.models())
    if (!m->fallback.empty() && m->fallback_queue_wait.count() == 0 && t.admission.cfg.max_queued == 0)
      r.fail(nullptr, (m->name.empty() ? std::string("model") : "models." + m->name) + ".fallback",
             "says where, but not when: give fallback_queue_wait, or [admission] max_queued");
}

// Every model is served by a pool, and a model with a prefill pool has a decode-capable one:
// a prefill replica hands each request to a replica of its own model after its first token.
void check_models_served(const reader& r, const toml::table& root, const topology_config& t) {
  const toml::node* pools = root.get("pools");
  for (const auto& p : t.pools)  // a rank on another node loads its shard from that node's copy of [model]
    if (!p.model.empty() && !p.rank_nodes.empty())
      r.fail(pools, "pools.rank_nodes", "pool \"" + p.name + "\" serves [models." + p.model +
                                            "]; only pools of [model] place ranks on other nodes yet");
  for (const model_spec* m : t.models()) {
    int serving = 0, decoding = 0;
    for (const auto& p : t.pools)
      if (p.model == m->name) ++serving, decoding += p.role != pool_role::prefill;
    if (serving == 0 && m->name.empty())
      r.fail(pools, "pools.model", "no pool serves [model] (a pool without a model key serves it)");
    if (serving == 0)
      r.fail(root.get("models"), "models." + m->name, "no pool serves it (give a pool model = \"" + m->name + "\")");
    if (serving > 0 && decoding == 0)
      for (const auto& p : t.pools)
        if (p.model == m->name)
          r.fail(pools, "pools.role", "pool \"" + p.name + "\" only prefills, and no pool of " + m->label() +
                                          " has role \"decode\" or \"both\" to hand its requests to");
  }
}

}  // namespace troupe::topology::detail
