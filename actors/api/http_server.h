// A small asynchronous HTTP/1.1 server (Boost.Asio + Boost.Beast's parser) for the frontend:
// keep-alive, request bodies up to a limit, plain and chunked (server-sent events) responses,
// and notice of a client that goes away while its request is served. One I/O thread holds
// thousands of connections; every call on an exchange may come from any thread.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace troupe::http {

struct header {
  std::string name, value;
};

struct request {
  std::string method;
  std::string target;  // path and query
  std::string body;
  std::vector<header> headers;  // names in lower case

  // The value of the first header named `name` (lower case), or empty.
  std::string header_value(const std::string& name) const {
    for (auto& h : headers)
      if (h.name == name) return h.value;
    return "";
  }
};

// One request being answered. Exactly one of respond() or begin_stream()..end_stream() per
// exchange; calls after the client left are ignored.
class exchange {
 public:
  virtual ~exchange() = default;
  virtual const request& req() const = 0;
  virtual void respond(int status, const std::string& content_type, std::string body,
                       std::vector<header> headers = {}) = 0;
  virtual void begin_stream(const std::string& content_type) = 0;  // 200, chunked
  // A header every answer of this exchange carries (an X-Request-Id); call before answering,
  // from the thread that answers.
  virtual void add_header(header h) = 0;
  virtual void send(std::string data) = 0;                         // one chunk of the stream
  virtual void end_stream() = 0;
  // Called once (on the I/O thread) if the client disconnects before the answer is complete, or
  // leaves more than server_config::max_unsent_bytes of it unread.
  virtual void on_gone(std::function<void()> f) = 0;
  virtual bool gone() const = 0;
};

using handler = std::function<void(std::shared_ptr<exchange>)>;

struct server_config {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8000;  // 0: any free port
  std::size_t max_body = std::size_t(4) << 20;
  int idle_timeout_s = 75;  // a keep-alive connection without a request is closed after this
  // A request's header must be whole this long after its first byte (slowloris: a header sent a
  // byte at a time held its connection for the whole idle timeout); its body then has the
  // idle timeout.
  int header_timeout_s = 10;
  // What an answer may have queued unsent for a client that does not read it: past this the
  // client counts as gone (its requests end, freeing their batch slots) and the connection closes.
  std::size_t max_unsent_bytes = std::size_t(1) << 20;
};

class server {
 public:
  // Binds and listens (throws std::runtime_error naming the address if it cannot), then serves
  // on its own thread until stop() or destruction. The handler runs on the I/O thread: it must
  // hand work off rather than block.
  server(const server_config& cfg, handler h);
  ~server();
  std::uint16_t port() const;
  // Stops accepting, lets answers already handed over be written (up to `flush`), then stops.
  void stop(std::chrono::milliseconds flush = std::chrono::milliseconds(2000));
  std::size_t open_connections() const;
  // CPU time the I/O thread has used (parsing, socket writes), in seconds.
  double io_cpu_seconds() const;

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

const char* reason_phrase(int status);

}  // namespace troupe::http
