#!/usr/bin/env bash
# Disaggregation against interference (docs/performance.md): ongoing decodes (8 streams of
# 64-token prompts and 128 output tokens) while 4,000-token prompts arrive every 10 s, on the
# `small` model in two node processes sharing this machine's cores: one prefill and one decode
# replica (configs/bench-interference-disagg.toml) against two replicas that do both
# (configs/bench-interference-agg.toml). Reports the decodes' inter-token latency p50/p99 and the
# long prompts' TTFT; writes docs/bench/interference-{disagg,agg}-{decode,prefill}.json.
#
# usage: tools/bench/interference.sh     (after building: cmake --build build)
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then  # usage_from_header: the comment above, nothing run
  sed -n '2,/^[^#]/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-docs/bench}
port=18670
tmp=$(mktemp -d)
launcher=""
trap '[ -n "$launcher" ] && kill -INT $launcher 2>/dev/null; rm -rf "$tmp"' EXIT

for mode in disagg agg; do
  build/troupe launch configs/bench-interference-$mode.toml --port $port > "$tmp/launch.log" 2>&1 &
  launcher=$!
  up=0
  for _ in $(seq 1200); do
    if curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 &&
       curl -sf "http://127.0.0.1:$port/metrics" | grep -q '^troupe:num_replicas_live[^ ]* 2'; then up=1; break; fi
    sleep 0.1
  done
  [ $up = 1 ] || { cat "$tmp/launch.log" >&2; exit 1; }
  url="http://127.0.0.1:$port"
  build/troupe bench serve --url $url --prompt-len 64 --output-len 128 --concurrency 8 --requests 32 --seed 5 --quiet \
      --json "$out/interference-$mode-decode.json" > "$tmp/decode.txt" &
  decodes=$!
  build/troupe bench serve --url $url --prompt-len 4000 --output-len 4 --rate 0.1 --arrival fixed --requests 4 --seed 6 \
      --quiet --json "$out/interference-$mode-prefill.json" > "$tmp/prefill.txt"
  wait $decodes
  kill -INT $launcher; wait $launcher 2>/dev/null || true; launcher=""
done

/usr/bin/python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print("| topology | decode ITL p50 (ms) | ITL p99 (ms) | long prompt TTFT median (ms) | decode output tok/s |")
print("|---|---|---|---|---|")
r = {}
for mode, name in (("disagg", "1 prefill + 1 decode"), ("agg", "2 aggregated")):
    d = json.load(open(f"{out}/interference-{mode}-decode.json"))
    p = json.load(open(f"{out}/interference-{mode}-prefill.json"))
    r[mode] = d["p99_itl_ms"]
    print(f"| {name} | {d['p50_itl_ms']:.1f} | {d['p99_itl_ms']:.1f} | {p['median_ttft_ms']:.1f} | {d['output_throughput']:.1f} |")
print(f"\nITL p99: aggregated / disaggregated = {r['agg'] / r['disagg']:.2f}x")
PY
