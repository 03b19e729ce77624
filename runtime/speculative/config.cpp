#include "runtime/speculative/config.h"

namespace troupe::speculative {

const char* method_name(method m) {
  switch (m) {
    case method::off: return "off";
    case method::ngram: return "ngram";
    case method::draft: return "draft";
  }
  return "?";
}

std::optional<std::string> speculative_config::invalid(const std::string& where) const {
  if (k < 1 || k > max_proposals)
    return where + ".k: " + std::to_string(k) + " is not in 1.." + std::to_string(max_proposals);
  if (!(min_acceptance >= 0 && min_acceptance <= 1))
    return where + ".min_acceptance: " + std::to_string(min_acceptance) + " is not in 0..1";
  if (probe_every < 1) return where + ".probe_every: " + std::to_string(probe_every) + " is below 1";
  if (max_running < 0) return where + ".max_running: " + std::to_string(max_running) + " is negative";
  if (how == method::ngram)
    if (auto e = ngram.invalid(where)) return e;
  if (how == method::draft && draft_model.empty()) return where + ".draft_model: method \"draft\" needs a model folder";
  if (how != method::draft && !draft_model.empty())
    return where + ".draft_model: set, but method is \"" + method_name(how) + "\" (a draft model needs method \"draft\")";
  return std::nullopt;
}

}  // namespace troupe::speculative
