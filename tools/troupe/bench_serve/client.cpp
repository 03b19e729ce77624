#include "tools/troupe/bench_serve/client.h"

#include <sys/resource.h>

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <csignal>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>

#include "runtime/common/error.h"

namespace troupe::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;

client_options parse_url(const std::string& url) {
  client_options o;
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) throw input_error("--url: expected http://HOST:PORT, got '" + url + "'");
  std::string rest = url.substr(scheme.size());
  const auto slash = rest.find('/');
  if (slash != std::string::npos) {
    o.prefix = rest.substr(slash);
    while (!o.prefix.empty() && o.prefix.back() == '/') o.prefix.pop_back();
    if (o.prefix.size() >= 3 && o.prefix.compare(o.prefix.size() - 3, 3, "/v1") == 0) o.prefix.resize(o.prefix.size() - 3);
    rest = rest.substr(0, slash);
  }
  const auto colon = rest.rfind(':');
  o.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  if (o.host == "localhost") o.host = "127.0.0.1";
  try {
    o.port = colon == std::string::npos ? 80 : std::uint16_t(std::stoi(rest.substr(colon + 1)));
  } catch (const std::exception&) {
    throw input_error("--url: bad port in '" + url + "'");
  }
  return o;
}

namespace {

struct run_state {
  asio::io_context ioc;
  client_options opt;
  tcp::endpoint ep;
  clock_type::time_point t0;
  std::vector<request_result>* results = nullptr;
  const std::vector<planned_request>* plan = nullptr;
  std::deque<std::size_t> queued;  // arrived, waiting for a concurrency slot
  int active = 0;
  std::size_t done = 0;
  std::vector<bool> started;                 // per planned request
  std::unique_ptr<asio::signal_set> signals;  // SIGINT/SIGTERM: stop sending (see run_requests)
  std::vector<std::unique_ptr<asio::steady_timer>> arrivals;
  bool stopped = false;
  std::function<void(std::size_t, std::size_t)> progress;
  double now() const { return std::chrono::duration<double>(clock_type::now() - t0).count(); }
};

std::string body_of(const client_options& o, const planned_request& r) {
  nlohmann::json j = {{"max_tokens", r.output_len}, {"stream", true}, {"stream_options", {{"include_usage", true}}},
                      {"temperature", 0.0}, {"ignore_eos", o.ignore_eos}};
  if (!r.model.empty())
    j["model"] = r.model;
  else if (!o.model.empty())
    j["model"] = o.model;
  if (!r.tenant.empty()) j["user"] = r.tenant;
  if (o.chat) {
    std::string text = r.prompt_text;
    if (text.empty())  // token-id workloads in chat form: one word per planned token
      for (std::size_t i = 0; i < r.prompt_ids.size(); ++i) text += (i ? " w" : "w") + std::to_string(r.prompt_ids[i] % 1000);
    j["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", text}}});
  } else if (!r.prompt_text.empty()) {
    j["prompt"] = r.prompt_text;
  } else {
    j["prompt"] = r.prompt_ids;
  }
  return j.dump();
}

void start_next(const std::shared_ptr<run_state>& st);

// The signal wait is the one piece of work that never ends by itself: drop it once every request
// that will run has ended, so that the I/O loop returns.
void finish_if_idle(const std::shared_ptr<run_state>& st) {
  const bool all_done = st->done == st->plan->size() || (st->stopped && st->active == 0 && st->queued.empty());
  if (all_done && st->signals) {
    beast::error_code ec;
    st->signals->cancel(ec);
  }
}

// Stops sending: arrivals still to come are cancelled and the queue is emptied; what is in
// flight finishes. The second signal gets the default action (asio restores it on clear).
void stop_sending(const std::shared_ptr<run_state>& st) {
  st->stopped = true;
  st->queued.clear();
  for (auto& t : st->arrivals) t->cancel();
  beast::error_code ec;
  st->signals->clear(ec);
  finish_if_idle(st);
}

// "HTTP 413: <the error's message>" from an OpenAI error body, else the body's first 300 bytes.
std::string http_error_text(int status, const std::string& body) {
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_object() && j["error"].contains("message") &&
      j["error"]["message"].is_string())
    return "HTTP " + std::to_string(status) + ": " + j["error"]["message"].get<std::string>();
  return "HTTP " + std::to_string(status) + ": " + body.substr(0, 300);
}

// One streaming request on its own connection.
class exchange : public std::enable_shared_from_this<exchange> {
 public:
  exchange(std::shared_ptr<run_state> st, std::size_t index) : st_(std::move(st)), i_(index), stream_(st_->ioc) {}

