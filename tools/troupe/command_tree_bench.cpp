// The troupe bench commands and their flags (see command_tree.cpp).
#include "tools/troupe/command_line.h"
#include "tools/troupe/commands.h"

namespace troupe::cli {

namespace {

void declare_bench_engine(command& bench) {
  bench.sub("engine", "prefill and decode throughput against the machine's roofline", "--model DIR [options]",
            "Prefill and decode throughput of the engine against this machine's measured roofline.", cmd_bench_engine)
      .option("model", "DIR|FILE", "the model folder or .gguf file (required)")
      .option("batches", "1,4,16,32", "decode batch sizes")
      .option("context", "N", "context per sequence (default 128)")
      .option("prompt", "N", "prefill length (default 512)")
      .option("steps", "N", "decode steps per batch (default 8)")
      .option("verify", "K", "also time each batch as a speculative verify step of K proposals per sequence (1 + K rows each)")
      .option("kv-dtype", "f32|f16|bf16|int8", "the KV cache's element type (default: the weights'; int8: a scale per token and head)")
      .option("kv-context", "N", "for a model with sliding-window and global layers: the KV one sequence of N positions holds per "
                                 "position, its windowed layers' pages freed and every position kept (default 32768)")
      .option("fit-profile", "FILE", "also write the cluster simulator's step profile fitted to the steps measured and to prefills of a "
                                     "quarter and a half of the prompt (troupe bench sim --profile)")
      .flag("json", "one JSON object on stdout")
      .flag("profile", "time each operation of the forward");
  bench.sub("runtime", "the control plane under load, or the time outside the forward", "[options]",
            "The control plane under load on a sim or cpu topology started in this process, or with --overhead, the time "
            "outside the forward per decode step.",
            cmd_bench_runtime)
      .option("config", "TOPOLOGY", "the topology (default configs/sim-32.toml; with --overhead, configs/local.toml)")
      .option("requests", "N", "requests to send (default 10000)")
      .option("prompt", "N", "prompt tokens per request (default 256)")
      .option("max-tokens", "N", "tokens generated per request (default 32)")
      .option("overhead", "1,64", "batch sizes to measure the overhead at")
      .flag("json", "one JSON object on stdout")
      .log_flags("warn: no line per request");
}

void declare_bench_serve(command& bench) {
  bench.sub("serve", "load an OpenAI-compatible server and report TTFT, TPOT, ITL, E2E, throughput", "--url http://HOST:PORT [options]",
            "Loads an OpenAI-compatible server and reports TTFT, TPOT, ITL, E2E, throughput and goodput. It first asks the "
            "server what it serves: the model's name and context (GET /v1/models) and its tokenizer (POST /tokenize, "
            "/detokenize, as troupe serve and vLLM answer them). Prompts are real text cut to the asked length in the "
            "server's own tokens; lengths left at their defaults shrink to fit a smaller context, asked ones that cannot fit "
            "are refused before anything is sent.",
            cmd_bench_serve)
      .option("url", "URL", "the server (required)")
      .option("model", "NAME", "the served model name to send (default: the first /v1/models lists)")
      .option("max-model-len", "N", "the server's context in tokens (default: what /v1/models says)")
      .option("api-key", "KEY", "sent as 'Authorization: Bearer KEY' (default: $OPENAI_API_KEY)")
      .option("dataset-name", "NAME", "text (default): windows of real text; sharegpt: a ShareGPT file's first human turns, "
                                      "their replies' lengths as output lengths; random: random token ids below --vocab "
                                      "(for servers without /tokenize)")
      .option("dataset-path", "FILE", "the text file (text) or JSON file (sharegpt; the default for *.json); without it, "
                                      "text prompts come from a built-in public-domain text")
      .option("vocab", "N", "the vocabulary for --dataset-name random")
      .option("requests", "N", "requests to send (default 64)")
      .option("concurrency", "C", "at most C requests in flight")
      .option("rate", "R", "requests per second (default: all at once)")
      .option("arrival", "poisson|fixed|burst", "how arrivals are spaced at --rate")
      .option("prompt-len", "N", "prompt tokens (default 200)")
      .option("output-len", "N", "output tokens (default 64)")
      .option("prompt-dist", "fixed|uniform|longtail", "the prompt lengths' distribution around --prompt-len")
      .option("output-dist", "fixed|uniform|longtail", "the output lengths' distribution around --output-len")
      .option("shared-prefix", "SYSTEMS:USERS:TOKENS", "SYSTEMS system prompts of TOKENS tokens, each shared by USERS requests")
      .flag("shuffle", "interleave the shared-prefix requests' system prompts (seeded) instead of sending them system by system")
      .option("block-size", "N", "the server's KV block size, for the shared prefixes' cache-hit estimate (default 16)")
      .option("trace", "FILE.jsonl", "replay arrivals and lengths from a trace")
      .option("baseline", "NAME", "then replay the same requests against this served model and report the two side by side")
      .option("baseline-url", "URL", "with --baseline: the baseline's server (default --url)")
      .flag("canary-split", "during a rollout: replay against the model's canary (X-Troupe-Split: canary), then its baseline, side by side")
      .flag("chat", "/v1/chat/completions, the prompt as one user message")
      .option("goodput", "\"ttft:MS tpot:MS e2el:MS\"", "the SLO a request must meet to count as goodput")
      .option("fit-profile", "FILE", "with --concurrency 1: add what serving costs beyond the forward to a step profile "
                                     "(troupe bench engine --fit-profile FILE): per step, per first token and per stream (told "
                                     "apart from the step's with answers of several lengths, as --output-dist uniform gives); "
                                     "against a disaggregated server, what a handoff costs beyond the KV copy (after an "
                                     "aggregated server's fit)")
      .option("json", "FILE", "write the report as JSON")
      .flag("detailed", "with --json: every request's timings too")
      .option("plot", "PREFIX", "draw the latency distributions with gnuplot")
      .option("seed", "S", "the workload's seed")
      .option("timeout", "S", "seconds a request may take (default 1800)")
      .flag("no-ignore-eos", "let requests end at end-of-sequence (default: they run to their output length)")
      .flag("quiet", "no progress bar")
      .footer("SIGINT or SIGTERM (Ctrl-C) stops sending: requests in flight finish and the report covers the ones sent; a\n"
              "second one ends the program at once. A background load can so run for exactly as long as something\n"
              "else takes (tools/bench/interference.sh). Exits 1 when any request failed, naming what the server said.\n");
}

void declare_bench_rest(command& bench) {
  bench.sub("kv-transfer", "GB/s of each KV transfer backend against this machine's memcpy", "[options]",
            "GB/s of each KV transfer backend (in-process, shared memory, TCP over loopback) moving f16 blocks of a 1B-class "
            "layout, against memcpy measured in the same run. The shared-memory and TCP senders are a forked process.",
            cmd_bench_kv)
      .option("sizes", "1,4,16,64,256", "MiB of KV per transfer")
      .option("reps", "N", "timed pulls per size and backend (median; default 5)")
      .option("fit-profile", "FILE", "add the transfer cost fitted to these pulls to a step profile (troupe bench engine --fit-profile FILE)")
      .option("backend", "inproc|shm|tcp", "the backend --fit-profile fits (default tcp: between nodes)")
      .flag("json", "one JSON object on stdout instead of the table");
  bench.sub("structured", "what constrained decoding costs: compile, mask per token, tok/s with a schema", "[options]",
            "Over the JSON Schema corpus on a real model: compile time per schema (cold), the token mask per token per "
            "sequence replayed over the tokens the engine chose (a schema's first use after the others, in a new process, "
            "and cached), and output tokens per second with and without a schema at concurrency 1 and 16 (rounds "
            "alternating the two; the median ratio), all in this process.",
            cmd_bench_structured)
      .option("model", "DIR", "the model folder (default models/kjv)")
      .option("corpus", "FILE", "the schemas, [{name, schema}] (default tests/structured/corpus/schemas.json)")
      .option("max-tokens", "N", "tokens per request at most (default 128)")
      .option("rounds", "N", "throughput rounds, each with and without a schema (default 3)")
      .flag("json", "one JSON object on stdout instead of the table");
  bench.sub("tokenizer", "encode and decode MB/s of a tokenizer on one thread", "--tokenizer FILE --corpus FILE [options]",
            "Encode (without special tokens) and decode throughput of a tokenizer on one thread, in MB of text per second, "
            "over a corpus of strings; tools/bench/tokenizers.sh runs it beside the Hugging Face library on the same files.",
            cmd_bench_tokenizer)
      .option("tokenizer", "FILE|DIR", "a tokenizer.json, or a model folder or .gguf file (required)")
      .option("corpus", "FILE", "a JSON array of strings (tests/tokenizer/make_corpus.py writes one), or a text file read "
                                "line by line (required)")
      .option("seconds", "S", "time each of encode and decode for at least this long (default 2)")
      .flag("json", "one JSON object on stdout");
  bench.sub("autoscale", "the autoscaler (or a fixed pool) against a trace, on the sim backend", "[options]",
            "Replays a request trace into a sim topology started in this process, with time compressed, and reports the "
            "replica-hours a pool used, SLO attainment and each change of the pool's size, all in simulated time. The "
            "autoscaler runs as configured; --fixed N runs N replicas without it.",
            cmd_bench_autoscale)
      .option("config", "TOPOLOGY", "a sim topology with [autoscaler] (default configs/autoscale-sim.toml)")
      .option("pool", "NAME", "the pool measured (default: the first)")
      .option("trace", "FILE", "a trace: CSV \"seconds,prompt_tokens,max_tokens\" after that header, or a public one "
              "(Azure LLM inference CSV, Mooncake JSONL with its prefix blocks, BurstGPT CSV; docs/performance.md)")
      .option("shape", "NAME", "or a generated one: ramp-spike-quiet (80 s, default) or hour (3600 s)")
      .option("peak", "R", "the shape's peak requests/s (default 40)")
      .option("seed", "S", "the shape's arrivals")
      .option("write-trace", "FILE", "write the trace and exit (how a test's recorded trace is made)")
      .option("speedup", "X", "simulated seconds per wall second (default 10)")
      .option("fixed", "N", "N replicas, no autoscaler (the comparison)")
      .option("settle", "S", "keep watching the pool S simulated seconds after the last request ends")
      .option("ttft-slo", "S", "the TTFT a request must meet (default: the autoscaler's, else 1 s)")
      .option("itl-slo", "S", "the ITL a request must meet (default: the autoscaler's, else 0.1 s)")
      .flag("json", "one JSON object on stdout")
      .log_flags("warn");
  bench.sub("sim", "how fast the cluster simulator runs: simulated requests per wall second by cluster size", "[options]",
            "Runs the cluster simulator (the router's policy, the scheduler and the KV cache manager of every replica, in "
            "virtual time) on a seeded synthetic workload whose arrival rate grows with the cluster, and reports wall time, "
            "simulated requests per wall second, and the simulated TTFT and ITL at each size.",
            cmd_bench_sim)
      .option("replicas", "32,256,1000", "the cluster sizes")
      .option("requests", "N", "requests per size (default 1000000)")
      .option("rate", "R", "requests/s per replica (default 4)")
      .option("policy", "NAME", "the router's policy: least_loaded (default), kv_aware, round_robin")
      .option("profile", "FILE", "the step profile (troupe bench engine --fit-profile); default: 4 ms + 30 us/token + 2 ns/context position")
      .flag("json", "one JSON object on stdout");
  bench.sub("collectives", "all-reduce and all-to-all per backend, and TP/PP step times", "[options]",
            "All-reduce and all-to-all latency and bandwidth of the collectives backends that run here (Gloo between "
            "processes over loopback TCP, shared memory between threads), per message size, against memcpy bandwidth in "
            "the same run; with --model, the step time of a replica's worker group for TP=1, TP=2, PP=2 and PP=2 with 2 "
            "micro-batches, and its time in collectives.",
            cmd_bench_collectives)
      .option("ranks", "N", "ranks per group (default 2)")
      .option("sizes", "LIST", "bytes per rank, comma-separated, B/KiB/MiB (default 4KiB,64KiB,1MiB,16MiB)")
      .flag("no-gloo", "shared memory only")
      .option("model", "DIR", "also time worker groups on this model")
      .option("seqs", "N", "the groups' decode batch (default 8)")
      .option("context", "T", "the groups' prompt length (default 128)")
      .option("steps", "S", "the groups' decode steps (default 8)")
      .flag("json", "machine-readable output");
}

}  // namespace

void declare_bench(command& root) {
  command bench = root.sub("bench", "measure the engine, the runtime, a server, transfers, autoscaling, collectives",
                           "engine|runtime|serve|kv-transfer|autoscale|collectives [options]", "");
  declare_bench_engine(bench);
  declare_bench_serve(bench);
  declare_bench_rest(bench);
}

}  // namespace troupe::cli
