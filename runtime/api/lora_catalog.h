// The LoRA adapters a head serves as models, by name: where each was read from and the identity
// (model::lora_identity) requests carry to the replicas. The request preparers read it on their
// own threads while the head's LoRA manager changes it at run time, so it locks; a lookup is a
// map search under the lock.
#pragma once
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace troupe::api {

struct lora_entry {
  std::string name;      // what requests name as `model`
  std::string dir;       // the PEFT folder it was read from
  std::string identity;  // NAME@FINGERPRINT, what the replicas know it by
  bool from_topology = false;  // [lora] adapters: loaded by every replica at start, never unloaded
};

class lora_catalog {
 public:
  // `base_names`: the base model's served name and aliases, which no adapter may take.
  lora_catalog(std::vector<std::string> base_names, std::size_t max_adapters);

  std::optional<lora_entry> find(const std::string& name) const;
  std::vector<lora_entry> list() const;  // by name
  std::size_t max_adapters() const { return max_; }

  // Why `name` cannot be loaded as a new adapter now, with `loading` (names whose load is under
  // way) counted as loaded; none when it can.
  std::optional<std::string> refuse_new(const std::string& name, const std::set<std::string>& loading) const;
  void add(lora_entry e);
  // Removes a runtime-loaded adapter; why it cannot be removed otherwise (unknown, or the topology's).
  std::optional<std::string> remove(const std::string& name);

 private:
  std::vector<std::string> base_names_;
  std::size_t max_;
  mutable std::mutex m_;
  std::map<std::string, lora_entry> by_name_;
};

// vLLM's runtime LoRA routes. POST /v1/load_lora_adapter {"lora_name", "lora_path"} (and
// "load_inplace": false; true, replacing a loaded adapter's weights in place, is refused by
// name); POST /v1/unload_lora_adapter {"lora_name"} ("lora_int_id", vLLM's internal number, is
// accepted and changes nothing: adapters are named). Other keys are a 400 naming them.
struct lora_load_request {
  std::string name, path;
};
lora_load_request parse_lora_load(const std::string& body);
std::string parse_lora_unload(const std::string& body);

}  // namespace troupe::api
