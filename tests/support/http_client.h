// A blocking HTTP/1.1 client for tests (Boost.Beast over loopback), and a `troupe serve` child
// process to talk to.
#pragma once
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <string>
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
inline std::uint16_t free_port() {
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::acceptor a(ioc, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

// A loopback port P free now with P + 1 free too: an admin endpoint and its event stream
// (`troupe serve --admin-port P`).
inline std::uint16_t free_port_pair() {
  for (;;) {
    boost::asio::io_context ioc;
    boost::asio::ip::tcp::acceptor first(ioc, {boost::asio::ip::make_address("127.0.0.1"), 0});
    const std::uint16_t a = first.local_endpoint().port();
    boost::system::error_code ec;
    boost::asio::ip::tcp::acceptor second(ioc);
    second.open(boost::asio::ip::tcp::v4(), ec);
    if (a < 65535 && !ec) second.bind({boost::asio::ip::make_address("127.0.0.1"), std::uint16_t(a + 1)}, ec);
    if (a < 65535 && !ec) return a;
  }
}

inline http_response http_request(std::uint16_t port, const std::string& method, const std::string& target,
                                  const std::string& body = "",
                                  const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  namespace beast = boost::beast;
  boost::asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
  beast::http::request<beast::http::string_body> req(beast::http::string_to_verb(method), target, 11);
  req.set(beast::http::field::host, "127.0.0.1");
  req.set(beast::http::field::content_type, "application/json");
  for (auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();
  beast::error_code wec;
  beast::http::write(stream, req, wec);  // a server may answer (413) before taking the whole body
  beast::flat_buffer buf;
  beast::http::response_parser<beast::http::string_body> parser;
  parser.body_limit(std::uint64_t(1) << 30);
  beast::http::read(stream, buf, parser);
  http_response r;
  r.status = int(parser.get().result_int());
  for (auto& f : parser.get()) {
    std::string name(f.name_string());
    for (auto& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    r.headers[name] = std::string(f.value());
  }
  r.body = parser.get().body();
  beast::error_code ec;
  stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
  return r;
}

inline http_response post_json(std::uint16_t port, const std::string& target, const nlohmann::json& body) {
  return http_request(port, "POST", target, body.dump());
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
