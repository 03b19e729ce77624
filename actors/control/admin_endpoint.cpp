#include "actors/control/admin_endpoint.h"

#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.hpp>

#include "actors/control/autoscaler.h"
#include "actors/control/zap.h"
#include "runtime/common/error.h"
#include "runtime/common/wall_clock.h"

namespace troupe::actors {

namespace {

constexpr std::size_t max_pending = 256;       // requests in progress at once; more are refused
constexpr std::size_t max_events = 4096;       // events waiting for the socket thread
constexpr std::int64_t max_message = 1 << 20;  // ZeroMQ drops a peer sending more than this
const char* const zap_domain = "troupe-admin";

}  // namespace

struct admin_endpoint::shared {
  std::mutex mu;
  std::deque<std::pair<std::uint64_t, admin::reply>> replies;
  std::deque<std::string> events;  // encoded
  std::uint64_t event_seq = 0, events_dropped = 0;
  int wake = -1;  // eventfd
  bool stop = false;
  void poke() {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake, &one, sizeof one);
  }
};

struct admin_endpoint::sockets {
  zmq::context_t ctx{1};
  zmq::socket_t router{ctx, zmq::socket_type::router};
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
  zmq::socket_t zap{ctx, zmq::socket_type::rep};
  bool has_pub = false, curve = false;
  std::set<std::string> authorized;  // binary public keys
  struct pending {
    std::string identity;
    bool delimiter = true;  // a REQ-style client sent an empty frame before the payload
    std::uint64_t id = 0;
  };
  std::map<std::uint64_t, pending> in_flight;
  std::uint64_t next_token = 0;
};

admin_endpoint::admin_endpoint(caf::actor_system& sys, const topology::topology_config& topo, router_actor router, owner_actor owner,
                               node_registry_actor registry, nlohmann::json model, lora_serving lora, std::string head)
    : q_(std::make_shared<shared>()), z_(std::make_unique<sockets>()) {
  const auto& spec = topo.admin;
  q_->wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (q_->wake < 0) throw std::runtime_error("admin endpoint: eventfd failed");
  auto& z = *z_;
  for (auto* s : {&z.router, &z.pub, &z.zap}) s->set(zmq::sockopt::linger, 0);
  z.router.set(zmq::sockopt::maxmsgsize, max_message);
  z.pub.set(zmq::sockopt::maxmsgsize, std::int64_t(1024));  // what a subscriber sends: a subscription's topic
  z.router.set(zmq::sockopt::router_mandatory, 0);  // a reply to a client gone is dropped, not an error
  if (spec.curve()) {
    const curve_server_keys keys = load_curve_server_keys(spec.secret_key, spec.authorized_keys, "admin");
    z.authorized = keys.authorized;
    bind_zap(z.zap);  // before any CURVE socket accepts a peer
    for (auto* s : {&z.router, &z.pub}) make_curve_server(*s, keys, zap_domain);
    z.curve = true;
  }
  if (spec.enabled()) try {
      z.router.bind(spec.endpoint);
    } catch (const zmq::error_t& e) {
      throw input_error("admin.endpoint: cannot bind " + spec.endpoint + ": " + e.what());
    }
  if (!spec.events.empty()) {
    try {
      z.pub.bind(spec.events);
    } catch (const zmq::error_t& e) {
      throw input_error("admin.events: cannot bind " + spec.events + ": " + e.what());
    }
    z.has_pub = true;
  }
  admin_config cfg;
  cfg.topo = topo;
  cfg.router = std::move(router);
  cfg.owner = std::move(owner);
  cfg.registry = std::move(registry);
  cfg.model = std::move(model);
  cfg.lora = std::move(lora);
  cfg.head = std::move(head);
  cfg.timeout = std::min(topo.timeouts.request, std::chrono::milliseconds(10000));
  std::weak_ptr<shared> weak = q_;  // the actor may outlive this endpoint
  cfg.reply = [weak](std::uint64_t token, admin::reply r) {
    auto q = weak.lock();
    if (!q) return;
    {
      std::lock_guard lock(q->mu);
      q->replies.emplace_back(token, std::move(r));
    }
    q->poke();
  };
  const bool has_pub = z.has_pub;
  cfg.event = [weak, has_pub](const std::string& kind, nlohmann::json fields) {
    auto q = weak.lock();
    if (!q || !has_pub) return;
    {
      std::lock_guard lock(q->mu);
      if (q->events.size() >= max_events) {
        ++q->events_dropped;
        return;
      }
      q->events.push_back(admin::encode_event(++q->event_seq, unix_seconds(), kind, std::move(fields)));
    }
    q->poke();
  };
  actor_ = sys.spawn(admin, std::move(cfg));
  if (topo.autoscaler.cfg.enabled) {  // it acts through the admin actor, which lets the console steer it
    autoscaler_ = sys.spawn(autoscaler, topo.autoscaler.cfg, actor_);
    caf::anon_send(actor_, autoscaler_atom::value, autoscaler_);
  }
  if (spec.enabled()) thread_ = std::thread([this] { run(); });  // without [admin]: the autoscaler's actors only
}

