#include "runtime/api/openai.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <set>

#include "runtime/api/choices.h"
#include "runtime/api/structured_output.h"
#include "runtime/api/tools.h"
#include "runtime/common/error.h"
#include "runtime/common/json.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/unicode.h"

namespace troupe::api {

using json = nlohmann::json;

namespace {

const char* json_type(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "a number";
  }
}

// Optional typed fields: absent or null leave the default.
struct fields {
  const json& j;
  const json* get(const char* k) const {
    auto it = j.find(k);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<double> number(const char* k) const {
    const json* v = get(k);
    if (!v) return std::nullopt;
    if (!v->is_number()) bad_field(k, std::string("expected a number, got ") + json_type(*v));
    const double d = v->get<double>();
    if (!std::isfinite(d)) bad_field(k, "must be finite");
    return d;
  }
  std::optional<long long> integer(const char* k) const {
    const json* v = get(k);
    if (!v) return std::nullopt;
    if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>()) {
      const double d = v->get<double>();
      if (!(d >= -9.2e18 && d <= 9.2e18)) bad_field(k, "is out of range");
      return (long long)d;
    }
    if (!v->is_number_integer()) bad_field(k, std::string("expected an integer, got ") + json_type(*v));
    return v->get<long long>();
  }
  std::optional<bool> boolean(const char* k) const {
    const json* v = get(k);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) bad_field(k, std::string("expected a boolean, got ") + json_type(*v));
    return v->get<bool>();
  }
  std::optional<std::string> string(const char* k) const {
    const json* v = get(k);
    if (!v) return std::nullopt;
    if (!v->is_string()) bad_field(k, std::string("expected a string, got ") + json_type(*v));
    return v->get<std::string>();
  }
};

// One prompt: a string or a list of token ids.
std::optional<prompt_input> one_prompt(const json& p, const std::string& field) {
  prompt_input in;
  if (p.is_string()) {
    in.text = p.get<std::string>();
    if (in.text->empty()) bad_field(field, "must not be empty");
    return in;
  }
  if (!p.is_array() || p.empty() || !p[0].is_number_integer()) return std::nullopt;
  for (const auto& t : p) {
    if (!t.is_number_integer()) bad_field(field, "a token-id prompt must hold only integers");
    in.ids.push_back(t.get<std::int32_t>());
  }
  return in;
}

std::string message_text(const json& content, std::size_t index) {
  const std::string field = "messages[" + std::to_string(index) + "].content";
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (content.is_array()) {  // [{"type": "text", "text": ...}, ...]
    std::string out;
    for (const auto& part : content) {
      if (!holds(part, "type", "text") || !part.contains("text") || !part["text"].is_string())
        bad_field(field, "only text parts ({\"type\": \"text\", \"text\": ...}) are supported");
      out += part["text"].get<std::string>();
    }
    return out;
  }
  bad_field(field, std::string("expected a string or an array of text parts, got ") + json_type(content));
}

// Fields that change nothing Troupe computes, accepted because ordinary clients send them (the
// OpenAI SDKs' `store`, `metadata` and `service_tier`; vLLM's spaces_between_special_tokens,
// which only its slow tokenizers read) and recorded in completion_request::no_effect_fields.
// docs/serving.md lists them.
const std::set<std::string>& no_effect_fields() {
  static const std::set<std::string> s = {"store", "metadata", "service_tier", "spaces_between_special_tokens",
                                          "guided_decoding_backend"};
  return s;
}

// Every field this server reads; anything else is refused by name rather than ignored.
const std::set<std::string>& known_fields(endpoint kind) {
  static const std::set<std::string> common = {
      "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "n", "stream", "stream_options", "logprobs",
      "stop", "stop_token_ids", "seed", "presence_penalty", "frequency_penalty", "repetition_penalty", "ignore_eos",
      "user", "priority", "logit_bias", "min_tokens", "include_stop_str_in_output", "skip_special_tokens", "prompt_logprobs",
      "speculate", "allow_fallback", "response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
      "guided_whitespace_pattern", "structured_outputs"};
  static const std::set<std::string> completions = [] {
    auto s = common;
    s.insert({"prompt", "best_of", "echo", "suffix"});
    return s;
  }();
  static const std::set<std::string> chat = [] {
    auto s = common;
    s.insert({"messages", "max_completion_tokens", "top_logprobs", "add_generation_prompt", "chat_template_kwargs", "tools",
              "tool_choice", "parallel_tool_calls"});
    return s;
  }();
  return kind == endpoint::chat ? chat : completions;
}

