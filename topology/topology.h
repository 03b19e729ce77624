// A Troupe topology: which model, which backend, which nodes (processes), which pools of
// replicas on which nodes, scheduler limits, the routing policy and the failure timeouts.
// Read from TOML in one place (load_topology); everything else takes these structs.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/dtype.h"
#include "runtime/admission/admission.h"
#include "runtime/autoscale/autoscale.h"
#include "runtime/kv/transfer/kv_handle.h"
#include "runtime/routing/placement.h"
#include "runtime/routing/policy.h"
#include "runtime/common/ids.h"
#include "runtime/sched/scheduler.h"
#include "runtime/speculative/config.h"

namespace troupe::topology {

enum class backend_kind { cpu, cuda, sim };
using pool_role = routing::replica_role;  // prefill, decode, both

const char* backend_name(backend_kind b);
const char* role_name(pool_role r);

// A model the topology serves: [model] (the default, `name` empty), or one [models.NAME] table.
struct model_spec {
  std::string name;    // the table's NAME; empty for [model]
  // The names requests give it ([models.NAME] served_names; default [NAME]): the first is the
  // name answers carry. [model]'s come from [frontend] model_name (default: the folder's name).
  std::vector<std::string> served_names;
  // A label for this version of the weights (a commit, a date): part of the cache key with the
  // weights' fingerprint, so two revisions never share KV blocks even with equal files.
  std::string revision;
  std::string path;    // a Hugging Face folder (cpu, cuda); optional for sim
  std::string preset;  // sim without a folder: tiny | small | 1b sizes
  backend_kind backend = backend_kind::cpu;
  int max_model_len = 0;  // 0: the model's own
  std::string chat_template;  // a .jinja file replacing the model folder's template
  // The format the model writes tool calls in: hermes | llama3_json | mistral | none; empty:
  // inferred from the chat template.
  std::string tool_call_parser;
  // A smaller model that answers this one's overflow instead of refusing it (docs/models.md):
  // a [models.NAME]'s NAME (read as written: one of its served names, resolved to NAME), with the
  // same tokenizer. It applies to a request the full queue refuses ([admission] max_queued), or
  // whose pool predicts a longer queue wait than fallback_queue_wait (0: none), of priority
  // fallback_min_priority or less important.
  std::string fallback;
  std::chrono::milliseconds fallback_queue_wait{0};
  int fallback_min_priority = -1000000;
  int line = 0;
  // What errors and logs call it: "[model]" or "[models.NAME]".
  std::string label() const { return name.empty() ? "[model]" : "[models." + name + "]"; }
};

struct node_spec {
  std::string name;
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: any free port (single-process topologies)
  bool head = false;       // runs `troupe serve`: an HTTP frontend, request owner and router
  // This head's admin endpoint and event stream (`admin`, `admin_events`), when not [admin]'s:
  // with several heads each serves the admin protocol for the whole cluster.
  std::string admin_endpoint, admin_events;
  int line = 0;            // where it was declared, for later error messages
};

struct pool_spec {
  std::string name;
  std::string model;  // the [models.NAME] its replicas serve; empty: [model]
  pool_role role = pool_role::both;
  int replicas = 1;      // serving at start
  // Scaling bounds (troupe admin scale, the autoscaler). Defaults: replicas.
  int min_replicas = 1, max_replicas = 1;
  // Replicas beyond `replicas` started at once and kept warm (model loaded, KV allocated, placed
  // on by nobody), so scaling up never waits for a load; the slots beyond those are stopped until
  // a scale-up needs them (the node agent starts them), and scaling up refills the warm pool.
  // Default (-1): every slot up to max_replicas is warm.
  int warm_replicas = -1;
  int warm() const { return warm_replicas < 0 ? std::max(0, max_replicas - replicas) : warm_replicas; }
  std::vector<std::string> nodes;  // replicas are placed round-robin over these
  int pipeline_parallel = 1;       // pipeline stages per replica, each a contiguous range of layers
  int tensor_parallel = 1;         // ranks per stage, each holding a shard of every matrix (heads, features)
  // Mixture-of-experts models: ranks per stage holding whole experts, tokens dispatched to them
  // by all-to-all (attention split over the same ranks); tensor_parallel is then 1 or the same.
  int expert_parallel = 1;
  // A step's batch is cut into this many micro-batches (between sequences) so that pipeline
  // stages work at once; 1 runs the stages in turn. Default: pipeline_parallel.
  int micro_batches = 0;
  // Where each rank of a replica's group runs, stage by stage, tensor ranks in order (so
  // pipeline_parallel x max(tensor_parallel, expert_parallel) names): the replica's own node or
  // another, whose agent starts the rank. Empty: every rank in the replica's process. The
  // pool's replicas must be on heads, and the nodes on loopback (Gloo's TCP has no authentication).
  std::vector<std::string> rank_nodes;
  // [pools.speculative]: its replicas' speculative decoding (off unless a method is set).
  speculative::speculative_config speculative;
  int line = 0;
};

struct scheduler_spec {
  sched::scheduler_config limits;                   // token budget, max seqs, chunk, block size, order
  std::size_t kv_memory_bytes = std::size_t(256) << 20;  // per replica
  int kv_memory_line = 0;                                // where it was set, for errors
  kernels::dtype kv_dtype = kernels::dtype::f32;
  bool prefix_caching = true;  // reuse the KV of equal prefixes (runtime/kv/kv_cache_manager.h)
};

struct router_spec {
  std::string policy = "round_robin";
  routing::policy_params params;
  // Conditional disaggregation (runtime/routing/disaggregation.h): a prompt goes to the prefill
  // pool only when what is left to compute of it is at least disaggregate_min_prompt tokens and
  // the prefill pool's queued work is at most disaggregate_queue_ratio times that (0: no limit).
  int disaggregate_min_prompt = 0;
  double disaggregate_queue_ratio = 0;
};

// Moving KV between replicas (runtime/kv/transfer): how, how long a pull may take, how long a
// prefill replica holds a handed-off request's KV for its receiver, and what a failed pull does.
// A KV store per process hosting replicas (actors/serving/kv_store_actor.h): host memory for the prefix
// blocks its replicas let go of, which any replica can pull back instead of recomputing.
struct kv_store_spec {
  std::size_t capacity_bytes = 0;  // 0: no store
  // A second tier in a file of this directory (made and unlinked at start, so nothing stays
  // behind): blocks host memory has no room for, brought back when looked up.
  std::string disk_dir;
  std::size_t disk_bytes = 0;
  bool enabled() const { return capacity_bytes > 0; }
};

struct kv_transfer_spec {
  kv::transfer::backend backend = kv::transfer::backend::automatic;
  std::chrono::milliseconds timeout{10000};
  std::chrono::milliseconds hold{60000};
  bool retry_on_failure = false;  // on_failure = "retry": prefill again elsewhere; else recompute
  bool shared_memory = true;      // caches in shared-memory segments (same-host pulls by mapping)
};

// A peer is judged in two stages (docs/runtime.md, "Telling slow from dead"): silent past
// `suspect`, its replicas are placed on only if no other can take a request; silent past
// `connection`, its link is closed and it is dead (its requests move). The defaults hold on a
// host at load average 30 on two cores; a process that ends is noticed at once either way.
struct timeouts_spec {
  std::chrono::milliseconds heartbeat{1000};    // middleman heartbeat interval
  std::chrono::milliseconds suspect{3000};      // a replica this long without a load report is suspect
  std::chrono::milliseconds connection{15000};  // a silent link is dead after this
  std::chrono::milliseconds request{30000};     // every request between actors
  int migration_limit = 3;                      // times one request may move before it fails
  std::chrono::milliseconds step{120000};       // a forward step slower than this restarts its group
  int group_restarts = 3;                       // worker-group restarts allowed per window ...
  std::chrono::milliseconds group_restart_window{60000};  // ... before the replica is given up
};

// Who may join the cluster: a node joins only with the cluster token (TROUPE_CLUSTER_TOKEN,
// token_file or token; without any, the head makes one and keeps it in a file only this user
// can read, which nodes on the same machine read) and the head's model fingerprint. With the
// three tls_* files, every link between processes is TLS with mutual certificate checks; a
// topology with a node off loopback must have them.
struct cluster_spec {
  std::string token;
  std::string token_file;
  std::string tls_certificate, tls_key, tls_ca;  // PEM files
  int line = 0;

