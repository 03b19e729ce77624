#include "runtime/api/choices.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace troupe::api {

using json = nlohmann::json;

json merge_choices(const choice_plan& plan, const std::vector<json>& fulls, const std::vector<double>& cumulative) {
  if (int(fulls.size()) != plan.size() || fulls.empty())
    throw std::logic_error("merge_choices: " + std::to_string(fulls.size()) + " answers for " + std::to_string(plan.size()));
  json out = fulls.front();
  out["choices"] = json::array();
  long long prompt_tokens = 0, completion_tokens = 0;
  for (int p = 0; p < plan.prompts; ++p) {
    std::vector<int> draws(std::size_t(plan.best_of));
    std::iota(draws.begin(), draws.end(), p * plan.best_of);
    if (plan.best_of > plan.n)
      std::stable_sort(draws.begin(), draws.end(), [&](int a, int b) { return cumulative.at(std::size_t(a)) > cumulative.at(std::size_t(b)); });
    for (int rank = 0; rank < plan.n; ++rank) {
      json c = fulls[std::size_t(draws[std::size_t(rank)])]["choices"][0];
      c["index"] = p * plan.n + rank;
      out["choices"].push_back(std::move(c));
    }
    prompt_tokens += fulls[std::size_t(p * plan.best_of)]["usage"]["prompt_tokens"].get<long long>();
    for (int j = 0; j < plan.best_of; ++j)
      completion_tokens += fulls[std::size_t(p * plan.best_of + j)]["usage"]["completion_tokens"].get<long long>();
  }
  out["usage"] = {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
                  {"total_tokens", prompt_tokens + completion_tokens}};
  return out;
}

}  // namespace troupe::api
