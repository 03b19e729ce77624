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

namespace {

const char* const usage = R"(usage: troupe COMMAND [options]

commands:
  generate   run prompts through the engine as one continuous batch
             [--config TOPOLOGY.toml] [--model DIR]
             (--prompt TEXT | --prompt-ids 1,2,3 | --prompts-file FILE)
             [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--min-p P]
             [--seed S] [--stop STRING] [--ignore-eos] [--kv-dtype f32|f16]
             [--max-batched-tokens N] [--chunk N] [--kv-blocks N] [--json]
  model synth  write a model folder with deterministic random weights
             --preset tiny|small|1b [--arch llama|mistral|qwen2] [--dtype f32|f16|bf16]
             [--seed N] [--tied] [--rope-scaling llama3] --out DIR
  bench engine  prefill and decode throughput against the machine's roofline
             --model DIR [--json] [--batches 1,4,16,32] [--context 128] [--prompt 512]
  serve      the head of a topology: the OpenAI HTTP API (default 127.0.0.1:8000), router,
             request owner, and the registry nodes join
             [CONFIG (default configs/local.toml)] [--port N] [--host HOST] [--model DIR]
             [--registry-port N] [--listen HOST (the registry's)]
  node       a process hosting the replicas a topology places on one node
             CONFIG --name NODE [--head HOST:PORT] [--model DIR]
  launch     start every node of a topology as local processes and keep them running
             CONFIG [--netns] [--model DIR] [--port HTTP_PORT]
  bench runtime  the control plane under load (sim or cpu topology started in this process)
             [--config configs/sim-32.toml] [--requests 10000] [--prompt 256] [--max-tokens 32] [--json]
             --overhead 1,64 [--config configs/local.toml]: time outside the forward per decode step
  bench serve  load an OpenAI-compatible server and report TTFT, TPOT, ITL, E2E, throughput
             --url http://HOST:PORT [--requests 64] [--concurrency C | --rate R [--arrival poisson|fixed]]
             [--prompt-len 200] [--output-len 64] [--prompt-dist/--output-dist fixed|uniform|longtail]
             [--shared-prefix SYSTEMS:USERS:TOKENS] [--trace FILE.jsonl] [--chat] [--model NAME]
             [--goodput "ttft:MS tpot:MS e2el:MS"] [--json FILE [--detailed]] [--plot PREFIX] [--seed S] [--vocab N]
  info       what this build and machine offer (ISA, threads, CUDA)

Without --model, generate uses models/small, synthesizing it on first run.
)";

int info() {
  std::printf("troupe 0.1\ncpu: isa %s, %d threads\n%s\n", troupe::kernels::isa_name(troupe::kernels::active_isa()),
              troupe::kernels::num_threads(), troupe::kernels::cuda::describe().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "generate") return troupe::cli::cmd_generate(argc, argv);
    if (cmd == "model") return troupe::cli::cmd_model(argc, argv);
    if (cmd == "bench") return troupe::cli::cmd_bench(argc, argv);
    if (cmd == "serve") return troupe::cli::cmd_serve(argc, argv);
    if (cmd == "node") return troupe::cli::cmd_node(argc, argv);
    if (cmd == "launch") return troupe::cli::cmd_launch(argc, argv);
    if (cmd == "info") return info();
    std::fprintf(stderr, "troupe: unknown command '%s'\n\n%s", cmd.c_str(), usage);
    return 2;
  } catch (const troupe::input_error& e) {
    std::fprintf(stderr, "troupe %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe %s: internal error: %s\n", cmd.c_str(), e.what());
    return 70;
  }
}
