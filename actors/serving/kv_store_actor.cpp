#include "actors/serving/kv_store_actor.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#include "runtime/kv/transfer/pull.h"
#include "runtime/kv/transfer/registry.h"
#include "runtime/common/wall_clock.h"

namespace troupe::actors {

void register_store_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_type<engine::offload_batch>("troupe.offload_batch");
  cfg.add_message_type<kv::offload_block>("troupe.offload_block");
  cfg.add_message_type<std::vector<kv::offload_block>>("troupe.offload_blocks");
  cfg.add_message_type<store_report>("troupe.store_report");
  cfg.add_message_type<kv_store_actor>("troupe.kv_store_actor");
  cfg.add_message_type<std::vector<kv::block_hash>>("troupe.block_hashes");
}

kv_store_state::~kv_store_state() {
  if (!source.key.empty()) kv::transfer::registry::global().withdraw(source.key);
  if (disk_fd >= 0) ::close(disk_fd);
}

namespace {

using store_ptr = kv_store_actor::stateful_pointer<kv_store_state>;
using kv::block_hash;

void publish(store_ptr self, std::vector<kv::kv_event> events) {
  auto& st = self->state;
  if (events.empty() || st.sinks.empty()) return;
  const double now = unix_seconds();
  kv::kv_event_batch b{st.cfg.id, st.generation, ++st.seq, now, std::move(events), st.cfg.layout.type};
  for (const auto& s : st.sinks) self->send(s, b);
}

void unpin(store_ptr self, const std::string& request) {
  auto& st = self->state;
  st.holds.released(request);
  auto it = st.pins.find(request);
  if (it == st.pins.end()) return;
  st.index->unpin(it->second);
  st.pins.erase(it);
}

kv::kv_event removed(block_hash h, const char* medium) { return {kv::kv_event_kind::removed, {h}, 0, false, {}, 0, medium}; }

kv::kv_event stored(const kv_store_state& st, block_hash h, const char* medium) {
  const auto& m = st.meta.at(h);
  return {kv::kv_event_kind::stored, {h}, m.parent, m.has_parent, m.tokens, st.cfg.layout.block_size, medium};
}

// A memory slot's bytes (every layer's K and V of one block) to or from a slot of the file.
bool file_io(kv_store_state& st, std::int32_t mem_slot, std::int32_t disk_slot, bool to_file) {
  const std::size_t bb = st.cache->block_bytes();
  std::size_t at = std::size_t(disk_slot) * 2 * std::size_t(st.cache->num_layers()) * bb;
  for (int l = 0; l < st.cache->num_layers(); ++l)
    for (int kv = 0; kv < 2; ++kv, at += bb) {
      std::uint8_t* p = st.cache->block_data(l, kv, mem_slot);
      for (std::size_t done = 0; done < bb;) {
        const ssize_t n = to_file ? ::pwrite(st.disk_fd, p + done, bb - done, off_t(at + done))
                                  : ::pread(st.disk_fd, p + done, bb - done, off_t(at + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        done += std::size_t(n);
      }
    }
  return true;
}

// A memory slot for block `h` (pinned until commit or abort). When memory is full, the least
// recently used unpinned block goes to the file if there is one (dropping the file's least
// recently used), else it is dropped; the events say so.
std::optional<std::int32_t> place_in_memory(kv_store_state& st, block_hash h, std::vector<kv::kv_event>& events) {
  std::vector<block_hash> dropped;
  auto s = st.index->reserve(h, dropped);
  if (!s) return s;
  for (block_hash d : dropped) {  // at most one: its bytes are still in slot *s
    events.push_back(removed(d, "cpu"));
    bool kept = false;
    if (st.disk) {
      std::vector<block_hash> gone;
      if (auto ds = st.disk->reserve(d, gone)) {
        for (block_hash g : gone) {
          events.push_back(removed(g, "disk"));
          st.meta.erase(g);
          ++st.stats.dropped;
        }
        if (file_io(st, *s, *ds, true)) {
          st.disk->commit(d);
          events.push_back(stored(st, d, "disk"));
          ++st.stats.demoted;
          kept = true;
        } else {
          st.disk->abort(d);
        }
      }
    }
    if (!kept) {
      st.meta.erase(d);
      ++st.stats.dropped;
    }
  }
  return s;
}

bool holds(const kv_store_state& st, block_hash h) {
  return st.index->slot_of(h) || (st.disk && st.disk->slot_of(h));
}

}  // namespace

namespace {

// The file tier when the topology gives [kv_store] disk_dir and disk_bytes; the actor quits with
// an error naming the path when the file cannot be made.
void open_disk_tier(store_ptr self) {
  auto& st = self->state;
  const auto& l = st.cfg.layout;
  // Unlinked as soon as it is open: the space goes back when this process ends, however it ends.
  const std::string path = st.cfg.disk_dir + "/troupe-kv-store-" + std::to_string(::getpid()) + "-" +
                           std::to_string(st.cfg.id.value) + ".bin";
  const int disk_slots = kv::kv_cache::blocks_in(st.cfg.disk_bytes, l.block_size, l.type, l.num_layers, l.n_kv_heads, l.head_dim);
  st.disk_fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (st.disk_fd >= 0) {
    ::unlink(path.c_str());
    if (::ftruncate(st.disk_fd, off_t(std::size_t(disk_slots) * 2 * l.num_layers * l.block_bytes())) == 0) {
      st.disk = std::make_unique<kv::kv_store_index>(disk_slots);
      st.stats.disk_slots = disk_slots;
    }
  }
  if (!st.disk) {
    const std::string why = std::strerror(errno);
    self->quit(caf::make_error(caf::sec::runtime_error, "[kv_store] disk: cannot use " + path + ": " + why));
  }
}

// A replica's blocks offloaded here: room first (older blocks go to the file or are dropped),
// then one pull of the blocks not held in either tier, in rounds when there are more of them
// than memory slots (the blocks a round wrote go to the file to make room for the next).
// Returns how many were stored.
std::uint32_t offload(store_ptr self, engine::offload_batch& x) {
    auto& st = self->state;
    const int bs = st.cfg.layout.block_size;
    if (x.blocks.size() != x.from.blocks.size()) return 0;
    for (const auto& b : x.blocks)
      if (b.tokens.size() != std::size_t(bs)) return 0;
    // Room first (older blocks go to the file or are dropped), then one pull of the blocks
    // not held in either tier; in rounds when there are more of them than memory slots
    // (the blocks a round wrote go to the file to make room for the next).
    std::vector<kv::kv_event> events;
    std::uint32_t n = 0;
    for (std::size_t next = 0; next < x.blocks.size();) {
      kv::transfer::kv_handle part = x.from;
      part.blocks.clear();
      std::vector<std::int32_t> slots;
      std::vector<std::size_t> which;
      for (; next < x.blocks.size(); ++next) {
        if (holds(st, x.blocks[next].hash)) continue;
        auto s = place_in_memory(st, x.blocks[next].hash, events);
        if (!s) break;  // every slot is being written or read: the rest in the next round
        part.blocks.push_back(x.from.blocks[next]);
        slots.push_back(*s);
        which.push_back(next);
      }
      if (slots.empty()) break;  // no room at all (every slot pinned by lookups)
      part.positions = std::int32_t(slots.size()) * bs;
      bool ok = true;
      try {
        kv::transfer::pull(part, {st.cache.get(), 0, st.cfg.layout, slots}, kv::transfer::backend::automatic,
                           std::chrono::steady_clock::now() + std::chrono::seconds(10));
      } catch (const kv::transfer::transfer_error&) {
        ok = false;  // the replica's cache is gone (it restarted): nothing stored
      }
      for (std::size_t i : which) {
        auto& b = x.blocks[i];
        if (!ok) {
          st.index->abort(b.hash);
          continue;
        }
        st.index->commit(b.hash);
        st.meta[b.hash] = {b.parent, b.has_parent, std::move(b.tokens)};
        events.push_back(stored(st, b.hash, "cpu"));
        ++n;
      }
      if (!ok) break;
    }
    st.stats.stored += n;
    publish(self, std::move(events));
    return n;
}

// The leading run of `hashes` held in either tier, each block pinned in memory as it is reached
// (so bringing a later one back from the file cannot push an earlier one out), as a handle the
// replica pulls from; held for the request until claimed, released or expired.
kv::transfer::kv_handle lookup(store_ptr self, const std::string& request, const std::vector<kv::block_hash>& hashes) {
    auto& st = self->state;
    unpin(self, request);  // a request looked up again (it moved) holds one pin at most
    ++st.stats.lookups;
    // The leading run held in either tier, each block pinned in memory as it is reached (so
    // bringing a later one back from the file cannot push an earlier one out).
    std::vector<std::int32_t> slots;
    std::vector<kv::kv_event> events;
    for (block_hash h : hashes) {
      const std::span<const block_hash> one(&h, 1);
      if (st.index->slot_of(h)) {
        slots.push_back(st.index->pin_prefix(one).at(0));
        continue;
      }
      if (!st.disk || !st.disk->slot_of(h)) break;
      const auto disk_pin = st.disk->pin_prefix(one);  // kept while memory makes room
      auto s = place_in_memory(st, h, events);
      const bool in = s && file_io(st, *s, disk_pin.at(0), false);
      st.disk->unpin(disk_pin);
      if (!in) {
        if (s) st.index->abort(h);
        break;
      }
      st.disk->erase(h);
      events.push_back(removed(h, "disk"));  // before stored: a follower's index keeps it
      st.index->commit(h);
      events.push_back(stored(st, h, "cpu"));
      ++st.stats.promoted;
      slots.push_back(st.index->pin_prefix(one).at(0));
    }
    publish(self, std::move(events));
    kv::transfer::kv_handle h;
    if (slots.empty()) return h;
    st.stats.hit_blocks += slots.size();
    h.request = request;
    h.layout = st.cfg.layout;
    h.sources = {st.source};
    h.blocks = slots;
    h.positions = std::int32_t(slots.size()) * st.cfg.layout.block_size;
    st.pins[request] = std::move(slots);
    self->delayed_send(self, st.cfg.hold, hold_atom::value, request, st.holds.handed_off(request, true).timer);
    return h;
}

// A replica is about to pull what a lookup pinned for `request`: true if it still is, held
// again for a hold period from now.
bool claim(store_ptr self, const std::string& request) {
  auto& st = self->state;
  const auto c = st.holds.claimed(request);
  if (c.timer) self->delayed_send(self, st.cfg.hold, hold_atom::value, request, *c.timer);
  return c.held;
}

// A router follows this store's KV events from now on, starting from everything it holds.
kv_snapshot subscribe(store_ptr self, kv_event_sink sink) {
    auto& st = self->state;
    if (std::none_of(st.sinks.begin(), st.sinks.end(), [&](const kv_event_sink& s) { return s == sink; })) {
      self->monitor(sink);
      st.sinks.push_back(sink);
    }
    std::vector<block_hash> all = st.index->hashes();
    if (st.disk) {
      auto d = st.disk->hashes();
      all.insert(all.end(), d.begin(), d.end());
    }
    return kv_snapshot{st.generation, st.seq, all};
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
  if (!st.cfg.disk_dir.empty() && st.cfg.disk_bytes > 0) open_disk_tier(self);
  st.generation = std::uint64_t(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  self->set_down_handler([=](const caf::down_msg& m) {
    auto& sinks = self->state.sinks;
    sinks.erase(std::remove_if(sinks.begin(), sinks.end(), [&](const kv_event_sink& s) { return s.address() == m.source; }),
                sinks.end());
  });
  return {
      [=](offload_atom, engine::offload_batch& x) { return offload(self, x); },
      [=](lookup_atom, const std::string& request, const std::vector<kv::block_hash>& hashes) {
        return lookup(self, request, hashes);
      },
      [=](claim_atom, const std::string& request) { return claim(self, request); },
      [=](release_atom, const std::string& request) { unpin(self, request); },
      [=](hold_atom, const std::string& request, std::uint64_t n) {
        if (self->state.holds.expired(request, n)) unpin(self, request);
      },
      [=](kv_subscribe_atom, replica_id, kv_event_sink sink) { return subscribe(self, std::move(sink)); },
      [=](load_atom) {
        auto r = self->state.stats;
        r.held = self->state.index->held();
        r.disk_held = self->state.disk ? self->state.disk->held() : 0;
        return r;
      },
  };
}

replica_id store_id_of(const topology::topology_config& topo, const std::string& node, const std::string& model) {
  std::uint32_t index = 0;
  while (index < topo.nodes.size() && topo.nodes[index].name != node) ++index;
  return replica_id(store_id_base + std::uint32_t(topo.model_index(model) * topo.nodes.size()) + index);
}

kv_store_actor spawn_kv_store(caf::actor_system& sys, const topology::topology_config& topo, const engine::engine_config& ec,
                              const model::model_config& m, const std::string& node) {
  if (!topo.kv_store.enabled()) return {};
  kv_store_config c;
  c.layout = engine::kv_layout_of(ec, m, {{0, m.num_hidden_layers}});
  c.capacity_bytes = topo.kv_store.capacity_bytes;
  c.id = store_id_of(topo, node, ec.served_model);
  c.hold = topo.kv_transfer.hold;
  c.disk_dir = topo.kv_store.disk_dir;
  c.disk_bytes = topo.kv_store.disk_bytes;
  return sys.spawn<caf::detached>(kv_store, c);
}

}  // namespace troupe::actors