void refuse_unknown_fields(const json& j, endpoint kind) {
  const auto& known = known_fields(kind);
  for (auto& [k, v] : j.items())
    if (!known.count(k) && !no_effect_fields().count(k)) bad_field(k.size() > 64 ? k.substr(0, 64) + "..." : k, "is not a field this server supports");
}

// logit_bias: {"token id": bias, ...}, as OpenAI sends it (ids as strings).
std::vector<std::pair<std::int32_t, float>> parse_logit_bias(const json& v) {
  if (!v.is_object()) bad_field("logit_bias", std::string("expected an object of token id -> bias, got ") + json_type(v));
  if (v.size() > 1024) bad_field("logit_bias", "at most 1024 tokens");
  std::vector<std::pair<std::int32_t, float>> out;
  for (auto& [k, b] : v.items()) {
    long long id = -1;
    const auto [p, ec] = std::from_chars(k.data(), k.data() + k.size(), id);
    if (ec != std::errc() || p != k.data() + k.size() || id < 0 || id > INT32_MAX) bad_field("logit_bias", "\"" + k + "\" is not a token id");
    if (!b.is_number() || !(b.get<double>() >= -100 && b.get<double>() <= 100)) bad_field("logit_bias", "biases must be numbers in [-100, 100]");
    out.emplace_back(std::int32_t(id), b.get<float>());
  }
  return out;
}

}  // namespace

std::vector<prompt_input> parse_prompts(const json& p, const std::string& field, std::size_t most) {
  if (auto one = one_prompt(p, field)) return {std::move(*one)};
  if (!p.is_array() || p.empty())
    bad_field(field, std::string("expected a non-empty string, a list of token ids, or a list of those, got ") + json_type(p));
  if (p.size() > most) bad_field(field, "at most " + std::to_string(most) + " in one request");
  std::vector<prompt_input> out;
  for (const auto& x : p) {
    auto one = one_prompt(x, field);
    if (!one) bad_field(field, "each entry of a list must be a non-empty string or a list of token ids");
    out.push_back(std::move(*one));
  }
  return out;
}

json parse_messages(const json& m) {
  if (!m.is_array() || m.empty()) bad_field("messages", "expected a non-empty array of messages");
  json out = json::array();
  for (std::size_t i = 0; i < m.size(); ++i) {
    const json& msg = m[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) bad_field(at, "expected an object");
    if (!msg.contains("role") || !msg["role"].is_string()) bad_field(at + ".role", "is required (a string)");
    const std::string role = msg["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer")
      bad_field(at + ".role", "unknown role \"" + role + "\"");
    json copy = msg;
    copy["content"] = message_text(msg.contains("content") ? msg["content"] : json(nullptr), i);
    normalize_tool_calls(copy, at);
    if (copy.contains("tool_call_id") && !copy["tool_call_id"].is_null() && !copy["tool_call_id"].is_string())
      bad_field(at + ".tool_call_id", "expected a string");
    out.push_back(std::move(copy));
  }
  return out;
}

// Each no-effect field at a value that indeed changes nothing, or a 400 naming it.
void check_no_effect_fields(const fields& f, completion_request& r) {
  if (const json* m = f.get("metadata")) {  // null is absent
    if (!m->is_object()) bad_field("metadata", std::string("expected an object, got ") + json_type(*m));
    if (m->size() > 16) bad_field("metadata", "at most 16 keys");
  }
  // The rest are only type-checked: a 400 names a wrong type as for any field.
  f.boolean("store");
  f.string("service_tier");
  f.boolean("spaces_between_special_tokens");
  for (const auto& name : no_effect_fields())
    if (f.get(name.c_str())) r.no_effect_fields.push_back(name);
}

