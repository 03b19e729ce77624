#include "actors/api/http_server.h"

#include <future>

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it
#include <optional>
#include <sys/resource.h>
#include <pthread.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>
#include <time.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <array>
#include <deque>
#include <stdexcept>

namespace troupe::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

namespace {

class session;

struct shared_state {
  asio::io_context ioc;
  server_config cfg;
  handler on_request;
  std::atomic<std::size_t> open{0};
  std::atomic<std::size_t> unsent{0};  // pieces of answers queued on sessions, not yet written
};

// The exchange handed to the application; forwards to its session on the I/O thread.
class session_exchange : public exchange, public std::enable_shared_from_this<session_exchange> {
 public:
  session_exchange(std::shared_ptr<session> s, request r) : s_(std::move(s)), r_(std::move(r)) {}
  const request& req() const override { return r_; }
  void respond(int status, const std::string& content_type, std::string body, std::vector<header> headers) override;
  void begin_stream(const std::string& content_type) override;
  void add_header(header h) override { extra_.push_back(std::move(h)); }
  void send(std::string data) override;
  void end_stream() override;
  void on_gone(std::function<void()> f) override;
  bool gone() const override { return gone_.load(); }

  std::atomic<bool> gone_{false};
  std::function<void()> gone_cb;  // I/O thread only

