#include "actors/api/frontend.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "actors/protocol/error_text.h"
#include "actors/api/frontend_answer.h"
#include "actors/api/frontend_callers.h"
#include "actors/api/frontend_metrics.h"
#include "actors/api/frontend_health.h"
#include "actors/api/frontend_models.h"
#include "actors/api/frontend_prepare.h"
#include "actors/protocol/serve_error.h"
#include "runtime/api/choices.h"
#include "runtime/api/openai.h"
#include "runtime/api/embeddings.h"
#include "runtime/common/error.h"
#include "runtime/common/log.h"
#include "runtime/metrics/metrics.h"
#include "runtime/common/wall_clock.h"
#include "runtime/engine/request_check.h"

namespace troupe::actors {

// The HTTP thread hands each exchange to the frontend actor; it never leaves the process.
struct exchange_msg {
  std::shared_ptr<http::exchange> ex;
};

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::exchange_msg)

namespace troupe::actors {

namespace {

using json = nlohmann::json;
using clock = std::chrono::steady_clock;
using gone_atom = caf::atom_constant<caf::atom("gone")>;
using shutdown_atom = caf::atom_constant<caf::atom("shutdown")>;
using grace_over_atom = caf::atom_constant<caf::atom("graceover")>;

struct io_stats {
  double cpu_seconds = 0;
  std::size_t open_connections = 0;
};

struct frontend_state {
  frontend_config cfg;
  owner_actor owner;
  router_actor router;
  std::shared_ptr<const model_table> models;  // [model]'s first
  int preparing = 0;  // requests being parsed and tokenized off the actor
  std::int64_t started = 0;  // `created` of the served model
  std::shared_ptr<frontend_metrics> m;
  std::map<std::string, live_request> live;
  std::map<caf::actor_addr, load_report> seen;  // per replica actor: its last report, for counter deltas
  std::uint64_t next_id = 0;
  std::string id_salt;
  admission::tenant_budgets budgets;  // per tenant, bounded
  std::function<io_stats()> io;  // the HTTP server's CPU and connections
  double actor_cpu = 0;  // CPU seconds spent in the actor's handlers
  preparer_pool preparers;  // detached: templates, tokenizers and grammars run there
  bool draining = false;  // shutting down: new requests are refused
  int cut_off = 0;        // requests ended by the end of the grace period
  std::vector<caf::response_promise> drained;  // answered once nothing is in flight
  static inline const char* name = "troupe.frontend";
};

using frontend_ptr = caf::stateful_actor<frontend_state>*;

// An error answer, counted under the model the request named (`model`, its served name), or
// [model]'s when it was refused before its model was known.
void send_error(frontend_ptr self, const std::shared_ptr<http::exchange>& ex, const api::api_error& e, const std::string& model = "") {
  std::vector<http::header> headers;
  if (e.status() == 429 || e.status() == 503)
    headers.push_back({"Retry-After", std::to_string(e.retry_after() > 0 ? long(e.retry_after()) : long(self->state.cfg.retry_after_s))});
  self->state.m->rejected.inc({{"model_name", model.empty() ? self->state.cfg.models.front().model_name : model}, {"code", std::to_string(e.status())}});
  ex->respond(e.status(), "application/json", dump(e.body()), std::move(headers));
}


std::vector<api::token_logprob> logprobs_of(const token_update& u) {
  std::vector<api::token_logprob> out;
  for (std::size_t i = 0; i < u.logprobs.size() && i < u.tokens.size(); ++i) {
    api::token_logprob lp;
    lp.id = u.tokens[i];
    lp.logprob = u.logprobs[i];
    if (i < u.top_ids.size()) lp.top_ids = u.top_ids[i];
    if (i < u.top_logprobs.size()) lp.top_logprobs = u.top_logprobs[i];
    out.push_back(std::move(lp));
  }
  return out;
}

// A request that cannot finish: a stream under way gets the error as an event and [DONE] (its
// 200 is sent), any other request the error as its answer.
void end_with_error(frontend_ptr self, live_request& r, const api::api_error& e) {
  if (r.group->failed) return;  // its group already answered
  r.group->failed = true;
  if (!r.stream || !r.group->began) return send_error(self, r.ex, e, r.labels.empty() ? std::string() : r.labels.front().second);
  sse(r.ex, e.body());
  r.ex->send("data: [DONE]\n\n");
  r.ex->end_stream();
}

// A sub-request failed or its client left: its group's others stop too.
void abort_others(frontend_ptr self, live_request& r) {
  auto& st = self->state;
  for (const auto& id : r.group->ids) {
    auto it = st.live.find(id);
    if (it == st.live.end() || &it->second == &r || it->second.gone) continue;
    it->second.gone = true;
    if (it->second.submitted) self->send(st.owner, abort_atom::value, id);
  }
}

// One line of the request log: when it came (Unix seconds), its lengths, whose and which model.
void record_trace(workload::request_trace& t, const live_request& r, const std::string& outcome) {
  const double age = std::chrono::duration<double>(clock::now() - r.arrived).count();
  std::string tenant = "default";
  for (const auto& [k, v] : r.labels)
    if (k == "tenant") tenant = v;
  t.record({unix_seconds() - age, r.prompt_tokens, r.output_tokens, tenant, r.group->model, r.group->endpoint, outcome});
}

void finish(frontend_ptr self, live_request& r, const token_update& u) {
  auto& m = *self->state.m;
  const auto now = clock::now();
  const auto reason = api::openai_finish_reason(engine::finish_reason_name(u.reason));
  const bool error = u.reason == engine::finish_reason::error;
  postprocess_timer timer{m.postprocess, r.labels, reason.has_value()};
  if (reason || error)
    judge_slo(m, self->state.cfg.ttft_slo, self->state.cfg.itl_slo, {r.arrived, r.first_token, r.last_token, r.output_tokens}, r.labels,
              error);
  metrics::labels l = r.labels;
  l.emplace_back("finished_reason", reason ? *reason : error ? "error" : "abort");
  m.success.inc(l);
  m.migrations.inc({r.labels.front()}, u.migrations);  // the request's model_name
  if (!r.fell_back_from.empty() && !error) m.fallbacks.inc({{"model_name", r.fell_back_from}, {"fallback", r.labels.front().second}});
  if (self->state.cfg.request_trace && r.group->endpoint) record_trace(*self->state.cfg.request_trace, r, reason ? *reason : error ? "error" : "abort");
  if (reason) {
    const double e2e = std::chrono::duration<double>(now - r.arrived).count();
    m.e2e.observe(with_output(r.labels, r.output_tokens), e2e);
    m.queue.observe(r.labels, u.queue_seconds);
    m.prefill.observe(r.labels, u.prefill_seconds);
    m.decode.observe(r.labels, u.decode_seconds);
    if (u.transfer_seconds > 0) m.transfer.observe(r.labels, u.transfer_seconds);
    m.prompt_len.observe(r.labels, r.prompt_tokens);
    m.gen_len.observe(r.labels, r.output_tokens);
    if (r.output_tokens > 1)
      m.tpot.observe(with_output(r.labels, r.output_tokens),
                     std::chrono::duration<double>(r.last_token - r.first_token).count() / (r.output_tokens - 1));
  }
  if (r.gone || r.group->failed) return;
  if (error) {
    abort_others(self, r);
    return end_with_error(self, r, api::api_error(500, "the request failed while running: " + u.error, "", "server_error"));
  }
  open_answer(r);  // tokens that came before the owner's acceptance
  choice_group& g = *r.group;
  --g.left;
  if (g.embeddings) {
    g.vectors[std::size_t(r.sub)] = u.embedding;
    g.prompt_tokens += r.prompt_tokens;
    if (g.left > 0) return;
    return r.ex->respond(200, "application/json", dump(api::embedding_response(g.vectors, g.base64, g.model,
                                                                               int(g.prompt_tokens))));
  }
  if (r.stream) {
    for (const auto& c : r.w->chunks(u.text, r.logprobs ? logprobs_of(u) : std::vector<api::token_logprob>{}, reason.value_or("abort")))
      sse(r.ex, c);
    if (g.plan.draw_of(r.sub) == 0) g.prompt_tokens += r.prompt_tokens;
    g.completion_tokens += r.output_tokens;
    if (g.left > 0) return;
    if (r.include_usage) sse(r.ex, r.w->usage_chunk({int(g.prompt_tokens), int(g.completion_tokens)}));
    r.ex->send("data: [DONE]\n\n");
    r.ex->end_stream();
  } else {
    g.fulls[std::size_t(r.sub)] = r.w->full(r.text, r.lps, reason.value_or("abort"), {r.prompt_tokens, r.output_tokens});
    g.cumulative[std::size_t(r.sub)] = r.cumulative;
    if (g.left > 0) return;
    r.ex->respond(200, "application/json", dump(api::merge_choices(g.plan, g.fulls, g.cumulative)));
  }
}

// Answers the shutdown's waiters once nothing is in flight (or being prepared).
void check_drained(frontend_ptr self) {
  auto& st = self->state;
  if (!st.draining || !st.live.empty() || st.preparing > 0) return;
  for (auto& rp : st.drained) rp.deliver(st.cut_off);
  st.drained.clear();
}

// The grace period is over: every request still in flight ends now, streams with an error event
// and [DONE] (the client sees why it ended), others with 503; the replicas stop working on them.
void cut_off_in_flight(frontend_ptr self) {
  auto& st = self->state;
  const api::api_error e(503, "the server shut down before this request finished", "", "server_error");
  for (auto& [id, r] : st.live) {
    ++st.cut_off;
    if (r.submitted) self->send(st.owner, abort_atom::value, id);
    if (!r.gone) end_with_error(self, r, e);
  }
  st.live.clear();
  st.preparing = 0;  // those still being prepared are refused when they come back (draining)
  check_drained(self);
}

// Admission sent the request to its model's fallback (`key`, the topology's name): from now on
// its answer, its metrics and the X-Troupe-Model header name that model.
void answered_by(frontend_ptr self, live_request& r, const std::string& key) {
  auto& st = self->state;
  for (const auto& pc : *st.models) {
    if (pc->key != key) continue;
    r.fell_back_from = r.labels.front().second;
    r.labels.front().second = pc->model_name;
    r.group->model = pc->model_name;
    if (r.w) r.w->set_model(pc->model_name);
    return;
  }
}

void on_update(frontend_ptr self, token_update& u) {
  auto& st = self->state;
  auto it = st.live.find(u.id);
  if (it == st.live.end()) return;
  live_request& r = it->second;
  if (!u.served_by.empty()) return answered_by(self, r, u.served_by);
  if (!u.prompt_logprobs.empty() && r.w) r.w->prompt_scored(std::move(u.prompt_logprobs));
  for (float lp : u.logprobs) r.cumulative += lp;
  const auto now = clock::now();
  if (!u.tokens.empty()) {
    if (r.output_tokens == 0) {
      r.first_token = now;
      metrics::labels l = r.labels;
      l.emplace_back("cache", cache_state(u.cached_tokens, u.prompt_tokens));
      st.m->ttft.observe(l, std::chrono::duration<double>(now - r.arrived).count());
      st.m->prompt_tokens.inc(r.labels, r.prompt_tokens);
    } else {
      st.m->itl.observe(r.labels, std::chrono::duration<double>(now - r.last_token).count());
    }
    r.last_token = now;
    r.output_tokens += int(u.tokens.size());
    st.m->generation_tokens.inc(r.labels, double(u.tokens.size()));
  }
  if (u.finished) {
    if (!r.stream) {
      r.text += u.text;
      if (r.logprobs) for (auto& lp : logprobs_of(u)) r.lps.push_back(std::move(lp));
    }
    finish(self, r, u);
    st.live.erase(it);
    check_drained(self);
    return;
  }
  if (r.gone) return;
  if (r.stream) {
    open_answer(r);
    // One chunk per step for this request, also when its token completed no text yet (a
    // partial character, text held back against a stop string, or a model without a
    // tokenizer): clients see every token's timing.
    if (!u.tokens.empty())
      for (const auto& c : r.w->chunks(u.text, r.logprobs ? logprobs_of(u) : std::vector<api::token_logprob>{}, std::nullopt))
        sse(r.ex, c);
  } else {
    r.text += u.text;
    if (r.logprobs) for (auto& lp : logprobs_of(u)) r.lps.push_back(std::move(lp));
  }
}

void handle_completion(frontend_ptr self, const std::shared_ptr<http::exchange>& ex, api::endpoint kind) {
  auto& st = self->state;
  prepared p;
  p.id = std::string(kind == api::endpoint::chat ? "chatcmpl-" : kind == api::endpoint::embeddings ? "embd-" : "cmpl-") + st.id_salt + std::to_string(++st.next_id);
  const std::string given = ex->req().header_value("x-request-id");
  p.trace = usable_trace_id(given) ? given : p.id;
  ex->add_header({"X-Request-Id", p.trace});  // on the answer, whatever it is
  if (int(st.live.size()) + st.preparing >= st.cfg.max_requests)
    throw api::api_error(429, "too many requests in flight (" + std::to_string(st.cfg.max_requests) + "); retry later");
  p.split_side = split_side_of(ex->req());
  p.ex = ex;
  p.kind = kind;
  p.arrived = clock::now();
  ++st.preparing;
  self->send(st.preparers.pick(ex->req().body), prepare_job{st.models, std::make_shared<prepared>(std::move(p))});
}

// What echo puts first: the prompt as the client sent it, or its tokens' text.
std::string echo_text(const prepare_context& pc, const api::completion_request& req, std::size_t i,
                      const std::vector<std::int32_t>& prompt) {
  if (!req.echo) return "";
  if (i < req.prompts.size() && req.prompts[i].text) return *req.prompts[i].text;
  return pc.tok ? pc.tok->decode(prompt) : "";
}

// One prompt of the request by the engine's rules (runtime/engine/request_check.h): 413 when the
// prompt alone does not fit the context, else 400 naming the field. A max_tokens left out is the
// rest of the context for a chat request, 16 for a completion.
void check_prompt(const prepare_context& pc, api::completion_request& req, api::endpoint kind, const std::vector<std::int32_t>& prompt,
                  int public_prefix) {
  const char* prompt_field = kind == api::endpoint::chat ? "messages" : "prompt";
  const int len = int(prompt.size());
  if (!req.max_tokens_given) req.params.max_tokens = kind == api::endpoint::chat ? std::max(1, pc.max_model_len - len) : 16;
  const auto p = engine::check_request(prompt, {}, req.params, public_prefix, {pc.vocab_size, pc.max_model_len, true});
  if (!p) return;
  if (p->too_long) throw api::api_error(413, p->message, prompt_field);
  const bool about_prompt = p->field == "prompt" || (p->context && !req.max_tokens_given);
  throw api::api_error(400, p->message, about_prompt ? prompt_field : p->field);
}

// The tenant's request rate and token budget: an API key's tenant has its [admission.tenants]
// entry; a `user` (or nobody) the default.
void charge_tenant(frontend_state& st, const http::request& rq, const std::string& user, double tokens) {
  if (st.cfg.admission.tenants.empty()) return;
  const std::string salt = cache_salt(st.cfg, rq, user);
  const bool keyed = salt.rfind("tenant:", 0) == 0;
  const auto v = st.budgets.charge(st.cfg.admission, salt.empty() ? "default" : salt, keyed ? salt.substr(7) : "default", tokens,
                                   admission::clock::now());
  if (!v.admitted) throw api::api_error(429, v.reason + "; retry later").with_retry_after(v.retry_after_s);
}

// A sub-request the owner could not take: the request's answer is that error.
void on_submit_failed(frontend_ptr self, const std::string& id, const caf::error& err) {
  auto it = self->state.live.find(id);
  if (it == self->state.live.end()) return;
  live_request& r = it->second;
  const std::string why = error_message(self->system(), err);
  abort_others(self, r);
  const auto code = serve_code(err);
  if (code == serve_errc::overloaded)  // the pool's queue is full for its priority
    end_with_error(self, r, api::api_error(429, why).with_retry_after(serve_retry_after(err)));
  else if (code == serve_errc::unavailable || err == caf::sec::request_timeout)
    end_with_error(self, r, api::api_error(503, "no replica can serve the request now (" + why + "); retry later"));
  else
    end_with_error(self, r, api::api_error(400, why));
  self->state.live.erase(it);
  check_drained(self);
}

void on_submitted(frontend_ptr self, const std::string& id) {
  auto it = self->state.live.find(id);
  if (it == self->state.live.end()) return;
  live_request& r = it->second;
  r.submitted = true;
  if (r.gone) return self->send(self->state.owner, abort_atom::value, id);
  open_answer(r);
}

void submit_one(frontend_ptr self, engine::request er) {
  auto& st = self->state;
  const std::string id = er.id;
  self->request(st.owner, st.cfg.request_timeout, submit_atom::value, std::move(er), caf::actor_cast<token_sink>(self))
      .then([=](bool) { on_submitted(self, id); }, [=](caf::error& err) { on_submit_failed(self, id, err); });
}

void submit_embeddings(frontend_ptr self, prepared& p);

// What every engine request of a client's request carries: its prompt `prompt`, who sends it
// (tenant, user, a pinned rollout side) and where it goes (model, adapter).
engine::request engine_request_of(const frontend_state& st, const prepared& p, const std::string& id, std::size_t prompt,
                                  const std::string& user, int priority) {
  engine::request er;
  er.id = id;
  er.prompt = p.prompts[prompt];
  er.priority = priority;
  er.cache_salt = cache_salt(st.cfg, p.ex->req(), user);
  er.public_prefix = p.public_prefix[prompt];
  er.trace_id = p.trace;
  er.adapter = p.adapter;
  er.model = p.pc->key;
  er.user = user;
  er.split_side = p.split_side;
  return er;
}

void submit(frontend_ptr self, prepared& p) {
  auto& st = self->state;
  const auto& ex = p.ex;
  const api::endpoint kind = p.kind;
  if (p.error) throw *p.error;
  if (p.embed) return submit_embeddings(self, p);
  api::completion_request& req = *p.req;
  double tokens = 0;
  for (std::size_t i = 0; i < p.prompts.size(); ++i) {
    check_prompt(*p.pc, req, kind, p.prompts[i], p.public_prefix[i]);
    tokens += double(p.prompts[i].size() + std::size_t(req.params.max_tokens)) * req.best_of;
  }
  if (ex->gone()) return;  // the client left while its request was being prepared
  charge_tenant(st, ex->req(), req.user, tokens);

  auto g = std::make_shared<choice_group>();
  g->plan = {int(p.prompts.size()), req.n, req.best_of};
  g->left = g->plan.size();
  g->model = p.model;
  g->endpoint = kind == api::endpoint::chat ? "chat" : "completions";
  g->fulls.resize(std::size_t(g->left));
  g->cumulative.resize(std::size_t(g->left));
  const bool client_logprobs = req.params.logprobs >= 0;
  sampling::sampling_params params = req.params;
  if (req.best_of > req.n) params.logprobs = std::max(params.logprobs, 0);  // to rank the draws
  for (int k = 0; k < g->plan.size(); ++k) g->ids.push_back(g->plan.size() == 1 ? p.id : p.id + "-" + std::to_string(k));
  // A client that leaves aborts its requests at once, freeing their KV blocks.
  ex->on_gone([h = caf::actor_cast<caf::actor>(self), ids = g->ids] {
    for (const auto& id : ids) caf::anon_send(h, gone_atom::value, id);
  });
  for (int k = 0; k < g->plan.size(); ++k) {
    const std::size_t i = std::size_t(g->plan.prompt_of(k));
    const std::vector<std::int32_t>& prompt = p.prompts[i];
    const std::string id = g->ids[std::size_t(k)];
    live_request r;
    r.group = g;
    r.sub = k;
    r.ex = ex;
    r.stream = req.stream;
    r.include_usage = req.include_usage;
    r.logprobs = client_logprobs;
    r.prompt_tokens = int(prompt.size());
    r.arrived = p.arrived;
    r.labels = {{"model_name", p.pc->model_name}, {"tenant", req.user.empty() ? "default" : req.user},
                {"priority", std::to_string(req.priority)}, {"input_bucket", length_bucket(int(prompt.size()))}};
    r.w = std::make_unique<api::response_writer>(kind, p.id, p.model, std::int64_t(unix_seconds()), p.pc->tok.get(), r.logprobs);
    r.w->set_index(g->plan.index_of(k));
    expect_answer_parts(*r.w, p, req.tools.parallel);
    if (req.echo || req.params.prompt_logprobs >= 0)
      r.w->expect_prompt(prompt, echo_text(*p.pc, req, i, prompt), req.echo, req.prompt_logprobs_list);
    st.live.emplace(id, std::move(r));

    engine::request er = engine_request_of(st, p, id, i, req.user, req.priority);
    er.params = params;
    er.params.seed = g->plan.seed_of(req.params.seed, k);
    er.speculate = req.speculate;
    // One answer names one model: a request of several choices is never split between two.
    er.allow_fallback = req.allow_fallback && p.adapter.empty() && g->plan.size() == 1;
    submit_one(self, std::move(er));
  }
}

// An embeddings request: one engine request per input, each ending with its vector; the answer
// goes once all have.
void submit_embeddings(frontend_ptr self, prepared& p) {
  auto& st = self->state;
  const auto& ex = p.ex;
  const api::embedding_request& req = *p.embed;
  double tokens = 0;
  for (const auto& prompt : p.prompts) {
    if (auto c = engine::check_context(int(prompt.size()), 0, 1, p.pc->max_model_len, true))
      throw api::api_error(413, c->message, "input");
    tokens += double(prompt.size());
  }
  if (ex->gone()) return;
  charge_tenant(st, ex->req(), req.user, tokens);
  auto g = std::make_shared<choice_group>();
  g->plan = {int(p.prompts.size()), 1, 1};
  g->left = g->plan.size();
  g->embeddings = true;
  g->base64 = req.base64;
  g->model = p.model;
  g->vectors.resize(p.prompts.size());
  for (int k = 0; k < g->plan.size(); ++k) g->ids.push_back(g->plan.size() == 1 ? p.id : p.id + "-" + std::to_string(k));
  ex->on_gone([h = caf::actor_cast<caf::actor>(self), ids = g->ids] {
    for (const auto& id : ids) caf::anon_send(h, gone_atom::value, id);
  });
  for (int k = 0; k < g->plan.size(); ++k) {
    const auto& prompt = p.prompts[std::size_t(k)];
    live_request r;
    r.group = g;
    r.sub = k;
    r.ex = ex;
    r.prompt_tokens = int(prompt.size());
    r.arrived = p.arrived;
    r.labels = {{"model_name", p.pc->model_name}, {"tenant", req.user.empty() ? "default" : req.user},
                {"priority", std::to_string(req.priority)}, {"input_bucket", length_bucket(int(prompt.size()))}};
    st.live.emplace(g->ids[std::size_t(k)], std::move(r));
    engine::request er = engine_request_of(st, p, g->ids[std::size_t(k)], std::size_t(k), req.user, req.priority);
    er.embed = true;
    er.params.max_tokens = 1;
    er.speculate = false;
    submit_one(self, std::move(er));
  }
}

// The served name of replica r's model, the label its series carry.
const std::string& model_of_replica(const frontend_config& cfg, std::uint32_t r) {
  auto it = cfg.replica_models.find(r);
  return it == cfg.replica_models.end() ? cfg.models.front().model_name : it->second;
}

// The live replicas' reports gathered for one scrape, summed per model.
struct metrics_gather {
  std::size_t left = 0;
  std::map<std::string, load_report> totals;  // by model name
  std::map<std::string, int> replicas;
};

// The page, once every replica answered (or failed to): the per-model gauges, the frontend's
// own figures, and the router's counts when it answers in time (the page goes out either way).
void render_metrics(frontend_ptr self, const std::shared_ptr<http::exchange>& ex, const metrics_gather& g) {
  auto& st = self->state;
  for (const auto& m : st.cfg.models) {
    const metrics::labels l = {{"model_name", m.model_name}};
    auto t = g.totals.find(m.model_name);
    const load_report total = t == g.totals.end() ? load_report{} : t->second;
    st.m->running.set(l, total.running_seqs);
    st.m->waiting.set(l, total.waiting_seqs);
    st.m->kv_usage.set(l, total.total_blocks ? double(total.used_blocks) / total.total_blocks : 0.0);
    auto n = g.replicas.find(m.model_name);
    st.m->replicas.set(l, n == g.replicas.end() ? 0.0 : double(n->second));
  }
  const metrics::labels l = {{"model_name", st.cfg.models.front().model_name}};
  const io_stats ios = st.io ? st.io() : io_stats{};
  st.m->connections.set(l, double(ios.open_connections));
  st.m->frontend_cpu.advance_to({{"part", "http_io"}}, ios.cpu_seconds);
  st.m->frontend_cpu.advance_to({{"part", "actor"}}, st.actor_cpu);
  st.m->process_cpu.advance_to({}, process_cpu_now());
  self->request(st.router, st.cfg.request_timeout, router_stats_atom::value)
      .then(
          [=](const router_stats& rs) {
            auto& st = self->state;
            st.m->events_published.advance_to(l, double(rs.events_published));
            st.m->events_dropped.advance_to(l, double(rs.events_dropped));
            for (const auto& [reason, n] : rs.decisions) {
              metrics::labels rl = l;
              rl.emplace_back("reason", reason);
              st.m->router_decisions.advance_to(rl, double(n));
            }
            ex->respond(200, "text/plain; version=0.0.4; charset=utf-8", st.m->reg.render());
          },
          [=](caf::error&) { ex->respond(200, "text/plain; version=0.0.4; charset=utf-8", self->state.m->reg.render()); });
}

// /metrics: every live replica asked for its load (a dead one's gauges go to zero), then rendered.
void handle_metrics(frontend_ptr self, const std::shared_ptr<http::exchange>& ex) {
  auto& st = self->state;
  self->request(st.router, st.cfg.request_timeout, view_atom::value)
      .then(
          [=](const std::vector<replica_view>& views) {
            auto& st = self->state;
            auto g = std::make_shared<metrics_gather>();
            std::vector<replica_view> live;
            for (const auto& v : views) {
              const std::string n = topology::name_of(st.cfg.replica_names, v.replica.value);  // a bounded label
              const std::string& model = model_of_replica(st.cfg, v.replica.value);
              if (v.alive) {
                live.push_back(v);
                ++g->replicas[model];
                continue;
              }
              const metrics::labels dl = {{"model_name", model}, {"replica", n}};
              st.m->replica_running.set(dl, 0);
              st.m->replica_waiting.set(dl, 0);
              st.m->replica_kv_usage.set(dl, 0);
              st.m->replica_up.set(dl, 0);
            }
            g->left = live.size();
            if (live.empty()) return render_metrics(self, ex, *g);
            for (const auto& v : live)
              self->request(v.scheduler, st.cfg.request_timeout, load_atom::value)
                  .then(
                      [=, s = v.scheduler, id = v.replica.value](const load_report& r) {
                        auto& st = self->state;
                        const std::string& model = model_of_replica(st.cfg, id);
                        observe_replica(*st.m, model, st.seen[s.address()], topology::name_of(st.cfg.replica_names, id), r);
                        load_report& total = g->totals[model];
                        total.running_seqs += r.running_seqs;
                        total.waiting_seqs += r.waiting_seqs;
                        total.used_blocks += r.used_blocks;
                        total.total_blocks += r.total_blocks;
                        if (--g->left == 0) render_metrics(self, ex, *g);
                      },
                      [=](caf::error&) {  // a replica that just died: counted as absent
                        if (--g->left == 0) render_metrics(self, ex, *g);
                      });
          },
          [=](caf::error& e) { send_error(self, ex, api::api_error(503, "router: " + error_message(self->system(), e))); });
}

void need_method(const http::request& rq, const std::string& path, std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* m : allowed) {
    if (rq.method == m) return;
    list += (list.empty() ? "" : ", ") + std::string(m);
  }
  throw api::api_error(405, "use " + list + " for " + path);
}

void handle(frontend_ptr self, const std::shared_ptr<http::exchange>& ex) {
  auto& st = self->state;
  const auto& rq = ex->req();
  const std::string path = rq.target.substr(0, rq.target.find('?'));
  try {
    const bool openai_route = path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
    if ((openai_route || st.cfg.api_key_on_all_routes) && !authorized(st.cfg, rq))
      throw api::api_error(401, "a valid API key is required: send it as 'Authorization: Bearer KEY'", "", "authentication_error");
    if (path == "/v1/completions" || path == "/v1/chat/completions") {
      need_method(rq, path, {"POST"});
      if (st.draining) throw api::api_error(503, "the server is shutting down; send the request to another", "", "server_error");
      return handle_completion(self, ex, path == "/v1/completions" ? api::endpoint::completions : api::endpoint::chat);
    }
    if (path == "/v1/embeddings") {
      need_method(rq, path, {"POST"});
      if (st.draining) throw api::api_error(503, "the server is shutting down; send the request to another", "", "server_error");
      return handle_completion(self, ex, api::endpoint::embeddings);
    }
    if (path == "/tokenize" || path == "/detokenize") {
      need_method(rq, path, {"POST"});
      self->send(self->state.preparers.pick(ex->req().body), tokenize_job{st.models, ex, path == "/detokenize"});
      return;
    }
    if (path == "/v1/models") {
      need_method(rq, path, {"GET"});
      json data = json::array();
      for (auto& card : model_cards(st.cfg, st.started)) data.push_back(std::move(card));
      return ex->respond(200, "application/json", dump({{"object", "list"}, {"data", data}}));
    }
    if (path.rfind("/v1/models/", 0) == 0) {
      need_method(rq, path, {"GET"});
      const std::string id = path.substr(11);
      for (auto& card : model_cards(st.cfg, st.started))
        if (card["id"] == id) return ex->respond(200, "application/json", dump(card));
      throw no_such_model(id, *st.models);
    }
    if (path == "/v1/load_lora_adapter" || path == "/v1/unload_lora_adapter") {
      need_method(rq, path, {"POST"});
      return answer_lora_route(self, st.cfg, ex, path == "/v1/load_lora_adapter", [self, ex](const api::api_error& e) { send_error(self, ex, e); });
    }
    if (path == "/health") {
      need_method(rq, path, {"GET", "HEAD"});
      if (st.draining)
        return ex->respond(503, "application/json", dump({{"status", "shutting down"}}),
                           {{"Retry-After", std::to_string(st.cfg.retry_after_s)}});
      return answer_health(self, st.cfg, st.router, ex);
    }
    if (path == "/metrics") {
      need_method(rq, path, {"GET", "HEAD"});
      return handle_metrics(self, ex);
    }
    throw api::api_error(404, "no route " + rq.method + " " + path);
  } catch (const api::api_error& e) {
    send_error(self, ex, e);
  } catch (const std::exception& e) {
    send_error(self, ex, api::api_error(500, std::string("internal error: ") + e.what()));
  }
}

// A prepared request: submitted, or answered with its error.
void on_prepared(frontend_ptr self, prepared& p) {
  if (self->state.preparing > 0) --self->state.preparing;
  try {
    if (self->state.draining) throw api::api_error(503, "the server is shutting down; send the request to another", "", "server_error");
    submit(self, p);
  } catch (const api::api_error& e) {
    send_error(self, p.ex, e, p.pc ? p.pc->model_name : std::string());
  } catch (const std::exception& e) {
    send_error(self, p.ex, api::api_error(500, std::string("internal error: ") + e.what()), p.pc ? p.pc->model_name : std::string());
  }
}

caf::behavior frontend_actor(caf::stateful_actor<frontend_state>* self, frontend_config cfg, owner_actor owner,
                             router_actor router, std::function<io_stats()> io) {
  auto& st = self->state;
  st.io = std::move(io);
  st.m = std::make_shared<frontend_metrics>(cfg.metric_prefix);
  for (const auto& m : cfg.models) {
    zero_counters(*st.m, m.model_name);
    if (!m.fallback.empty()) st.m->fallbacks.inc({{"model_name", m.model_name}, {"fallback", m.fallback}}, 0);
  }
  st.cfg = std::move(cfg);
  st.owner = std::move(owner);
  st.router = std::move(router);
  st.models = model_table_of(st.cfg);
  st.preparers.spawn(self);
  st.started = std::int64_t(unix_seconds());
  std::random_device rd;
  char salt[16];
  std::snprintf(salt, sizeof salt, "%08x-", unsigned(rd()));
  st.id_salt = salt;
  return {
      [=](const exchange_msg& m) {
        cpu_account acc(self->state.actor_cpu);
        handle(self, m.ex);
      },
      [=](const prepared_msg& m) {
        cpu_account acc(self->state.actor_cpu);
        on_prepared(self, *m.p);
        check_drained(self);
      },
      [=](token_batch& b) {
        cpu_account acc(self->state.actor_cpu);
        for (auto& u : b.updates) on_update(self, u);
      },
      [=](gone_atom, const std::string& id) {
        cpu_account acc(self->state.actor_cpu);
        auto it = self->state.live.find(id);
        if (it == self->state.live.end()) return;
        it->second.gone = true;
        if (it->second.submitted) self->send(self->state.owner, abort_atom::value, id);
      },
      [=](shutdown_atom, caf::timespan grace) -> caf::result<int> {
        auto& st = self->state;
        st.draining = true;
        auto rp = self->make_response_promise<int>();
        st.drained.push_back(rp);
        self->delayed_send(self, grace, grace_over_atom::value);
        check_drained(self);
        return rp;
      },
      [=](grace_over_atom) { cut_off_in_flight(self); },
  };
}

}  // namespace