// n, best_of and the prompts: at most choice_plan::max_choices sub-requests in all.
void check_choices(const fields& f, completion_request& r) {
  const long long n = f.integer("n").value_or(1);
  if (n < 1 || n > choice_plan::max_choices) bad_field("n", "must be in [1, " + std::to_string(choice_plan::max_choices) + "]");
  r.n = int(n);
  const long long best = f.integer("best_of").value_or(n);
  if (best < n) bad_field("best_of", "must be at least n (" + std::to_string(n) + ")");
  const long long prompts = std::max<long long>(1, (long long)r.prompts.size());
  if (best * prompts > choice_plan::max_choices)
    bad_field(f.get("best_of") ? "best_of" : "n", std::to_string(prompts) + " prompt(s) x " + std::to_string(best) +
                                                      " choices is over the " + std::to_string(choice_plan::max_choices) + " a request may ask for");
  r.best_of = int(best);
  if (r.best_of > r.n && f.boolean("stream").value_or(false))
    bad_field("best_of", "cannot be streamed (the n kept are known only at the end); leave it out or equal to n");
}

namespace {

// The prompt fields of either endpoint: a completion's prompt (and echo, logprobs), or a
// chat's messages, logprobs, template arguments and tools.
void parse_prompt_fields(const fields& f, const json& j, endpoint kind, completion_request& r) {
  if (kind == endpoint::completions) {
    const json* p = f.get("prompt");
    if (!p) bad_field("prompt", "is required");
    r.prompts = parse_prompts(*p, "prompt", std::size_t(choice_plan::max_choices));
    r.echo = f.boolean("echo").value_or(false);
    if (f.get("suffix")) bad_field("suffix", "is not supported");
    if (auto lp = f.integer("logprobs")) {
      if (*lp < 0 || *lp > sampling::sampling_params::max_logprobs)
        bad_field("logprobs", "must be in [0, " + std::to_string(sampling::sampling_params::max_logprobs) + "]");
      r.params.logprobs = int(*lp);
    }
  } else {
    const json* m = f.get("messages");
    if (!m) bad_field("messages", "is required");
    r.messages = parse_messages(*m);
    if (auto lp = f.boolean("logprobs"); lp && *lp) {
      const auto top = f.integer("top_logprobs").value_or(0);
      if (top < 0 || top > sampling::sampling_params::max_logprobs)
        bad_field("top_logprobs", "must be in [0, " + std::to_string(sampling::sampling_params::max_logprobs) + "]");
      r.params.logprobs = int(top);
    } else if (f.get("top_logprobs")) {
      bad_field("top_logprobs", "needs logprobs: true");
    }
    if (auto g = f.boolean("add_generation_prompt")) r.add_generation_prompt = *g;
    if (const json* k = f.get("chat_template_kwargs")) {
      if (!k->is_object()) bad_field("chat_template_kwargs", "expected an object");
      r.template_kwargs = *k;
    }
    r.tools = parse_tools(j);
    if (r.tools.mode != tool_request::choice::none) r.template_kwargs["tools"] = r.tools.tools;
  }
}

// The sampling knobs as sent: temperature, nucleus and top-k, penalties, seed, stops, bias.
void parse_sampling_fields(const fields& f, sampling::sampling_params& p) {
  if (auto t = f.number("temperature")) {
    p.temperature = float(*t);
  }
  if (auto t = f.number("top_p")) {
    p.top_p = float(*t);
  }
  if (auto k = f.integer("top_k")) {
    if (*k < -1) bad_field("top_k", "must be -1 or 0 (off) or a positive count");
    p.top_k = *k <= 0 ? 0 : int(*k);
  }
  if (auto m = f.number("min_p")) {
    p.min_p = float(*m);
  }
  if (auto v = f.number("presence_penalty")) {
    p.presence_penalty = float(*v);
  }
  if (auto v = f.number("frequency_penalty")) {
    p.frequency_penalty = float(*v);
  }
  if (auto v = f.number("repetition_penalty")) {
    p.repetition_penalty = float(*v);
  }
  if (const json* s = f.get("seed")) {
    if (!s->is_number_integer()) bad_field("seed", std::string("expected an integer, got ") + json_type(*s));
    p.seed = s->is_number_unsigned() ? s->get<std::uint64_t>() : std::uint64_t(s->get<long long>());
  }
  if (const json* s = f.get("stop")) {
    if (s->is_string()) {
      p.stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      for (const auto& x : *s) {
        if (!x.is_string()) bad_field("stop", "expected strings");
        p.stop.push_back(x.get<std::string>());
      }
    } else {
      bad_field("stop", std::string("expected a string or an array of strings, got ") + json_type(*s));
    }
  }
  if (const json* s = f.get("stop_token_ids")) {
    if (!s->is_array()) bad_field("stop_token_ids", "expected an array of token ids");
    for (const auto& x : *s) {
      if (!x.is_number_integer()) bad_field("stop_token_ids", "expected integers");
      p.stop_token_ids.push_back(x.get<std::int32_t>());
    }
  }
  if (auto ie = f.boolean("ignore_eos")) p.ignore_eos = *ie;
  if (const json* lb = f.get("logit_bias")) p.logit_bias = parse_logit_bias(*lb);
  if (auto mt = f.integer("min_tokens")) {
    p.min_tokens = int(std::max<long long>(std::min<long long>(*mt, 1 << 30), -1));
  }
  if (auto inc = f.boolean("include_stop_str_in_output")) p.include_stop_str_in_output = *inc;
  if (auto skip = f.boolean("skip_special_tokens")) p.skip_special_tokens = *skip;
}

}  // namespace