  bool tls() const { return !tls_certificate.empty(); }
};

// The head's HTTP frontend (OpenAI API, /health, /metrics).
struct frontend_spec {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8000;
  std::string model_name;            // empty: the model folder's name (or the sim preset)
  // Other names requests may give the same model (model_name = ["kjv", "bible"]: the first is
  // model_name, the name answers carry; vLLM's --served-model-name with several names).
  std::vector<std::string> model_aliases;
  int max_requests = 4096;           // in flight; more get 429
  int retry_after_s = 1;             // Retry-After of 429 and 503 answers
  // On SIGINT/SIGTERM: new requests get 503 while those in flight have this long to finish;
  // streams still open then end with an error event and [DONE].
  std::chrono::milliseconds shutdown_grace{30000};
  std::size_t max_body = std::size_t(4) << 20;
  std::chrono::seconds header_timeout{10};       // a request's header whole within this of its first byte
  std::size_t max_unread = std::size_t(1) << 20;  // an answer's bytes a client may leave unread before it counts as gone
  std::string metric_prefix = "troupe:";
  // Bearer tokens the OpenAI routes require (none: open, as on loopback by default).
  std::vector<std::string> api_keys;
  bool api_key_on_all_routes = false;  // api_key_routes = "all": /health and /metrics too
  // Per api_keys entry, the tenant it names ("" for none). A tenant's requests share prefix-
  // cache blocks only among themselves; without one, a request's `user` is its tenant.
  std::vector<std::string> api_key_tenants;
  // Whether a request's `user` names its tenant when its API key names none (false: such
  // requests all share the default tenant's cache, as one organisation's users would).
  bool tenant_by_user = true;
  // System prompts every tenant may share blocks of: a prompt that starts with one (as the text
  // of a completion prompt, or a chat's first, system message) shares its whole blocks.
  struct public_prompt {
    std::string name, text;
  };
  std::vector<public_prompt> public_prompts;
  // A request log in the trace format `troupe bench serve --trace` replays
  // (runtime/workload/request_trace.h): one line per finished request, at most this many bytes.
  std::string request_trace;  // empty: none
  std::size_t request_trace_max = std::size_t(1) << 30;
  // The service level a request is held to in /metrics (troupe:slo_requests_total{met}): its time
  // to first token at most ttft_slo and its mean time between tokens at most itl_slo (0: that
  // bound not set; neither set: no SLO series).
  std::chrono::milliseconds ttft_slo{0}, itl_slo{0};
};

// KV events out of the cluster: a ZeroMQ PUB socket in vLLM's wire format, and a ROUTER socket
// that replays what a late subscriber missed (docs/kv-events.md).
struct kv_events_spec {
  std::string endpoint;         // "tcp://127.0.0.1:PORT"; empty: not published
  std::string replay_endpoint;  // empty: no replay
  std::string topic;            // the first frame of every message
  int buffer = 10000;           // batches kept for replay
  // With keys both sockets are CURVE servers and only the authorized subscribers' keys get in
  // (any address then); without, they bind to loopback only.
  std::string secret_key;                    // the server's CURVE secret key file (troupe admin keygen)
  std::vector<std::string> authorized_keys;  // Z85 public keys of the subscribers let in
  // Whether stored blocks carry their token ids (vLLM's format may); false (the default)
  // publishes hashes only, so no subscriber learns a tenant's prompt. True needs CURVE.
  bool token_ids = false;
  bool enabled() const { return !endpoint.empty(); }
  bool curve() const { return !secret_key.empty(); }
};

// The admin endpoint on the head (docs/admin.md): ZeroMQ request/reply and an event stream.
// With keys, both sockets are CURVE servers and only the authorized client keys get an answer;
// without, they bind to loopback only.
struct admin_spec {
  std::string endpoint;                  // "tcp://HOST:PORT" (ROUTER); empty: no admin endpoint
  std::string events;                    // "tcp://HOST:PORT" (PUB) for `watch`; empty: none
  std::string secret_key;                // the server's CURVE secret key file (troupe admin keygen)
  std::vector<std::string> authorized_keys;  // Z85 public keys of the clients let in
  int line = 0;
  bool enabled() const { return !endpoint.empty(); }
  bool curve() const { return !secret_key.empty(); }
};

// Admission control (runtime/admission/admission.h): a bounded queue per pool with priority
// shares, and token buckets per tenant.
struct admission_spec {
  admission::admission_config cfg;
  int line = 0;
};

// The autoscaler (runtime/autoscale/autoscale.h): on the first head, when enabled; it scales
// pools between their min_replicas and max_replicas.
struct autoscaler_spec {
  autoscale::autoscale_config cfg;
  int line = 0;
};

// LoRA adapters (runtime/model/lora.h, docs/lora.md): served as models by name, every replica
// of every pool holding them beside the base weights.
struct lora_spec {
  struct adapter {
    std::string name;  // what requests name as their `model`
    std::string path;  // a PEFT folder (the same path on every node)
  };
  std::vector<adapter> adapters;  // loaded by every replica at start
  int max_adapters = 0;           // loaded at once per replica, runtime loads included; 0: no [lora]
  // /v1/load_lora_adapter, /v1/unload_lora_adapter and `troupe admin lora` (off: 404 naming this key).
  bool runtime_loading = false;
  int line = 0;
  bool enabled() const { return max_adapters > 0; }
};

// The GPU the sim backend pretends to be.
struct sim_spec {
  double flops = 989e12;             // FLOP/s
  double bandwidth = 3.35e12;        // bytes/s
  std::chrono::microseconds step_overhead{200};
  // Simulated seconds per wall second. Not a TOML key: `troupe bench autoscale` compresses a
  // long trace with it (and divides every duration it sets by the same factor).
  double speedup = 1;
};

struct topology_config {
  std::string source;  // the file it came from
  model_spec model;                     // [model]: what pools serve unless they name another
  std::vector<model_spec> more_models;  // [models.NAME] tables, in file order
  std::vector<node_spec> nodes;
  std::vector<pool_spec> pools;
  scheduler_spec scheduler;
  router_spec router;
  timeouts_spec timeouts;
  frontend_spec frontend;
  cluster_spec cluster;
  kv_events_spec kv_events;
  admin_spec admin;
  admission_spec admission;
  autoscaler_spec autoscaler;
  kv_transfer_spec kv_transfer;
  kv_store_spec kv_store;
  lora_spec lora;
  std::optional<sim_spec> sim;

