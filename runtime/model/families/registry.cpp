// The families Troupe serves (family.h). A new family is its own file and one line here.
#include "runtime/model/family.h"

namespace troupe::model {

const family& llama_family();
const family& mistral_family();
const family& mixtral_family();
const family& qwen2_family();
const family& qwen3_family();
const family& qwen2_moe_family();
const family& qwen3_moe_family();
const family& gemma2_family();
const family& gemma3_family();
const family& granite_family();
const family& olmo2_family();
const family& smollm3_family();
const family& phi3_family();

const std::vector<const family*>& families() {
  static const std::vector<const family*> all = {&llama_family(),  &mistral_family(),   &mixtral_family(),   &qwen2_family(),
                                                 &qwen3_family(),  &qwen2_moe_family(), &qwen3_moe_family(),
                                                 &gemma2_family(), &gemma3_family(),  &granite_family(),   &olmo2_family(),
                                                 &smollm3_family(), &phi3_family()};
  return all;
}

}  // namespace troupe::model
