// A blocking HTTP/1.1 client for tests (Boost.Beast over loopback, compiled once in
// http_client.cpp: Asio and Beast in every test that sends a request made each of 18 tests
// about a third slower to compile), and a `troupe serve` child process to talk to.
#pragma once
#include <nlohmann/json.hpp>
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/process.h"

namespace troupe::test {

struct http_response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;

  nlohmann::json json() const { return nlohmann::json::parse(body); }
  // The `data:` payloads of a server-sent-event body, in order.
  std::vector<std::string> events() const {
    std::vector<std::string> out;
    std::size_t p = 0;
    while ((p = body.find("data: ", p)) != std::string::npos) {
      const std::size_t e = body.find("\n\n", p);
      out.push_back(body.substr(p + 6, e - p - 6));
      p = e;
    }
    return out;
  }
};

// A loopback port free now (a test's servers run in parallel with other tests').
std::uint16_t free_port();

// A loopback port P free now with P + 1 free too: an admin endpoint and its event stream
// (`troupe serve --admin-port P`).
std::uint16_t free_port_pair();

// One request on a connection of its own, answered in full (bodies up to 1 GiB).
http_response http_request(std::uint16_t port, const std::string& method, const std::string& target,
                           const std::string& body = "",
                           const std::vector<std::pair<std::string, std::string>>& headers = {});

inline http_response post_json(std::uint16_t port, const std::string& target, const nlohmann::json& body) {
  return http_request(port, "POST", target, body.dump());
}

// The sum of a counter's series in the server's /metrics, whatever their labels.
double metric_sum(std::uint16_t port, const std::string& name);

// `troupe serve CONFIG --port 0 ...`, with the HTTP port it printed.
class serve_process {
 public:
  explicit serve_process(const std::vector<std::string>& extra_args) {
    std::vector<std::string> argv = {std::string(TROUPE_BINARY_DIR) + "/troupe", "serve"};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    argv.insert(argv.end(), {"--port", "0"});
    if (std::find(extra_args.begin(), extra_args.end(), "--registry-port") == extra_args.end())
      argv.insert(argv.end(), {"--registry-port", "0"});
    child_ = std::make_unique<child_process>(argv);
    std::string line;
    if (!child_->wait_for_line("listening on http://127.0.0.1:", &line)) return;
    const auto at = line.find("127.0.0.1:") + 10;
    port_ = std::uint16_t(std::stoi(line.substr(at)));
  }
  std::uint16_t port() const { return port_; }
  child_process& child() { return *child_; }

 private:
  std::unique_ptr<child_process> child_;
  std::uint16_t port_ = 0;
};

}  // namespace troupe::test
