// A canary rollout's traffic split (docs/admin.md, `rollout`): a share of a model's requests goes
// to the replicas of the new revision, the rest to the others. The side is drawn from who sends
// the request, so a conversation (one `user`) stays on one revision while the share holds, and a
// growing share only moves senders from the baseline to the canary, never back.
#pragma once
#include <string>
#include <string_view>

namespace troupe::routing {

// A model's split: requests whose side is the canary go to replicas running `key`.
struct canary_split {
  std::string key;     // the canary's cache key (load_report::model_key)
  double share = 0;    // of the model's senders, 0 to 1
};

// Whether `sender` is on the canary's side at `share`: its hash's place in [0, 1) below the share.
bool canary_side(std::string_view sender, double share);

}  // namespace troupe::routing
