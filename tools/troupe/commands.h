// The troupe subcommands. Each returns the process exit code.
#pragma once

namespace troupe::cli {

int cmd_model(int argc, char** argv);     // troupe model synth ...
int cmd_generate(int argc, char** argv);  // troupe generate ...
int cmd_bench(int argc, char** argv);     // troupe bench engine ...
int cmd_bench_runtime(int argc, char** argv);  // troupe bench runtime ...
int cmd_serve(int argc, char** argv);     // troupe serve [CONFIG]
int cmd_node(int argc, char** argv);      // troupe node CONFIG --name NODE
int cmd_launch(int argc, char** argv);    // troupe launch CONFIG [--netns]

}  // namespace troupe::cli
