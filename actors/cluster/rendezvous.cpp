#include "actors/cluster/rendezvous.h"

#include "runtime/collectives/communicator.h"

namespace troupe::actors {

namespace {

void close(caf::stateful_actor<rendezvous_state>* self, const caf::error& reason) {
  for (auto& [key, waiting] : self->state.waiting)
    for (auto& p : waiting) p.deliver(caf::make_error(caf::sec::runtime_error, "the group's rendezvous closed before \"" + key + "\" was set"));
  self->state.waiting.clear();
  self->quit(reason);
}

}  // namespace

caf::behavior rendezvous_store(caf::stateful_actor<rendezvous_state>* self, caf::actor owner) {
  self->monitor(owner);
  self->set_down_handler([=](const caf::down_msg& m) { close(self, m.reason); });
  self->set_exit_handler([=](const caf::exit_msg& m) { close(self, m.reason); });
  return {
      [=](rdv_set_atom, const std::string& key, std::string& value) -> caf::result<bool> {
        auto& st = self->state;
        if (value.size() > st.max_value)
          return caf::make_error(caf::sec::invalid_argument, "rendezvous value for \"" + key + "\" is " + std::to_string(value.size()) +
                                                                 " bytes, above the limit of " + std::to_string(st.max_value));
        if (!st.values.count(key) && st.values.size() >= st.max_keys)
          return caf::make_error(caf::sec::invalid_argument, "rendezvous holds " + std::to_string(st.max_keys) + " keys already");
        st.values[key] = value;
        if (auto it = st.waiting.find(key); it != st.waiting.end()) {
          for (auto& p : it->second) p.deliver(value);
          st.waiting.erase(it);
        }
        return true;
      },
      [=](rdv_get_atom, const std::string& key) -> caf::result<std::string> {
        auto& st = self->state;
        if (auto it = st.values.find(key); it != st.values.end()) return it->second;
        if (st.waiting.size() >= st.max_keys) return caf::make_error(caf::sec::invalid_argument, "too many rendezvous keys awaited");
        auto p = self->make_response_promise();
        st.waiting[key].push_back(p);
        return caf::delegated<std::string>();
      },
  };
}

collectives::rendezvous rendezvous_client(caf::actor_system& sys, caf::actor store) {
  collectives::rendezvous r;
  r.set = [&sys, store](const std::string& key, const std::string& value) {
    caf::scoped_actor self{sys};
    std::string failed;
    self->request(store, std::chrono::seconds(30), rdv_set_atom::value, key, value)
        .receive([](bool) {}, [&](caf::error& e) { failed = sys.render(e); });
    if (!failed.empty()) throw collectives::collective_error("rendezvous: could not publish \"" + key + "\": " + failed);
  };
  r.get = [&sys, store](const std::string& key, std::chrono::milliseconds deadline) {
    caf::scoped_actor self{sys};
    std::string value, failed;
    self->request(store, deadline, rdv_get_atom::value, key)
        .receive([&](std::string& v) { value = std::move(v); }, [&](caf::error& e) { failed = sys.render(e); });
    if (!failed.empty()) throw collectives::collective_error("rendezvous: no \"" + key + "\" from the group's other ranks: " + failed);
    return value;
  };
  return r;
}

}  // namespace troupe::actors
