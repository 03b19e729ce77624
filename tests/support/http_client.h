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

// That sum once two scrapes in a row agree: replicas report after their steps, so a request just
// answered may not be counted yet.
inline double settled_metric_sum(std::uint16_t port, const std::string& name) {
  double last = -1;
  for (int i = 0; i < 200; ++i) {
    const double now = metric_sum(port, name);
    if (now == last) return now;
    last = now;
  }
  return last;
}

// `n` prompts of King James words, the i-th of 5 + 3i words (tests compare answers to them).
inline std::vector<std::string> bible_prompts(int n) {
  const std::vector<std::string> words = {"the", "king", "said", "unto", "them", "and", "it", "came", "to", "pass", "that", "in"};
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string p;
    for (int w = 0; w < 5 + i * 3; ++w) p += words[std::size_t((i * 7 + w * 5) % words.size())] + " ";
    out.push_back(p);
  }
  return out;
}

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
