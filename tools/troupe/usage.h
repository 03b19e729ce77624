// The usage text of troupe and of each of its commands: what --help / -h prints.
#pragma once
#include <string>

namespace troupe::cli {

// The usage of `command` ("serve", "bench serve", ...; "" for troupe itself), or nullptr.
const char* usage_of(const std::string& command);

// The command a command line names: argv[1], with argv[2] when it is a subcommand
// ("model synth", "bench engine", ...).
std::string command_of(int argc, char** argv);

}  // namespace troupe::cli
