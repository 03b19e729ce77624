// The Containerfile's final stage can run the troupe this tree builds: every shared library
// the binary links (ldd) comes from a Debian package that stage installs (dpkg -S), except the
// CUDA toolkit's, which Debian's image does not have and its CPU build does not link. It runs
// as a user of its own, with the models as a volume, from a build that used the README's install.
#define BOOST_TEST_MODULE containerfile
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <map>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "tests/support/process.h"

using namespace troupe;

namespace {

std::string containerfile() {
  std::ifstream in(std::string(TROUPE_SOURCE_DIR) + "/Containerfile");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The stage the image is: everything after the last FROM.
std::string final_stage(const std::string& text) { return text.substr(text.rfind("\nFROM ")); }

std::set<std::string> installed_packages(const std::string& stage) {
  const auto at = stage.find("apt-get install");
  BOOST_TEST_REQUIRE(at != std::string::npos);
  const std::string rest = stage.substr(at, stage.find("&& rm", at) - at);
  std::set<std::string> out;
  const std::regex word(R"(\b([a-z0-9][a-z0-9.+-]+[a-z0-9])\b)");
  for (std::sregex_iterator it(rest.begin(), rest.end(), word), end; it != end; ++it) out.insert((*it)[1]);
  return out;
}

// Each library's Debian package, from one `dpkg -S` over every spelling of every path (merged
// /usr: a path may be listed with or without /usr, under its link's name or its target's). One
// call, not one per spelling: each reads dpkg's whole file list.
std::map<std::string, std::string> packages_of(const std::vector<std::string>& libs) {
  std::map<std::string, std::vector<std::string>> spellings;
  std::string command = "dpkg -S";
  for (const auto& lib : libs) {
    std::error_code ec;
    const std::string real = std::filesystem::canonical(lib, ec).string();
    auto& s = spellings[lib];
    for (const std::string& path : {lib, "/usr" + lib, real, "/usr" + real, std::regex_replace(lib, std::regex("^/usr"), "")})
      if (!path.empty() && path != "/usr") {
        s.push_back(path);
        command += " '" + path + "'";
      }
  }
  // Its status is not 0 while any spelling is unknown; the lines say what each known one is.
  const auto r = test::run_command(command + " 2>/dev/null");
  std::map<std::string, std::string> owner;  // path -> package (`pkg:arch: /path`)
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    const auto sep = line.find(": /");
    if (sep == std::string::npos || line.rfind("diversion", 0) == 0) continue;
    owner[line.substr(sep + 2)] = line.substr(0, line.find(':'));
  }
  std::map<std::string, std::string> out;
  for (const auto& [lib, paths] : spellings)
    for (const auto& path : paths)
      if (owner.count(path)) {
        out[lib] = owner[path];
        break;
      }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_image_installs_every_library_troupe_links) {
  const auto pkgs = installed_packages(final_stage(containerfile()));
  const auto ldd = test::run_command("ldd " + std::string(TROUPE_BINARY_DIR) + "/troupe");
  BOOST_TEST_REQUIRE(ldd.status == 0, ldd.output);
  std::istringstream lines(ldd.output);
  std::vector<std::string> libs;
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, std::regex(R"(=> (/\S+))"))) continue;
    if (std::string(m[1]).rfind("/usr/local/cuda", 0) != 0) libs.push_back(m[1]);
  }
  const auto owners = packages_of(libs);
  int checked = 0;
  for (const auto& lib : libs) {
    const auto it = owners.find(lib);
    const std::string pkg = it == owners.end() ? "" : it->second;
    BOOST_TEST_CONTEXT(lib) {
      BOOST_TEST(!pkg.empty());
      BOOST_TEST(pkgs.count(pkg) == 1u, pkg << " is not installed by the Containerfile's final stage");
    }
    ++checked;
  }
  BOOST_TEST(checked >= 10);
}

BOOST_AUTO_TEST_CASE(the_image_runs_as_its_own_user_with_models_as_a_volume) {
  const std::string text = containerfile(), stage = final_stage(text);
  BOOST_TEST(text.find("FROM debian:12 AS build") != std::string::npos);
  BOOST_TEST(text.find("bash scripts/install-deps.sh") != std::string::npos);  // the README's install
  BOOST_TEST(stage.find("FROM debian:12") != std::string::npos);
  BOOST_TEST(stage.find("\nUSER 10001:10001\n") != std::string::npos);
  BOOST_TEST(stage.find("VOLUME [\"/models\"]") != std::string::npos);
  BOOST_TEST(stage.find("COPY --from=build /build/troupe /usr/local/bin/troupe") != std::string::npos);
  // The user the manifests run pods as (topology/deploy/statefulset.cpp: runAsUser).
  BOOST_TEST(stage.find("useradd --uid 10001") != std::string::npos);
}