  const node_spec* node(const std::string& name) const;
  const pool_spec* pool_named(const std::string& name) const;  // null when there is none
  // Every model, [model] first: a model's index here is its number in stores' ids and logs.
  std::vector<const model_spec*> models() const;
  // The model named NAME ("" : [model]); null when there is none.
  const model_spec* model_named(const std::string& name) const;
  const model_spec& model_of(const pool_spec& p) const { return *model_named(p.model); }
  std::size_t model_index(const std::string& name) const;
  // The nodes that are heads: those marked `head = true`, or the first node. With several,
  // each serves the API over the same other nodes, so losing one leaves the others serving.
  std::vector<const node_spec*> heads() const;
  bool is_head(const std::string& name) const;
};

// Why `name` cannot name a node or a pool, none when it can. Such names reach DNS names, pod
// and file names, labels, generated scripts and PromQL: each is an RFC 1123 label (lower-case
// letters, digits and '-', starting and ending with a letter or digit) of 1 to `max` characters.
std::optional<std::string> dns_label_problem(const std::string& name, std::size_t max = 63);
// The longest pool name: its replicas' names ("<pool>-<index>") and its pods' label key
// ("troupe.dev/pool-<pool>") stay RFC 1123 labels of at most 63 characters.
inline constexpr std::size_t max_pool_name = 50;
// Why a name a client sends back to us (a served model name, an adapter, a [models.NAME]) cannot
// be one: empty, over `max` bytes, or with a control character (a NUL, a newline) that would cut
// a log line, a metric label or a header. None when it can.
std::optional<std::string> served_name_problem(const std::string& name, std::size_t max = 256);

// Reads and validates a topology file. Throws input_error as "FILE:LINE: KEY: what is wrong"
// for a syntax error, a wrong type, an unknown key, a missing required key, a duplicate name,
// a pool on an unknown node, or an unknown routing policy or parameter.
topology_config load_topology(const std::string& path);

// Sets fe's served names from `names`: the first is model_name, the rest its aliases. What is
// wrong with them instead ("\"a\" is named twice"), for the caller to prefix with where they
// came from ([frontend] model_name, --served-model-name); fe is left as it was then.
std::optional<std::string> assign_model_names(frontend_spec& fe, const std::vector<std::string>& names);

// A served name two models share ([frontend] model_name and its aliases are [model]'s), as
// "[models.NAME] served_names: ..."; none when every name is one model's.
std::optional<std::string> served_name_clash(const topology_config& t);

// Why [lora] cannot run on `t` (the backend, or a pool that splits its model over ranks), none
// when it can: parse_topology refuses such a file, and troupe serve's flags check again after
// they change the pools.
std::optional<std::string> lora_unsupported(const topology_config& t);
// Adds an adapter every replica loads at start; what is wrong instead, as "name: ..." or
// "path: ..." (the base's name or one named twice, a path that is not a directory here).
std::optional<std::string> add_lora_adapter(topology_config& t, lora_spec::adapter a);

// The admin endpoint head `head` serves: [admin] with that head's own addresses, if it names any.
admin_spec admin_of(const topology_config& t, const std::string& head);
topology_config parse_topology(const std::string& text, const std::string& source);

}  // namespace troupe::topology

