// The head's HTTP face: the OpenAI API (/v1/completions, /v1/chat/completions, /v1/models),
// /health and /metrics, over the request owner. Requests are parsed, tokenized and streamed by
// the frontend actor; sockets live on the HTTP server's I/O thread.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/admission/admission.h"
#include "topology/topology.h"
#include "actors/api/frontend_config.h"
#include "actors/api/http_server.h"
#include "actors/protocol/owner_protocol.h"
#include "actors/protocol/router_protocol.h"
#include "runtime/chat/chat_template.h"
#include "runtime/chat/tool_calls.h"
#include "runtime/model/pooling.h"
#include "runtime/tokenizer/tokenizer.h"

namespace troupe::actors {

class frontend {
 public:
  // Starts the HTTP server and the frontend actor for cfg.models (each with its tokenizer and
  // chat template). Throws std::runtime_error if it cannot listen.
  frontend(caf::actor_system& sys, owner_actor owner, router_actor router, frontend_config cfg);
  ~frontend();
  frontend(const frontend&) = delete;
  frontend& operator=(const frontend&) = delete;

  std::uint16_t port() const;

  // Shutting down: new requests get 503 (and /health 503), those in flight may finish within
  // `grace`; then streams still open end with an error event and [DONE], other requests get
  // 503, and all are aborted. Blocks until that is done; returns how many were cut off.
  int drain(std::chrono::milliseconds grace);

 private:
  caf::actor_system& sys_;
  caf::actor actor_;
  std::unique_ptr<http::server> server_;
  std::shared_ptr<std::atomic<http::server*>> io_server_;  // for the actor's CPU accounting
};

}  // namespace troupe::actors
