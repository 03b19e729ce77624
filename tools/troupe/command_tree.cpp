// Every troupe command and every flag it takes, each with its help: the one place both the parser
// and --help read (tools/troupe/command_line.h). A flag a command reads must be declared here,
// and one declared here must be read by its command.
#include "tools/troupe/command_line.h"

#include "runtime/admin/admin_message.h"
#include "tools/troupe/commands.h"

namespace troupe::cli {

namespace {

// --tls-certificate, --tls-key, --tls-ca (tools/troupe/cmd_cluster.cpp reads the three together).
command& tls_flags(command& c) {
  return c
      .option("tls-certificate", "FILE", "TLS for the links between processes: this process's certificate (with --tls-key "
                                         "and --tls-ca; replaces [cluster]'s files, as launch --netns passes them)")
      .option("tls-key", "FILE", "this process's TLS private key")
      .option("tls-ca", "FILE", "the certificate authority every process of the cluster is signed by");
}

void declare_serve(command& root) {
  command serve = root.sub("serve", "the head of a topology: the OpenAI HTTP API, router, request owner, node registry", "[CONFIG | MODEL] [options]",
           "The head of a topology: the OpenAI HTTP API, router, request owner, and the registry nodes join. vLLM's habits work: "
           "`troupe serve models/kjv --served-model-name kjv --max-model-len 256`.",
           cmd_serve)
      .positional("CONFIG | MODEL", "a topology file, *.toml (default configs/local.toml); or a model folder or .gguf file, "
                                    "served by configs/local.toml (as --model)")
      .option("port", "N", "HTTP port (default: the topology's [frontend] address, else 8000; 0: any free port)")
      .option("host", "HOST", "HTTP address (default: the topology's, else 127.0.0.1); off loopback it needs --api-key "
                              "(or [frontend] api_keys), or --allow-unauthenticated")
      .flag("allow-unauthenticated", "serve the OpenAI API off loopback without any API key")
      .option("model", "DIR|FILE", "the model folder or .gguf file (default: the topology's [model] path)")
      .option("served-model-name", "NAME[,ALIAS...]", "the model's name in the API, and other names requests may use ([frontend] model_name)")
      .option("max-model-len", "N", "the context in tokens ([model] max_model_len); at most the model's positions")
      .option("tensor-parallel-size", "N", "ranks of every pool's tensor-parallel group (tensor_parallel)")
      .flag("enable-lora", "serve LoRA adapters ([lora]; docs/lora.md)")
      .option("lora-modules", "NAME=PATH[,NAME=PATH...]", "adapters every replica loads at start, served as models by NAME ([[lora.adapters]])")
      .option("max-loras", "N", "adapters loaded at once per replica ([lora] max_adapters; default 8); VLLM_ALLOW_RUNTIME_LORA_UPDATING=true "
                               "turns on /v1/load_lora_adapter and /v1/unload_lora_adapter ([lora] runtime_loading)")
      .option("shutdown-grace", "S", "on SIGINT/SIGTERM, seconds in-flight requests have to finish while new ones get 503 "
                                     "([frontend] shutdown_grace; default 30); streams still open then end with an error "
                                     "event and [DONE]")
      .option("name", "HEAD", "which head of the topology this is (default: the first)")
      .option("registry-port", "N", "the node registry's port (default: the head node's)")
      .option("admin-port", "N", "the admin endpoint at port N, its events at N + 1 (on [admin]'s host, else on loopback: "
                                 "this turns the admin console on)")
      .option("listen", "HOST", "the node registry's address")
      .option("api-key", "KEY", "require 'Authorization: Bearer KEY' on the OpenAI routes")
      .option("chat-template", "FILE", "a .jinja chat template instead of the model folder's");
  tls_flags(serve).log_flags("info");
}

void declare_cluster(command& root) {
  command node = root.sub("node", "a process hosting the replicas a topology places on one node", "CONFIG --name NODE [options]",
           "A process hosting the replicas a topology places on one node; it joins the heads and serves them (rejoining a "
           "head that comes back) until SIGINT or SIGTERM, which stop it in order.",
           cmd_node)
      .positional("CONFIG", "the topology file")
      .option("name", "NODE", "the node of CONFIG this process is (required)")
      .option("head", "HOST:PORT[,..]", "the heads' node registries (default: every head of the topology)")
      .option("model", "DIR|FILE", "the model folder or .gguf file (default: the topology's)")
      .option("status-file", "FILE", "keep one word in FILE for probes: loading; once joined ready, draining or parked (by what its replicas do), joining while no head is joined; stopping on a signal");
  tls_flags(node).log_flags("info");
  root.sub("launch", "start every node of a topology as local processes and keep them running", "CONFIG [options]",
           "Starts every node of a topology as local processes (the head as `troupe serve`) and restarts any that dies, "
           "with backoff (and a pause when one keeps dying), until Ctrl-C.",
           cmd_launch)
      .positional("CONFIG", "the topology file")
      .flag("netns", "each node in a network namespace of its own (needs root)")
      .option("model", "DIR|FILE", "the model folder or .gguf file (default: the topology's)")
      .option("port", "N", "the head's HTTP port (head k of several: N + k)")
      .option("registry-port", "N", "the head's node registry port (head k: N + k); the nodes are told")
      .option("admin-port", "N", "the head's admin endpoint, events at N + 1 (head k: N + 2k)")
      .option("shutdown-grace", "S", "the heads' grace for requests in flight on Ctrl-C (see troupe serve --help)")
      .option("restart-pause", "DURATION", "a process that dies more than 5 times within 60 s is paused this long, then tried again; "
                                           "the pause doubles while it keeps dying (default 60s, at most 10m)")
      .log_flags("info (passed to every process it starts)");
}

// The server's commands come from the list the admin actor answers `help` with
// (runtime/admin/admin_message.h), so a command added there is in --help too.
std::string admin_footer() {
  std::string out = "commands (the server's):\n";
  auto line = [&](const std::string& name, const std::string& what) {
    out += "  " + name + (name.size() < 24 ? std::string(24 - name.size(), ' ') : "\n" + std::string(26, ' ')) + what + "\n";
  };
  for (const auto& [name, what] : admin::server_commands()) line(name, what);
  out += "\ncommands (this console's):\n";
  line("watch", "follow the event stream (placements, migrations, replica deaths, restarts and drains, admin actions)");
  line("top", "a live full-screen view of replicas, queues, KV use and throughput, as wide as the terminal");
  line("keygen [PREFIX]", "write PREFIX.key (secret, 0600) and PREFIX.pub (troupe admin keygen --help)");
  return out;
}

void declare_admin(command& root) {
  command admin =
      root.sub("admin", "the console of a running cluster: status, kv, drain, kill, scale, watch, top (ZeroMQ)",
               "[options] [COMMAND [ARGS]]",
               "The console of a running cluster, over its ZeroMQ admin endpoint (docs/admin.md). Without a COMMAND: an "
               "interactive console (line editing, history; quit ends it). Results print as tables or sentences; --json "
               "prints the reply as it came.",
               cmd_admin)
          .positional("COMMAND [ARGS]", "one command and its arguments (below), run once", -1)
          .option("endpoint", "E", "the admin endpoint (default tcp://127.0.0.1:7600)")
          .option("events", "E", "the event stream, for watch (default tcp://127.0.0.1:7601)")
          .option("config", "TOPOLOGY", "take both (and the server's public key) from a topology's [admin]")
          .option("server-key", "KEY|FILE", "the server's CURVE public key")
          .option("key", "FILE", "this client's CURVE secret key")
          .flag("json", "print results (and events) as JSON")
          .option("timeout", "S", "seconds to wait for a reply (default 30)")
          .option("count", "N", "watch: stop after N events; top: after N frames")
          .option("for", "S", "watch and top: stop after S seconds")
          .option("model", "DIR", "swap, rollout: the new revision's model folder (or GGUF file), on every node of the pool")
          .option("revision", "R", "swap, rollout: the new revision's name (part of its cache key)")
          .option("canary", "P%", "rollout: the canary's first share of the pool's senders (default 10%)")
          .option("step", "P%:DURATION", "rollout: how much the share grows, after how long (default 10%:5m)")
          .option("max-ttft-ratio", "X", "rollout: the canary's TTFT p50 and p99 over the baseline's, at most (default 1.5)")
          .option("max-itl-ratio", "X", "rollout: the same for the time between tokens (default 1.5)")
          .option("max-error-rate", "X", "rollout: the canary's failed share above the baseline's, at most (default 0.01)")
          .option("max-refusal-rate", "X", "rollout: the canary's refused share above the baseline's, at most (default 0.05)")
          .option("min-requests", "N", "rollout: requests on each side before the gate judges (default 20)")
          .option("held-out", "FILE", "rollout: quality gate: text (read on the head) whose perplexity the canary must keep")
          .option("prompts", "FILE", "rollout: quality gate: prompts, one per line (read on the head), the canary must answer as the baseline does")
          .option("max-ppl-ratio", "X", "rollout: the canary's held-out perplexity over the baseline's, at most (default 1.05)")
          .option("min-greedy-match", "P%", "rollout: the share of the baseline's greedy answers the canary must match (default 80%)")
          .option("greedy-tokens", "N", "rollout: tokens each quality prompt is answered with (default 16)")
          .footer(admin_footer());
  admin.sub("keygen", "write a CURVE key pair for the admin endpoint", "[PREFIX]",
            "Writes a CURVE key pair for the admin endpoint: PREFIX.key (the secret key, mode 0600) and PREFIX.pub (the public "
            "key; list it in a topology's [admin] authorized_keys).",
            cmd_admin_keygen)
      .positional("PREFIX", "where the two files go (default: admin)");
}

void declare_generate(command& root) {
  root.sub("generate", "run prompts through the engine as one continuous batch",
           "(--prompt TEXT | --prompt-ids 1,2,3 | --prompts-file FILE) [options]",
           "Runs prompts through the engine in this process as one continuous batch.", cmd_generate)
      .option("prompt", "TEXT", "a prompt, tokenized with the model's tokenizer")
      .option("prompt-ids", "1,2,3", "a prompt as token ids")
      .option("prompts-file", "FILE", "one prompt a line")
      .option("config", "TOPOLOGY", "the model and scheduler limits from a topology (cpu backend)")
      .option("model", "DIR|FILE", "the model folder, or a llama .gguf file (default models/kjv, the committed default model)")
      .option("max-tokens", "N", "tokens to generate per prompt")
      .option("temperature", "T", "sampling temperature (default 0: greedy; unlike serve, generate does not take the model's "
                                  "generation_config.json defaults: give the sampling flags to sample)")
      .option("top-k", "K", "sample among the K likeliest tokens")
      .option("top-p", "P", "sample among the likeliest tokens holding probability P")
      .option("min-p", "P", "drop tokens below P times the likeliest's probability")
      .option("repetition-penalty", "R", "divide the logits of tokens already seen by R")
      .option("seed", "S", "the sampler's seed")
      .option("stop", "STRING", "stop at this text")
      .flag("ignore-eos", "keep going past end-of-sequence tokens")
      .option("kv-dtype", "f32|f16|bf16|int8", "the KV cache's element type (int8: a scale per token and head)")
      .option("max-batched-tokens", "N", "tokens per engine step")
      .option("chunk", "N", "prefill chunk in tokens")
      .option("kv-blocks", "N", "KV blocks in the pool")
      .flag("json", "print the outputs as JSON");
}

void declare_model(command& root) {
  command model = root.sub("model", "write model folders", "synth|quantize [options]", "");
  model.sub("synth", "write a model folder with deterministic random weights", "--preset tiny|small|1b|moe --out DIR [options]",
            "Writes a Hugging Face model folder (config.json, model.safetensors, tokenizer files) with deterministic random "
            "weights.",
            cmd_model_synth)
      .option("preset", "tiny|small|1b|moe", "the model's size (moe: sized for mixture-of-experts archs; default small)")
      .option("out", "DIR", "where to write it (required)")
      .option("arch", "ARCH", "a family: llama (default), mistral, mixtral, qwen2, qwen3, qwen2_moe, qwen3_moe, gemma2, gemma3, granite, olmo2, smollm3 or phi3")
      .option("dtype", "f32|f16|bf16", "the weights' element type (default f32)")
      .option("seed", "N", "the weights' seed (default 0)")
      .flag("tied", "tie the LM head to the embedding table")
      .option("rope-scaling", "llama3|linear|yarn|dynamic", "a rotary scaling: Llama 3.1's, linear (factor 2), YaRN (factor 4 over 256 positions), dynamic NTK (factor 2)")
      .option("head-dim", "N", "each attention head's size (default hidden size / heads)")
      .option("partial-rotary", "F", "the share of each head RoPE rotates (Phi-4-mini's 0.75; default all of it)")
      .option("vocab", "N", "the vocabulary size (default the preset's; a real family's to serve its tokenizer.json with the weights)")
      .option("sliding-window", "N", "the windowed layers' window in positions (Gemma 3 1B's 512; default 32, what tests pass)")
      .option("layers", "N", "the number of layers (default the preset's)");
  model.sub("synth-lora", "write a LoRA adapter with deterministic random matrices for a base model", "--base MODEL --out DIR [options]",
            "Writes a PEFT adapter folder (adapter_config.json, adapter_model.safetensors) shaped for the base model, with random "
            "matrices on every projection: what docs/lora.md serves. It adapts nothing learnt.",
            cmd_model_synth_lora)
      .option("base", "MODEL", "the base model folder or GGUF file it is shaped for (required)")
      .option("out", "DIR", "where to write it (required)")
      .option("rank", "N", "its rank (default 4; lora_alpha is twice it)")
      .option("seed", "N", "the matrices' seed (default 11)");
  model.sub("quantize", "write a copy of a model with quantized weights: a folder, or a GGUF file in llama.cpp's mixes",
            "--type TYPE --model DIR --out DIR|FILE.gguf",
            "To a folder: a copy whose attention and MLP projections are quantized: q8_0 and q4_0 are GGML's blocks of 32 "
            "weights with an f16 scale, int8 has one f32 scale per output channel, and a mix (q2_k|q3_k_m|q4_k_m|q5_k_m|q6_k|"
            "iq4_xs) puts each projection in the K-quant or IQ4_XS format llama.cpp's mix of that name gives it; embeddings, "
            "norms, the LM head and the tokenizer are copied unchanged. To a .gguf file (any mix, q4_0, q8_0, or f16 and f32 "
            "unquantized): a GGUF file of the model's family (llama, qwen2, qwen3, gemma2, gemma3, granite, olmo2, smollm3) with its tokenizer and chat template, every tensor in the type the mix gives it, the head and embedding table "
            "included; llama.cpp reads it, and so does every command that takes --model. Both quantize without an importance "
            "matrix (docs/quantization.md).",
            cmd_model_quantize)
      .option("type", "TYPE", "q8_0, q4_0, int8 (a folder only), f16 or f32 (a .gguf file only), or a mix: q2_k, q3_k_m, q4_k_m, "
              "q5_k_m, q6_k, iq4_xs (required)")
      .option("model", "DIR", "the model to quantize (default models/kjv)")
      .option("out", "DIR|FILE.gguf", "where to write it (required; a folder must not hold a model, a file is replaced)");
}

void declare_deploy(command& root) {
  command deploy = root.sub("deploy", "the objects that run a topology on an orchestrator", "kubernetes TOPOLOGY.toml [options]", "");
  deploy.sub("kubernetes", "Kubernetes manifests for a topology: StatefulSets, Services, ConfigMap, Secrets, PDBs, KEDA",
             "TOPOLOGY.toml [--image IMAGE] [--namespace NS] [-o DIR]",
             "Writes the Kubernetes objects a topology means (docs/deploy.md): heads and nodes as StatefulSets, a headless "
             "Service for node discovery and a Service for the OpenAI API, the topology in a ConfigMap, the cluster token, an "
             "API key, the admin endpoint's CURVE keys and TLS material as Secrets (generated here), probes, a preStop hook "
             "that drains a pod's replicas, a PodDisruptionBudget per pool, a ServiceMonitor, and a KEDA ScaledObject for "
             "each pool whose replicas are pods. What pods cannot run is refused naming the topology's key.",
             cmd_deploy_kubernetes)
      .positional("TOPOLOGY.toml", "the topology file")
      .option("image", "IMAGE", "the container image (default troupe:latest; Containerfile)")
      .option("namespace", "NS", "the namespace of every object (default: default)")
      .option("name", "NAME", "what every object's name starts with (default troupe)")
      .option("o,out", "DIR", "write one file per object and a kustomization.yaml there (default: every object to standard output)")
      .option("models-claim", "PVC", "the PersistentVolumeClaim holding the model folders, mounted at /models (default NAME-models)")
      .option("tls-secret", "SECRET", "an existing Secret with tls.crt, tls.key and ca.crt (default: a self-signed one is generated)")
      .option("prometheus", "URL", "the Prometheus KEDA queries (default http://prometheus-operated.monitoring.svc:9090)");
}

void declare_plan(command& root) {
  root.sub("plan", "the cheapest topology that serves a trace within an SLO, by simulating the cluster",
           "--trace FILE --slo ttft_p99=2s,itl_p99=100ms --profile FILE[,FILE...] [options]",
           "Simulates the cluster (the router's policy, the scheduler and the KV cache manager of every replica, in virtual "
           "time, priced by step and KV transfer profiles measured on the target hardware) over aggregated and disaggregated "
           "topologies, replicas per pool, prefill chunks, step token budgets and the tensor-parallel degrees of the profiles "
           "given; prints the cheapest topology meeting the SLO, the Pareto table of devices against goodput and SLO "
           "attainment with a plot, and writes the topology (docs/performance.md).",
           cmd_plan)
      .option("trace", "FILE", "the requests: an Azure LLM inference trace, Mooncake JSONL, BurstGPT or troupe CSV (required)")
      .option("slo", "SPEC", "percentile limits, comma-separated: ttft_pP, itl_pP, e2e_pP = a time (required; as ttft_p99=2s,itl_p99=100ms)")
      .option("profile", "FILE[,FILE]", "step profiles (troupe bench engine --fit-profile; a transfer fit from troupe bench kv-transfer "
                                         "--fit-profile for disaggregated topologies), one per tensor-parallel degree (required)")
      .option("max-replicas", "N", "replicas per topology at most, all pools together (default 8)")
      .option("modes", "agg,disagg", "which topologies to search (default both; disagg without a transfer fit is skipped, or refused when named)")
      .option("chunks", "256,512,1024", "prefill chunks to try (tokens of one request per step)")
      .option("budgets", "1024,2048,4096", "step token budgets to try")
      .option("policy", "NAME", "the router's policy (default least_loaded)")
      .option("kv-blocks", "N", "KV blocks of 16 tokens per replica (default 4096)")
      .option("max-seqs", "N", "running sequences per replica at most (default 128)")
      .option("report-interval", "S", "seconds between replicas' load reports (default 0: the router sees loads as they are)")
      .option("model", "DIR", "the model path written into the topology (default models/kjv); with --config, the model it serves")
      .option("o,out", "FILE", "where to write the chosen topology (default: printed after the table, or as \"topology\" with --json)")
      .option("plot", "FILE.svg", "also draw every topology tried, devices against goodput, as SVG")
      .option("config", "TOPOLOGY", "predict this topology's latencies and goodput on the trace instead of searching (one --profile)")
      .flag("exhaustive", "simulate every point of the space instead of searching it (slower; the same answer when more replicas never hurt)")
      .flag("json", "the result as one JSON object on stdout");
}

void declare_eval(command& root) {
  command eval = root.sub("eval", "measure a model's quality", "perplexity [options]", "");
  eval.sub("perplexity", "a model's teacher-forced perplexity on a text (the quality gate)", "--text FILE [options]",
           "A model's perplexity on a text, teacher-forced: the text's tokens are cut into consecutive windows of the model's "
           "context, and every token after a window's first is scored by the probability the model gives it after the "
           "window's earlier tokens (runtime/eval/perplexity.h).",
           cmd_eval_perplexity)
      .option("text", "FILE", "the text to score (UTF-8; tokenized with the model's tokenizer.json)")
      .option("model", "DIR|FILE", "the model folder, or a llama .gguf file (default: models/kjv, the committed default model)")
      .option("window", "N", "tokens per window (default: the model's max_position_embeddings)")
      .option("chunk", "N", "tokens per forward within a window (default 256; bounds memory only)")
      .option("kv-dtype", "f32|f16|bf16|int8", "the KV cache's element type (default f32; int8 prices KV quantization)")
      .flag("json", "print the result as JSON")
      .log_flags("info");
}

}  // namespace

void declare_commands(command_line& cl) {
  command root = cl.root();
  declare_serve(root);
  declare_cluster(root);
  declare_admin(root);
  declare_generate(root);
  declare_model(root);
  declare_bench(root);
  declare_eval(root);
  declare_deploy(root);
  declare_plan(root);
  root.sub("info", "what this build and machine offer (ISA, threads, CUDA)", "",
           "Prints what this build and machine offer: the instruction set in use, threads, CUDA devices.", cmd_info);
  root.footer("troupe COMMAND --help shows a command's flags; troupe --version prints the version.");
}

}  // namespace troupe::cli
