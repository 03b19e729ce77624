#!/usr/bin/env bash
# The cluster simulator against the real CPU cluster (docs/performance.md): one seeded trace
# (Poisson arrivals at RATE requests/s, default 2, for REQUESTS requests, default 240; prompts of
# 64-512 tokens, answers of 16-128) replayed by troupe bench serve into troupe serve on the
# committed kjv model for three topologies:
#  - configs/local.toml: one replica doing prefill and decode;
#  - configs/kv-aware.toml: two replicas, kv_aware routing;
#  - configs/disagg.toml: one prefill and one decode replica.
# and simulated by `troupe plan --config` on a profile measured right before that topology's
# replay, so the machine is measured as the replay finds it (troupe bench engine --fit-profile,
# troupe bench kv-transfer --fit-profile --backend inproc: these topologies are one process;
# troupe bench serve --concurrency 1 --fit-profile on other requests, against the topology's
# server for what serving adds to the forward, or for the disaggregated one against
# configs/local.toml first and then against it for what a handoff adds to the KV copy). Before
# any measuring, each server's KV pools are written once over. Prints TTFT and TPOT (a request's
# mean inter-token latency) at p50, p90 and p99, and goodput (ttft <= 1 s and tpot <= 50 ms),
# predicted against measured, with each prediction's error. Writes
# docs/bench/sim-accuracy-TOPOLOGY-{profile,real,sim}.json.
# Every process runs with TROUPE_THREADS=1 (unless set): each replica computes on a core of its
# own, as replicas on GPUs of their own do. With both cores each, two replicas in one process
# contend for one kernel thread pool op by op, which the simulator models only as taking turns.
#
# usage: RATE=2 REQUESTS=240 tools/bench/sim_accuracy.sh     (after building: cmake --build build)
. "$(dirname "$0")/usage.sh"
usage_from_header "$@"
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-docs/bench}
rate=${RATE:-2}
export TROUPE_THREADS=${TROUPE_THREADS:-1}
requests=${REQUESTS:-240}
port=18690
tmp=$(mktemp -d)
. tools/bench/serve_lib.sh
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$tmp"' EXIT
mkdir -p "$out"

