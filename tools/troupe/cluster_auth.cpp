#include "tools/troupe/cluster_auth.h"

#include "topology/engine_settings.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "actors/cluster/local_cluster.h"
#include "runtime/common/error.h"
#include "runtime/model/fingerprint.h"

namespace troupe::cli {

namespace {

// A folder only this user can use; refused if someone else made it first.
std::string private_dir(const std::string& path) {
  ::mkdir(path.c_str(), 0700);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
    throw input_error(path + ": not a folder owned by this user and closed to others; remove it or set TROUPE_CLUSTER_TOKEN");
  return path;
}

std::string token_dir() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg && *xdg) return private_dir(std::string(xdg) + "/troupe");
  return private_dir("/tmp/troupe-" + std::to_string(::geteuid()));
}

std::string read_token(const std::string& path) {
  std::ifstream in(path);
  std::string token;
  if (!(in >> token) || token.size() < 16) throw input_error(path + ": cannot read a cluster token (16 characters or more)");
  return token;
}

// Whether some socket of this machine holds TCP `port` (a head's registry listening there).
bool port_in_use(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return true;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  const bool taken = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0;
  ::close(fd);
  return taken;
}

// Token files of heads that are gone (killed, or ended by an error before they could remove
// theirs): no socket holds their port any more. Each would otherwise stay for good.
void sweep_stale_tokens(const std::string& dir) {
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = f.path().filename().string();
    if (name.rfind("token-", 0) != 0) continue;
    const std::string digits = name.substr(6, name.find('.') == std::string::npos ? std::string::npos : name.find('.') - 6);
    if (digits.empty() || digits.size() > 5 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const int port = std::stoi(digits);
    if (port > 0 && port < 65536 && !port_in_use(std::uint16_t(port))) std::filesystem::remove(f.path(), ec);
  }
}

}  // namespace

std::string new_cluster_token() {
  std::random_device rd;
  std::string t;
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) t += hex[rd() % 16];
  return t;
}

std::string cluster_token(const topology::topology_config& t, std::uint16_t registry_port, bool create) {
  if (const char* env = std::getenv("TROUPE_CLUSTER_TOKEN"); env && *env) {
    if (std::string(env).size() < 16) throw input_error("TROUPE_CLUSTER_TOKEN: must be at least 16 characters");
    return env;
  }
  if (!t.cluster.token.empty()) return t.cluster.token;
  if (!t.cluster.token_file.empty()) return read_token(t.cluster.token_file);
  if (t.heads().size() > 1)
    throw input_error(t.source + ": several heads need one cluster token: set TROUPE_CLUSTER_TOKEN or [cluster] token_file");
  const std::string path = token_dir() + "/token-" + std::to_string(registry_port);
  if (!create) {
    if (::access(path.c_str(), R_OK) != 0)
      throw input_error("no cluster token: set TROUPE_CLUSTER_TOKEN or [cluster] token_file (a head on this machine keeps it in " +
                        path + ")");
    return read_token(path);
  }
  sweep_stale_tokens(token_dir());
  const std::string token = new_cluster_token();
  const std::string tmp = path + ".new";
  {
    const mode_t old = ::umask(077);
    std::ofstream out(tmp, std::ios::trunc);
    ::umask(old);
    out << token << "\n";
    if (!out) throw input_error(tmp + ": cannot write the cluster token");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw input_error(path + ": cannot write the cluster token");
  return token;
}

void forget_cluster_token(std::uint16_t registry_port) {
  try {
    ::unlink((token_dir() + "/token-" + std::to_string(registry_port)).c_str());
  } catch (const input_error&) {
  }
}

std::string served_fingerprint(const topology::topology_config& t, const std::string& model_dir) {
  std::string fp = t.model.backend == topology::backend_kind::sim ? model::shape_fingerprint(topology::sim_shape(t))
                                                                  : model::model_fingerprint(model_dir);
  if (!t.model.revision.empty()) fp += "@" + t.model.revision;
  // Every other model by the key its replicas' blocks carry (its files' fingerprint and revision).
  for (const auto& m : t.more_models) fp += "," + m.name + "=" + topology::engine_config_of(t, m.name).model_key;
  return fp;
}

std::string make_launch_certificate() {
  char tmpl[] = "/tmp/troupe-tls-XXXXXX";
  if (!::mkdtemp(tmpl)) throw input_error("cannot make a folder for the launch certificate");
  const std::string dir = tmpl;
  const std::string cmd = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=troupe-launch"
                          " -keyout " + dir + "/key.pem -out " + dir + "/cert.pem >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) throw input_error("openssl could not make the launch certificate (is openssl installed?)");
  return dir;
}

}  // namespace troupe::cli