frontend::frontend(caf::actor_system& sys, owner_actor owner, router_actor router, frontend_config cfg) : sys_(sys) {
  const http::server_config hc = cfg.http;
  io_server_ = std::make_shared<std::atomic<http::server*>>(nullptr);
  auto holder = io_server_;
  std::function<io_stats()> io = [holder] {
    http::server* s = holder->load();
    return s ? io_stats{s->io_cpu_seconds(), s->open_connections()} : io_stats{};
  };
  actor_ = sys.spawn(frontend_actor, std::move(cfg), std::move(owner), std::move(router), std::move(io));
  auto a = actor_;
  server_ = std::make_unique<http::server>(hc, [a](std::shared_ptr<http::exchange> ex) {
    caf::anon_send(a, exchange_msg{std::move(ex)});
  });
  io_server_->store(server_.get());
}

int frontend::drain(std::chrono::milliseconds grace) {
  caf::scoped_actor self{sys_};
  int cut = 0;
  self->request(actor_, grace + std::chrono::seconds(10), shutdown_atom::value, caf::timespan(grace))
      .receive([&](int n) { cut = n; }, [&](caf::error&) { cut = -1; });
  return cut;
}

frontend::~frontend() {
  io_server_->store(nullptr);
  server_->stop();
  caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
}

std::uint16_t frontend::port() const { return server_->port(); }

}  // namespace troupe::actors