namespace troupe::topology {

// Where each replica runs: replicas are numbered pool by pool in file order (max_replicas of
// each, the first `replicas` active), and a pool's replicas go round-robin over its nodes.
struct replica_placement {
  replica_id replica;
  std::string pool;
  std::string model;  // the pool's ("" : [model])
  pool_role role = pool_role::both;
  std::string node;
  int pipeline_parallel = 1;
  int tensor_parallel = 1;
  int expert_parallel = 1;
  int micro_batches = 1;
  std::string name;  // "<pool>-<index in the pool>": what logs and the admin console call it
  bool active = true;   // serving at start (else warm, for scaling up)
  bool started = true;  // started at start (else stopped: started by a scale-up)
  std::vector<std::string> rank_nodes;  // the pool's
};

std::vector<replica_placement> place_replicas(const topology_config& t);

// Replica id -> its name (replica_placement::name), for logs and metric labels; name_of falls
// back to "replica-ID" for an id the topology does not place.
using replica_names = std::map<std::uint32_t, std::string>;
replica_names names_of(const topology_config& t);
std::string name_of(const replica_names& names, std::uint32_t id);

// Refuses, before anything is allocated, a topology whose replicas on `node` (every node when
// empty: all in one process; "*": every process of the topology on this host, what `troupe
// launch` starts) need more KV memory than 90% of the machine (`machine_bytes`) or than is free
// now (`available_bytes`): input_error naming scheduler.kv_memory, the figure and the machine's.
// The sim backend allocates no KV and always passes.
void check_kv_memory(const topology_config& t, const std::string& node, std::size_t machine_bytes,
                     std::size_t available_bytes = SIZE_MAX);

}  // namespace troupe::topology
