#include "actors/api/frontend_prepare.h"

#include <algorithm>

#include "runtime/api/structured_output.h"
#include "runtime/api/tokenize.h"
#include "runtime/engine/request_check.h"
#include "runtime/common/error.h"
#include "runtime/common/log.h"

namespace troupe::actors {

using json = nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

api::api_error no_such_model(const std::string& asked, const model_table& models) {
  std::string served;
  for (const auto& m : models) served += (served.empty() ? "\"" : ", \"") + m->model_name + "\"";
  return api::api_error(404, "the model \"" + asked + "\" does not exist; this server serves " + served + " (GET /v1/models lists every name)",
                        "model", "not_found_error");
}

bool serves(const std::string& name, const std::vector<std::string>& aliases, const std::string& asked) {
  return asked == name || std::find(aliases.begin(), aliases.end(), asked) != aliases.end();
}

served_model_ref resolve_model(const model_table& models, const std::string& asked) {
  if (asked.empty()) return {models.front(), models.front()->model_name, ""};
  for (const auto& pc : models)
    if (serves(pc->model_name, pc->model_aliases, asked)) return {pc, pc->model_name, ""};
  for (const auto& pc : models)
    if (pc->loras)
      if (auto a = pc->loras->find(asked)) return {pc, a->name, a->identity};
  throw no_such_model(asked, models);
}

namespace {

// How many leading tokens of `prompt` are the longest public prefix it starts with.
int public_prefix_of(const prepare_context& pc, const std::vector<std::int32_t>& prompt) {
  std::size_t best = 0;
  for (const auto& p : pc.public_prefixes)
    if (p.size() > best && p.size() <= prompt.size() && std::equal(p.begin(), p.end(), prompt.begin())) best = p.size();
  return int(best);
}

// Whether `id` is a token of the model (any id is, without a vocabulary size).
bool in_vocabulary(const prepare_context& pc, std::int32_t id) { return pc.vocab_size <= 0 || (id >= 0 && id < pc.vocab_size); }
std::string vocabulary(const prepare_context& pc) { return "the vocabulary [0, " + std::to_string(pc.vocab_size) + ")"; }

// A request may name a served model, one of its aliases, an adapter, or none.
void check_model(const model_table& models, const std::string& asked, prepared& p) {
  served_model_ref m = resolve_model(models, asked);
  p.model = m.name;
  p.adapter = m.adapter;
  p.pc = std::move(m.pc);
}

// The model a body names, before it is parsed as its model's request (whose defaults are that
// model's): the first when only one is served, or the body names none or one not served (then
// check_model's 404 follows).
const prepare_context& context_of(const model_table& models, const std::string& body) {
  if (models.size() == 1) return *models.front();
  const json j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_string()) return *models.front();
  try {
    return *resolve_model(models, j["model"].get<std::string>()).pc;
  } catch (const api::api_error&) {
    return *models.front();
  }
}

// A prompt as tokens: text encoded (with BOS as the tokenizer adds it), ids as sent. A
// completion's are checked with the rest of the request (engine::check_request, at submission).
std::vector<std::int32_t> completion_prompt(const prepare_context& pc, const api::prompt_input& in,
                                            const std::string& field = "prompt") {
  if (in.text) {
    if (!pc.tok) throw api::api_error(400, "this model has no tokenizer; send the " + field + " as token ids", field);
    return pc.tok->encode(*in.text, true);
  }
  return in.ids;
}

// An embedding input's ids, by the engine's vocabulary rule.
void check_input_ids(const prepare_context& pc, const std::vector<std::int32_t>& ids) {
  if (auto bad = engine::first_outside_vocabulary(ids, pc.vocab_size))
    throw api::api_error(400, "input: token " + std::to_string(*bad) + " is " + std::to_string(ids[*bad]) + ", outside " + vocabulary(pc),
                         "input");
}

// An embeddings request: parsed, its model checked to be an embedding model, its inputs tokenized
// (with the special tokens the tokenizer adds, as sentence-transformers encodes).
void prepare_embeddings(const model_table& models, prepared& p) {
  api::embedding_request req = api::parse_embedding_request(p.ex->req().body);
  check_model(models, req.model, p);
  const prepare_context& pc = *p.pc;
  if (!pc.pooling)
    throw api::api_error(400, "the model \"" + pc.model_name + "\" computes no embeddings: its folder has no sentence-transformers "
                         "Pooling module (modules.json)", "model");
  api::check_dimensions(req, pc.embedding_size);
  for (const auto& in : req.inputs) {
    p.prompts.push_back(completion_prompt(pc, in, "input"));
    check_input_ids(pc, p.prompts.back());
  }
  for (const auto& prompt : p.prompts) p.public_prefix.push_back(public_prefix_of(pc, prompt));
  if (!req.no_effect_fields.empty())
    log::debug("request_fields_without_effect", {{"id", p.id}, {"trace", p.trace}, {"fields", req.no_effect_fields}});
  p.embed = std::move(req);
}

void prepare(const model_table& models, prepared& p) {
  if (p.kind == api::endpoint::embeddings) return prepare_embeddings(models, p);
  api::completion_request req = api::parse_request(p.ex->req().body, p.kind, context_of(models, p.ex->req().body).sampling_defaults);
  check_model(models, req.model, p);
  const prepare_context& pc = *p.pc;
  if (p.kind == api::endpoint::chat) {
    if (!pc.chat) throw api::api_error(400, "this model has no chat template; use /v1/completions", "messages");
    if (!pc.tok) throw api::api_error(400, "this model has no tokenizer; use /v1/completions with token ids", "messages");
    std::string text;
    try {
      text = pc.chat->render(req.messages, req.add_generation_prompt, req.template_kwargs);
    } catch (const input_error& e) {
      throw api::api_error(400, e.what(), "messages");
    }
    p.prompts.push_back(pc.tok->encode(text, false));  // the template wrote the special tokens itself
    p.tool_format = api::answer_tool_format(req.tools, pc.tool_format, req.params, p.ex->req().body);
    if ((p.reasoning = pc.chat->reasoning())) {
      p.reasoning_open = chat::prompt_opens_reasoning(text, *p.reasoning);
      api::constrain_after_reasoning(req.params.constraint, *p.reasoning, p.reasoning_open);
    }
  } else {
    for (const auto& in : req.prompts) p.prompts.push_back(completion_prompt(pc, in));
  }
  // Token ids the model does not have would index past its logits.
  for (auto id : req.params.stop_token_ids)
    if (!in_vocabulary(pc, id))
      throw api::api_error(400, "stop_token_ids: " + std::to_string(id) + " is outside " + vocabulary(pc), "stop_token_ids");
  for (auto& [id, b] : req.params.logit_bias)
    if (!in_vocabulary(pc, id))
      throw api::api_error(400, "logit_bias: token " + std::to_string(id) + " is outside " + vocabulary(pc), "logit_bias");
  for (const auto& prompt : p.prompts) p.public_prefix.push_back(public_prefix_of(pc, prompt));
  if (!req.no_effect_fields.empty())
    log::debug("request_fields_without_effect", {{"id", p.id}, {"trace", p.trace}, {"fields", req.no_effect_fields}});
  p.req = std::move(req);
}

// Parsing, template rendering and tokenizing: a slow or hostile request (a template running to
// its budget, a 4 MB body) delays only itself.
void run_prepare(const model_table& models, prepared& p) {
  try {
    prepare(models, p);
  } catch (const api::api_error& e) {
    p.error = e;
  } catch (const std::exception& e) {
    p.error = api::api_error(500, std::string("internal error: ") + e.what());
  }
}

// /tokenize and /detokenize (vLLM's), answered where they are computed.
void run_tokenize(const model_table& models, const std::shared_ptr<http::exchange>& ex, bool detokenize) {
  try {
    json out;
    if (detokenize) {
      const auto r = api::parse_detokenize(ex->req().body);
      const auto pc = resolve_model(models, r.model).pc;  // an adapter shares the base's tokenizer
      out = api::detokenize(r, pc->tok.get(), pc->vocab_size);
    } else {
      const auto r = api::parse_tokenize(ex->req().body);
      const auto pc = resolve_model(models, r.model).pc;
      out = api::tokenize(r, pc->tok.get(), pc->chat.get(), pc->max_model_len);
    }
    ex->respond(200, "application/json", dump(out));
  } catch (const api::api_error& e) {
    ex->respond(e.status(), "application/json", dump(e.body()));
  } catch (const std::exception& e) {
    ex->respond(500, "application/json", dump(api::api_error(500, std::string("internal error: ") + e.what()).body()));
  }
}

}  // namespace

