// troupe deploy kubernetes: the manifests a topology means (topology/deploy/kubernetes.h),
// with the secrets they need generated here: the cluster token, an API key, CURVE keys for the
// admin endpoint and, unless --tls-secret names one, a self-signed TLS certificate.
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "actors/control/zap.h"
#include "runtime/common/error.h"
#include "tools/troupe/args.h"
#include "tools/troupe/cluster_auth.h"
#include "tools/troupe/commands.h"
#include "topology/deploy/kubernetes.h"
#include "topology/deploy/yaml_writer.h"
#include "topology/topology.h"

namespace troupe::cli {

namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error(path + ": cannot be read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Bytes of a model's weights on disk: a GGUF file, or a folder's weight files. A model that is
// not on this machine (its weights may be only on the models volume) counts none, and says so:
// the pods' memory requests then leave its weights out.
std::uint64_t weight_bytes(const topology::model_spec& m) {
  if (m.path.empty()) return 0;
  std::error_code ec;
  if (fs::is_regular_file(m.path, ec)) return fs::file_size(m.path);
  if (!fs::is_directory(m.path, ec)) {
    std::fprintf(stderr, "troupe deploy: %s path: %s is not here; the pods' memory requests leave its weights out\n", m.label().c_str(),
                 m.path.c_str());
    return 0;
  }
  std::uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(m.path)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".safetensors" || ext == ".gguf" || ext == ".bin")) total += e.file_size();
  }
  return total;
}

// A certificate the pods present to each other and trust alone, valid for a year.
std::pair<std::string, std::string> self_signed_certificate() {
  char tmpl[] = "/tmp/troupe-deploy-XXXXXX";
  if (!::mkdtemp(tmpl)) throw input_error("cannot make a folder for the certificate");
  const std::string dir = tmpl;
  const std::string cmd = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 365 -subj /CN=troupe-cluster"
                          " -keyout " + dir + "/key.pem -out " + dir + "/cert.pem >/dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  std::pair<std::string, std::string> out;
  if (rc == 0) out = {read_text(dir + "/cert.pem"), read_text(dir + "/key.pem")};
  fs::remove_all(dir);
  if (rc != 0) throw input_error("openssl could not make the certificate (is openssl installed?); or give --tls-secret");
  return out;
}

topology::deploy::kubernetes_secrets make_secrets(bool tls) {
  topology::deploy::kubernetes_secrets s;
  s.cluster_token = new_cluster_token();
  s.api_key = new_cluster_token() + new_cluster_token();
  const auto server = actors::curve_keypair(), client = actors::curve_keypair();
  s.admin_server_secret = server.secret_key;
  s.admin_server_public = server.public_key;
  s.admin_client_secret = client.secret_key;
  s.admin_client_public = client.public_key;
  if (tls) std::tie(s.tls_certificate, s.tls_key) = self_signed_certificate();
  return s;
}

topology::deploy::kubernetes_options options_of(const args& a, const topology::topology_config& t) {
  topology::deploy::kubernetes_options o;
  o.name = a.get("name", o.name);
  o.ns = a.get("namespace", o.ns);
  o.image = a.get("image", o.image);
  o.models_claim = a.get("models-claim", "");
  o.tls_secret = a.get("tls-secret", "");
  o.prometheus = a.get("prometheus", o.prometheus);
  // Each reaches object names, DNS names and the pods' files: RFC 1123, checked before anything is written.
  if (auto why = topology::dns_label_problem(o.name, 30)) throw input_error("--name: " + *why + " (pods' names are made from it)");
  if (auto why = topology::dns_label_problem(o.ns)) throw input_error("--namespace: " + *why);
  for (const auto& [flag, v] : {std::pair{"--models-claim", &o.models_claim}, std::pair{"--tls-secret", &o.tls_secret}})
    if (!v->empty())
      if (auto why = topology::dns_label_problem(*v, 253)) throw input_error(std::string(flag) + ": " + *why);
  for (const auto& [flag, v] : {std::pair{"--image", &o.image}, std::pair{"--prometheus", &o.prometheus}})
    for (char c : *v)
      if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f || c == '"' || c == '\\' || v->size() > 512)
        throw input_error(std::string(flag) + ": expected up to 512 characters with no space, quote, backslash or control character");
  for (const auto* m : t.models()) {
    if (t.model.backend != topology::backend_kind::sim) o.weight_bytes[m->name] = weight_bytes(*m);
    if (!m->chat_template.empty()) {
      std::error_code ec;
      if (fs::is_regular_file(m->chat_template, ec)) o.files[m->chat_template] = read_text(m->chat_template);
    }
  }
  return o;
}

void write_manifests(const std::vector<topology::deploy::manifest>& ms, const std::string& dir) {
  fs::create_directories(dir);
  std::string kustomization = "# kubectl apply -k " + dir + "\nresources:\n";
  for (const auto& m : ms) {
    const std::string path = dir + "/" + m.file;
    // Secrets among them: readable by this user only.
    const mode_t old = ::umask(077);
    std::ofstream out(path, std::ios::trunc);
    ::umask(old);
    out << topology::deploy::to_yaml(m.object);
    if (!out) throw input_error("-o: cannot write " + path);
    kustomization += "- " + m.file + "\n";
  }
  std::ofstream(dir + "/kustomization.yaml", std::ios::trunc) << kustomization;
  // The dashboard also as a file, for Grafana's import.
  for (const auto& m : ms)
    if (m.object["metadata"]["name"].get<std::string>().ends_with("-dashboard"))
      std::ofstream(dir + "/grafana-dashboard.json", std::ios::trunc) << m.object["data"]["troupe-dashboard.json"].get<std::string>();
}

}  // namespace

int cmd_deploy_kubernetes(const args& a) {
  if (a.positional().size() != 1) throw input_error("usage: troupe deploy kubernetes TOPOLOGY.toml [--image IMAGE] [--namespace NS] [-o DIR]");
  const std::string path = a.positional()[0];
  const std::string text = read_text(path);
  const auto topo = topology::parse_topology(text, path);
  const auto o = options_of(a, topo);
  const auto secrets = make_secrets(o.tls_secret.empty());
  const auto manifests = topology::deploy::kubernetes_manifests(topo, text, o, secrets);
  if (auto dir = a.get("out")) {
    write_manifests(manifests, *dir);
    std::printf("wrote %zu objects to %s (kubectl apply -k %s) and grafana-dashboard.json; it holds Secrets: keep it private\n"
                "admin endpoint's public key (troupe admin --server-key): %s\n",
                manifests.size(), dir->c_str(), dir->c_str(), secrets.admin_server_public.c_str());
    return 0;
  }
  std::vector<nlohmann::json> docs;
  for (const auto& m : manifests) docs.push_back(m.object);
  std::fputs(topology::deploy::to_yaml_documents(docs).c_str(), stdout);
  return 0;
}

}  // namespace troupe::cli
