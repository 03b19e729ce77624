// CURVE servers with an allow-list, for the ZeroMQ sockets a head binds (the admin endpoint, the
// KV events): the server's secret key and the authorized clients' public keys, read and checked
// from a topology's files, and the ZAP handler (RFC 27) that lets in only those keys. A ZAP
// handler serves one ZeroMQ context: each socket owner binds its own.
#pragma once
#include <set>
#include <string>
#include <vector>

#include <zmq.hpp>

namespace troupe::actors {

// CURVE keys as Z85 text. Throws std::runtime_error if ZeroMQ has no CURVE support.
struct curve_pair {
  std::string public_key, secret_key;
};
curve_pair curve_keypair();
// The public key of a Z85 secret key; throws std::invalid_argument if it is not one.
std::string curve_public_of(const std::string& secret_z85);
// A key file's Z85 key (its first line, trimmed); throws input_error naming `what` and the file.
std::string read_key_file(const std::string& path, const std::string& what);

struct curve_server_keys {
  std::string secret;                // Z85, 40 characters
  std::set<std::string> authorized;  // binary public keys (32 bytes each)
};

// Reads the secret key file and decodes the authorized keys; throws input_error naming `what`
// (a topology key such as "admin" or "kv_events") and the bad file or key.
curve_server_keys load_curve_server_keys(const std::string& secret_key_file, const std::vector<std::string>& authorized_keys,
                                         const std::string& what);

// Binds `zap` to the context's ZAP endpoint: call before any CURVE server socket of the context
// accepts a peer.
void bind_zap(zmq::socket_t& zap);

// Makes `s` a CURVE server with the keys' secret, authenticated by the context's ZAP handler.
void make_curve_server(zmq::socket_t& s, const curve_server_keys& keys, const char* domain);

// Answers one pending ZAP request on `zap` (a REP socket bound by bind_zap): 200 for a CURVE
// client whose key is authorized, 400 otherwise.
void answer_zap(zmq::socket_t& zap, const std::set<std::string>& authorized);

}  // namespace troupe::actors
