// A client of the admin endpoint (docs/admin.md): what `troupe admin` and
// examples/external_controller.cpp speak. One DEALER socket for requests, one SUB socket for
// events, CURVE when given keys. Not thread-safe: one client per thread.
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/admin/admin_message.h"

namespace troupe::actors {

struct admin_client_config {
  std::string endpoint = "tcp://127.0.0.1:7600";
  std::string events = "tcp://127.0.0.1:7601";
  std::string server_key;  // the server's Z85 public key; with secret_key: CURVE
  std::string secret_key;  // this client's Z85 secret key (its public key is derived)
  std::chrono::milliseconds timeout{30000};
};

// A wait for an answer cut short by a signal: the command was sent and may still take effect.
struct admin_interrupted : std::runtime_error {
  admin_interrupted() : std::runtime_error("interrupted: the command was sent and may still take effect; its answer was not waited for") {}
};

class admin_client {
 public:
  explicit admin_client(admin_client_config cfg);
  ~admin_client();
  admin_client(const admin_client&) = delete;
  admin_client& operator=(const admin_client&) = delete;

  // Sends a command and waits for its reply; throws std::runtime_error when none comes within
  // the timeout (no server there, or not an authorized key: CURVE gives no answer to those),
  // and admin_interrupted when a signal (Ctrl-C) cuts the wait short.
  admin::reply call(const std::string& cmd, const std::vector<std::string>& args = {});
  // The next event (subscribing on first use), or nullopt after `wait` or a signal.
  std::optional<nlohmann::json> next_event(std::chrono::milliseconds wait);

 private:
  struct sockets;
  admin_client_config cfg_;
  std::unique_ptr<sockets> z_;
  std::uint64_t next_id_ = 0;
};

}  // namespace troupe::actors
