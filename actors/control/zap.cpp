#include "actors/control/zap.h"

#include <fstream>
#include <stdexcept>

#include "runtime/common/error.h"

namespace troupe::actors {

curve_pair curve_keypair() {
  char pub[41] = {0}, sec[41] = {0};
  if (zmq_curve_keypair(pub, sec) != 0) throw std::runtime_error("this ZeroMQ has no CURVE support");
  return {pub, sec};
}

std::string curve_public_of(const std::string& secret_z85) {
  char pub[41] = {0};
  if (secret_z85.size() != 40 || zmq_curve_public(pub, secret_z85.c_str()) != 0)
    throw std::invalid_argument("not a Z85 CURVE secret key of 40 characters");
  return pub;
}

std::string read_key_file(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw input_error(what + ": cannot open " + path);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
  if (line.size() != 40) throw input_error(what + ": " + path + " holds no Z85 key of 40 characters (troupe admin keygen writes them)");
  return line;
}

curve_server_keys load_curve_server_keys(const std::string& secret_key_file, const std::vector<std::string>& authorized_keys,
                                         const std::string& what) {
  curve_server_keys k;
  k.secret = read_key_file(secret_key_file, what + ".secret_key");
  try {
    curve_public_of(k.secret);
  } catch (const std::invalid_argument&) {
    throw input_error(what + ".secret_key: " + secret_key_file + " is not a CURVE secret key");
  }
  for (const auto& key : authorized_keys) {
    std::string bin(32, '\0');
    if (key.size() != 40 || !zmq_z85_decode(reinterpret_cast<std::uint8_t*>(bin.data()), key.c_str()))
      throw input_error(what + ".authorized_keys: \"" + key.substr(0, 64) + "\" is not a Z85 key");
    k.authorized.insert(bin);
  }
  return k;
}

void bind_zap(zmq::socket_t& zap) {
  zap.set(zmq::sockopt::linger, 0);
  zap.set(zmq::sockopt::maxmsgsize, std::int64_t(4096));  // the handshake's frames: a key, a mechanism
  zap.bind("inproc://zeromq.zap.01");
}

void make_curve_server(zmq::socket_t& s, const curve_server_keys& keys, const char* domain) {
  s.set(zmq::sockopt::curve_server, 1);
  s.set(zmq::sockopt::curve_secretkey, keys.secret);
  s.set(zmq::sockopt::zap_domain, domain);
}

void answer_zap(zmq::socket_t& zap, const std::set<std::string>& authorized) {
  std::vector<zmq::message_t> f;
  for (bool more = true; more;) {
    zmq::message_t m;
    if (!zap.recv(m, zmq::recv_flags::dontwait)) break;
    more = m.more();
    f.push_back(std::move(m));
  }
  if (f.empty()) return;
  const bool ok = f.size() >= 7 && f[5].to_string() == "CURVE" && authorized.count(f[6].to_string()) > 0;
  const std::string request_id = f.size() > 1 ? f[1].to_string() : "";
  const std::vector<std::string> out = {"1.0", request_id, ok ? "200" : "400", ok ? "OK" : "not an authorized key", "", ""};
  for (std::size_t i = 0; i < out.size(); ++i)
    zap.send(zmq::buffer(out[i]), i + 1 < out.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
}

}  // namespace troupe::actors