  void start() {
    auto& res = (*st_->results)[i_];
    res.start = st_->now();
    res.tenant = (*st_->plan)[i_].tenant;
    res.prompt_tokens = (*st_->plan)[i_].prompt_len;
    req_ = {beast::http::verb::post, st_->opt.prefix + (st_->opt.chat ? "/v1/chat/completions" : "/v1/completions"), 11};
    req_.set(beast::http::field::host, st_->opt.host);
    req_.set(beast::http::field::content_type, "application/json");
    if (!st_->opt.api_key.empty()) req_.set(beast::http::field::authorization, "Bearer " + st_->opt.api_key);
    if (!st_->opt.split.empty()) req_.set("X-Troupe-Split", st_->opt.split);
    req_.body() = body_of(st_->opt, (*st_->plan)[i_]);
    req_.prepare_payload();
    parser_.body_limit(std::uint64_t(1) << 32);
    on_chunk_ = [this](std::uint64_t, beast::string_view data, beast::error_code&) {
      on_data(std::string_view(data.data(), data.size()));
      return data.size();
    };
    parser_.on_chunk_body(on_chunk_);  // by reference: the member outlives the parser's use
    stream_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(st_->opt.request_timeout_s)));
    auto self = shared_from_this();
    stream_.async_connect(st_->ep, [self](beast::error_code ec) {
      if (ec) return self->fail("connect: " + ec.message());
      beast::http::async_write(self->stream_, self->req_, [self](beast::error_code ec, std::size_t) {
        if (ec) return self->fail("write: " + ec.message());
        self->read();
      });
    });
  }

 private:
  void read() {
    auto self = shared_from_this();
    beast::http::async_read_some(stream_, buf_, parser_, [self](beast::error_code ec, std::size_t) {
      if (ec) return self->fail("read: " + ec.message());
      if (!self->parser_.is_done()) return self->read();
      auto& res = (*self->st_->results)[self->i_];
      const int status = int(self->parser_.get().result_int());
      res.status = status;
      if (status != 200) return self->fail(http_error_text(status, self->parser_.get().body()));
      if (!self->finished_ && res.error.empty()) return self->fail("the stream ended without [DONE]");
      self->complete();
    });
  }

  void on_data(std::string_view data) {
    sse_.append(data);
    std::size_t p;
    while ((p = sse_.find("\n\n")) != std::string::npos) {
      const std::string event = sse_.substr(0, p);
      sse_.erase(0, p + 2);
      if (event.rfind("data: ", 0) == 0) on_event(event.substr(6));
    }
  }

  void on_event(const std::string& payload) {
    auto& res = (*st_->results)[i_];
    if (payload == "[DONE]") {
      finished_ = true;
      return;
    }
    nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
    if (j.is_discarded()) return;
    if (j.contains("error")) {
      res.error = j["error"].value("message", j["error"].dump());
      return;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      res.output_tokens = j["usage"].value("completion_tokens", 0);
      res.prompt_tokens = j["usage"].value("prompt_tokens", res.prompt_tokens);
    }
    if (res.model.empty() && j.contains("model") && j["model"].is_string()) res.model = j["model"];
    if (!j.contains("choices") || j["choices"].empty()) return;
    // A chunk with a token: completions carry "text", chat a delta with "content" (the
    // opening chunk with only the role carries none). Its text may be empty (a partial
    // character, or a server without a tokenizer).
    const auto& c = j["choices"][0];
    const bool is_token = (c.contains("text") && c["text"].is_string()) ||
                          (c.contains("delta") && c["delta"].contains("content") && !c["delta"].contains("role"));
    if (!is_token) return;
    const double t = st_->now() - res.start;
    if (res.chunk_times.empty()) res.ttft = t;
    res.chunk_times.push_back(t);
  }

  void fail(const std::string& why) {
    auto& res = (*st_->results)[i_];
    res.ok = false;
    res.e2e = st_->now() - res.start;  // for a refusal: how long it took to be told
    if (res.error.empty()) res.error = why;
    end();
  }

  void complete() {
    auto& res = (*st_->results)[i_];
    res.e2e = st_->now() - res.start;
    if (!res.error.empty()) return end();
    if (res.output_tokens == 0) res.output_tokens = int(res.chunk_times.size());  // a server without usage
    res.ok = !res.chunk_times.empty();
    if (!res.ok) res.error = "no tokens";
    end();
  }

  void end() {
    if (ended_) return;
    ended_ = true;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    --st_->active;
    ++st_->done;
    if (st_->progress) st_->progress(st_->done, st_->results->size());
    start_next(st_);
    finish_if_idle(st_);
  }

  std::shared_ptr<run_state> st_;
  std::size_t i_;
  beast::tcp_stream stream_;
  beast::flat_buffer buf_;
  beast::http::request<beast::http::string_body> req_;
  beast::http::response_parser<beast::http::string_body> parser_;
  std::function<std::size_t(std::uint64_t, beast::string_view, beast::error_code&)> on_chunk_;
  std::string sse_;
  bool finished_ = false, ended_ = false;
};