void expect_answer_parts(api::response_writer& w, const prepared& p, bool parallel_tool_calls) {
  if (p.tool_format != chat::tool_format::none) w.expect_tool_calls(p.tool_format, parallel_tool_calls);
  if (p.reasoning) w.expect_reasoning(*p.reasoning, p.reasoning_open);
}

bool may_compile_grammar(const std::string& body) {
  for (const char* field : {"\"response_format\"", "\"guided_", "\"structured_outputs\"", "\"tools\""})
    if (body.find(field) != std::string::npos) return true;
  return false;
}

void preparer_pool::spawn(caf::local_actor* owner) {
  for (int i = 0; i < preparer_threads; ++i) plain_.push_back(owner->spawn<caf::detached + caf::linked>(preparer));
  grammar_.push_back(owner->spawn<caf::detached + caf::linked>(preparer));
}

caf::actor preparer_pool::pick(const std::string& body) {
  if (may_compile_grammar(body)) return grammar_[next_grammar_++ % grammar_.size()];
  return plain_[next_plain_++ % plain_.size()];
}

caf::behavior preparer(caf::event_based_actor* self) {
  return {
      [=](prepare_job& j) {
        run_prepare(*j.models, *j.p);
        self->send(caf::actor_cast<caf::actor>(self->current_sender()), prepared_msg{std::move(j.p)});
      },
      [=](tokenize_job& j) { run_tokenize(*j.models, j.ex, j.detokenize); },
  };
}

