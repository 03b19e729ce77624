#include "actors/api/frontend_models.h"

#include "actors/protocol/error_text.h"
#include "actors/protocol/serve_error.h"
#include "runtime/api/lora_catalog.h"

namespace troupe::actors {

namespace {

api::api_error lora_error(caf::actor_system& sys, const caf::error& err) {
  const std::string why = error_message(sys, err);
  const auto code = serve_code(err);
  if (code == serve_errc::not_found) return api::api_error(404, why, serve_field(err), "not_found_error");
  if (code == serve_errc::invalid) return api::api_error(400, why, serve_field(err));
  return api::api_error(503, "the adapter could not be changed on every replica now (" + why + "); retry later", "", "server_error");
}

}  // namespace

void answer_lora_route(caf::event_based_actor* self, const frontend_config& cfg, const std::shared_ptr<http::exchange>& ex,
                       bool load, std::function<void(const api::api_error&)> on_error) {
  if (!cfg.lora.runtime_loading || !cfg.lora.manager)
    return on_error(api::api_error(404, "loading LoRA adapters at run time is off; the topology's [lora] runtime_loading = true "
                                        "turns it on"));
  auto done = [ex](std::string text) { ex->respond(200, "text/plain", std::move(text)); };
  auto failed = [self, on_error](caf::error& e) { on_error(lora_error(self->system(), e)); };
  if (load) {
    const api::lora_load_request r = api::parse_lora_load(ex->req().body);
    self->request(cfg.lora.manager, cfg.request_timeout, lora_atom::value, r.name, r.path)
        .then([done, name = r.name](const std::string&) { done("Success: LoRA adapter '" + name + "' added successfully."); }, failed);
  } else {
    const std::string name = api::parse_lora_unload(ex->req().body);
    self->request(cfg.lora.manager, cfg.request_timeout, lora_atom::value, name)
        .then([done, name](const std::string&) { done("Success: LoRA adapter '" + name + "' removed successfully."); }, failed);
  }
}

std::vector<nlohmann::json> model_cards(const frontend_config& cfg, std::int64_t created) {
  std::vector<nlohmann::json> out;
  auto card = [&](const std::string& id, const std::string& root, const served_model_spec& m) {
    nlohmann::json c{{"id", id}, {"object", "model"}, {"created", created}, {"owned_by", "troupe"}, {"root", root},
                     {"max_model_len", m.max_model_len}};
    if (m.vocab_size > 0) c["vocab_size"] = m.vocab_size;  // an adapter keeps the base's vocabulary
    return c;
  };
  for (const auto& m : cfg.models) {
    out.push_back(card(m.model_name, m.model_name, m));
    for (const auto& alias : m.model_aliases) out.push_back(card(alias, m.model_name, m));
  }
  const served_model_spec& base = cfg.models.front();
  if (cfg.lora.catalog)
    for (const auto& a : cfg.lora.catalog->list()) {
      out.push_back(card(a.name, a.dir, base));
      out.back()["parent"] = base.model_name;
    }
  return out;
}

}  // namespace troupe::actors
