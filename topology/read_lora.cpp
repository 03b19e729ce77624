// A topology's [lora] section: the LoRA adapters every replica loads at start, how many may be
// loaded at once, and whether they may be loaded and unloaded at run time. Called by
// parse_topology (topology.cpp) after [model], [[pools]] and [frontend], which it checks against.
#include <algorithm>
#include <filesystem>
#include <string>

#include "topology/toml_reader.h"
#include "topology/topology.h"

namespace troupe::topology::detail {

namespace {

// Adapters run beside the base weights of a whole model in the scheduler's process (the plan
// that carries them is not serialized): a pool that splits its model, or runs it elsewhere, is
// refused by name rather than served without its adapter.
void check_pools_run_adapters(const reader& r, const toml::node* n, const topology_config& t) {
  if (t.model.backend != backend_kind::cpu)
    r.fail(n, "lora", std::string("adapters run on the cpu backend only, not ") + backend_name(t.model.backend));
  for (const auto& p : t.pools) {
    const char* split = p.tensor_parallel > 1 ? "tensor_parallel" : p.pipeline_parallel > 1 ? "pipeline_parallel"
                        : p.expert_parallel > 1 ? "expert_parallel" : !p.rank_nodes.empty() ? "rank_nodes" : nullptr;
    if (split)
      r.fail(n, "lora", "pool \"" + p.name + "\" sets " + split + "; adapters run only where one rank holds the whole model");
  }
}

lora_spec::adapter read_adapter(const reader& r, const toml::node& v, const std::string& key) {
  const toml::table* a = v.as_table();
  if (!a) r.fail(&v, key, "expected a table with name and path");
  r.only_keys(*a, key + ".", {"name", "path"});
  lora_spec::adapter out{r.string(*a, "name", key + ".", std::nullopt), r.string(*a, "path", key + ".", std::nullopt)};
  if (out.name.empty() || out.name.size() > 256) r.fail(a->get("name"), key + ".name", "expected 1 to 256 characters");
  std::error_code ec;
  if (!std::filesystem::is_directory(out.path, ec))
    r.fail(a->get("path"), key + ".path", "\"" + out.path + "\" is not a directory here (a PEFT adapter folder)");
  return out;
}

}  // namespace

void read_lora(const reader& r, const toml::table& root, topology_config& t) {
  const toml::table* l = r.table(root, "lora", "");
  if (!l) return;
  r.only_keys(*l, "lora.", {"adapters", "max_adapters", "runtime_loading"});
  auto& spec = t.lora;
  spec.line = int(l->source().begin.line);
  check_pools_run_adapters(r, l, t);
  spec.runtime_loading = r.boolean(*l, "runtime_loading", "lora.", false);
  if (const toml::node* n = l->get("adapters")) {
    const toml::array* arr = n->as_array();
    if (!arr) r.fail(n, "lora.adapters", "expected [[lora.adapters]] tables with name and path");
    for (std::size_t i = 0; i < arr->size(); ++i) {
      auto a = read_adapter(r, (*arr)[i], "lora.adapters[" + std::to_string(i) + "]");
      const toml::node* at = (*arr)[i].as_table()->get("name");
      if (a.name == t.frontend.model_name ||
          std::find(t.frontend.model_aliases.begin(), t.frontend.model_aliases.end(), a.name) != t.frontend.model_aliases.end())
        r.fail(at, "lora.adapters.name", "\"" + a.name + "\" is the base model's served name");
      for (const auto& other : spec.adapters)
        if (other.name == a.name) r.fail(at, "lora.adapters.name", "\"" + a.name + "\" is named twice");
      spec.adapters.push_back(std::move(a));
    }
  }
  spec.max_adapters = int(r.integer(*l, "max_adapters", "lora.", std::max<std::int64_t>(8, std::int64_t(spec.adapters.size())), 1, 64));
  if (spec.max_adapters < int(spec.adapters.size()))
    r.fail(l->get("max_adapters"), "lora.max_adapters",
           std::to_string(spec.max_adapters) + " is fewer than the " + std::to_string(spec.adapters.size()) + " adapters listed");
}

}  // namespace troupe::topology::detail
