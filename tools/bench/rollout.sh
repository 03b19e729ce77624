#!/usr/bin/env bash
# Canary rollouts under load (docs/performance.md, docs/admin.md): configs/admin.toml (a head
# and two node processes, pool `decode` of two replicas and a stopped slot) serving models/kjv,
# 6 closed-loop clients of 64-token prompts and 32-token answers throughout.
#   1. Steady state: 400 requests' TTFT and ITL with nothing moving.
#   2. A rollout step: the same 400 requests while a canary (the same weights as revision "r2",
#      its gate out of the way) starts and takes 50% of the senders: what a step costs clients.
#   3. A breach: a canary (revision "r3") at 50% with the gate at 3x the baseline's latencies,
#      then `slow CANARY 100` (each of its steps waits 100 ms: a latency regression). Reports the time from the injection to the
#      roll_back decision and to every replica back on the baseline, and how many requests the
#      bad canary answered after the injection (from the head's request_end log lines).
#   4. A broken revision: models/kjv with its MLP weights shuffled (the same shapes, so the same
#      speed: the live figures pass it) as a canary at 50% with the quality gate on (held-out
#      text models/kjv/heldout.txt, its first 16 lines as greedy prompts). Reports the time from
#      the canary's first step to the roll_back decision, how many requests the broken canary
#      answered meanwhile, and the gate's figures.
# RUNS times each (default 3); writes docs/bench/rollout.json and prints the medians.
#
# usage: RUNS=3 tools/bench/rollout.sh     (after building: cmake --build build)
. "$(dirname "$0")/usage.sh"
usage_from_header "$@"
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-docs/bench}
runs=${RUNS:-3}
port=18690
admin_port=18760
tmp=$(mktemp -d)
launcher=""
load=""
trap '[ -n "$load" ] && kill -KILL $load 2>/dev/null; [ -n "$launcher" ] && kill -INT $launcher 2>/dev/null; rm -rf "$tmp"' EXIT
admin() { build/troupe admin --timeout 600 --json --endpoint tcp://127.0.0.1:$admin_port --events tcp://127.0.0.1:$((admin_port + 1)) "$@"; }
bench() {  # N requests from 6 clients; the report's JSON to $1
  build/troupe bench serve --url http://127.0.0.1:$port --prompt-len 64 --output-len 32 --concurrency 6 --requests "$2" --seed 3 \
      --quiet --json "$1" > /dev/null
}
# Returns once the background load's requests are being answered (its plan is built first).
loaded() { local n0; n0=$(grep -c 'request_end' "$tmp/launch.log" || true); until [ "$(grep -c 'request_end' "$tmp/launch.log" || true)" -gt $((n0 + 12)) ]; do sleep 0.2; done; }
phase() { admin rollout status decode | /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin)["rollouts"]; print(r[0]["phase"] if r else "")'; }

mkdir -p "$out"
: > "$tmp/runs.jsonl"
/usr/bin/python3 - models/kjv "$tmp/kjv-broken" <<'PY'
import json, os, shutil, struct, sys
import numpy as np
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, exist_ok=True)
for f in os.listdir(src):
    if f != "model.safetensors": shutil.copy(os.path.join(src, f), dst)
data = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header, body = json.loads(data[8:8 + n]), bytearray(data[8 + n:])
rng = np.random.default_rng(7)
for name, t in header.items():
    if name == "__metadata__" or ".mlp." not in name: continue
    a, b = t["data_offsets"]
    w = np.frombuffer(bytes(body[a:b]), dtype=np.float16).copy()
    rng.shuffle(w)  # the same values, scrambled: a broken revision of the same architecture
    body[a:b] = w.tobytes()
