#include "tools/troupe/usage.h"

#include "runtime/admin/admin_message.h"

#include <cstring>
#include <map>

namespace troupe::cli {

namespace {

// troupe admin's usage: the server's commands come from the list the admin actor answers `help`
// with (runtime/admin/admin_message.h), so a command added there is in --help too.
const std::string& admin_usage() {
  static const std::string u = [] {
    std::string out = R"(usage: troupe admin [options] [COMMAND [ARGS]]
The console of a running cluster, over its ZeroMQ admin endpoint (docs/admin.md). Without a
COMMAND: an interactive console (line editing, history; quit ends it). Results print as tables
or sentences; --json prints the reply as it came.

commands (the server's):
)";
    auto line = [&](const std::string& name, const std::string& what) {
      out += "  " + name + (name.size() < 24 ? std::string(24 - name.size(), ' ') : "\n" + std::string(26, ' ')) + what + "\n";
    };
    for (const auto& [name, what] : admin::server_commands()) line(name, what);
    out += "\ncommands (this console's):\n";
    line("watch", "follow the event stream (placements, migrations, replica deaths, restarts and drains, admin actions)");
    line("top", "a live full-screen view of replicas, queues, KV use and throughput, as wide as the terminal");
    line("keygen [PREFIX]", "write PREFIX.key (secret, 0600) and PREFIX.pub (default PREFIX: admin)");
    out += R"(
options:
  --endpoint E           the admin endpoint (default tcp://127.0.0.1:7600)
  --events E             the event stream, for watch (default tcp://127.0.0.1:7601)
  --config TOPOLOGY      take both (and the server's public key) from a topology's [admin]
  --server-key KEY|FILE  the server's CURVE public key   --key FILE  this client's secret key
  --json                 print results (and events) as JSON
  --timeout S            seconds to wait for a reply (default 30)
  --count N --for S      watch: stop after N events or S seconds; top: after N frames or S seconds
  -h, --help             this text
)";
    return out;
  }();
  return u;
}

const std::map<std::string, const char*>& usages() {
  static const std::map<std::string, const char*> u = {
      {"", R"(usage: troupe COMMAND [options]        (troupe COMMAND --help for a command's options)

commands:
  serve          the head of a topology: the OpenAI HTTP API, router, request owner, node registry
  node           a process hosting the replicas a topology places on one node
  launch         start every node of a topology as local processes and keep them running
  admin          the console of a running cluster: status, kv, drain, kill, watch (ZeroMQ)
  admin keygen   write a CURVE key pair for the admin endpoint
  generate       run prompts through the engine as one continuous batch
  model synth    write a model folder with deterministic random weights
  model quantize write a copy of a model with q8_0, q4_0 or int8 projections
  bench engine   prefill and decode throughput against the machine's roofline
  bench runtime  the control plane under load, or the time outside the forward
  bench serve    load an OpenAI-compatible server and report TTFT, TPOT, ITL, E2E, throughput
  bench kv-transfer  GB/s of each KV transfer backend against this machine's memcpy
  bench autoscale    the autoscaler (or a fixed pool) against a trace, on the sim backend
  bench collectives  all-reduce and all-to-all per backend, and TP/PP step times
  eval perplexity    a model's teacher-forced perplexity on a text (the quality gate)
  info           what this build and machine offer (ISA, threads, CUDA)

  troupe --version   the version
)"},
      {"eval", R"(usage: troupe eval perplexity [options]     (troupe eval perplexity --help)
)"},
      {"eval perplexity", R"(usage: troupe eval perplexity --text FILE [options]
A model's perplexity on a text, teacher-forced: the text's tokens are cut into consecutive
windows of the model's context, and every token after a window's first is scored by the
probability the model gives it after the window's earlier tokens (runtime/eval/perplexity.h).

  --text FILE            the text to score (UTF-8; tokenized with the model's tokenizer.json)
  --model DIR|FILE       the model folder, or a llama .gguf file (default: models/kjv, the committed default model)
  --window N             tokens per window (default: the model's max_position_embeddings)
  --chunk N              tokens per forward within a window (default 256; bounds memory only)
  --json                 print the result as JSON
  --log-level LEVEL      debug, info, warn, error or off
  --log-format text|json
)"},
      {"serve", R"(usage: troupe serve [CONFIG | MODEL] [options]
The head of a topology: the OpenAI HTTP API, router, request owner, and the registry nodes join.
vLLM's habits work: `troupe serve models/kjv --served-model-name kjv --max-model-len 256`.

  CONFIG                 a topology file, *.toml (default configs/local.toml)
  MODEL                  a model folder or .gguf file, served by configs/local.toml (as --model)
  --port N               HTTP port (default: the topology's [frontend] address, else 8000; 0: any free port)
  --host HOST            HTTP address (default: the topology's, else 127.0.0.1); off loopback it
                         needs --api-key (or [frontend] api_keys), or --allow-unauthenticated
  --allow-unauthenticated  serve the OpenAI API off loopback without any API key
  --model DIR|FILE       the model folder or .gguf file (default: the topology's [model] path)
  --served-model-name N  the model's name in the API ([frontend] model_name)
  --max-model-len N      the context in tokens ([model] max_model_len); at most the model's positions
  --tensor-parallel-size N  ranks of every pool's tensor-parallel group (tensor_parallel)
  --shutdown-grace S     on SIGINT/SIGTERM, seconds in-flight requests have to finish while new
                         ones get 503 ([frontend] shutdown_grace; default 30); streams still
                         open then end with an error event and [DONE]
  --name HEAD            which head of the topology this is (default: the first)
  --registry-port N      the node registry's port (default: the head node's)
  --admin-port N         the admin endpoint at port N, its events at N + 1 (on [admin]'s host,
                         else on loopback: this turns the admin console on)
  --listen HOST          the node registry's address
  --api-key KEY          require 'Authorization: Bearer KEY' on the OpenAI routes
  --chat-template FILE   a .jinja chat template instead of the model folder's
  --tls-certificate FILE --tls-key FILE --tls-ca FILE   TLS for the links between processes
                         (replace [cluster]'s files; what launch --netns passes)
  --log-level LEVEL      debug, info (default), warn, error or off
  --log-format FORMAT    text (default) or json: one JSON object per line on stderr
  -h, --help             this text
)"},
      {"node", R"(usage: troupe node CONFIG --name NODE [options]
A process hosting the replicas a topology places on one node; it joins the heads and serves
them (rejoining a head that comes back) until SIGINT or SIGTERM, which stop it in order.

  --name NODE            the node of CONFIG this process is (required)
  --head HOST:PORT[,..]  the heads' node registries (default: every head of the topology)
  --model DIR|FILE       the model folder or .gguf file (default: the topology's)
  --tls-certificate FILE --tls-key FILE --tls-ca FILE   TLS for the links between processes
  --log-level LEVEL      debug, info (default), warn, error or off
  --log-format FORMAT    text (default) or json
  -h, --help             this text
)"},
      {"launch", R"(usage: troupe launch CONFIG [options]
Starts every node of a topology as local processes (the head as `troupe serve`) and restarts
any that dies, until Ctrl-C.

  --netns                each node in a network namespace of its own (needs root)
  --model DIR|FILE       the model folder or .gguf file (default: the topology's)
  --port N               the head's HTTP port (head k of several: N + k)
  --registry-port N      the head's node registry port (head k: N + k); the nodes are told
  --admin-port N         the head's admin endpoint, events at N + 1 (head k: N + 2k)
  --shutdown-grace S     the heads' grace for requests in flight on Ctrl-C (see troupe serve --help)
  --log-level LEVEL --log-format FORMAT   passed to every process it starts
  -h, --help             this text
)"},
      {"admin", admin_usage().c_str()},
      {"admin keygen", R"(usage: troupe admin keygen [PREFIX]
Writes a CURVE key pair for the admin endpoint: PREFIX.key (the secret key, mode 0600) and
PREFIX.pub (the public key; list it in a topology's [admin] authorized_keys). Default PREFIX: admin.
)"},
      {"generate", R"(usage: troupe generate (--prompt TEXT | --prompt-ids 1,2,3 | --prompts-file FILE) [options]
Runs prompts through the engine in this process as one continuous batch.

  --config TOPOLOGY      the model and scheduler limits from a topology (cpu backend)
  --model DIR|FILE       the model folder, or a llama .gguf file (default models/kjv, the committed default model)
  --max-tokens N         tokens to generate per prompt
  --temperature T --top-k K --top-p P --min-p P --repetition-penalty R --seed S
  --stop STRING          stop at this text
  --ignore-eos           keep going past end-of-sequence tokens
  --kv-dtype f32|f16|bf16  --max-batched-tokens N  --chunk N  --kv-blocks N
  --json                 print the outputs as JSON
  -h, --help             this text
)"},
      {"model", R"(usage: troupe model synth|quantize [options]     (troupe model synth --help, troupe model quantize --help)
)"},
      {"model quantize", R"(usage: troupe model quantize --type q8_0|q4_0|int8 --model DIR --out DIR
Writes a copy of a model folder whose attention and MLP projections are quantized: q8_0 and
q4_0 are GGML's blocks of 32 weights with an f16 scale, int8 has one f32 scale per output
channel. Embeddings, norms, the LM head and the tokenizer are copied unchanged. The loader
reads the folder like any other (docs/quantization.md).

  --type q8_0|q4_0|int8  the format (required)
  --model DIR            the model to quantize (default models/kjv)
  --out DIR              where to write it (required; must not hold a model)
  -h, --help             this text
)"},
      {"model synth", R"(usage: troupe model synth --preset tiny|small|1b|moe --out DIR [options]
Writes a Hugging Face model folder (config.json, model.safetensors, tokenizer files) with
deterministic random weights.

  --preset tiny|small|1b|moe   the model's size (moe: sized for mixture-of-experts archs)
  --out DIR                where to write it (required)
  --arch llama|mistral|qwen2|mixtral|qwen2_moe|qwen3_moe  --dtype f32|f16|bf16  --seed N  --tied  --rope-scaling llama3
  -h, --help               this text
)"},
      {"bench", R"(usage: troupe bench engine|runtime|serve|kv-transfer|autoscale|collectives [options]     (troupe bench engine --help, ...)
)"},
      {"bench engine", R"(usage: troupe bench engine --model DIR [options]
Prefill and decode throughput of the engine against this machine's measured roofline.

  --model DIR|FILE       the model folder or .gguf file (required)
  --batches 1,4,16,32    decode batch sizes    --context N   context per sequence
  --prompt N             prefill length        --steps N     decode steps per batch
  --kv-dtype f32|f16|bf16  --json  --profile
  -h, --help             this text
)"},
      {"bench runtime", R"(usage: troupe bench runtime [options]
The control plane under load on a sim or cpu topology started in this process, or with
--overhead, the time outside the forward per decode step.

  --config TOPOLOGY      (default configs/sim-32.toml)
  --requests N  --prompt N  --max-tokens N  --json
  --overhead 1,64        batch sizes to measure the overhead at
  --log-level LEVEL      the cluster's log on stderr (default warn: no line per request)
  --log-format text|json
  -h, --help             this text
)"},
      {"bench serve", R"(usage: troupe bench serve --url http://HOST:PORT [options]
Loads an OpenAI-compatible server and reports TTFT, TPOT, ITL, E2E, throughput and goodput.
It first asks the server what it serves: the model's name and context (GET /v1/models) and its
tokenizer (POST /tokenize, /detokenize, as troupe serve and vLLM answer them). Prompts are real
text cut to the asked length in the server's own tokens; lengths left at their defaults shrink
to fit a smaller context, asked ones that cannot fit are refused before anything is sent.

  --url URL              the server (required)
  --model NAME           the served model name to send (default: the first /v1/models lists)
  --max-model-len N      the server's context in tokens (default: what /v1/models says)
  --api-key KEY          sent as 'Authorization: Bearer KEY' (default: $OPENAI_API_KEY)
  --dataset-name NAME    text (default): windows of real text; sharegpt: a ShareGPT file's first
                         human turns, their replies' lengths as output lengths; random: random
                         token ids below --vocab (for servers without /tokenize)
  --dataset-path FILE    the text file (text) or JSON file (sharegpt; the default for *.json);
                         without it, text prompts come from a built-in public-domain text
  --vocab N              the vocabulary for --dataset-name random
  --requests N (64)  --concurrency C  --rate R  --arrival poisson|fixed|burst
  --prompt-len N (200)  --output-len N (64)  --prompt-dist/--output-dist fixed|uniform|longtail
  --shared-prefix SYSTEMS:USERS:TOKENS  --shuffle  --block-size N (16)
  --trace FILE.jsonl     replay arrivals and lengths from a trace
  --chat                 /v1/chat/completions, the prompt as one user message
  --goodput "ttft:MS tpot:MS e2el:MS"  --json FILE [--detailed]  --plot PREFIX
  --seed S  --timeout S (1800)  --no-ignore-eos  --quiet
  -h, --help             this text
SIGINT or SIGTERM (Ctrl-C) stops sending: requests in flight finish and the report covers the
ones sent; a second one ends the program at once. A background load can so run for exactly as
long as something else takes (tools/bench/interference.sh).
Exits 1 when any request failed, naming what the server said.
)"},
      {"bench kv-transfer", R"(usage: troupe bench kv-transfer [options]
GB/s of each KV transfer backend (in-process, shared memory, TCP over loopback) moving f16
blocks of a 1B-class layout, against memcpy measured in the same run. The shared-memory and TCP
senders are a forked process.

  --sizes 1,4,16,64,256  MiB of KV per transfer
  --reps N               timed pulls per size and backend (median; default 5)
  --json                 one JSON object on stdout instead of the table
  -h, --help             this text
)"},
      {"bench collectives", R"(usage: troupe bench collectives [options]
All-reduce and all-to-all latency and bandwidth of the collectives backends that run here
(Gloo between processes over loopback TCP, shared memory between threads), per message size,
against memcpy bandwidth in the same run; with --model, the step time of a replica's worker
group for TP=1, TP=2, PP=2 and PP=2 with 2 micro-batches, and its time in collectives.

  --ranks N          ranks per group (default 2)
  --sizes LIST       bytes per rank, comma-separated, B/KiB/MiB (default 4KiB,64KiB,1MiB,16MiB)
  --no-gloo          shared memory only
  --model DIR        also time worker groups on this model
  --seqs N  --context T  --steps S   the groups' decode batch, prompt length, decode steps (8, 128, 8)
  --json             machine-readable output
  -h, --help         this text
)"},
      {"bench autoscale", R"(usage: troupe bench autoscale [options]
Replays a request trace into a sim topology started in this process, with time compressed, and
reports the replica-hours a pool used, SLO attainment and each change of the pool's size, all in
simulated time. The autoscaler runs as configured; --fixed N runs N replicas without it.

  --config TOPOLOGY      a sim topology with [autoscaler] (default configs/autoscale-sim.toml)
  --pool NAME            the pool measured (default: the first)
  --trace FILE           a trace: CSV "seconds,prompt_tokens,max_tokens" after that header
  --shape NAME           or a generated one: ramp-spike-quiet (80 s, default) or hour (3600 s)
  --peak R               the shape's peak requests/s (default 40)   --seed S   its arrivals
  --write-trace FILE     write the trace and exit (how a test's recorded trace is made)
  --speedup X            simulated seconds per wall second (default 10)
  --fixed N              N replicas, no autoscaler (the comparison)
  --settle S             keep watching the pool S simulated seconds after the last request ends
  --ttft-slo S  --itl-slo S   the SLO a request must meet (default: the autoscaler's, else 1 s, 0.1 s)
  --json                 one JSON object on stdout
  --log-level LEVEL      debug, info, warn (default), error or off
  --log-format FORMAT    text (default) or json
  -h, --help             this text
)"},
      {"info", R"(usage: troupe info
Prints what this build and machine offer: the instruction set in use, threads, CUDA devices.
)"},
  };
  return u;
}

}  // namespace

const char* usage_of(const std::string& command) {
  auto it = usages().find(command);
  return it == usages().end() ? nullptr : it->second;
}

std::string command_of(int argc, char** argv) {
  if (argc < 2) return "";
  std::string cmd = argv[1];
  if (argc >= 3 && usages().count(cmd + " " + argv[2])) cmd += std::string(" ") + argv[2];
  return cmd;
}

}  // namespace troupe::cli
