// The HTTP request parser as the frontend configures it (Beast's, with our header and body
// limits), fed arbitrary bytes, possibly several pipelined requests in one buffer.
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace http = boost::beast::http;
  boost::beast::flat_buffer buf;
  if (size == 0) return 0;
  auto space = buf.prepare(size);
  std::memcpy(space.data(), data, size);
  buf.commit(size);
  for (int requests = 0; requests < 8 && buf.size() > 0; ++requests) {
    http::request_parser<http::string_body> p;
    p.header_limit(64 * 1024);
    p.body_limit(4u << 20);
    boost::beast::error_code ec;
    while (!p.is_done() && buf.size() > 0) {
      const std::size_t used = p.put(buf.data(), ec);
      buf.consume(used);
      if (ec || used == 0) break;
    }
    if (ec || !p.is_done()) break;
    auto msg = p.release();
    volatile bool keep = msg.keep_alive();  // what the server reads of a parsed request
    (void)keep;
    for (const auto& f : msg) (void)f.name_string().size();
  }
  return 0;
}