# Requests of 512 tokens that write every replica's KV pool once and a quarter: the measured run
# then finds its memory touched, as a server that has run a while does. (On a virtual machine
# whose memory the host backs lazily, a first pass over a fresh pool made KV pulls 3-10 times
# slower: the disaggregated TPOT p90 rose 17%.)
warmup_requests() {
  /usr/bin/python3 - "$1" "$profile" <<'PY'
import json, re, sys, tomllib
topology = tomllib.load(open(sys.argv[1], "rb"))
per_token = json.load(open(sys.argv[2]))["kv_bytes_per_token"]
size = re.fullmatch(r"(\d+)(KiB|MiB|GiB)", topology["scheduler"]["kv_memory"])
pool_tokens = int(size.group(1)) * {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[size.group(2)] / per_token
replicas = sum(p.get("replicas", 1) for p in topology["pools"])
print(int(replicas * pool_tokens * 1.25 / 512) + 1)
PY
}
warm_up() {
  build/troupe bench serve --url "http://127.0.0.1:$port" --requests "$(warmup_requests "$1")" --concurrency 2 \
      --prompt-len 512 --prompt-dist uniform --output-len 2 --seed 99 --quiet > /dev/null
}

# A profile of the machine as it is now: steps, the KV copy (into $1).
fit_steps() {
  build/troupe bench engine --model models/kjv --kv-dtype f32 --steps 32 --fit-profile "$1" > /dev/null
  build/troupe bench kv-transfer --sizes 1,4,16 --backend inproc --fit-profile "$1" > /dev/null
}
# What serving adds beyond the forward (into $1), on the server up now, with nothing queued: per
# step, per first token and per stream (answers of 36 to 108 tokens tell the two apart).
fit_serving() {
  build/troupe bench serve --url "http://127.0.0.1:$port" --concurrency 1 --requests 32 --prompt-len 256 --prompt-dist uniform \
      --output-len 72 --output-dist uniform --seed 3 --quiet --fit-profile "$1" > /dev/null
}

# The same requests in bench serve's JSONL and in the simulator's CSV.
/usr/bin/python3 - "$tmp" "$rate" "$requests" <<'PY'
import json, random, sys
tmp, rate, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
rng = random.Random(11)
t = 0.0
with open(f"{tmp}/trace.jsonl", "w") as jl, open(f"{tmp}/trace.csv", "w") as csv:
    csv.write("seconds,prompt_tokens,max_tokens\n")
    for i in range(n):
        prompt, output = rng.randint(64, 512), rng.randint(16, 128)
        jl.write(json.dumps({"timestamp": round(t, 4), "prompt_len": prompt, "output_len": output}) + "\n")
        csv.write(f"{t:.4f},{prompt},{output}\n")
        t += rng.expovariate(rate)
PY

for topo in local kv-aware disagg; do
  profile=$out/sim-accuracy-$topo-profile.json
  rm -f "$profile"
  fit_steps "$profile"
  if [ $topo = disagg ]; then  # the serving fit on an aggregated server; the handoff's on this one
    serve configs/local.toml
    warm_up configs/local.toml
    fit_serving "$profile"
    stop
  fi
  serve configs/$topo.toml
  warm_up configs/$topo.toml
  fit_serving "$profile"
  build/troupe bench serve --url "http://127.0.0.1:$port" --trace "$tmp/trace.jsonl" --goodput "ttft:1000 tpot:50" --quiet \
      --json "$out/sim-accuracy-$topo-real.json" > /dev/null
  stop
  build/troupe plan --config configs/$topo.toml --trace "$tmp/trace.csv" --slo ttft_p99=1s,itl_p99=50ms --profile "$profile" \
      --json > "$out/sim-accuracy-$topo-sim.json"
done

/usr/bin/python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
for topo in ("local", "kv-aware", "disagg"):
    profile = json.load(open(f"{out}/sim-accuracy-{topo}-profile.json"))
    s, v = profile["step"], profile["serving"]
    print(f"{topo}: {s['base_s']*1e3:.3f} ms + {s['per_token_s']*1e6:.1f} us/token + {s['per_context_s']*1e9:.2f} ns/context position "
          f"+ {s['per_decode_token_s']*1e6:.1f} us/decode token (worst fit error {100*profile['worst_error']:.0f}%); serving "
          f"{v['step_s']*1e3:.3f} ms per step, {v['first_token_s']*1e3:.3f} ms per first token, {v.get('stream_s', 0)*1e3:.3f} ms per stream, "
          f"{v.get('handoff_s', 0)*1e3:.3f} ms per handoff beyond the KV copy")
print("| topology | metric | simulated | measured | error |")
print("|---|---|---|---|---|")
worst = 0
for topo in ("local", "kv-aware", "disagg"):
    real = json.load(open(f"{out}/sim-accuracy-{topo}-real.json"))
    sim = json.load(open(f"{out}/sim-accuracy-{topo}-sim.json"))
    rows = [(f"TTFT {p}", sim["ttft_s"][p] * 1e3, real[f"{p}_ttft_ms"], "ms") for p in ("p50", "p90", "p99")]
    rows += [(f"TPOT {p}", sim["itl_s"][p] * 1e3, real[f"{p}_tpot_ms"], "ms") for p in ("p50", "p90", "p99")]
    rows.append(("goodput", sim["goodput"], real["request_goodput"] or 0.0, "req/s"))
    for name, predicted, measured, unit in rows:
        err = (predicted - measured) / measured if measured else float("inf")
        worst = max(worst, abs(err))
        print(f"| {topo} | {name} | {predicted:.2f} {unit} | {measured:.2f} {unit} | {100*err:+.0f}% |")
print(f"largest error: {100*worst:.0f}%")
PY
