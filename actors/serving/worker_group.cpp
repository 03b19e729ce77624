#include "actors/serving/worker_group.h"

#include "actors/protocol/node_protocol.h"
#include "actors/cluster/rendezvous.h"
#include "runtime/collectives/gloo.h"
#include "runtime/collectives/shm.h"
#include "runtime/common/log.h"
#include "runtime/kv/transfer/pull.h"
#include "runtime/kv/transfer/registry.h"

namespace troupe::actors {

void register_worker_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_type<engine::forward_plan>("troupe.forward_plan");
  cfg.add_message_type<stage_input>("troupe.stage_input");
  cfg.add_message_type<kv_pull>("troupe.kv_pull");
  cfg.add_message_type<kv::transfer::kv_handle>("troupe.kv_handle");
  cfg.add_message_type<std::vector<kv::transfer::kv_source>>("troupe.kv_sources");
  cfg.add_message_type<engine::step_result>("troupe.step_result");
  cfg.add_message_type<stage_output>("troupe.stage_output");
  cfg.add_message_type<sampling::sampling_row>("troupe.sampling_row");
  cfg.add_message_type<sampling::sampled_token>("troupe.sampled_token");
  cfg.add_message_type<group_status>("troupe.group_status");
  cfg.add_message_type<worker_actor>("troupe.worker_actor");
  cfg.add_message_type<std::vector<worker_actor>>("troupe.worker_actors");
  cfg.add_message_type<rank_spec>("troupe.rank_spec");
  cfg.add_message_type<rank_started>("troupe.rank_started");
}

std::pair<int, int> rank_layers(int layers, int r, int n) { return {layers * r / n, layers * (r + 1) / n}; }