completion_request parse_request(const std::string& body, endpoint kind, const sampling::sampling_params& defaults) {
  json j;
  try {
    j = parse_json(body, "the body");
  } catch (const input_error& e) {
    throw api_error(400, e.what());
  }
  if (!j.is_object()) throw api_error(400, std::string("the body must be a JSON object, got ") + json_type(j));
  refuse_unknown_fields(j, kind);
  const fields f{j};
  completion_request r;
  r.kind = kind;
  r.params = defaults;
  r.model = f.string("model").value_or("");

  parse_prompt_fields(f, j, kind, r);

  auto& p = r.params;
  const char* max_key = kind == endpoint::chat && f.get("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (auto mt = f.integer(max_key)) {
    // Bounded before it becomes an int; a larger value is named as sent, not as a clamped one.
    if (*mt > (1 << 30)) bad_field(max_key, "is " + std::to_string(*mt) + "; at most " + std::to_string(1 << 30));
    p.max_tokens = int(std::max<long long>(*mt, 0));
    r.max_tokens_given = true;
  }
  check_choices(f, r);
  parse_sampling_fields(f, p);
  if (auto pl = f.integer("prompt_logprobs")) {
    if (*pl < 0 || *pl > sampling::sampling_params::max_logprobs)
      bad_field("prompt_logprobs", "must be in [0, " + std::to_string(sampling::sampling_params::max_logprobs) + "]");
    p.prompt_logprobs = int(*pl);
    r.prompt_logprobs_list = true;
  }
  // Echo with logprobs scores the prompt too (the same top N).
  if (r.echo && p.logprobs >= 0) p.prompt_logprobs = std::max(p.prompt_logprobs, p.logprobs);
  p.constraint = parse_output_constraint(j, body);
  if (r.tools.forced()) {
    if (!p.constraint.empty()) bad_field("tool_choice", "a forced tool call cannot be combined with another structured output");
    p.constraint = forced_tool_constraint(r.tools, body);
  }
  if (auto v = p.check(r.max_tokens_given)) bad_field(v->field == "max_tokens" ? max_key : v->field, v->rule);
  if (auto s = f.boolean("stream")) r.stream = *s;
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object()) bad_field("stream_options", "expected an object");
    if (!r.stream) bad_field("stream_options", "is only allowed with stream: true");
    const fields sf{*so};
    r.include_usage = sf.boolean("include_usage").value_or(false);
  }
  if (auto u = f.string("user")) {
    // It names the tenant in metrics, logs and the cache key: text, not bytes (its length is
    // bounded where it becomes a label).
    for (char c : *u)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) bad_field("user", "must not hold control characters");
    r.user = *u;
  }
  if (auto sp = f.boolean("speculate")) r.speculate = *sp;
  if (auto fb = f.boolean("allow_fallback")) r.allow_fallback = *fb;
  check_no_effect_fields(f, r);
  if (auto pr = f.integer("priority")) {
    if (*pr < -1000000 || *pr > 1000000) bad_field("priority", "must be in [-1000000, 1000000]");
    r.priority = int(*pr);
  }
  return r;
}

