#include "actors/api/frontend_answer.h"

#include "actors/api/frontend_prepare.h"

namespace troupe::actors {

void open_answer(live_request& r) {
  if (!r.group->labelled) {
    r.group->labelled = true;
    r.ex->add_header({"X-Troupe-Model", r.group->model});
  }
  if (!r.stream || r.opened) return;
  r.opened = true;
  if (!r.group->began) {
    r.group->began = true;
    r.ex->begin_stream("text/event-stream");
  }
  if (r.group->endpoint && std::string(r.group->endpoint) == "chat") sse(r.ex, r.w->role_chunk());
}

void sse(const std::shared_ptr<http::exchange>& ex, const nlohmann::json& j) { ex->send("data: " + dump(j) + "\n\n"); }

}  // namespace troupe::actors
