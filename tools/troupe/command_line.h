// The troupe command line on CLI11 (Debian's libcli11-dev): every command declares its flags
// once, each with its help, and CLI11 both parses them and writes --help from them, so the usage
// a user reads cannot drift from what the command takes. A flag not declared is refused by name.
//
// Contract: a command's runner gets an `args` holding exactly the flags given (a flag given twice
// is refused before it runs) and its positional arguments; the typed accessors on `args` name
// the flag in their errors. `run` turns errors into exit codes: 1 for bad input (input_error,
// a malformed command line), 2 for an unknown command or a group named without its subcommand,
// 70 for anything else, 0 for --help (printed on stdout, nothing else done).
#pragma once
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tools/troupe/args.h"

namespace CLI {
class App;
}

namespace troupe::cli {

using runner = std::function<int(const args&)>;

class command_line;

// One command being declared: `troupe serve`, `troupe bench serve`...
class command {
 public:
  // A switch: --json.
  command& flag(const std::string& name, const std::string& help);
  // A flag with a value: option("port", "N", "HTTP port") reads --port N or --port=N;
  // option("o,out", ...) also reads -o N.
  command& option(const std::string& name, const std::string& value, const std::string& help);
  // The positional arguments, shown as `shown` in the usage; at most `max` of them (-1: any number).
  command& positional(const std::string& shown, const std::string& help, int max = 1);
  // --log-level and --log-format (tools/troupe/args.h: apply_log_flags), with the default level.
  command& log_flags(const std::string& default_level);
  // Text after the flags (examples, signals, exit codes).
  command& footer(const std::string& text);
  // A subcommand: `summary` is its line in the parent's list; `synopsis` follows "usage: troupe
  // PATH " in its help; `about` is the paragraph under it. Without a runner it is a group that
  // lists its subcommands.
  command sub(const std::string& name, const std::string& summary, const std::string& synopsis, const std::string& about,
              runner run = {});

 private:
  friend class command_line;
  command(CLI::App* app, command_line* owner) : app_(app), owner_(owner) {}
  CLI::App* app_;
  command_line* owner_;
};

class command_line {
 public:
  command_line();
  ~command_line();
  command_line(const command_line&) = delete;
  command_line& operator=(const command_line&) = delete;

  // `troupe` itself, to declare the commands on.
  command root();
  // Parses argv, prints help or an error, or calls the named command's runner; the exit code.
  int run(int argc, char** argv);
  // The help of the command `path` ("" for troupe, "bench serve"...), or "" when there is none.
  std::string help(const std::string& path) const;

 private:
  friend class command;
  struct text {
    std::string synopsis, about, footer;
    runner run;
    int max_positional = 0;
  };
  const text* text_of(const CLI::App* app) const;
  const CLI::App* find(const std::string& path) const;  // nullptr: no such command
  std::string help_of(const CLI::App* app) const;
  // What the leaf `app` was given, as its runner reads it; input_error for a flag given twice,
  // an unknown option or a positional argument too many.
  args collect(const CLI::App& app) const;

  std::unique_ptr<CLI::App> root_;
  std::map<const CLI::App*, text> texts_;
  std::deque<std::vector<std::string>> positionals_;  // CLI11 writes each command's positionals here
  class formatter;
  std::shared_ptr<formatter> formatter_;
};

// Declares every troupe command on `cl` (tools/troupe/command_tree.cpp), the bench ones through
// declare_bench (tools/troupe/command_tree_bench.cpp).
void declare_commands(command_line& cl);
void declare_bench(command& root);

}  // namespace troupe::cli
