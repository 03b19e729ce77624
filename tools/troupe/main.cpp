// troupe: serve, run and measure large language models.
#include <cstdio>
#include <cstring>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/device.h"
#include "tools/troupe/command_line.h"
#include "tools/troupe/commands.h"

namespace troupe::cli {

int cmd_info(const args&) {
  std::printf("troupe %s\ncpu: isa %s, %d threads\n%s\n", TROUPE_VERSION, kernels::isa_name(kernels::active_isa()), kernels::num_threads(),
              kernels::cuda::describe().c_str());
  return 0;
}

}  // namespace troupe::cli

int main(int argc, char** argv) {
  troupe::cli::command_line cl;
  troupe::cli::declare_commands(cl);
  if (argc >= 2 && (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V"))) {
    std::printf("troupe %s\n", TROUPE_VERSION);
    return 0;
  }
  return cl.run(argc, argv);
}
