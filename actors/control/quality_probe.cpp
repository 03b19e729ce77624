#include "actors/control/quality_probe.h"

#include <map>
#include <optional>
#include <utility>

#include "actors/protocol/error_text.h"

namespace troupe::actors {

namespace {

// Which probe a request id is: a held-out window (scored) or a prompt (answered), by index.
struct probe_slot {
  bool window = false;
  std::size_t index = 0;
};

struct probe_state {
  admin::quality_sample sample;
  std::map<std::string, probe_slot> outstanding;  // submitted and not finished, by request id
  scheduler_actor target;
  std::optional<std::string> error;
  caf::typed_response_promise<admin::quality_sample> answer;
  bool asked = false;
  static inline const char* name = "troupe.quality_probe";
};

using probe_ptr = quality_probe_actor::stateful_pointer<probe_state>;

void settle(probe_ptr self) {
  auto& st = self->state;
  if (!st.asked || (!st.outstanding.empty() && !st.error)) return;
  if (st.error) st.answer.deliver(caf::make_error(caf::sec::runtime_error, *st.error));
  else st.answer.deliver(st.sample);
  self->quit();
}

// The first failure is the answer; the other probes are ended, not left running on the replica.
void fail(probe_ptr self, std::string why) {
  auto& st = self->state;
  if (!st.error) st.error = std::move(why);
  for (const auto& [id, slot] : st.outstanding) self->send(st.target, abort_atom::value, id);
  st.outstanding.clear();
  settle(self);
}

engine::request probe_request(const std::string& id, std::vector<std::int32_t> prompt, const std::string& model, int max_tokens,
                              bool score_prompt) {
  engine::request r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.model = model;
  r.trace_id = id;
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;  // each side answers the same number of tokens
  if (score_prompt) r.params.prompt_logprobs = 0;
  return r;
}

void take(probe_ptr self, const token_update& u) {
  auto& st = self->state;
  const auto it = st.outstanding.find(u.id);
  if (it == st.outstanding.end()) return;
  const auto [window, index] = it->second;
  if (window) {
    for (const auto& lp : u.prompt_logprobs) st.sample.nll -= double(lp.logprob);
    st.sample.scored += std::int64_t(u.prompt_logprobs.size());
  } else if (index < st.sample.answers.size()) {
    auto& answer = st.sample.answers[index];
    answer.insert(answer.end(), u.tokens.begin(), u.tokens.end());
  }
  if (!u.finished) return;
  using engine::finish_reason;
  if (u.reason != finish_reason::stop && u.reason != finish_reason::length)
    return fail(self, "probe " + u.id + " ended with reason " + engine::finish_reason_name(u.reason) + (u.error.empty() ? "" : ": " + u.error));
  st.outstanding.erase(u.id);
  settle(self);
}

quality_probe_actor::behavior_type quality_probe(probe_ptr self, scheduler_actor target, admin::quality_set set, std::string model,
                                                 std::string tag, std::chrono::milliseconds timeout) {
  auto& st = self->state;
  st.target = target;
  st.sample.answers.resize(set.prompts.size());
  std::vector<engine::request> requests;
  for (std::size_t i = 0; i < set.windows.size(); ++i) {
    requests.push_back(probe_request(tag + "-w" + std::to_string(i), std::move(set.windows[i]), model, 1, true));
    st.outstanding[requests.back().id] = {true, i};
  }
  for (std::size_t i = 0; i < set.prompts.size(); ++i) {
    requests.push_back(probe_request(tag + "-p" + std::to_string(i), std::move(set.prompts[i]), model, set.greedy_tokens, false));
    st.outstanding[requests.back().id] = {false, i};
  }
  const auto sink = caf::actor_cast<token_sink>(self);
  for (auto& r : requests)
    self->request(target, timeout, submit_atom::value, std::move(r), sink)
        .then([](bool) {}, [=](caf::error& e) { fail(self, "a probe was not accepted: " + error_message(self->system(), e)); });
  return {
      [=](const token_batch& b) {
        for (const auto& u : b.updates) take(self, u);
      },
      [=](probe_atom) -> caf::result<admin::quality_sample> {
        self->state.answer = self->make_response_promise<admin::quality_sample>();
        self->state.asked = true;
        auto promise = self->state.answer;
        settle(self);
        return promise;
      },
  };
}

}  // namespace

quality_probe_actor spawn_quality_probe(caf::actor_system& sys, scheduler_actor target, admin::quality_set set, std::string model,
                                        std::string tag, std::chrono::milliseconds timeout) {
  return sys.spawn(quality_probe, std::move(target), std::move(set), std::move(model), std::move(tag), timeout);
}

}  // namespace troupe::actors
