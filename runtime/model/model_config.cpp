#include "runtime/model/model_config.h"

#include <algorithm>

namespace troupe::model {

bool model_config::is_moe_layer(int l) const {
  if (!moe) return false;
  if (std::find(moe->mlp_only_layers.begin(), moe->mlp_only_layers.end(), l) != moe->mlp_only_layers.end()) return false;
  return (l + 1) % moe->sparse_step == 0;
}

}  // namespace troupe::model
