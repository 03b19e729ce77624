#include "tests/support/http_client.h"

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <sstream>

namespace troupe::test {

std::uint16_t free_port() {
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::acceptor a(ioc, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

std::uint16_t free_port_pair() {
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

http_response http_request(std::uint16_t port, const std::string& method, const std::string& target,
                           const std::string& body, const std::vector<std::pair<std::string, std::string>>& headers) {
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

double metric_sum(std::uint16_t port, const std::string& name) {
  const auto r = http_request(port, "GET", "/metrics", "");
  double sum = 0;
  std::istringstream in(r.body);
  for (std::string l; std::getline(in, l);)
    if (l.rfind(name, 0) == 0 && l.size() > name.size() && (l[name.size()] == ' ' || l[name.size()] == '{'))
      sum += std::stod(l.substr(l.rfind(' ') + 1));
  return sum;
}

}  // namespace troupe::test
