#include "actors/control/admin_client.h"

#include <cerrno>
#include <stdexcept>

#include <zmq.hpp>

#include "actors/control/admin_endpoint.h"

namespace troupe::actors {

struct admin_client::sockets {
  zmq::context_t ctx{1};
  zmq::socket_t dealer{ctx, zmq::socket_type::dealer};
  zmq::socket_t sub{ctx, zmq::socket_type::sub};
  bool subscribed = false;
};

namespace {

void secure(zmq::socket_t& s, const admin_client_config& c) {
  if (c.server_key.empty() && c.secret_key.empty()) return;
  if (c.server_key.empty() || c.secret_key.empty())
    throw std::invalid_argument("CURVE needs both the server's public key and this client's secret key");
  std::string pub;
  try {
    pub = curve_public_of(c.secret_key);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument("the client key is not a Z85 CURVE secret key");
  }
  if (c.server_key.size() != 40) throw std::invalid_argument("the server key is not a Z85 CURVE public key of 40 characters");
  s.set(zmq::sockopt::curve_serverkey, c.server_key);
  s.set(zmq::sockopt::curve_publickey, pub);
  s.set(zmq::sockopt::curve_secretkey, c.secret_key);
}

// zmq::poll, with a signal's EINTR as admin_interrupted rather than zmq's "Interrupted system call".
int poll_once(zmq::pollitem_t& item, std::chrono::milliseconds wait) {
  try {
    return zmq::poll(&item, 1, wait);
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) throw admin_interrupted();
    throw;
  }
}

}  // namespace

admin_client::admin_client(admin_client_config cfg) : cfg_(std::move(cfg)), z_(std::make_unique<sockets>()) {
  for (auto* s : {&z_->dealer, &z_->sub}) {
    s->set(zmq::sockopt::linger, 0);
    s->set(zmq::sockopt::maxmsgsize, std::int64_t(64) << 20);  // an answer or event from a server, bounded too
    secure(*s, cfg_);
  }
  z_->dealer.connect(cfg_.endpoint);
}

admin_client::~admin_client() = default;

admin::reply admin_client::call(const std::string& cmd, const std::vector<std::string>& args) {
  admin::request req{++next_id_, cmd, args};
  const std::string bytes = admin::encode(req);
  z_->dealer.send(zmq::message_t(), zmq::send_flags::sndmore);  // REQ-style delimiter
  z_->dealer.send(zmq::buffer(bytes), zmq::send_flags::none);
  const auto deadline = std::chrono::steady_clock::now() + cfg_.timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    zmq::pollitem_t item{z_->dealer.handle(), 0, ZMQ_POLLIN, 0};
    if (left.count() <= 0 || poll_once(item, left) == 0)
      throw std::runtime_error("no reply from " + cfg_.endpoint + " within " + std::to_string(cfg_.timeout.count() / 1000) +
                               " s (no admin endpoint there, or this client's key is not authorized)");
    std::vector<zmq::message_t> f;
    for (bool more = true; more;) {
      zmq::message_t m;
      if (!z_->dealer.recv(m)) break;
      more = m.more();
      f.push_back(std::move(m));
    }
    if (f.empty()) continue;
    const auto& payload = f.back();
    admin::reply r = admin::decode_reply(std::string_view(static_cast<const char*>(payload.data()), payload.size()));
    if (r.id != req.id) continue;  // an answer to an earlier call that timed out
    return r;
  }
}

std::optional<nlohmann::json> admin_client::next_event(std::chrono::milliseconds wait) {
  if (!z_->subscribed) {
    z_->sub.set(zmq::sockopt::subscribe, "");
    z_->sub.connect(cfg_.events);
    z_->subscribed = true;
  }
  zmq::pollitem_t item{z_->sub.handle(), 0, ZMQ_POLLIN, 0};
  try {
    if (poll_once(item, wait) == 0) return std::nullopt;
  } catch (const admin_interrupted&) {
    return std::nullopt;  // the caller checks its own flag
  }
  zmq::message_t m;
  if (!z_->sub.recv(m)) return std::nullopt;
  return admin::decode_event(std::string_view(static_cast<const char*>(m.data()), m.size()));
}

}  // namespace troupe::actors