 private:
  void post(std::function<void(session&)> f);
  std::shared_ptr<session> s_;
  request r_;
  std::vector<header> extra_;  // added to every answer
};

class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket sock, shared_state& st) : sock_(std::move(sock)), st_(st) { ++st_.open; }
  ~session() {
    --st_.open;
    st_.unsent -= queue_.size();
  }

  asio::io_context& ioc() { return st_.ioc; }
  void start() { read_request(); }

  // --- called on the I/O thread by session_exchange ---
  void write(std::string data, bool last, bool probe = false) {
    if (closed_) return;
    if (!probe) answering_ = true;
    unsent_bytes_ += data.size();
    queue_.push_back(std::move(data));
    ++st_.unsent;
    if (streaming_ && unsent_bytes_ + kernel_unsent() > st_.cfg.max_unsent_bytes) {  // a client that does not read its stream
      client_gone();
      return close();
    }
    if (last) finishing_ = true;
    if (!writing_) write_next();
  }
  // Bytes the kernel holds for the client, unsent or unacknowledged (it grows a loopback
  // socket's buffer to megabytes, so an unread stream may sit there rather than in queue_).
  std::size_t kernel_unsent() {
    int n = 0;
    return ::ioctl(sock_.native_handle(), SIOCOUTQ, &n) == 0 && n > 0 ? std::size_t(n) : 0;
  }
  void stream_header(const std::string& content_type, const std::vector<header>& headers) {
    streaming_ = true;
    std::string out = "HTTP/1.1 200 OK\r\nContent-Type: " + content_type + "\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n";
    for (auto& h : headers) out += h.name + ": " + h.value + "\r\n";
    write(out + "Connection: " + (keep_alive_ ? "keep-alive" : "close") + "\r\n\r\n", false);
  }
  void chunk(const std::string& data) {
    if (data.empty()) return;
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    write(std::string(size) + data + "\r\n", false);
  }
  void full(int status, const std::string& content_type, const std::string& body, const std::vector<header>& headers) {
    std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\nContent-Type: " +
                      content_type + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    for (auto& h : headers) out += h.name + ": " + h.value + "\r\n";
    out += std::string("Connection: ") + (keep_alive_ ? "keep-alive" : "close") + "\r\n\r\n";
    write(out + body, true);
  }
  bool closed() const { return closed_; }

 private:
  // Waits for a request's first byte (the idle timeout), then its header (the header timeout),
  // then its body (the idle timeout again): a sender too slow for either is closed.
  void read_request() {
    parser_.emplace();
    parser_->body_limit(st_.cfg.max_body);
    parser_->header_limit(64 * 1024);
    if (buf_.size() > 0) return read_header();
    arm_idle_timer();
    auto self = shared_from_this();
    sock_.async_read_some(buf_.prepare(4096), [self](beast::error_code ec, std::size_t n) {
      if (ec) return self->on_request(ec);
      self->buf_.commit(n);
      self->read_header();
    });
  }
  void read_header() {
    arm_idle_timer(st_.cfg.header_timeout_s);
    auto self = shared_from_this();
    beast::http::async_read_header(sock_, buf_, *parser_, [self](beast::error_code ec, std::size_t) {
      if (ec) return self->on_request(ec);
      self->arm_idle_timer();
      beast::http::async_read(self->sock_, self->buf_, *self->parser_, [self](beast::error_code e, std::size_t) { self->on_request(e); });
    });
  }

  // A connection that is not answering a request is closed once the idle timeout (or `seconds`) passes.
  void arm_idle_timer(int seconds = 0) {
    timer_.expires_after(std::chrono::seconds(seconds > 0 ? seconds : st_.cfg.idle_timeout_s));
    auto self = shared_from_this();
    timer_.async_wait([self](beast::error_code ec) {
      if (!ec && !self->busy_) self->close();
    });
  }

  void on_request(beast::error_code ec) {
    timer_.cancel();
    if (ec == beast::http::error::end_of_stream || ec == asio::error::operation_aborted || ec == asio::error::eof ||
        ec == asio::error::connection_reset) {
      return close();
    }
    busy_ = true;
    if (ec) {
      keep_alive_ = false;
      const bool too_big = ec == beast::http::error::body_limit;
      const int status = too_big ? 413 : 400;
      const std::string msg = too_big ? "the request body is larger than " + std::to_string(st_.cfg.max_body) + " bytes"
                                      : "malformed HTTP request: " + ec.message();
      std::string body = "{\"error\": {\"message\": \"" + msg + "\", \"type\": \"invalid_request_error\", \"param\": null, \"code\": " +
                         std::to_string(status) + "}}";
      return full(status, "application/json", body, {});
    }
    auto msg = parser_->release();
    keep_alive_ = msg.keep_alive();
    http11_ = msg.version() >= 11;
    answering_ = probed_ = streaming_ = false;
    request r{std::string(msg.method_string()), std::string(msg.target()), std::move(msg.body()), {}};
    for (const auto& f : msg) {
      std::string name(f.name_string());
      for (auto& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
      r.headers.push_back({std::move(name), std::string(f.value())});
    }
    ex_ = std::make_shared<session_exchange>(shared_from_this(), std::move(r));
    watch();  // notice a client that leaves while its answer is being prepared
    st_.on_request(ex_);
  }

  // A read while a request is being answered: an error means the client left; EOF means it
  // half-closed (shutdown(SHUT_WR) after its request) or hung up (close()); the hang-up probe
  // tells the two apart; bytes are kept for the next request (a pipelining client).
  void watch() {
    if (watching_ || closed_ || buf_.size() > 64 * 1024) return;
    watching_ = true;
    auto self = shared_from_this();
    sock_.async_read_some(buf_.prepare(4096), [self](beast::error_code ec, std::size_t n) {
      self->watching_ = false;
      if (ec == asio::error::operation_aborted && !self->closed_) return self->read_request();  // see done()
      if (ec == asio::error::eof && self->busy_) {
        self->keep_alive_ = false;
        return self->arm_hangup_probe();
      }
      if (ec) {
        if (self->busy_) self->client_gone();
        return self->close();
      }
      self->buf_.commit(n);
      if (self->busy_) return self->watch();
      self->timer_.cancel();
      self->read_request();
    });
  }

  // EOF with a request still unanswered: a client that half-closed waits for its answer, one
  // that hung up never reads it, and nothing on the wire so far tells them apart. Once the
  // request has gone unanswered for a second, send what every HTTP/1.1 client must accept
  // before a final answer, an interim "100 Continue": a live half-closed client reads past it,
  // the kernel of one that closed answers with a reset, and the socket goes to CLOSE. Checked
  // every second until the answer starts; a hang-up aborts the request (its KV is freed) as a
  // disconnect mid-stream does. HTTP/1.0 clients get no interim answer, so no probe.
  void arm_hangup_probe() {
    if (!http11_ || answering_ || closed_) return;
    probe_timer_.expires_after(std::chrono::seconds(1));
    auto self = shared_from_this();
    probe_timer_.async_wait([self](beast::error_code ec) {
      if (ec || self->closed_ || !self->busy_ || self->answering_) return;
      if (!self->probed_) {
        self->probed_ = true;
        self->write("HTTP/1.1 100 Continue\r\n\r\n", false, true);
      } else if (self->peer_reset()) {
        self->client_gone();
        return self->close();
      }
      self->arm_hangup_probe();
    });
  }
  bool peer_reset() {
    tcp_info ti{};
    socklen_t len = sizeof ti;
    if (::getsockopt(sock_.native_handle(), IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return true;
    return ti.tcpi_state == TCP_CLOSE;
  }

  void client_gone() {
    if (!ex_ || ex_->gone_.exchange(true)) return;
    if (ex_->gone_cb) {
      auto cb = std::move(ex_->gone_cb);
      cb();
    }
  }

  void write_next() {
    if (queue_.empty()) {
      writing_ = false;
      if (finishing_) done();
      return;
    }
    writing_ = true;
    auto self = shared_from_this();
    asio::async_write(sock_, asio::buffer(queue_.front()), [self](beast::error_code ec, std::size_t) {
      self->unsent_bytes_ -= self->queue_.front().size();
      self->queue_.pop_front();
      --self->st_.unsent;
      if (ec || self->closed_) {
        self->client_gone();
        return self->close();
      }
      self->write_next();
    });
  }

  void done() {  // the answer is complete
    finishing_ = false;
    busy_ = false;
    ex_.reset();
    if (!keep_alive_) {
      beast::error_code ec;
      sock_.shutdown(tcp::socket::shutdown_send, ec);
      return linger();
    }
    if (!watching_) return read_request();
    // A pipelining client's next request is already buffered: stop the watch read, whose
    // handler then parses it (two reads on one socket must not overlap).
    if (buf_.size() > 0) return sock_.cancel();
    // The pending watch read continues the connection when the next request arrives; until
    // then the idle timeout applies.
    arm_idle_timer();
  }

  // After the last answer on a connection: read and drop what the client still sends (the rest
  // of an oversized body) for a moment, so closing does not reset the connection and destroy
  // the answer before the client reads it.
  void linger() {
    if (watching_) return;  // the watch read ends in EOF and closes
    timer_.expires_after(std::chrono::seconds(2));
    auto self = shared_from_this();
    timer_.async_wait([self](beast::error_code ec) {
      if (!ec) self->close();
    });
    drain();
  }
  void drain() {
    auto self = shared_from_this();
    sock_.async_read_some(asio::buffer(discard_), [self](beast::error_code ec, std::size_t) {
      if (ec || self->closed_) return self->close();
      self->drain();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    timer_.cancel();
    probe_timer_.cancel();
    beast::error_code ec;
    sock_.close(ec);  // pending writes end with an error; their buffers stay queued until then
    if (busy_) client_gone();
    // The exchange holds this session; once closed, the session lets go of the exchange so the
    // two are freed when the application drops its end (a cycle kept every gone client before).
    ex_.reset();
  }

  tcp::socket sock_;
  shared_state& st_;
  beast::flat_buffer buf_;
  std::optional<beast::http::request_parser<beast::http::string_body>> parser_;
  asio::steady_timer timer_{sock_.get_executor()};
  asio::steady_timer probe_timer_{sock_.get_executor()};  // see arm_hangup_probe
  std::shared_ptr<session_exchange> ex_;
  std::deque<std::string> queue_;
  std::size_t unsent_bytes_ = 0;  // in queue_
  std::array<char, 16384> discard_;
  bool writing_ = false, finishing_ = false, busy_ = false, watching_ = false, closed_ = false, keep_alive_ = true;
  bool http11_ = true, answering_ = false, probed_ = false;  // the request's version; answer begun; probe sent
  bool streaming_ = false;  // the answer is a stream (server-sent events)
};

void session_exchange::post(std::function<void(session&)> f) {
  auto s = s_;
  asio::post(s->ioc(), [s, f = std::move(f)] { f(*s); });
}
void session_exchange::respond(int status, const std::string& content_type, std::string body, std::vector<header> headers) {
  headers.insert(headers.end(), extra_.begin(), extra_.end());
  post([=, body = std::move(body)](session& s) { s.full(status, content_type, body, headers); });
}
void session_exchange::begin_stream(const std::string& content_type) {
  post([=, headers = extra_](session& s) { s.stream_header(content_type, headers); });
}
void session_exchange::send(std::string data) {
  post([data = std::move(data)](session& s) { s.chunk(data); });
}
void session_exchange::end_stream() {
  post([](session& s) { s.write("0\r\n\r\n", true); });
}
void session_exchange::on_gone(std::function<void()> f) {
  auto self = shared_from_this();
  post([self, f = std::move(f)](session&) {
    if (self->gone_) return f();
    self->gone_cb = std::move(f);
  });
}

}  // namespace

struct server::impl {
  shared_state st;
  tcp::acceptor acceptor{st.ioc};
  asio::steady_timer retry{st.ioc};
  std::thread thread;

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket sock) {
      if (ec == asio::error::operation_aborted) return;
      if (ec) {  // out of descriptors, say: try again shortly rather than spin
        retry.expires_after(std::chrono::milliseconds(50));
        retry.async_wait([this](beast::error_code e) {
          if (!e) accept();
        });
        return;
      }
      sock.set_option(tcp::no_delay(true));
      std::make_shared<session>(std::move(sock), st)->start();
      accept();
    });
  }
};

