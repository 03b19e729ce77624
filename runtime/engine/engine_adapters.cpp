// The engine's LoRA adapters: which are loaded, and which rows of a step run with which.
#include <string>

#include "runtime/common/error.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/engine_sequence.h"

namespace troupe::engine {

void engine::load_adapter(const std::string& identity, std::shared_ptr<const model::lora_adapter> a) {
  if (!exec_->runs_adapters())
    throw input_error("adapter '" + identity + "': this replica's model is split over ranks; LoRA adapters run only on a whole model");
  if (!a || a->layers.size() != std::size_t(mc_.num_hidden_layers))
    throw input_error("adapter '" + identity + "': not shaped for this model's " + std::to_string(mc_.num_hidden_layers) + " layers");
  if (adapters_.count(identity)) return;  // the same files under the same name: already here
  if (int(adapters_.size()) >= cfg_.max_adapters)
    throw input_error("adapter '" + identity + "': " + std::to_string(adapters_.size()) + " adapters are loaded, the most this replica allows (" +
                      std::to_string(cfg_.max_adapters) + ", [lora] max_adapters)");
  adapters_.emplace(identity, std::move(a));
}

bool engine::unload_adapter(const std::string& identity) { return adapters_.erase(identity) > 0; }

std::vector<std::string> engine::adapters() const {
  std::vector<std::string> out;
  for (const auto& [identity, a] : adapters_) out.push_back(identity);
  return out;
}

std::shared_ptr<const model::lora_adapter> engine::adapter_of(const request& r) const {
  if (r.adapter.empty()) return nullptr;
  auto it = adapters_.find(r.adapter);
  if (it == adapters_.end()) throw input_error("request '" + r.id + "': adapter '" + r.adapter + "' is not loaded on this replica");
  return it->second;
}

// Sequences of one adapter side by side share a span: one pair of small matmuls per projection
// for all of them, not one per sequence (each is a dispatch over the kernel threads).
void engine::add_adapter_rows(const sequence& s, std::size_t first, forward_plan& fp) const {
  if (!s.adapter || fp.tokens.size() == first) return;
  const auto count = std::int32_t(fp.tokens.size() - first);
  if (!fp.adapters.empty() && fp.adapters.back().adapter == s.adapter &&
      std::size_t(fp.adapters.back().first + fp.adapters.back().count) == first) {
    fp.adapters.back().count += count;
    return;
  }
  fp.adapters.push_back({std::int32_t(first), count, s.adapter});
}

std::string load_adapter_folder(engine& e, const std::string& name, const std::string& dir) {
  auto a = model::shared_lora_adapter(dir, e.model_config());  // one read per process
  std::string identity = model::lora_identity(name, a->fingerprint);
  e.load_adapter(identity, std::move(a));
  return identity;
}

}  // namespace troupe::engine