void start_next(const std::shared_ptr<run_state>& st) {
  while (!st->queued.empty() && (st->opt.max_concurrency <= 0 || st->active < st->opt.max_concurrency)) {
    const std::size_t i = st->queued.front();
    st->queued.pop_front();
    ++st->active;
    st->started[i] = true;
    std::make_shared<exchange>(st, i)->start();
  }
}

tcp::endpoint resolve(const client_options& o) {
  beast::error_code ec;
  auto addr = asio::ip::make_address(o.host, ec);
  if (ec) throw input_error("--url: host must be an IP address (or localhost), got '" + o.host + "'");
  return {addr, o.port};
}

}  // namespace

namespace {

volatile std::sig_atomic_t stop_noted = 0;
extern "C" void note_stop(int) { stop_noted = 1; }

}  // namespace

void note_stops_until_run() {
  std::signal(SIGINT, note_stop);
  std::signal(SIGTERM, note_stop);
}

std::vector<request_result> run_requests(const client_options& o, const std::vector<planned_request>& plan,
                                         const std::function<void(std::size_t, std::size_t)>& progress, double* duration,
                                         bool* stopped) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {  // thousands of streams
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  std::vector<request_result> results(plan.size());
  auto st = std::make_shared<run_state>();
  st->opt = o;
  st->ep = resolve(o);
  st->results = &results;
  st->plan = &plan;
  st->progress = progress;
  st->started.assign(plan.size(), false);
  st->t0 = clock_type::now();
  for (std::size_t i = 0; i < plan.size(); ++i) {
    auto t = std::make_unique<asio::steady_timer>(st->ioc);
    t->expires_at(st->t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(plan[i].at)));
    t->async_wait([st, i](beast::error_code ec) {
      if (ec || st->stopped) return;
      st->queued.push_back(i);
      start_next(st);
    });
    st->arrivals.push_back(std::move(t));
  }
  // The default first, so that asio restores it when a stop clears the set: a second signal
  // then ends the process, whatever the process started with or noted before.
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  st->signals = std::make_unique<asio::signal_set>(st->ioc, SIGINT, SIGTERM);
  st->signals->async_wait([st](beast::error_code ec, int) {
    if (!ec) stop_sending(st);
  });
  if (plan.empty()) st->signals->cancel();
  if (stop_noted) {  // stopped while the plan was made: nothing is sent
    stop_noted = 0;
    stop_sending(st);
  }
  st->ioc.run();
  if (duration) *duration = st->now();
  st->arrivals.clear();
  st->signals.reset();
  if (st->stopped) {  // the report covers what was sent
    std::vector<request_result> sent;
    for (std::size_t i = 0; i < results.size(); ++i)
      if (st->started[i]) sent.push_back(std::move(results[i]));
    results = std::move(sent);
  }
  if (stopped) *stopped = st->stopped;
  return results;
}

namespace {

std::pair<int, std::string> exchange_once(const client_options& o, beast::http::verb verb, const std::string& path,
                                          const std::string& body) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  stream.connect(resolve(o), ec);
  if (ec) throw input_error("cannot connect to http://" + o.host + ":" + std::to_string(o.port) + ": " + ec.message());
  stream.expires_after(std::chrono::seconds(60));
  beast::http::request<beast::http::string_body> req{verb, o.prefix + path, 11};
  req.set(beast::http::field::host, o.host);
  if (!o.api_key.empty()) req.set(beast::http::field::authorization, "Bearer " + o.api_key);
  if (verb == beast::http::verb::post) {
    req.set(beast::http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
  }
  beast::http::write(stream, req, ec);
  beast::flat_buffer buf;
  beast::http::response_parser<beast::http::string_body> res;
  res.body_limit(64u << 20);
  if (!ec) beast::http::read(stream, buf, res, ec);
  if (ec) throw input_error(std::string(verb == beast::http::verb::get ? "GET " : "POST ") + path + ": " + ec.message());
  return {int(res.get().result_int()), res.get().body()};
}

}  // namespace

std::pair<int, std::string> http_get(const client_options& o, const std::string& path) {
  return exchange_once(o, beast::http::verb::get, path, "");
}

std::pair<int, std::string> http_post(const client_options& o, const std::string& path, const std::string& body) {
  return exchange_once(o, beast::http::verb::post, path, body);
}

}  // namespace troupe::bench
