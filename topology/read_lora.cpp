// A topology's [lora] section: the LoRA adapters every replica loads at start, how many may be
// loaded at once, and whether they may be loaded and unloaded at run time. Called by
// parse_topology (topology.cpp) after [model], [[pools]] and [frontend], which it checks against.
#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>

#include "topology/toml_reader.h"
#include "topology/topology.h"

namespace troupe::topology {

// Adapters run beside the base weights of a whole model in the scheduler's process (the plan
// that carries them is not serialized): a pool that splits its model, or runs it elsewhere, is
// refused by name rather than served without its adapter.
std::optional<std::string> lora_unsupported(const topology_config& t) {
  if (t.model.backend != backend_kind::cpu) return std::string("adapters run on the cpu backend only, not ") + backend_name(t.model.backend);
  if (!t.more_models.empty())  // an adapter is trained for one base; which one is not said yet
    return "adapters are served with [model] alone, and this topology also has [models." + t.more_models.front().name + "]";
  for (const auto& p : t.pools) {
    const char* split = p.tensor_parallel > 1 ? "tensor_parallel" : p.pipeline_parallel > 1 ? "pipeline_parallel"
                        : p.expert_parallel > 1 ? "expert_parallel" : !p.rank_nodes.empty() ? "rank_nodes" : nullptr;
    if (split) return "pool \"" + p.name + "\" sets " + split + "; adapters run only where one rank holds the whole model";
  }
  return std::nullopt;
}

std::optional<std::string> add_lora_adapter(topology_config& t, lora_spec::adapter a) {
  if (auto why = served_name_problem(a.name)) return "name: " + *why;
  const auto& fe = t.frontend;
  if (a.name == fe.model_name || std::find(fe.model_aliases.begin(), fe.model_aliases.end(), a.name) != fe.model_aliases.end())
    return "name: \"" + a.name + "\" is the base model's served name";
  for (const auto& other : t.lora.adapters)
    if (other.name == a.name) return "name: \"" + a.name + "\" is named twice";
  std::error_code ec;
  if (!std::filesystem::is_directory(a.path, ec)) return "path: \"" + a.path + "\" is not a directory here (a PEFT adapter folder)";
  t.lora.adapters.push_back(std::move(a));
  return std::nullopt;
}

}  // namespace troupe::topology

namespace troupe::topology::detail {

void read_lora(const reader& r, const toml::table& root, topology_config& t) {
  const toml::table* l = r.table(root, "lora", "");
  if (!l) return;
  r.only_keys(*l, "lora.", {"adapters", "max_adapters", "runtime_loading"});
  auto& spec = t.lora;
  spec.line = int(l->source().begin.line);
  if (auto why = lora_unsupported(t)) r.fail(l, "lora", *why);
  spec.runtime_loading = r.boolean(*l, "runtime_loading", "lora.", false);
  if (const toml::node* n = l->get("adapters")) {
    const toml::array* arr = n->as_array();
    if (!arr) r.fail(n, "lora.adapters", "expected [[lora.adapters]] tables with name and path");
    for (std::size_t i = 0; i < arr->size(); ++i) {
      const std::string key = "lora.adapters[" + std::to_string(i) + "]";
      const toml::table* a = (*arr)[i].as_table();
      if (!a) r.fail(&(*arr)[i], key, "expected a table with name and path");
      r.only_keys(*a, key + ".", {"name", "path"});
      if (auto why = add_lora_adapter(t, {r.string(*a, "name", key + ".", std::nullopt), r.string(*a, "path", key + ".", std::nullopt)})) {
        const std::string field = why->substr(0, why->find(':'));  // "name: ..." or "path: ..."
        r.fail(a->get(field), key + "." + field, why->substr(field.size() + 2));
      }
    }
  }
  spec.max_adapters = int(r.integer(*l, "max_adapters", "lora.", std::max<std::int64_t>(8, std::int64_t(spec.adapters.size())), 1, 64));
  if (spec.max_adapters < int(spec.adapters.size()))
    r.fail(l->get("max_adapters"), "lora.max_adapters",
           std::to_string(spec.max_adapters) + " is fewer than the " + std::to_string(spec.adapters.size()) + " adapters listed");
}

}  // namespace troupe::topology::detail
