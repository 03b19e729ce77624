#include "actors/kv_store_actor.h"

#include "runtime/kv/transfer/pull.h"
#include "runtime/kv/transfer/registry.h"

namespace troupe::actors {

void register_store_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_type<kv_offload>("troupe.kv_offload");
  cfg.add_message_type<store_report>("troupe.store_report");
  cfg.add_message_type<kv_store_actor>("troupe.kv_store_actor");
  cfg.add_message_type<std::vector<kv::block_hash>>("troupe.block_hashes");
}

kv_store_state::~kv_store_state() {
  if (!source.key.empty()) kv::transfer::registry::global().withdraw(source.key);
}

namespace {

using store_ptr = kv_store_actor::stateful_pointer<kv_store_state>;

void publish(store_ptr self, std::vector<kv::kv_event> events) {
  auto& st = self->state;
  if (events.empty() || st.sinks.empty()) return;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  kv::kv_event_batch b{st.cfg.id, st.generation, ++st.seq, now, std::move(events)};
  for (const auto& s : st.sinks) self->send(s, b);
}

void unpin(store_ptr self, const std::string& request) {
  auto it = self->state.pins.find(request);
  if (it == self->state.pins.end()) return;
  self->state.index->unpin(it->second.slots);
  self->state.pins.erase(it);
}

}  // namespace

kv_store_actor::behavior_type kv_store(store_ptr self, kv_store_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  const auto& l = st.cfg.layout;
  const int slots = kv::kv_cache::blocks_in(st.cfg.capacity_bytes, l.block_size, l.type, l.num_layers, l.n_kv_heads, l.head_dim);
  st.index = std::make_unique<kv::kv_store_index>(slots);
  st.cache = std::make_shared<kv::kv_cache>(kv::kv_cache_config{slots, l.block_size, l.type, true}, l.num_layers, l.n_kv_heads,
                                            l.head_dim);
  st.source = kv::transfer::registry::global().with_tcp(kv::transfer::registry::global().expose(st.cache));
  st.stats.slots = slots;
  st.generation = std::uint64_t(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  self->set_down_handler([=](const caf::down_msg& m) {
    auto& sinks = self->state.sinks;
    sinks.erase(std::remove_if(sinks.begin(), sinks.end(), [&](const kv_event_sink& s) { return s.address() == m.source; }),
                sinks.end());
  });
  return {
      [=](offload_atom, kv_offload& x) -> std::uint32_t {
        auto& st = self->state;
        const int bs = st.cfg.layout.block_size;
        if (x.hashes.size() != x.from.blocks.size() || x.tokens.size() != x.hashes.size() * std::size_t(bs)) return 0;
        // Room first (dropping the least recently used), then one pull of every block not held.
        std::vector<kv::block_hash> dropped;
        kv::transfer::kv_handle part = x.from;
        part.blocks.clear();
        std::vector<std::int32_t> slots;
        std::vector<std::size_t> which;
        for (std::size_t i = 0; i < x.hashes.size(); ++i)
          if (auto s = st.index->reserve(x.hashes[i], dropped)) {
            part.blocks.push_back(x.from.blocks[i]);
            slots.push_back(*s);
            which.push_back(i);
          }
        std::vector<kv::kv_event> events;
        if (!dropped.empty()) {
          events.push_back({kv::kv_event_kind::removed, dropped, 0, false, {}, 0, "cpu"});
          st.stats.dropped += dropped.size();
        }
        if (!slots.empty()) {
          part.positions = std::int32_t(slots.size()) * bs;
          bool ok = true;
          try {
            kv::transfer::pull(part, {st.cache.get(), 0, st.cfg.layout, slots}, kv::transfer::backend::automatic,
                               std::chrono::steady_clock::now() + std::chrono::seconds(10));
          } catch (const kv::transfer::transfer_error&) {
            ok = false;  // the replica's cache is gone (it restarted): nothing stored
          }
          for (std::size_t k = 0; k < which.size(); ++k) {
            const std::size_t i = which[k];
            if (!ok) {
              st.index->abort(x.hashes[i]);
              continue;
            }
            st.index->commit(x.hashes[i]);
            kv::kv_event e{kv::kv_event_kind::stored, {x.hashes[i]}, x.parents[i], x.has_parent[i] != 0, {}, bs, "cpu"};
            e.token_ids.assign(x.tokens.begin() + std::ptrdiff_t(i) * bs, x.tokens.begin() + std::ptrdiff_t(i + 1) * bs);
            events.push_back(std::move(e));
          }
          if (ok) st.stats.stored += which.size();
        }
        st.stats.held = st.index->held();
        const auto stored = std::uint32_t(events.size() - (dropped.empty() ? 0 : 1));
        publish(self, std::move(events));
        return stored;
      },
      [=](lookup_atom, const std::string& request, const std::vector<kv::block_hash>& hashes) {
        auto& st = self->state;
        unpin(self, request);  // a request looked up again (it moved) holds one pin at most
        ++st.stats.lookups;
        kv::transfer::kv_handle h;
        auto slots = st.index->pin_prefix(hashes);
        if (slots.empty()) return h;
        st.stats.hit_blocks += slots.size();
        h.request = request;
        h.layout = st.cfg.layout;
        h.sources = {st.source};
        h.blocks = slots;
        h.positions = std::int32_t(slots.size()) * st.cfg.layout.block_size;
        const std::uint64_t n = ++st.pin_count;
        st.pins[request] = {std::move(slots), n};
        self->delayed_send(self, st.cfg.hold, hold_atom::value, request, n);
        return h;
      },
      [=](claim_atom, const std::string& request) {
        auto& st = self->state;
        auto it = st.pins.find(request);
        if (it == st.pins.end()) return false;
        it->second.n = ++st.pin_count;
        self->delayed_send(self, st.cfg.hold, hold_atom::value, request, it->second.n);
        return true;
      },
      [=](release_atom, const std::string& request) { unpin(self, request); },
      [=](hold_atom, const std::string& request, std::uint64_t n) {
        auto it = self->state.pins.find(request);
        if (it != self->state.pins.end() && it->second.n == n) unpin(self, request);
      },
      [=](kv_subscribe_atom, replica_id, kv_event_sink sink) {
        auto& st = self->state;
        if (std::none_of(st.sinks.begin(), st.sinks.end(), [&](const kv_event_sink& s) { return s == sink; })) {
          self->monitor(sink);
          st.sinks.push_back(sink);
        }
        return kv_snapshot{st.generation, st.seq, st.index->hashes()};
      },
      [=](load_atom) {
        auto r = self->state.stats;
        r.held = self->state.index->held();
        return r;
      },
  };
}

}  // namespace troupe::actors