open(os.path.join(dst, "model.safetensors"), "wb").write(data[:8 + n] + bytes(body))
PY
head -16 models/kjv/heldout.txt > "$tmp/prompts.txt"
for run in $(seq "$runs"); do
  build/troupe launch configs/admin.toml --port $port --registry-port 18780 --admin-port $admin_port > "$tmp/launch.log" 2>&1 &
  launcher=$!
  up=0
  for _ in $(seq 1200); do
    if [ "$(grep -c ': ready' "$tmp/launch.log" || true)" -ge 2 ] && curl -sf http://127.0.0.1:$port/health > /dev/null 2>&1; then up=1; break; fi
    kill -0 $launcher 2>/dev/null || break
    sleep 0.1
  done
  [ $up = 1 ] || { cat "$tmp/launch.log" >&2; exit 1; }
  bench "$tmp/steady.json" 400
  admin rollout decode --model models/kjv --revision r2 --canary 50% --step 50%:10m --max-ttft-ratio 100 --max-itl-ratio 100 > /dev/null &
  starting=$!
  bench "$tmp/step.json" 400
  wait $starting
  admin rollback decode > /dev/null
  until [ "$(phase)" = rolled_back ]; do sleep 0.2; done
  # The breach: a canary made slow under load.
  build/troupe bench serve --url http://127.0.0.1:$port --prompt-len 64 --output-len 32 --concurrency 6 --requests 20000 --seed 4 \
      --quiet --json "$tmp/breach-load.json" > /dev/null 2>&1 &
  load=$!
  loaded
  admin rollout decode --model models/kjv --revision r3 --canary 50% --step 50%:10m --max-ttft-ratio 3 --max-itl-ratio 3 > "$tmp/r3.json"
  key=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["model_key"])' "$tmp/r3.json")
  canary=$(admin status | /usr/bin/python3 -c 'import json,sys; k=sys.argv[1]; print([r["name"] for r in json.load(sys.stdin)["replicas"] if r["state"]=="running" and r["model_key"]==k][0])' "$key")
  injected=$(date +%s.%N)
  admin slow "$canary" 100 > /dev/null
  until [ "$(phase)" = rolled_back ]; do sleep 0.2; done
  kill -TERM $load; wait $load || true; load=""
  admin rollout status decode > "$tmp/status.json"
  # The broken revision, caught by the quality gate under the same load.
  build/troupe bench serve --url http://127.0.0.1:$port --prompt-len 64 --output-len 32 --concurrency 6 --requests 20000 --seed 5 \
      --quiet --json "$tmp/broken-load.json" > /dev/null 2>&1 &
  load=$!
  loaded
  admin rollout decode --model "$tmp/kjv-broken" --revision r4 --canary 50% --step 50%:10m --max-ttft-ratio 100 --max-itl-ratio 100 \
      --held-out "$PWD/models/kjv/heldout.txt" --prompts "$tmp/prompts.txt" > "$tmp/r4.json"
  key4=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["model_key"])' "$tmp/r4.json")
  broken=$(admin status | /usr/bin/python3 -c 'import json,sys; k=sys.argv[1]; print([r["name"] for r in json.load(sys.stdin)["replicas"] if r["state"]=="running" and r["model_key"]==k][0])' "$key4")
  until [ "$(phase)" = rolled_back ]; do sleep 0.2; done
  kill -TERM $load; wait $load || true; load=""
  admin rollout status decode > "$tmp/status4.json"
  /usr/bin/python3 - "$tmp" "$injected" "$canary" "$run" "$broken" >> "$tmp/runs.jsonl" <<'PY'
import json, sys, re, datetime
tmp, injected, canary, run, broken = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
steady, step = (json.load(open(f"{tmp}/{n}.json")) for n in ("steady", "step"))
decisions = lambda f: {x["decision"]: x for x in json.load(open(f"{tmp}/{f}"))["rollouts"][0]["decisions"]}
def served_by(replica, since, until):  # requests that ended on the replica in [since, until]
    n = 0
    for line in open(f"{tmp}/launch.log"):
        m = re.match(r"(\S+Z) INFO request_end .*replicas=\[([^\]]*)\]", line)
        if not m or f'"{replica}"' not in m.group(2).split(",")[-1]: continue
        t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()
        n += since <= t <= until
    return n
d, q = decisions("status.json"), decisions("status4.json")
decided, done = d["roll_back"]["at"], d["rolled_back"]["at"]
print(json.dumps({"run": run, "steady": {k: steady[k] for k in ("median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms")},
                  "step": {k: step[k] for k in ("median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms", "failed")},
                  "breach_to_decision_s": decided - injected, "decision_to_rolled_back_s": done - decided,
                  "served_by_the_bad_canary_after_injection": served_by(canary, injected, decided), "reason": d["roll_back"]["reason"],
                  "quality": {"canary_serving_to_decision_s": q["roll_back"]["at"] - q["step"]["at"],
                              "decision_to_rolled_back_s": q["rolled_back"]["at"] - q["roll_back"]["at"],
                              "served_by_the_broken_canary": served_by(broken, q["step"]["at"], q["roll_back"]["at"]),
                              "reason": q["roll_back"]["reason"]}}))
PY
  kill -INT $launcher; wait $launcher 2>/dev/null || true; launcher=""
  echo "run $run: done" >&2
done
/usr/bin/python3 - "$tmp/runs.jsonl" "$out/rollout.json" <<'PY'
import json, sys, statistics, platform, os
runs = [json.loads(l) for l in open(sys.argv[1])]
med = lambda f: statistics.median(f(r) for r in runs)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
summary = {"machine": f"{cpu}, {os.cpu_count()} cores", "runs": runs,
           "median": {"steady_ttft_p50_ms": med(lambda r: r["steady"]["median_ttft_ms"]), "steady_ttft_p99_ms": med(lambda r: r["steady"]["p99_ttft_ms"]),
                      "step_ttft_p50_ms": med(lambda r: r["step"]["median_ttft_ms"]), "step_ttft_p99_ms": med(lambda r: r["step"]["p99_ttft_ms"]),
                      "steady_itl_p99_ms": med(lambda r: r["steady"]["p99_itl_ms"]), "step_itl_p99_ms": med(lambda r: r["step"]["p99_itl_ms"]),
                      "step_failed": max(r["step"]["failed"] for r in runs),
                      "breach_to_decision_s": med(lambda r: r["breach_to_decision_s"]),
                      "decision_to_rolled_back_s": med(lambda r: r["decision_to_rolled_back_s"]),
                      "served_by_the_bad_canary_after_injection": med(lambda r: r["served_by_the_bad_canary_after_injection"]),
                      "quality_canary_serving_to_decision_s": med(lambda r: r["quality"]["canary_serving_to_decision_s"]),
                      "quality_decision_to_rolled_back_s": med(lambda r: r["quality"]["decision_to_rolled_back_s"]),
                      "served_by_the_broken_canary": med(lambda r: r["quality"]["served_by_the_broken_canary"])}}
json.dump(summary, open(sys.argv[2], "w"), indent=2)
print(json.dumps(summary["median"], indent=2))
PY