server::server(const server_config& cfg, handler h) : p_(std::make_unique<impl>()) {
  // Thousands of streaming clients need thousands of descriptors.
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  p_->st.cfg = cfg;
  p_->st.on_request = std::move(h);
  beast::error_code ec;
  const auto addr = asio::ip::make_address(cfg.host, ec);
  if (ec) throw std::runtime_error("cannot listen on " + cfg.host + ":" + std::to_string(cfg.port) + ": bad address");
  const tcp::endpoint ep(addr, cfg.port);
  p_->acceptor.open(ep.protocol(), ec);
  if (!ec) p_->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) p_->acceptor.bind(ep, ec);
  if (!ec) p_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw std::runtime_error("cannot listen on " + cfg.host + ":" + std::to_string(cfg.port) + ": " + ec.message());
  p_->accept();
  p_->thread = std::thread([this] { p_->st.ioc.run(); });
}

server::~server() { stop(); }

void server::stop(std::chrono::milliseconds flush) {
  if (!p_->thread.joinable()) return;
  asio::post(p_->st.ioc, [this] {
    beast::error_code ec;
    p_->acceptor.close(ec);
  });
  // Answers already handed over (the last events of streams ended at shutdown) go out first:
  // each check runs on the I/O thread after every send posted before it.
  const auto deadline = std::chrono::steady_clock::now() + flush;
  for (;;) {
    auto left = std::make_shared<std::promise<std::size_t>>();
    auto f = left->get_future();
    asio::post(p_->st.ioc, [left, st = &p_->st] { left->set_value(st->unsent.load()); });
    if (f.wait_for(flush) != std::future_status::ready || f.get() == 0 || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a bounded wait for the sockets to drain
  }
  asio::post(p_->st.ioc, [this] { p_->st.ioc.stop(); });
  p_->thread.join();
}

std::uint16_t server::port() const { return p_->acceptor.local_endpoint().port(); }
std::size_t server::open_connections() const { return p_->st.open.load(); }

double server::io_cpu_seconds() const {
  clockid_t cid;
  timespec ts{};
  if (!p_->thread.joinable() || pthread_getcpuclockid(p_->thread.native_handle(), &cid) != 0 || clock_gettime(cid, &ts) != 0)
    return 0;
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

}  // namespace troupe::http
