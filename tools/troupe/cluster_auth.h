// The credentials a node joins with: the cluster token and the model fingerprint, and the TLS
// files of `troupe launch --netns`.
#pragma once
#include <cstdint>
#include <string>

#include "topology/topology.h"

namespace troupe::cli {

// The cluster token: TROUPE_CLUSTER_TOKEN, else [cluster] token_file or token, else the file the
// head keeps for `registry_port` in a folder only this user may read ($XDG_RUNTIME_DIR/troupe or
// /tmp/troupe-UID), which the head creates (`create`) and nodes on the same machine read.
// Throws input_error saying where a token can come from when a node finds none.
std::string cluster_token(const topology::topology_config& t, std::uint16_t registry_port, bool create);

// A fresh random token (32 hex digits).
std::string new_cluster_token();

// Removes the token file the head made for `registry_port` (on its way out).
void forget_cluster_token(std::uint16_t registry_port);

// Removes the token file of `registry_port` when it goes out of scope, however the command ends
// (a signal, or an error after the token was written).
struct cluster_token_file {
  std::uint16_t port = 0;
  ~cluster_token_file() {
    if (port) forget_cluster_token(port);
  }
};

// What a node must serve to join: [model]'s folder fingerprint (or the sim shape's) and
// revision, and every [models.NAME]'s key (its files' fingerprint and revision).
std::string served_fingerprint(const topology::topology_config& t, const std::string& model_dir);

// A fresh self-signed certificate and key (openssl req) in a new folder only this user can
// read, for a cluster that exists for one `troupe launch`: each process presents it and trusts
// only it. Returns the folder (cert.pem, key.pem); throws input_error if openssl fails.
std::string make_launch_certificate();

}  // namespace troupe::cli