std::optional<std::string> openai_finish_reason(const std::string& engine_reason) {
  if (engine_reason == "stop" || engine_reason == "length") return engine_reason;
  return std::nullopt;
}

response_writer::response_writer(endpoint kind, std::string id, std::string model, std::int64_t created,
                                 const tokenizer::tokenizer* tok, bool logprobs)
    : kind_(kind), id_(std::move(id)), model_(std::move(model)), created_(created), tok_(tok), logprobs_(logprobs) {}

std::string response_writer::token_string(std::int32_t id) const {
  if (!tok_) return "token_id:" + std::to_string(id);
  return tok_->decode({id}, false);
}

json response_writer::logprobs_json(const std::vector<token_logprob>& lps, std::size_t text_offset) const {
  if (!logprobs_) return nullptr;
  auto bytes_of = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(int(c));
    return b;
  };
  if (kind_ == endpoint::chat) {
    json content = json::array();
    for (const auto& lp : lps) {
      const std::string t = token_string(lp.id);
      json top = json::array();
      for (std::size_t i = 0; i < lp.top_ids.size(); ++i) {
        const std::string tt = token_string(lp.top_ids[i]);
        top.push_back({{"token", tt}, {"logprob", lp.top_logprobs[i]}, {"bytes", bytes_of(tt)}});
      }
      content.push_back({{"token", t}, {"logprob", lp.logprob}, {"bytes", bytes_of(t)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  std::size_t off = text_offset;
  for (const auto& lp : lps) {
    const std::string t = token_string(lp.id);
    tokens.push_back(t);
    token_lps.push_back(lp.logprob);
    json top = json::object();
    for (std::size_t i = 0; i < lp.top_ids.size(); ++i) top[token_string(lp.top_ids[i])] = lp.top_logprobs[i];
    tops.push_back(top);
    offsets.push_back(off);
    off += t.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json response_writer::chunk(const std::string& text, const std::vector<token_logprob>& lps,
                            const std::optional<std::string>& finish_reason) {
  json choice = {{"index", index_}, {"logprobs", logprobs_json(lps, text_so_far_)},
                 {"finish_reason", finish_reason ? json(*finish_reason) : json(nullptr)}};
  text_so_far_ += text.size();
  if (kind_ == endpoint::chat) {
    choice["delta"] = text.empty() && finish_reason ? json::object() : json{{"content", text}};
    return {{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", model_}, {"choices", {choice}}};
  }
  choice["text"] = text;
  return {{"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", model_}, {"choices", {choice}}};
}

void response_writer::expect_tool_calls(chat::tool_format format, bool parallel) {
  // Call ids: the completion's id made a call's ("chatcmpl-x" -> "call_x_0"; choice 2's
  // "call_x_2_0"), unique as it is.
  const auto dash = id_.find('-');
  const std::string choice = index_ > 0 ? "_" + std::to_string(index_) : "";
  tools_.emplace(format, "call_" + (dash == std::string::npos ? id_ : id_.substr(dash + 1)) + choice + "_", parallel);
}

void response_writer::expect_reasoning(const chat::reasoning_format& format, bool starts_inside) {
  reasoning_.emplace(format, starts_inside);
}

void response_writer::expect_prompt(std::vector<std::int32_t> ids, std::string text, bool echo, bool prompt_logprobs) {
  prompt_ids_ = std::move(ids);
  prompt_text_ = std::move(text);
  echo_ = echo;
  prompt_logprobs_ = prompt_logprobs;
}

void response_writer::prompt_scored(std::vector<sampling::token_logprobs> lps) {
  if (!prompt_lps_) prompt_lps_ = std::move(lps);  // a migrated request's second copy is the same
}

// vLLM's prompt_logprobs: null for the first token, then {id: {logprob, rank, decoded_token}}.
json response_writer::prompt_logprobs_json() const {
  json out = json::array({nullptr});
  if (!prompt_lps_) return out;
  for (std::size_t k = 0; k < prompt_lps_->size() && k + 1 < prompt_ids_.size(); ++k) {
    const auto& lp = (*prompt_lps_)[k];
    const std::int32_t id = prompt_ids_[k + 1];
    json entry = json::object();
    entry[std::to_string(id)] = {{"logprob", lp.logprob}, {"rank", lp.rank}, {"decoded_token", token_string(id)}};
    for (std::size_t t = 0; t < lp.top_ids.size(); ++t) {
      const std::string key = std::to_string(lp.top_ids[t]);
      if (!entry.contains(key))
        entry[key] = {{"logprob", lp.top_logprobs[t]}, {"rank", int(t) + 1}, {"decoded_token", token_string(lp.top_ids[t])}};
    }
    out.push_back(std::move(entry));
  }
  return out;
}

// Completions' logprobs with the prompt's tokens first (the first scored by nothing: null),
// then the output's, offsets running on from the prompt's text.
json response_writer::echoed_logprobs(const json& output) const {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  std::size_t off = 0;
  for (std::size_t k = 0; k < prompt_ids_.size(); ++k) {
    const std::string t = token_string(prompt_ids_[k]);
    tokens.push_back(t);
    offsets.push_back(off);
    off += tok_ ? tok_->decode({prompt_ids_[k]}).size() : t.size();  // special tokens add no text
    if (k == 0 || !prompt_lps_ || k - 1 >= prompt_lps_->size()) {
      lps.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    const auto& lp = (*prompt_lps_)[k - 1];
    lps.push_back(lp.logprob);
    json top = json::object();
    for (std::size_t t = 0; t < lp.top_ids.size(); ++t) top[token_string(lp.top_ids[t])] = lp.top_logprobs[t];
    tops.push_back(std::move(top));
  }
  if (output.is_object()) {
    for (const auto& x : output["tokens"]) tokens.push_back(x);
    for (const auto& x : output["token_logprobs"]) lps.push_back(x);
    for (const auto& x : output["top_logprobs"]) tops.push_back(x);
    for (const auto& x : output["text_offset"]) offsets.push_back(x.get<std::size_t>() + prompt_text_.size());
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

void response_writer::add_prompt(json& choice) const {
  if (prompt_logprobs_) choice["prompt_logprobs"] = prompt_logprobs_json();
}

std::vector<json> response_writer::chunks(const std::string& text, const std::vector<token_logprob>& lps,
                                          const std::optional<std::string>& finish_reason) {
  std::vector<json> first;
  if ((echo_ || prompt_logprobs_) && !prompt_sent_) {  // the prompt's chunk, before the output's
    prompt_sent_ = true;
    json c = chunk("", {}, std::nullopt);
    json& choice = c["choices"][0];
    if (echo_ && kind_ == endpoint::completions) {
      choice["text"] = prompt_text_;
      if (logprobs_) choice["logprobs"] = echoed_logprobs(nullptr);
    }
    add_prompt(choice);
    if (echo_ && kind_ == endpoint::completions) text_so_far_ += prompt_text_.size();
    first.push_back(std::move(c));
  }
  if (!reasoning_) {
    auto rest = answer_chunks(text, lps, finish_reason);
    first.insert(first.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
    return first;
  }
  chat::reasoning_events r = reasoning_->feed(text);
  if (finish_reason) {
    chat::reasoning_events tail = reasoning_->finish();
    r.reasoning += tail.reasoning;
    r.content += tail.content;
  }
  static const std::vector<token_logprob> none;
  const std::vector<token_logprob>& answer_lps = r.reasoning.empty() ? lps : none;  // else they went with the reasoning
  if (!r.reasoning.empty()) {  // the tokens' logprobs go with the first chunk of their text
    json c = chunk("", lps, std::nullopt);
    c["choices"][0]["delta"] = {{"reasoning_content", r.reasoning}};
    first.push_back(std::move(c));
  }
  if (!r.content.empty() || finish_reason || (r.reasoning.empty() && !answer_lps.empty())) {
    auto rest = answer_chunks(r.content, answer_lps, finish_reason);
    first.insert(first.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
  }
  return first;
}

// The answer's chunks (after any reasoning): its text, or with tool calls expected the content
// and the calls' deltas (see chunks()).
std::vector<json> response_writer::answer_chunks(const std::string& text, const std::vector<token_logprob>& lps,
                                                 const std::optional<std::string>& finish_reason) {
  if (!tools_) return {chunk(text, lps, finish_reason)};
  chat::tool_events e = tools_->feed(text);
  if (finish_reason) {
    chat::tool_events tail = tools_->finish();
    e.content += tail.content;
    e.calls.insert(e.calls.end(), tail.calls.begin(), tail.calls.end());
  }
  std::vector<json> out;
  if (!e.content.empty() || !lps.empty() || e.calls.empty()) out.push_back(chunk(e.content, lps, std::nullopt));
  if (!e.calls.empty()) out.push_back(tool_chunk(e.calls));
  if (finish_reason) {
    const bool called = !tools_->calls().empty();
    out.push_back(chunk("", {}, called && *finish_reason == "stop" ? std::string("tool_calls") : *finish_reason));
  }
  return out;
}

json response_writer::tool_chunk(const std::vector<chat::tool_call_delta>& deltas) const {
  json calls = json::array();
  for (const auto& d : deltas) {
    if (d.first())
      calls.push_back({{"index", d.index}, {"id", d.id}, {"type", "function"}, {"function", {{"name", d.name}, {"arguments", ""}}}});
    else
      calls.push_back({{"index", d.index}, {"function", {{"arguments", d.arguments}}}});
  }
  json choice = {{"index", index_}, {"delta", {{"tool_calls", calls}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  return {{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", model_}, {"choices", {choice}}};
}

json response_writer::role_chunk() const {
  json choice = {{"index", index_}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  return {{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", model_}, {"choices", {choice}}};
}

json response_writer::usage_chunk(const usage& u) const {
  return {{"id", id_},
          {"object", kind_ == endpoint::chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"choices", json::array()},
          {"usage", {{"prompt_tokens", u.prompt_tokens}, {"completion_tokens", u.completion_tokens},
                     {"total_tokens", u.prompt_tokens + u.completion_tokens}}}};
}

json response_writer::full(const std::string& text, const std::vector<token_logprob>& lps, const std::string& finish_reason,
                           const usage& u) const {
  std::string content = text;
  std::optional<std::string> reasoning;
  if (reasoning_) {  // the whole text through copies of the parsers as they started
    chat::reasoning_stream split = *reasoning_;
    chat::reasoning_events r = split.feed(text), tail = split.finish();
    if (split.reasoned()) reasoning = r.reasoning + tail.reasoning;
    content = r.content + tail.content;
  }
  std::vector<chat::tool_call> calls;
  if (tools_) {
    chat::tool_call_stream parse = *tools_;
    const std::string answer = content;
    content = parse.feed(answer).content;
    content += parse.finish().content;
    calls = parse.calls();
  }
  const bool called = !calls.empty() && finish_reason == "stop";
  json choice = {{"index", index_}, {"logprobs", logprobs_json(lps, 0)}, {"finish_reason", called ? std::string("tool_calls") : finish_reason}};
  json out = {{"id", id_}, {"created", created_}, {"model", model_}};
  if (kind_ == endpoint::chat) {
    choice["message"] = {{"role", "assistant"}, {"content", calls.empty() || !content.empty() ? json(content) : json(nullptr)}};
    if (reasoning_) choice["message"]["reasoning_content"] = reasoning ? json(*reasoning) : json(nullptr);
    if (!calls.empty()) {
      json tc = json::array();
      for (const auto& c : calls)
        tc.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
      choice["message"]["tool_calls"] = std::move(tc);
    }
    out["object"] = "chat.completion";
  } else {
    choice["text"] = echo_ ? prompt_text_ + content : content;
    if (echo_ && logprobs_) choice["logprobs"] = echoed_logprobs(choice["logprobs"]);
    out["object"] = "text_completion";
  }
  add_prompt(choice);
  out["choices"] = json::array({choice});
  out["usage"] = {{"prompt_tokens", u.prompt_tokens}, {"completion_tokens", u.completion_tokens},
                  {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  return out;
}

}  // namespace troupe::api
