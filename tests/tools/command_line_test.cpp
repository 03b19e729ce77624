// The command line on CLI11 (tools/troupe/command_line.h): a command's --help lists every flag it
// takes because both come from one declaration; a flag not declared, a flag given twice and a
// word too many are refused by name before the command runs; --help runs nothing.
#define BOOST_TEST_MODULE command_line
#include <boost/test/unit_test.hpp>

#include "tools/troupe/command_line.h"

#include <string>
#include <vector>

using namespace troupe::cli;

namespace {

struct fixture {
  command_line cl;
  int runs = 0;
  args last{{}, {}};

  fixture() {
    command root = cl.root();
    root.sub("serve", "serve a model", "[CONFIG] [options]", "The head of a topology.", [this](const args& a) {
          ++runs;
          last = a;
          return 0;
        })
        .positional("CONFIG", "a topology file")
        .option("port", "N", "HTTP port")
        .option("tls-certificate", "FILE", "this process's certificate")
        .flag("json", "print JSON")
        .log_flags("info");
    command bench = root.sub("bench", "measure things", "engine [options]", "");
    bench.sub("collectives", "all-reduce per backend", "[options]", "All-reduce and all-to-all.", [this](const args& a) {
           ++runs;
           last = a;
           return 0;
         })
        .flag("no-gloo", "shared memory only")
        .option("ranks", "N", "ranks per group");
  }

  int run(std::vector<std::string> words) {
    words.insert(words.begin(), "troupe");
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    return cl.run(int(argv.size()), argv.data());
  }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(help_lists_every_declared_flag_and_command, fixture) {
  const std::string serve = cl.help("serve");
  BOOST_TEST(serve.rfind("usage: troupe serve [CONFIG] [options]\n", 0) == 0, serve);
  for (const char* f : {"CONFIG", "--port N", "--tls-certificate FILE", "--json", "--log-level LEVEL", "--log-format FORMAT", "-h, --help"})
    BOOST_TEST(serve.find(f) != std::string::npos, f << " not in " << serve);
  const std::string collectives = cl.help("bench collectives");
  BOOST_TEST(collectives.rfind("usage: troupe bench collectives", 0) == 0, collectives);
  BOOST_TEST(collectives.find("--no-gloo") != std::string::npos, collectives);
  const std::string top = cl.help("");
  for (const char* c : {"serve", "bench collectives"}) BOOST_TEST(top.find("  " + std::string(c) + " ") != std::string::npos, top);
  BOOST_TEST(cl.help("frobnicate").empty());
}

BOOST_FIXTURE_TEST_CASE(the_runner_gets_exactly_what_was_given, fixture) {
  BOOST_TEST(run({"serve", "local.toml", "--port=8001", "--json", "--log-level", "warn"}) == 0);
  BOOST_TEST(runs == 1);
  BOOST_TEST(last.get("port", "") == "8001");
  BOOST_TEST(last.has("json"));
  BOOST_TEST(!last.has("tls-certificate"));
  BOOST_TEST(last.get("log-level", "") == "warn");
  BOOST_TEST(last.positional() == std::vector<std::string>{"local.toml"});
  BOOST_TEST(run({"bench", "collectives", "--no-gloo", "--ranks", "-1"}) == 0);  // a negative number is a value
  BOOST_TEST(last.get_int("ranks", 0) == -1);
  // A word that names another command is an argument (`troupe admin log-level info` ran `info`).
  BOOST_TEST(run({"serve", "bench"}) == 0);
  BOOST_TEST(last.positional() == std::vector<std::string>{"bench"});
  BOOST_TEST(runs == 3);
}

BOOST_FIXTURE_TEST_CASE(mistakes_are_refused_by_name_before_the_command_runs, fixture) {
  BOOST_TEST(run({"serve", "--frobnicate"}) == 1);
  BOOST_TEST(run({"serve", "-x"}) == 1);
  BOOST_TEST(run({"serve", "--port", "1", "--port", "2"}) == 1);  // which one? a mistake, not a choice
  BOOST_TEST(run({"serve", "a.toml", "b.toml"}) == 1);
  BOOST_TEST(run({"serve", "--port"}) == 1);
  BOOST_TEST(run({"bench", "collectives", "--port", "1"}) == 1);  // serve's flag, not this command's
  BOOST_TEST(runs == 0);
  BOOST_TEST(run({"frobnicate"}) == 2);
  BOOST_TEST(run({"bench"}) == 2);  // a group without its command
  BOOST_TEST(run({"bench", "frobnicate"}) == 2);
  BOOST_TEST(runs == 0);
}

BOOST_FIXTURE_TEST_CASE(help_runs_nothing_wherever_it_is, fixture) {
  BOOST_TEST(run({"serve", "--port", "1", "--help"}) == 0);
  BOOST_TEST(run({"bench", "collectives", "-h", "--frobnicate"}) == 0);
  BOOST_TEST(run({"help", "serve"}) == 0);
  BOOST_TEST(run({"--help"}) == 0);
  BOOST_TEST(runs == 0);
}
