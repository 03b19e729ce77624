// Preparing a request off the frontend actor: parsed, its model checked, its chat template
// rendered and its prompts tokenized (or the error to answer with), on a few detached
// preparers; /tokenize and /detokenize are answered there too.
#pragma once
#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/api/frontend_config.h"
#include "actors/api/http_server.h"
#include "runtime/api/embeddings.h"
#include "runtime/api/lora_catalog.h"
#include "runtime/api/openai.h"
#include "runtime/chat/chat_template.h"
#include "runtime/tokenizer/tokenizer.h"

namespace troupe::actors {

struct prepare_context;

// What a request becomes before it is submitted: parsed, its chat template rendered and its
// prompt tokenized, or the error to answer with. Made off the frontend actor (see prepare).
struct prepared {
  std::shared_ptr<http::exchange> ex;
  api::endpoint kind = api::endpoint::completions;
  std::chrono::steady_clock::time_point arrived;
  std::optional<api::completion_request> req;
  std::optional<api::embedding_request> embed;  // kind embeddings: this instead of req
  std::vector<std::vector<std::int32_t>> prompts;  // one per prompt of the request
  std::vector<int> public_prefix;  // per prompt: leading tokens that are a public prompt's
  std::optional<api::api_error> error;
  std::string model;    // the served model that answers: the base's name, or an adapter's
  std::string adapter;  // that adapter's identity (engine::request::adapter); empty: the base
  std::shared_ptr<const prepare_context> pc;  // the model's (its key, context, tokenizer)
  std::string id;     // the completion's
  std::string trace;  // the client's X-Request-Id, or the id
  std::int8_t split_side = -1;  // the X-Troupe-Split header's side (engine::request::split_side)
  chat::tool_format tool_format = chat::tool_format::none;  // where the answer's tool calls are found
  std::optional<chat::reasoning_format> reasoning;  // how the answer's model reasons, if it does
  bool reasoning_open = false;                      // the prompt leaves the output inside reasoning
};

// A writer told what to look for in the answer: the prepared request's tool calls and reasoning.
void expect_answer_parts(api::response_writer& w, const prepared& p, bool parallel_tool_calls);

// The parts of the frontend's state that preparing reads; immutable once the frontend runs, but
// for the adapters loaded at run time, which the catalog keeps under its lock.
struct prepare_context {
  std::string key;  // the topology's name of the model (engine::request::model)
  std::string model_name;
  std::vector<std::string> model_aliases;
  std::shared_ptr<const api::lora_catalog> loras;  // null without [lora]
  int vocab_size = 0;
  int max_model_len = 0;
  std::shared_ptr<const tokenizer::tokenizer> tok;
  std::shared_ptr<const chat::chat_template> chat;
  chat::tool_format tool_format = chat::tool_format::none;  // the model's
  std::optional<model::pooling_config> pooling;  // an embedding model's
  int embedding_size = 0;
  sampling::sampling_params sampling_defaults;
  // The public prompts as token prefixes: as a completion prompt starts, and as a chat whose
  // first message is that system prompt is rendered up to the end of it.
  std::vector<std::vector<std::int32_t>> public_prefixes;
};

// Every model the frontend serves, [model]'s first (a request naming none gets it).
using model_table = std::vector<std::shared_ptr<const prepare_context>>;

// A request parsed, rendered and tokenized (or refused) off the frontend actor.
struct prepared_msg {
  std::shared_ptr<prepared> p;
};

// Work for a preparer: a request to prepare (answered to the frontend that sent it), or a /tokenize or
// /detokenize to answer.
struct prepare_job {
  std::shared_ptr<const model_table> models;
  std::shared_ptr<prepared> p;
};
struct tokenize_job {
  std::shared_ptr<const model_table> models;
  std::shared_ptr<http::exchange> ex;
  bool detokenize = false;
};

// The preparers: a few actors on threads of their own (detached), not CAF's workers, which the
// frontend actor, the router and the request owner run on. Eight requests rendering templates
// to their budget on CAF's two workers left /health unanswered for 30 s; here they queue for
// the preparers while every other route is served.
constexpr int preparer_threads = 2;

caf::behavior preparer(caf::event_based_actor* self);

// Two lanes of preparers: a request that may compile a grammar (its body names a structured
// output or tools) goes to the grammar lane, so that a schema compiling up to its budget never
// holds up a request that needs none; each lane takes its jobs in turn.
class preparer_pool {
 public:
  // Spawns the preparers, linked to `owner` (they go with it).
  void spawn(caf::local_actor* owner);
  // The preparer for a request with this body (empty: no body, as /tokenize's lane).
  caf::actor pick(const std::string& body);

 private:
  std::vector<caf::actor> plain_, grammar_;
  std::size_t next_plain_ = 0, next_grammar_ = 0;
};
// Whether a request body may ask for a grammar: any of the structured-output fields or tools
// appears in it (a prompt that merely quotes one goes to the grammar lane, at no harm).
bool may_compile_grammar(const std::string& body);

// What the preparers read of each model: the served names, the tokenizer and chat template, the
// tool-call format, and the public prompts' token prefixes (plain and in the chat form); the
// adapters go with [model]'s.
std::shared_ptr<const model_table> model_table_of(const frontend_config& cfg);

// A 404 naming the model asked for and those served.
api::api_error no_such_model(const std::string& asked, const model_table& models);
// The model a request names (none: [model]): its context, its name as answers carry it, and the
// adapter's identity when it names a LoRA adapter. Throws no_such_model's 404 for a name not served.
struct served_model_ref {
  std::shared_ptr<const prepare_context> pc;
  std::string name, adapter;
};
served_model_ref resolve_model(const model_table& models, const std::string& asked);
// Whether `asked` is the served model's name or one of its aliases.
bool serves(const std::string& name, const std::vector<std::string>& aliases, const std::string& asked);
// A JSON body as sent (invalid UTF-8 replaced, never thrown on).
std::string dump(const nlohmann::json& j);

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::prepared_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::prepare_job)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::tokenize_job)
