#include "actors/api/frontend_callers.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "runtime/api/api_error.h"
#include "runtime/common/constant_time.h"

namespace troupe::actors {

bool usable_trace_id(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || std::strchr("._:/+=-", c))) return false;
  return true;
}

std::int8_t split_side_of(const http::request& rq) {
  const std::string side = rq.header_value("x-troupe-split");
  if (side.empty()) return -1;
  if (side != "canary" && side != "baseline")
    throw api::api_error(400, "X-Troupe-Split: expected canary or baseline, got '" + side.substr(0, 64) + "'");
  return side == "canary" ? 1 : 0;
}

int key_index(const frontend_config& cfg, const http::request& rq) {
  const std::string auth = rq.header_value("authorization");
  // RFC 9110: the scheme is case-insensitive ("bearer", "BEARER"), and one or more spaces follow it.
  if (auth.size() < 7 || !std::equal(auth.begin(), auth.begin() + 6, "bearer", [](char a, char b) {
        return std::tolower(static_cast<unsigned char>(a)) == b;
      }) || auth[6] != ' ')
    return -1;
  const std::string given = auth.substr(auth.find_first_not_of(' ', 6) == std::string::npos ? auth.size() : auth.find_first_not_of(' ', 6));
  int found = -1;
  for (std::size_t i = 0; i < cfg.api_keys.size(); ++i)  // every key, no early exit to time
    if (constant_time_equal(cfg.api_keys[i], given)) found = int(i);
  return found;
}

bool authorized(const frontend_config& cfg, const http::request& rq) { return cfg.api_keys.empty() || key_index(cfg, rq) >= 0; }

std::string cache_salt(const frontend_config& cfg, const http::request& rq, const std::string& user) {
  const int k = cfg.api_keys.empty() ? -1 : key_index(cfg, rq);
  if (k >= 0 && std::size_t(k) < cfg.api_key_tenants.size() && !cfg.api_key_tenants[std::size_t(k)].empty())
    return "tenant:" + cfg.api_key_tenants[std::size_t(k)];
  return user.empty() || !cfg.tenant_by_user ? std::string() : "user:" + user;
}

}  // namespace troupe::actors
