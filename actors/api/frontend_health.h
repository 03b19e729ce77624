// GET /health: whether the head serves, and what is not serving. 200 while any replica can take
// a request ("ok", or "degraded" with the replicas that are down or suspect named), 503 with
// Retry-After while none can. Kubernetes' readiness probe and a load balancer read the status;
// an operator reads the body.
#pragma once
#include <caf/all.hpp>

#include <memory>

#include "actors/api/frontend_config.h"
#include "actors/api/http_server.h"
#include "actors/protocol/router_protocol.h"

namespace troupe::actors {

void answer_health(caf::event_based_actor* self, const frontend_config& cfg, const router_actor& router,
                   const std::shared_ptr<http::exchange>& ex);

}  // namespace troupe::actors
