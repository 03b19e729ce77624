#!/usr/bin/env bash
# Disaggregation against interference (docs/performance.md): ongoing decodes (8 streams of
# 64-token prompts and 128 output tokens, a new one as each ends) while 4,000-token prompts
# arrive every 10 s (4 of them), on the `small` model in two node processes sharing this
# machine's cores: one prefill and one decode replica (configs/bench-interference-disagg.toml)
# against two replicas that do both (configs/bench-interference-agg.toml).
#
# The decodes run from before the first long prompt until the last one has its answer, however
# fast the machine is: bench serve keeps them going until it gets SIGINT, then reports what it
# sent. Each topology runs RUNS times (default 3), alternating. Reports the machine, each run's
# decode inter-token latency p50/p99 and long prompts' TTFT, the medians, and whether
# disaggregation wins on ITL p99 here. Writes docs/bench/interference-{disagg,agg}-{decode,prefill}-RUN.json.
#
# usage: RUNS=3 tools/bench/interference.sh     (after building: cmake --build build)
. "$(dirname "$0")/usage.sh"
usage_from_header "$@"
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-docs/bench}
runs=${RUNS:-3}
port=18670
tmp=$(mktemp -d)
launcher=""
decodes=""
trap '[ -n "$decodes" ] && kill -KILL $decodes 2>/dev/null; [ -n "$launcher" ] && kill -INT $launcher 2>/dev/null; rm -rf "$tmp"' EXIT

metric() {  # the sum of a metric's samples on the server
  curl -sf "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 ~ "^"m"({|$)" { s += $2 } END { print s + 0 }'
}

rm -f "$out"/interference-*.json
for run in $(seq "$runs"); do
  for mode in disagg agg; do
    build/troupe launch configs/bench-interference-$mode.toml --port $port > "$tmp/launch.log" 2>&1 &
    launcher=$!
    up=0
    for _ in $(seq 1200); do
      if curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && [ "$(metric troupe:num_replicas_live)" = 2 ]; then up=1; break; fi
      sleep 0.1
    done
    [ $up = 1 ] || { cat "$tmp/launch.log" >&2; exit 1; }
    url="http://127.0.0.1:$port"
    build/troupe bench serve --url $url --prompt-len 64 --output-len 128 --concurrency 8 --requests 100000 --seed 5 --quiet \
        --json "$out/interference-$mode-decode-$run.json" > "$tmp/decode.txt" 2> "$tmp/decode.err" &
    decodes=$!
    # The long prompts start once the first 8 decodes have ended: every stream is running.
    until [ "$(metric troupe:request_success_total)" -ge 8 ]; do
      kill -0 $decodes 2>/dev/null || { cat "$tmp/decode.err" >&2; exit 1; }
      sleep 0.2
    done
    build/troupe bench serve --url $url --prompt-len 4000 --output-len 4 --rate 0.1 --arrival fixed --requests 4 --seed 6 \
        --quiet --json "$out/interference-$mode-prefill-$run.json" > "$tmp/prefill.txt"
    kill -INT $decodes; wait $decodes; decodes=""
    kill -INT $launcher; wait $launcher 2>/dev/null || true; launcher=""
    echo "run $run, $mode: done" >&2
  done
done

machine="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores"
/usr/bin/python3 - "$out" "$runs" "$machine" <<'PY'
import json, statistics, sys
out, runs, machine = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print(f"machine: {machine}; {runs} runs of each topology, alternating\n")
print("| topology | run | decode ITL p50 (ms) | ITL p99 (ms) | long prompt TTFT median (ms) | decode output tok/s | decode requests |")
print("|---|---|---|---|---|---|---|")
p99 = {}
for mode, name in (("disagg", "1 prefill + 1 decode"), ("agg", "2 aggregated")):
    rows = []
    for run in range(1, runs + 1):
        d = json.load(open(f"{out}/interference-{mode}-decode-{run}.json"))
        p = json.load(open(f"{out}/interference-{mode}-prefill-{run}.json"))
        rows.append((d["p50_itl_ms"], d["p99_itl_ms"], p["median_ttft_ms"], d["output_throughput"]))
        print(f"| {name} | {run} | {rows[-1][0]:.1f} | {rows[-1][1]:.1f} | {rows[-1][2]:.0f} | {rows[-1][3]:.1f} | {d['completed']} |")
    med = [statistics.median(r[i] for r in rows) for i in range(4)]
    print(f"| {name} | median | {med[0]:.1f} | {med[1]:.1f} | {med[2]:.0f} | {med[3]:.1f} | |")
    p99[mode] = med[1]
ratio = p99["agg"] / p99["disagg"]
if ratio > 1:
    print(f"\nDisaggregation wins on decode ITL p99 here: aggregated / disaggregated = {ratio:.2f}x (medians).")
else:
    print(f"\nDisaggregation does not win on decode ITL p99 here: aggregated / disaggregated = {ratio:.2f}x (medians).")
PY