namespace {

// One rank's cache in a pull: its tensor rank and its stage's first layer.
struct rank_cache {
  int tensor_rank = 0, first = 0;
  std::shared_ptr<kv::kv_cache> cache;
};

// A pull's copy, off the ranks' and the supervisor's threads: a detached actor that answers one
// request and ends. It holds this generation's caches, so a restart meanwhile leaves it writing
// caches nobody reads any more. With tensor ranks, each rank's heads are a cache of their own:
// receiving rank (s, t) pulls from the sending ranks t of the stages that hold its layers.
caf::behavior pull_helper(caf::event_based_actor* self, std::vector<rank_cache> caches, int tp) {
  return {[=](pull_atom, kv_pull& x) -> caf::result<std::uint64_t> {
    self->quit();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(x.timeout_ms);
    std::uint64_t bytes = 0;
    try {
      if (auto why = kv::transfer::layout_mismatch(x.from.layout, x.mine)) throw kv::transfer::transfer_error(*why);
      for (const auto& c : caches) {
        kv::transfer::kv_handle from = x.from;
        kv::transfer::kv_layout mine = x.mine;
        if (tp > 1) {  // rank t's heads only, as if they were a whole model's
          from.sources.clear();
          for (std::size_t k = std::size_t(c.tensor_rank); k < x.from.sources.size(); k += std::size_t(tp))
            from.sources.push_back(x.from.sources[k]);
          for (auto* l : {&from.layout, &mine}) l->n_kv_heads /= tp, l->tensor_parallel = 1;
        }
        bytes += kv::transfer::pull(from, {c.cache.get(), c.first, mine, x.table}, x.how, deadline).bytes;
      }
    } catch (const kv::transfer::transfer_error& e) {
      return caf::make_error(caf::sec::runtime_error, e.what());
    }
    return bytes;
  }};
}

// Runs `x` on a pull helper over `caches` and answers `self`'s request with its bytes.
template <class Self>
caf::result<std::uint64_t> pull_off_thread(Self* self, std::vector<rank_cache> caches, int tp, kv_pull x) {
  auto helper = self->template spawn<caf::detached>(pull_helper, std::move(caches), tp);
  auto rp = self->template make_response_promise<std::uint64_t>();
  const auto limit = std::chrono::milliseconds(x.timeout_ms) + std::chrono::seconds(5);
  self->request(helper, limit, pull_atom::value, std::move(x))
      .then([rp](std::uint64_t bytes) mutable { rp.deliver(bytes); }, [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
  return rp;
}

}  // namespace

worker_actor::behavior_type worker(worker_actor::stateful_pointer<worker_state> self,
                                   std::shared_ptr<const model::llama_model> model, std::shared_ptr<kv::kv_cache> cache,
                                   int first, int last, bool last_stage, std::shared_ptr<collectives::fault_injector> tp,
                                   connect_fn connect, caf::actor supervisor) {
  auto& st = self->state;
  self->monitor(supervisor);  // a rank lives no longer than its group
  self->set_down_handler([=](const caf::down_msg& m) { self->quit(m.reason); });
  st.cache = std::move(cache);
  st.model = std::move(model);
  st.first = first;
  st.last = last;
  st.last_stage = last_stage;
  st.tp = std::move(tp);
  if (st.tp && connect) {
    try {  // on this rank's thread (detached): a Gloo connect waits for the stage's other ranks
      st.tp->attach(connect());
    } catch (const collectives::collective_error& e) {  // ends the rank (the group restarts) before any message
      self->quit(caf::make_error(caf::sec::runtime_error, e.what()));
    }
  }
  return {
      [=](execute_atom, const stage_input& in) -> caf::result<stage_output> {
        auto& st = self->state;
        const model::forward_batch b = engine::view(in.plan);
        collectives::communicator* tp = st.tp.get();
        const bool lead = !tp || tp->rank() == 0;  // the rank that answers for the stage
        stage_output out;
        try {
          if (st.first == 0)
            st.model->embed(b, st.ws);
          else
            st.ws.x = in.hidden;
          st.model->run_layers(b, st.first, st.last, *st.cache, st.ws, tp);
          auto counts = [&] {  // the stage's routing statistics, answered by its first rank
            if (lead) out.result.expert_tokens = std::move(st.ws.expert_tokens);
            st.ws.expert_tokens.clear();
          };
          if (!st.last_stage) {
            if (lead) out.hidden = st.ws.x;
            counts();
            return out;
          }
          // The last stage chooses the tokens where the logits are; only ids leave it.
          const auto& mc = st.model->config();
          st.logits.resize(in.plan.logit_rows.size() * std::size_t(mc.vocab_size));
          st.model->head(b, st.ws, st.logits.data(), tp);
          counts();
        } catch (const collectives::collective_error& e) {  // the group failed; the supervisor restarts it
          return caf::make_error(caf::sec::runtime_error, e.what());
        } catch (const collectives::rank_fault& e) {  // fault injection: this rank dies here
          self->quit(caf::make_error(caf::sec::runtime_error, e.what()));
          return caf::make_error(caf::sec::runtime_error, e.what());
        }
        if (lead) out.result.pooled = st.model->pool(st.ws, in.plan.pools);
        if (lead) out.result.tokens = sampling::sample_rows(st.logits, in.plan.sampling, st.model->config().vocab_size,
                                                            st.model->config().eos_token_ids);
        return out;
      },
      [=](fault_atom, std::int32_t calls) {
        if (self->state.tp) self->state.tp->arm(calls);
        else self->quit(caf::make_error(caf::sec::runtime_error, "rank killed by fault injection"));  // no collectives to die in
      },
      [=](crash_rank_atom, std::int32_t calls) {
        if (self->state.tp) self->state.tp->arm(calls, true);
        else ::kill(::getpid(), SIGKILL);  // no collectives to die in
      },
      [=](pull_atom, kv_pull& x) -> caf::result<std::uint64_t> {
        auto& st = self->state;
        const int tp = st.tp ? st.tp->size() : 1, t = st.tp ? st.tp->rank() : 0;
        return pull_off_thread(self, {{t, st.first, st.cache}}, tp, std::move(x));
      },
  };
}

local_rank start_rank(caf::actor_system& sys, const rank_spec& spec, std::shared_ptr<const model::llama_model> shard,
                      std::shared_ptr<collectives::fault_injector> tp, std::shared_ptr<collectives::communicator> comm,
                      bool over_tcp) {
  auto cache = std::make_shared<kv::kv_cache>(spec.cache.for_layers(spec.first, spec.last), spec.last - spec.first, shard->kv_heads(), shard->config().head_dim);
  auto& registry = kv::transfer::registry::global();
  local_rank out;
  out.cache = cache;
  out.started.source = registry.expose(cache);
  if (over_tcp) out.started.source = registry.with_tcp(out.started.source);
  connect_fn connect;
  if (comm) {
    connect = [comm] { return comm; };
  } else if (spec.rendezvous) {
    collectives::gloo_options o;
    o.rank = spec.tensor_rank;
    o.size = spec.tensor_ranks;
    o.generation = spec.generation;
    o.group = spec.group + "/stage" + std::to_string(spec.stage);
    o.store = rendezvous_client(sys, spec.rendezvous);
    o.host = spec.host;
    o.timeout = std::chrono::milliseconds(spec.timeout_ms);
    connect = [o] { return std::shared_ptr<collectives::communicator>(collectives::connect_gloo(o)); };
  }
  // Tensor ranks wait inside collectives (and their connect), so each has a thread of its own.
  out.started.rank = tp ? sys.spawn<caf::detached>(worker, shard, cache, int(spec.first), int(spec.last), spec.last_stage, tp, connect,
                                           spec.supervisor)
                        : sys.spawn(worker, shard, cache, int(spec.first), int(spec.last), spec.last_stage, tp, connect, spec.supervisor);
  return out;
}

namespace {

// `node`'s agent, or a promise of the next one to register (never `dead`).
caf::result<caf::actor> agent_of(caf::stateful_actor<node_directory_state>* self, const std::string& node, const caf::actor_addr& dead) {
  auto& st = self->state;
  if (auto it = st.agents.find(node); it != st.agents.end()) {
    if (!dead || it->second.address() != dead) return it->second;
    st.agents.erase(it);
  }
  auto& w = st.waiting[node];
  w.erase(std::remove_if(w.begin(), w.end(), [](const caf::response_promise& p) { return p.pending() == false; }), w.end());
  w.push_back(self->make_response_promise());
  return caf::delegated<caf::actor>();
}

}  // namespace

caf::behavior node_directory(caf::stateful_actor<node_directory_state>* self) {
  self->set_down_handler([=](const caf::down_msg& m) {
    auto& agents = self->state.agents;
    for (auto it = agents.begin(); it != agents.end(); ++it)
      if (it->second.address() == m.source) {
        agents.erase(it);
        return;
      }
  });
  return {
      [=](agent_atom, const std::string& node, caf::actor agent) {
        auto& st = self->state;
        self->monitor(agent);
        st.agents[node] = agent;
        if (auto it = st.waiting.find(node); it != st.waiting.end()) {
          for (auto& p : it->second) p.deliver(agent);
          st.waiting.erase(it);
        }
      },
      [=](agent_atom, const std::string& node) -> caf::result<caf::actor> { return agent_of(self, node, caf::actor_addr{}); },
      // The node's agent other than `dead`, which its asker saw die: the directory may not have
      // heard yet, so it forgets that one and waits for the node's next agent.
      [=](agent_atom, const std::string& node, const caf::actor_addr& dead) -> caf::result<caf::actor> {
        return agent_of(self, node, dead);
      },
  };
}

namespace {

void withdraw(group_state& st) {
  for (const auto& s : st.sources) kv::transfer::registry::global().withdraw(s.key);
  st.sources.clear();
  st.caches.clear();
}

int stages_of(const group_state& st) { return group_ranks(st.cfg, st.model->num_layers()); }

const std::string& node_of(const group_state& st, std::size_t i) {
  return i < st.cfg.rank_nodes.size() ? st.cfg.rank_nodes[i] : st.cfg.node;
}
bool here(const group_state& st, std::size_t i) { return node_of(st, i) == st.cfg.node; }

group_status status_of(const group_state& st) {
  const int stages = stages_of(st);
  return {std::uint32_t(st.ranks.size()), st.restarts, std::uint32_t(stages), std::uint32_t(st.cfg.tensor_ranks), st.generation};
}

}  // namespace

group_state::~group_state() {
  withdraw(*this);
  for (auto& c : comms) c->abort("the group's supervisor ended");  // a rank waiting in a collective wakes
}

namespace {

void restart_or_quit(group_actor::stateful_pointer<group_state> self, const std::string& why);
void begin_step(group_actor::stateful_pointer<group_state> self, stage_input in,
                caf::typed_response_promise<engine::step_result> promise);

// `ready` is answered once no earlier generation's rank runs and every rank of this one is up.
void answer_ready(group_actor::stateful_pointer<group_state> self) {
  auto& st = self->state;
  if (!st.retired.empty() || st.starting > 0) return;
  for (auto& p : st.waiting_ready) p.deliver(status_of(st));
  st.waiting_ready.clear();
}

// Every rank of this generation is up: the scheduler learns where their KV is, a step that
// waited runs, and `ready` is answered.
void whole(group_actor::stateful_pointer<group_state> self) {
  auto& st = self->state;
  if (st.scheduler) caf::anon_send(st.scheduler, kv_sources_atom::value, st.sources);
  if (st.queued) {
    auto q = std::move(*st.queued);
    st.queued.reset();
    begin_step(self, std::move(q.first), std::move(q.second));
  }
  answer_ready(self);
}

// Rank i of this generation has started (here or on its node).
void place(group_actor::stateful_pointer<group_state> self, std::size_t i, rank_started r) {
  auto& st = self->state;
  self->monitor(r.rank);
  st.ranks[i] = std::move(r.rank);
  st.sources[i] = std::move(r.source);
}

// Asks rank i's node agent to start it; on failure the group restarts (the generation that
// asked, if still current). `tries` counts the agents that died before answering; `dead` is the
// last of them, which the directory may still name.
void start_remote(group_actor::stateful_pointer<group_state> self, std::size_t i, rank_spec spec, int tries = 0,
                  caf::actor_addr dead = {}) {
  auto& st = self->state;
  const std::uint64_t gen = st.generation;
  const std::string node = node_of(st, i);
  const auto wait = st.cfg.step_timeout;
  if (tries == 0) ++st.starting;
  auto failed = [=](const std::string& why) {
    if (self->state.generation == gen) restart_or_quit(self, "rank " + std::to_string(i) + " on node \"" + node + "\": " + why);
  };
  if (!st.cfg.hosts) return failed("this process has no node directory to find that node's agent");
  auto directory = dead ? self->request(st.cfg.hosts, wait, agent_atom::value, node, dead)
                        : self->request(st.cfg.hosts, wait, agent_atom::value, node);
  std::move(directory)
      .then(
          [=](caf::actor agent) {
            auto& st = self->state;
            if (st.generation != gen) return;
            const std::uint64_t ask = ++st.next_ask;
            st.asked[ask] = {agent.address(), i, spec, tries};
            self->monitor(agent);
            self->request(caf::actor_cast<node_agent_actor>(agent), wait, rank_atom::value, spec)
                .then(
                    [=](rank_started& r) {
                      auto& st = self->state;
                      self->demonitor(agent);
                      // A later generation, or this start was asked again after its agent seemed
                      // to die: this rank is not wanted.
                      if (st.generation != gen || !st.asked.erase(ask)) {
                        self->send_exit(r.rank, caf::exit_reason::kill);
                        return;
                      }
                      place(self, i, std::move(r));
                      if (--st.starting == 0) whole(self);
                    },
                    [=](caf::error& e) {
                      self->demonitor(agent);
                      if (self->state.asked.erase(ask)) failed(self->system().render(e));
                    });
          },
          [=](caf::error& e) { failed("its node has not joined: " + self->system().render(e)); });
}

// A node agent asked to start ranks died before answering: the node is gone (and perhaps
// returning). Each of its starts asks the directory for the node's next agent, up to three
// agents in all; then the group restarts.
void agent_died(group_actor::stateful_pointer<group_state> self, const caf::actor_addr& agent) {
  auto& st = self->state;
  std::vector<group_state::remote_start> lost;
  for (auto it = st.asked.begin(); it != st.asked.end();)
    if (it->second.agent == agent) {
      lost.push_back(std::move(it->second));
      it = st.asked.erase(it);
    } else {
      ++it;
    }
  for (auto& r : lost) {
    const std::string node = node_of(st, r.rank);
    if (r.tries + 1 >= 3) {
      restart_or_quit(self, "rank " + std::to_string(r.rank) + " on node \"" + node + "\": its agent died before starting it, three times");
      return;
    }
    log::warn("worker_group_agent_lost", {{"generation", st.generation}, {"rank", r.rank}, {"node", node}});
    start_remote(self, r.rank, std::move(r.spec), r.tries + 1, r.agent);
  }
}

void spawn_ranks(group_actor::stateful_pointer<group_state> self) {
  auto& st = self->state;
  const int stages = stages_of(st), tp = st.cfg.tensor_ranks;
  ++st.generation;
  st.ranks.assign(std::size_t(stages * tp), worker_actor{});
  st.caches.clear();
  st.sources.assign(std::size_t(stages * tp), {});
  st.comms.clear();
  st.starting = 0;
  st.asked.clear();
  if (st.rendezvous) self->send_exit(st.rendezvous, caf::exit_reason::user_shutdown);
  st.rendezvous = nullptr;
  auto me = caf::actor_cast<caf::actor>(self);
  std::vector<std::pair<std::size_t, rank_spec>> elsewhere;
  for (int s = 0; s < stages; ++s) {
    bool spans = false;
    for (int t = 0; t < tp; ++t) spans |= !here(st, std::size_t(s * tp + t));
    if (spans && tp > 1 && !st.rendezvous) st.rendezvous = self->spawn(rendezvous_store, me);
    std::vector<std::unique_ptr<collectives::communicator>> group;
    if (tp > 1 && !spans) group = collectives::make_shm_group({tp, st.generation, st.cfg.step_timeout});
    const auto [a, b] = rank_layers(st.model->num_layers(), s, stages);
    for (int t = 0; t < tp; ++t) {
      const std::size_t i = std::size_t(s * tp + t);
      rank_spec spec;
      spec.group = st.cfg.name;
      spec.generation = st.generation;
      spec.stage = s;
      spec.tensor_rank = t;
      spec.tensor_ranks = tp;
      spec.expert_parallel = st.cfg.expert_parallel;
      spec.first = a;
      spec.last = b;
      spec.last_stage = s == stages - 1;
      spec.cache = st.cache;
      spec.timeout_ms = st.cfg.step_timeout.count();
      spec.rendezvous = spans ? st.rendezvous : caf::actor{};
      spec.supervisor = me;
      if (!here(st, i)) {
        elsewhere.emplace_back(i, std::move(spec));
        continue;
      }
      std::shared_ptr<collectives::fault_injector> comm;
      if (tp > 1) {
        comm = std::make_shared<collectives::fault_injector>();
        st.comms.push_back(comm);
      }
      auto& shard = st.shards[t];
      if (!shard) shard = tp == 1 ? st.model : model::shared_shard(st.model->dir(), {t, tp, st.cfg.expert_parallel});
      auto started = start_rank(self->system(), spec, shard, comm, group.empty() ? nullptr : std::move(group[std::size_t(t)]), false);
      st.caches[i] = started.cache;
      place(self, i, std::move(started.started));
    }
  }
  for (auto& [i, spec] : elsewhere) start_remote(self, i, std::move(spec));
  if (st.starting == 0) whole(self);
}

void stop_ranks(group_actor::stateful_pointer<group_state> self, const std::string& why) {
  auto& st = self->state;
  withdraw(st);
  // Ranks waiting in a collective wake with an error first; then every rank goes (one on
  // another node too: aborting this process's ranks of its stage closes their connections).
  for (auto& c : st.comms) c->abort(why);
  st.comms.clear();
  for (auto& r : st.ranks) {
    if (!r) continue;  // the rank whose death this is, or one not started yet
    st.retired.insert(r.address());  // still monitored: `ready` waits for it to end
    self->send_exit(r, caf::exit_reason::kill);
  }
  st.ranks.clear();
  st.starting = 0;
  st.asked.clear();
  if (st.queued) {  // it would run on blocks whose KV is gone
    st.queued->second.deliver(caf::make_error(caf::sec::runtime_error, "step failed: " + why));
    st.queued.reset();
  }
}

// Replaces every rank; false when the restart limit is spent (the caller gives up).
bool restart(group_actor::stateful_pointer<group_state> self, const std::string& why) {
  auto& st = self->state;
  const auto now = std::chrono::steady_clock::now();
  while (!st.recent.empty() && now - st.recent.front() > st.cfg.restart_window) st.recent.pop_front();
  log::warn("worker_group_restart", {{"generation", st.generation}, {"why", why}});
  const bool waited = bool(st.queued);  // fails in stop_ranks: it carries the news of the lost KV
  stop_ranks(self, "generation " + std::to_string(st.generation) + " stopped: " + why);
  if (int(st.recent.size()) >= st.cfg.max_restarts) return false;
  st.recent.push_back(now);
  ++st.restarts;
  spawn_ranks(self);
  // The KV the scheduler thinks its blocks hold is gone; a step running now fails (the caller
  // answers it), else the next one does, so the scheduler recomputes before it relies on it.
  st.kv_lost = !st.step && !waited;
  return true;
}


void restart_or_quit(group_actor::stateful_pointer<group_state> self, const std::string& why) {
  if (!restart(self, why))
    self->quit(caf::make_error(caf::sec::runtime_error, "worker group gave up after " + std::to_string(self->state.restarts) +
                                                            " restarts (last: " + why + ")"));
}

// The running step `id` failed: it answers with the error, and the group restarts if the failure
// was in the generation it ran on (a later generation is already fresh).
void fail_step(group_actor::stateful_pointer<group_state> self, std::uint64_t id, const std::string& why) {
  auto& st = self->state;
  if (!st.step || st.step->id != id) return;  // answered already
  auto promise = st.step->promise;
  if (st.step->generation == st.generation) restart_or_quit(self, why);  // this step carries the news of the lost KV
  st.step.reset();
  promise.deliver(caf::make_error(caf::sec::runtime_error, "step failed: " + why));
}

void run_stage(group_actor::stateful_pointer<group_state> self, int stage, std::size_t m, std::vector<float> hidden);

// Stage `stage` of the step's micro-batch m is done: on to the next stage, or its tokens.
void stage_done(group_actor::stateful_pointer<group_state> self, std::uint64_t id, int stage, std::size_t m, stage_output out) {
  auto& st = self->state;
  if (!st.step || st.step->id != id) return;
  auto& counts = st.step->expert_tokens;
  counts.resize(std::max(counts.size(), out.result.expert_tokens.size()));
  for (std::size_t e = 0; e < out.result.expert_tokens.size(); ++e) counts[e] += out.result.expert_tokens[e];
  if (stage + 1 < stages_of(st)) return run_stage(self, stage + 1, m, std::move(out.hidden));
  auto& step = *st.step;
  const auto& rows = step.micro[m].rows;
  if (out.result.tokens.size() != rows.size()) return fail_step(self, id, "the last stage chose the wrong number of tokens");
  for (std::size_t i = 0; i < rows.size(); ++i) step.tokens[std::size_t(rows[i])] = std::move(out.result.tokens[i]);
  const auto& pools = step.micro[m].pools;
  if (out.result.pooled.size() != pools.size()) return fail_step(self, id, "the last stage pooled the wrong number of spans");
  for (std::size_t i = 0; i < pools.size(); ++i) step.pooled[std::size_t(pools[i])] = std::move(out.result.pooled[i]);
  if (--step.left > 0) return;
  engine::step_result r;
  r.tokens = std::move(step.tokens);
  r.expert_tokens = std::move(step.expert_tokens);
  r.pooled = std::move(step.pooled);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step.started).count();
  auto promise = step.promise;
  st.step.reset();
  promise.deliver(std::move(r));
}

// Sends micro-batch m to every rank of `stage`. A stage's ranks take micro-batches in the order
// they are sent (one sender, in order), so their collectives line up. The last stage is the
// plan's last use (only its rows are needed after), so the plan moves there, and the input
// moves into the last rank's message: one stage, one rank copies nothing.
void run_stage(group_actor::stateful_pointer<group_state> self, int stage, std::size_t m, std::vector<float> hidden) {
  auto& st = self->state;
  const std::uint64_t id = st.step->id;
  const int tp = st.cfg.tensor_ranks;
  auto& plan = st.step->micro[m].plan;
  stage_input in{stage + 1 == stages_of(st) ? std::move(plan) : plan, std::move(hidden)};
  for (int t = 0; t < tp; ++t)
    self->request(st.ranks[std::size_t(stage * tp + t)], st.cfg.step_timeout, execute_atom::value,
                  t + 1 == tp ? std::move(in) : in)
        .then(
            [=](stage_output& out) {
              if (t == 0) stage_done(self, id, stage, m, std::move(out));
            },
            [=](caf::error& e) {
              fail_step(self, id, "stage " + std::to_string(stage) + " rank " + std::to_string(t) + ": " + self->system().render(e));
            });
}

void begin_step(group_actor::stateful_pointer<group_state> self, stage_input in,
                caf::typed_response_promise<engine::step_result> promise) {
  auto& st = self->state;
  const std::size_t rows = in.plan.logit_rows.size();
  const std::size_t pools = in.plan.pools.size();
  auto micro = engine::split_plan(std::move(in.plan), st.cfg.micro_batches);
  if (micro.empty()) {
    promise.deliver(engine::step_result{});
    return;
  }
  auto& step = st.step.emplace();
  step.id = ++st.next_step;
  step.generation = st.generation;
  step.promise = std::move(promise);
  step.tokens.resize(rows);
  step.pooled.resize(pools);
  step.left = micro.size();
  step.micro = std::move(micro);
  step.started = std::chrono::steady_clock::now();
  for (std::size_t m = 0, n = step.left; m < n; ++m) run_stage(self, 0, m, {});
}

}  // namespace

namespace {

// One step through the stages (micro-batched when configured); answered with its result, or restarts the group on a failure
caf::result<engine::step_result> execute_step(group_actor::stateful_pointer<group_state> self, stage_input& in) {
  auto& st = self->state;
  if (st.step || st.queued) return caf::make_error(caf::sec::runtime_error, "a step is already running on this group");
  if (st.kv_lost) {
    st.kv_lost = false;
    return caf::make_error(caf::sec::runtime_error, "the group restarted since the last step: its KV is lost");
  }
  auto promise = self->make_response_promise<engine::step_result>();
  if (st.starting > 0)  // ranks on other nodes are still starting: it runs once they are up
    st.queued.emplace(std::move(in), promise);
  else
    begin_step(self, std::move(in), promise);
  return promise;
}

// KV pulled into every rank's cache for a request's blocks; answered with the bytes moved
caf::result<std::uint64_t> pull_kv(group_actor::stateful_pointer<group_state> self, kv_pull& x) {
  // This process's ranks on one helper thread; each rank elsewhere pulls its own part.
  auto& st = self->state;
  if (st.starting > 0) return caf::make_error(caf::sec::runtime_error, "the group's ranks are still starting");
  const int tp = st.cfg.tensor_ranks, stages = stages_of(st);
  std::vector<rank_cache> local;
  std::vector<worker_actor> pullers;  // the ranks elsewhere, then this process's helper
  for (std::size_t i = 0; i < st.ranks.size(); ++i) {
    if (auto c = st.caches.find(i); c != st.caches.end())
      local.push_back({int(i) % tp, rank_layers(st.model->num_layers(), int(i) / tp, stages).first, c->second});
    else if (st.ranks[i])
      pullers.push_back(st.ranks[i]);
  }
  if (pullers.empty()) return pull_off_thread(self, std::move(local), tp, std::move(x));
  // Several pullers: the bytes once all have answered, or the first error.
  auto rp = self->make_response_promise<std::uint64_t>();
  auto left = std::make_shared<std::size_t>(pullers.size() + (local.empty() ? 0 : 1));
  auto bytes = std::make_shared<std::uint64_t>(0);
  const auto limit = std::chrono::milliseconds(x.timeout_ms) + std::chrono::seconds(5);
  auto ask = [&](auto who) {
    self->request(who, limit, pull_atom::value, x)
        .then(
            [=](std::uint64_t b) mutable {
              *bytes += b;
              if (--*left == 0 && rp.pending()) rp.deliver(*bytes);
            },
            [=](caf::error& e) mutable {
              if (rp.pending()) rp.deliver(std::move(e));
            });
  };
  for (auto& r : pullers) ask(r);
  if (!local.empty()) ask(self->spawn<caf::detached>(pull_helper, std::move(local), tp));
  return rp;
}

// Answered once every rank of the current generation runs
caf::result<group_status> ready(group_actor::stateful_pointer<group_state> self) {
  auto& st = self->state;
  if (st.retired.empty() && st.starting == 0) return status_of(st);
  // Earlier ranks still running (one waking from an aborted collective), or ranks on other
  // nodes still starting: not whole yet.
  st.waiting_ready.push_back(self->make_response_promise<group_status>());
  return st.waiting_ready.back();
}

// Restarts the group now (the console, tests)
caf::result<group_status> restart(group_actor::stateful_pointer<group_state> self) {
  auto& st = self->state;
  if (st.step) fail_step(self, st.step->id, "the step passed its deadline");
  else if (!restart(self, "the step passed its deadline")) {
    self->quit(caf::make_error(caf::sec::runtime_error, "worker group gave up after a hung step"));
    return caf::make_error(caf::sec::runtime_error, "worker group gave up");
  }
  return status_of(self->state);
}

// A rank's death restarts the group (monitors, not links: a rank killed with exit_reason::kill
// must not take the supervisor with it). The scheduler's death ends it.
void on_down(group_actor::stateful_pointer<group_state> self, const caf::down_msg& m) {
  auto& st = self->state;
  const auto it = std::find_if(st.ranks.begin(), st.ranks.end(), [&](const worker_actor& r) { return r.address() == m.source; });
  if (it == st.ranks.end()) {
    if (m.source == st.scheduler.address()) return self->quit(m.reason);
    if (st.retired.erase(m.source)) return answer_ready(self);  // perhaps an earlier generation's last rank
    agent_died(self, m.source);  // else an agent that answered already, or an earlier generation's
    return;
  }
  const auto i = int(it - st.ranks.begin());
  *it = worker_actor{};  // gone already: nothing to stop
  const std::string why = "stage " + std::to_string(i / st.cfg.tensor_ranks) + " rank " + std::to_string(i % st.cfg.tensor_ranks) +
                          " died: " + self->system().render(m.reason);
  if (st.step && st.step->generation == st.generation)
    fail_step(self, st.step->id, why);  // restarts the group
  else
    restart_or_quit(self, why);
}

}  // namespace

group_actor::behavior_type group_supervisor(group_actor::stateful_pointer<group_state> self,
                                            std::shared_ptr<const model::llama_model> model,
                                            kv::kv_cache_config cache, group_config cfg, caf::actor scheduler) {
  auto& st = self->state;
  st.model = std::move(model);
  st.cache = cache;
  st.cfg = cfg;
  st.cfg.tensor_ranks = std::max(1, st.cfg.tensor_ranks);
  st.cfg.micro_batches = std::max(1, st.cfg.micro_batches);
  st.scheduler = scheduler;
  st.cfg.pipeline_ranks = group_ranks(st.cfg, st.model->num_layers());
  spawn_ranks(self);
  self->monitor(scheduler);
  self->set_down_handler([=](const caf::down_msg& m) { on_down(self, m); });
  return {
      [=](execute_atom, stage_input& in) { return execute_step(self, in); },
      [=](pull_atom, kv_pull& x) { return pull_kv(self, x); },
      [=](ready_atom) { return ready(self); },
      [=](restart_atom) { return restart(self); },
      [=](ranks_atom) { return self->state.ranks; },
  };
}

std::vector<group_config> group_configs_of(const topology::topology_config& topo) {
  std::vector<group_config> out;
  for (const auto& p : topology::place_replicas(topo)) {
    group_config g;
    g.pipeline_ranks = p.pipeline_parallel;
    g.tensor_ranks = std::max(p.tensor_parallel, p.expert_parallel);
    g.expert_parallel = p.expert_parallel > 1;
    g.micro_batches = p.micro_batches;
    g.max_restarts = topo.timeouts.group_restarts;
    g.restart_window = topo.timeouts.group_restart_window;
    g.step_timeout = topo.timeouts.step;
    g.rank_nodes = p.rank_nodes;
    g.node = p.node;
    g.name = p.name;
    out.push_back(g);
  }
  return out;
}

}  // namespace troupe::actors
