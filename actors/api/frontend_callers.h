// Who is asking, as the frontend reads it off a request: the API key it carries, the tenant
// whose prefix-cache blocks it may share, and the trace id its log lines carry.
#pragma once
#include <cstdint>
#include <string>

#include "actors/api/frontend_config.h"
#include "actors/api/http_server.h"

namespace troupe::actors {

// A client's X-Request-Id is kept when it is 1 to 128 characters of [A-Za-z0-9._:/+=-]
// (anything else would let a client forge log lines or bloat them); otherwise the completion's
// id serves.
bool usable_trace_id(const std::string& s);

// The side of a canary rollout the request's X-Troupe-Split header pins it to (1 canary,
// 0 baseline), -1 without the header; throws api_error 400 naming the header for another value.
std::int8_t split_side_of(const http::request& rq);

// The index of the configured API key the request carries, or -1 (compared in constant time).
int key_index(const frontend_config& cfg, const http::request& rq);

// Whether the request carries one of the configured API keys (always, when none are).
bool authorized(const frontend_config& cfg, const http::request& rq);

// The prefix-cache salt of a request: its API key's tenant, else its `user` (unless
// tenant_by_user is off), else none (the shared default). The two kinds never collide.
std::string cache_salt(const frontend_config& cfg, const http::request& rq, const std::string& user);

}  // namespace troupe::actors