admin_endpoint::~admin_endpoint() {
  {
    std::lock_guard lock(q_->mu);
    q_->stop = true;
  }
  q_->poke();
  if (thread_.joinable()) thread_.join();
  caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
  if (autoscaler_) caf::anon_send_exit(autoscaler_, caf::exit_reason::user_shutdown);
  ::close(q_->wake);
}

void admin_endpoint::run() {
  auto& z = *z_;
  auto send_reply = [&](const sockets::pending& to, admin::reply r) {
    r.id = to.id;
    const std::string bytes = admin::encode(r);
    z.router.send(zmq::buffer(to.identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    if (to.delimiter) z.router.send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    z.router.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
  };
  auto refuse = [&](const sockets::pending& to, const std::string& why) {
    admin::reply r;
    r.ok = false;
    r.error = why;
    send_reply(to, std::move(r));
  };
  for (;;) {
    std::vector<zmq::pollitem_t> items = {{z.router.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, q_->wake, ZMQ_POLLIN, 0}};
    if (z.curve) items.push_back({z.zap.handle(), 0, ZMQ_POLLIN, 0});
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(-1));
    } catch (const zmq::error_t&) {
      continue;  // EINTR
    }
    if (items[1].revents) {
      std::uint64_t n = 0;
      [[maybe_unused]] auto r = ::read(q_->wake, &n, sizeof n);
      std::deque<std::pair<std::uint64_t, admin::reply>> replies;
      std::deque<std::string> events;
      {
        std::lock_guard lock(q_->mu);
        if (q_->stop) return;
        replies.swap(q_->replies);
        events.swap(q_->events);
      }
      for (auto& [token, reply] : replies) {
        auto it = z.in_flight.find(token);
        if (it == z.in_flight.end()) continue;
        send_reply(it->second, std::move(reply));
        z.in_flight.erase(it);
      }
      for (auto& e : events) z.pub.send(zmq::buffer(e), zmq::send_flags::dontwait);
    }
    if (z.curve && items[2].revents) answer_zap(z.zap, z.authorized);  // ZAP (RFC 27): only the authorized keys get in
    if (items[0].revents) {
      std::vector<zmq::message_t> f;
      for (bool more = true; more;) {
        zmq::message_t m;
        if (!z.router.recv(m, zmq::recv_flags::dontwait)) break;
        more = m.more();
        if (f.size() < 4) f.push_back(std::move(m));  // more frames than a request has: dropped
      }
      if (f.size() < 2) continue;
      sockets::pending p;
      p.identity = f[0].to_string();
      p.delimiter = f.size() >= 3 && f[1].size() == 0;
      if (f.size() > (p.delimiter ? 3u : 2u)) {
        refuse(p, "admin request: expected one payload frame (after an empty delimiter frame, if any)");
        continue;
      }
      const zmq::message_t& payload = f.back();
      admin::request req;
      try {
        req = admin::decode_request(std::string_view(static_cast<const char*>(payload.data()), payload.size()));
      } catch (const std::invalid_argument& e) {
        refuse(p, e.what());
        continue;
      }
      p.id = req.id;
      if (z.in_flight.size() >= max_pending) {
        refuse(p, "too many admin requests in progress (" + std::to_string(max_pending) + "); try again");
        continue;
      }
      const std::uint64_t token = ++z.next_token;
      z.in_flight[token] = std::move(p);
      caf::anon_send(actor_, admin_atom::value, token, std::move(req.cmd), std::move(req.args));
    }
  }
}

}  // namespace troupe::actors
