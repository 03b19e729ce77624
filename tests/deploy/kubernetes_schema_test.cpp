// `troupe deploy kubernetes` on every topology in configs/, as a user runs it: each one either
// writes manifests that validate offline against the Kubernetes API's schemas and the CRDs'
// (tests/deploy/kubernetes, the npm packages the install script puts there), or is
// refused with the key that cannot be deployed named. The validator is shown to catch a broken
// object first, so a validator that passes everything fails this test.
#define BOOST_TEST_MODULE kubernetes_schema
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "tests/support/process.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

const std::string troupe_bin = std::string(TROUPE_BINARY_DIR) + "/troupe";
const std::string validator = std::string(TROUPE_SOURCE_DIR) + "/tests/deploy/kubernetes/validate.mjs";

// The topologies Kubernetes cannot run, and the key each refusal must name.
const std::map<std::string, std::string> refused = {{"tp2-two-nodes.toml", "pools.rank_nodes"}};

struct out_dir {
  fs::path path = fs::temp_directory_path() / ("troupe-k8s-" + std::to_string(::getpid()));
  out_dir() { fs::create_directories(path); }
  ~out_dir() { fs::remove_all(path); }
};

std::size_t yaml_files(const fs::path& dir) {
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ".yaml" && e.path().filename() != "kustomization.yaml";
  return n;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_validator_rejects_an_object_kubernetes_would) {
  out_dir out;
  const auto r = test::run_command("cd " + std::string(TROUPE_SOURCE_DIR) + " && " + troupe_bin +
                                   " deploy kubernetes configs/local.toml -o " + (out.path / "ok").string() + " 2>&1");
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  // A misspelt field, and a port that is not a number: each fails validation by name.
  std::ifstream in(out.path / "ok" / "statefulset-troupe-head.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::create_directories(out.path / "typo");
  std::ofstream(out.path / "typo" / "s.yaml") << std::regex_replace(text, std::regex("readOnlyRootFilesystem"), "readOnlyRootFileSystem");
  fs::create_directories(out.path / "type");
  std::ofstream(out.path / "type" / "s.yaml") << std::regex_replace(text, std::regex("containerPort: 8000"), "containerPort: \"http\"");
  const auto typo = test::run_command("node " + validator + " " + (out.path / "typo").string() + " 2>&1");
  BOOST_TEST(typo.status == 1, typo.output);
  BOOST_TEST(typo.output.find("field \"readOnlyRootFileSystem\" is not in the API") != std::string::npos, typo.output);
  const auto type = test::run_command("node " + validator + " " + (out.path / "type").string() + " 2>&1");
  BOOST_TEST(type.status == 1, type.output);
  BOOST_TEST(type.output.find("containerPort must be integer") != std::string::npos, type.output);
}

BOOST_AUTO_TEST_CASE(every_config_deploys_to_valid_objects_or_is_refused_by_key) {
  out_dir out;
  std::string dirs;
  std::size_t written = 0;
  std::set<std::string> deployed;
  for (const auto& e : fs::directory_iterator(std::string(TROUPE_SOURCE_DIR) + "/configs")) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".toml") continue;
    BOOST_TEST_CONTEXT(name) {
      const fs::path dir = out.path / e.path().stem();
      const auto r = test::run_command("cd " + std::string(TROUPE_SOURCE_DIR) + " && " + troupe_bin + " deploy kubernetes configs/" + name +
                                       " -o " + dir.string() + " 2>&1");
      if (auto it = refused.find(name); it != refused.end()) {
        BOOST_TEST(r.status == 1, r.output);
        BOOST_TEST(r.output.find(": " + it->second + ": ") != std::string::npos, r.output);
        continue;
      }
      BOOST_TEST_REQUIRE(r.status == 0, r.output);
      BOOST_TEST(fs::exists(dir / "kustomization.yaml"));
      written += yaml_files(dir);
      dirs += " " + dir.string();
      deployed.insert(name);
    }
  }
  BOOST_TEST(deployed.size() >= 20u);
  const auto v = test::run_command("node " + validator + dirs + " 2>&1");
  BOOST_TEST(v.status == 0, v.output);
  // Every object was checked, of every kind the command writes.
  std::size_t valid = 0;
  for (std::size_t pos = 0; (pos = v.output.find(": valid\n", pos)) != std::string::npos; ++pos) ++valid;
  BOOST_TEST(valid == written, v.output);
  BOOST_TEST_REQUIRE(v.output.find("kinds: ") != std::string::npos);
  const std::string kinds = v.output.substr(v.output.find("kinds: "));
  for (const char* kind : {"\"ConfigMap\"", "\"Secret\"", "\"Service\"", "\"StatefulSet\"", "\"PodDisruptionBudget\"", "\"ServiceMonitor\"",
                           "\"ScaledObject\""})
    BOOST_TEST(kinds.find(kind) != std::string::npos, kind);
}

// The weights may be only on the models volume: a folder not on this machine is said, not fatal.
BOOST_AUTO_TEST_CASE(a_model_not_on_this_machine_is_deployed_without_its_weights_in_the_memory_request) {
  out_dir out;
  const std::string config = (out.path / "elsewhere.toml").string();
  std::ofstream(config) << "[model]\npath = \"/nowhere/llama\"\n[[nodes]]\nname = \"head\"\n[[pools]]\nname = \"main\"\n";
  const auto r = test::run_command(troupe_bin + " deploy kubernetes " + config + " -o " + (out.path / "m").string() + " 2>&1");
  BOOST_TEST(r.status == 0, r.output);
  BOOST_TEST(r.output.find("/nowhere/llama is not here; the pods' memory requests leave its weights out") != std::string::npos, r.output);
}

BOOST_AUTO_TEST_CASE(deploy_answers_help_and_refuses_what_it_cannot_write) {
  const auto help = test::run_command(troupe_bin + " deploy kubernetes --help 2>&1");
  BOOST_TEST(help.status == 0);
  BOOST_TEST(help.output.find("-o, --out DIR") != std::string::npos, help.output);
  const auto bad_name = test::run_command("cd " + std::string(TROUPE_SOURCE_DIR) + " && " + troupe_bin +
                                          " deploy kubernetes configs/local.toml --namespace Bad_NS 2>&1");
  BOOST_TEST(bad_name.status == 1);
  BOOST_TEST(bad_name.output.find("--namespace") != std::string::npos, bad_name.output);
  const auto missing = test::run_command(troupe_bin + " deploy kubernetes /nonexistent.toml 2>&1");
  BOOST_TEST(missing.status == 1);
  BOOST_TEST(missing.output.find("/nonexistent.toml") != std::string::npos, missing.output);
}