namespace {

std::shared_ptr<const prepare_context> prepare_context_of(const frontend_config& cfg, const served_model_spec& m) {
  auto pc = std::make_shared<prepare_context>();
  pc->key = m.key;
  pc->model_name = m.model_name;
  pc->model_aliases = m.model_aliases;
  if (m.key.empty()) pc->loras = cfg.lora.catalog;
  pc->vocab_size = m.vocab_size;
  pc->max_model_len = m.max_model_len;
  pc->sampling_defaults = m.sampling_defaults;
  pc->tok = m.tok;
  if (m.chat) pc->chat = std::make_shared<const chat::chat_template>(*m.chat);
  pc->pooling = m.pooling;
  pc->embedding_size = m.embedding_size;
  if (pc->pooling)
    log::info("embeddings", {{"model", m.model_name}, {"pooling", model::pooling_method_name(pc->pooling->method)},
                             {"normalize", pc->pooling->normalize}, {"dimensions", pc->embedding_size}});
  pc->tool_format = m.tool_call_parser.value_or(pc->chat ? pc->chat->tool_calls() : chat::tool_format::none);
  log::info("tool_call_parser", {{"model", m.model_name}, {"format", chat::tool_format_name(pc->tool_format)},
                                 {"from", m.tool_call_parser ? "the topology" : "the chat template"}});
  if (pc->tok)
    for (const auto& [name, text] : cfg.public_prompts) {
      pc->public_prefixes.push_back(pc->tok->encode(text, true));
      if (!pc->chat) continue;
      try {  // the chat form: the template's rendering of that system message alone
        const auto msgs = nlohmann::json::array({{{"role", "system"}, {"content", text}}});
        pc->public_prefixes.push_back(pc->tok->encode(pc->chat->render(msgs, false), false));
      } catch (const input_error&) {
        // a template that refuses a lone system message: the completion form still applies
      }
    }
  return pc;
}

}  // namespace

std::shared_ptr<const model_table> model_table_of(const frontend_config& cfg) {
  auto t = std::make_shared<model_table>();
  for (const auto& m : cfg.models) t->push_back(prepare_context_of(cfg, m));
  return t;
}

}  // namespace troupe::actors
