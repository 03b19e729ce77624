#include "actors/serving/lora_manager.h"

#include <utility>
#include <vector>

#include "actors/protocol/error_text.h"
#include "actors/protocol/serve_error.h"
#include "runtime/common/log.h"

namespace troupe::actors {

namespace {

using lora_manager_ptr = lora_manager_actor::stateful_pointer<lora_manager_state>;

// The answers of every replica asked, gathered on the manager (its callbacks run one at a time).
struct lora_answers {
  std::size_t left = 0;
  std::vector<std::pair<scheduler_actor, std::string>> took;  // (replica, identity it loaded)
  std::string error;                                          // the first refusal
};

// Unload `identity` from `replicas`, whatever they answer (each logs what it dropped).
void drop_adapter_from(lora_manager_ptr self, const std::vector<scheduler_actor>& replicas, const std::string& identity,
               std::function<void()> done = {}) {
  if (replicas.empty()) {
    if (done) done();
    return;
  }
  auto left = std::make_shared<std::size_t>(replicas.size());
  auto one = [left, done] {
    if (--*left == 0 && done) done();
  };
  for (const auto& r : replicas)
    self->request(r, self->state.timeout, lora_atom::value, identity).then([one](bool) { one(); }, [one](caf::error&) { one(); });
}

// Every replica answered a load: served if all took the same files, else taken back everywhere.
void settle_adapter_load(lora_manager_ptr self, const std::string& name, const std::string& dir, lora_answers& g,
                 caf::typed_response_promise<std::string> rp) {
  auto& st = self->state;
  st.loading.erase(name);
  std::set<std::string> identities;
  std::vector<scheduler_actor> took;
  for (const auto& [r, identity] : g.took) identities.insert(identity), took.push_back(r);
  if (g.error.empty() && identities.size() > 1) g.error = dir + ": the replicas' hosts hold different files there";
  if (!g.error.empty()) {
    for (const auto& identity : identities) drop_adapter_from(self, took, identity);
    log::warn("lora_load_refused", {{"adapter", name}, {"dir", dir}, {"why", g.error}});
    rp.deliver(make_serve_error(serve_errc::invalid, "lora_path: " + g.error, 0, "lora_path"));
    return;
  }
  const std::string identity = *identities.begin();
  st.catalog->add({name, dir, identity, false});
  log::info("lora_served", {{"adapter", identity}, {"dir", dir}, {"replicas", took.size()}});
  rp.deliver(identity);
}

void load_adapter_on(lora_manager_ptr self, const std::string& name, const std::string& dir, const std::vector<scheduler_actor>& replicas,
             caf::typed_response_promise<std::string> rp) {
  if (replicas.empty()) {
    self->state.loading.erase(name);
    rp.deliver(make_serve_error(serve_errc::unavailable, "no replica is live to load the adapter on"));
    return;
  }
  auto g = std::make_shared<lora_answers>();
  g->left = replicas.size();
  for (const auto& r : replicas)
    self->request(r, self->state.timeout, lora_atom::value, name, dir)
        .then(
            [=](std::string& identity) mutable {
              g->took.emplace_back(r, std::move(identity));
              if (--g->left == 0) settle_adapter_load(self, name, dir, *g, rp);
            },
            [=](caf::error& e) mutable {
              if (g->error.empty()) g->error = error_message(self->system(), e);
              if (--g->left == 0) settle_adapter_load(self, name, dir, *g, rp);
            });
}

caf::result<std::string> load_everywhere(lora_manager_ptr self, const std::string& name, const std::string& dir) {
  auto& st = self->state;
  if (auto why = st.catalog->refuse_new(name, st.loading)) return make_serve_error(serve_errc::invalid, *why, 0, "lora_name");
  st.loading.insert(name);
  auto rp = self->make_response_promise<std::string>();
  self->request(st.router, st.timeout, replicas_atom::value)
      .then([=](std::vector<scheduler_actor>& replicas) { load_adapter_on(self, name, dir, replicas, rp); },
            [=](caf::error& e) mutable {
              self->state.loading.erase(name);
              rp.deliver(make_serve_error(serve_errc::unavailable, "router: " + error_message(self->system(), e)));
            });
  return rp;
}

// Out of the catalog first (new requests get 404), then off every replica.
caf::result<std::string> unload_everywhere(lora_manager_ptr self, const std::string& name) {
  auto& st = self->state;
  const auto entry = st.catalog->find(name);
  if (!entry) return make_serve_error(serve_errc::not_found, "lora_name: no adapter \"" + name + "\" is loaded", 0, "lora_name");
  if (auto why = st.catalog->remove(name)) return make_serve_error(serve_errc::invalid, *why, 0, "lora_name");
  auto rp = self->make_response_promise<std::string>();
  const std::string identity = entry->identity;
  self->request(st.router, st.timeout, replicas_atom::value)
      .then(
          [=](std::vector<scheduler_actor>& replicas) mutable {
            drop_adapter_from(self, replicas, identity, [=]() mutable {
              log::info("lora_unserved", {{"adapter", identity}});
              rp.deliver(identity);
            });
          },
          [=](caf::error& e) mutable { rp.deliver(make_serve_error(serve_errc::unavailable, "router: " + error_message(self->system(), e))); });
  return rp;
}

}  // namespace

lora_manager_actor::behavior_type lora_manager(lora_manager_actor::stateful_pointer<lora_manager_state> self, std::shared_ptr<api::lora_catalog> catalog, router_actor router,
                                               std::chrono::milliseconds timeout) {
  self->state.catalog = std::move(catalog);
  self->state.router = std::move(router);
  self->state.timeout = timeout;
  return {
      [=](lora_atom, const std::string& name, const std::string& dir) { return load_everywhere(self, name, dir); },
      [=](lora_atom, const std::string& name) { return unload_everywhere(self, name); },
  };
}

}  // namespace troupe::actors
