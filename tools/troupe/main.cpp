// troupe: serve, run and measure large language models.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/device.h"
#include "runtime/common/error.h"
#include "tools/troupe/commands.h"
#include "tools/troupe/usage.h"

namespace {

int info() {
  std::printf("troupe %s\ncpu: isa %s, %d threads\n%s\n", TROUPE_VERSION, troupe::kernels::isa_name(troupe::kernels::active_isa()),
              troupe::kernels::num_threads(), troupe::kernels::cuda::describe().c_str());
  return 0;
}

bool asks_for_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "help")) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  using troupe::cli::usage_of;
  if (argc < 2) {
    std::fputs(usage_of(""), stderr);
    return 2;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V")) {
    std::printf("troupe %s\n", TROUPE_VERSION);
    return 0;
  }
  // --help anywhere prints the usage of the command named before it, and does nothing else.
  if (asks_for_help(argc, argv)) {
    const std::string named = troupe::cli::command_of(argc, argv);
    const char* u = usage_of(named);
    if (!u && (named == "--help" || named == "-h" || named == "help")) u = usage_of("");
    if (!u) {
      std::fprintf(stderr, "troupe: unknown command '%s'\n\n%s", named.c_str(), usage_of(""));
      return 2;
    }
    std::fputs(u, stdout);
    return 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "generate") return troupe::cli::cmd_generate(argc, argv);
    if (cmd == "model") return troupe::cli::cmd_model(argc, argv);
    if (cmd == "bench") return troupe::cli::cmd_bench(argc, argv);
    if (cmd == "serve") return troupe::cli::cmd_serve(argc, argv);
    if (cmd == "node") return troupe::cli::cmd_node(argc, argv);
    if (cmd == "launch") return troupe::cli::cmd_launch(argc, argv);
    if (cmd == "admin") return troupe::cli::cmd_admin(argc, argv);
    if (cmd == "eval") return troupe::cli::cmd_eval(argc, argv);
    if (cmd == "info") {
      if (argc > 2) throw troupe::input_error(std::string("unexpected argument '") + argv[2] + "'");
      return info();
    }
    std::fprintf(stderr, "troupe: unknown command '%s'\n\n%s", cmd.c_str(), usage_of(""));
    return 2;
  } catch (const troupe::input_error& e) {
    std::fprintf(stderr, "troupe %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe %s: internal error: %s\n", cmd.c_str(), e.what());
    return 70;
  }
}
