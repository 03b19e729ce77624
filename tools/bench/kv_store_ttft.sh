#!/usr/bin/env bash
# TTFT of a 2,000-token prefix pulled from the KV store against recomputing it
# (docs/performance.md, "KV store"). Pairs of requests share a 2,000-token system prompt; round
# robin puts the first of each pair on replica 0 (it computes the prompt, then lets go of it:
# the store keeps it) and the second on replica 1, which pulls the prefix from the store, or,
# without [kv_store], computes it again. One request every 5 s (a 2,000-token prefill takes about 2.3 s here), one at a time, so each first
# request's blocks reach the store before its pair arrives. Writes docs/bench/store-cpu-*.json.
#
# usage: tools/bench/kv_store_ttft.sh     (after building: cmake --build build)
. "$(dirname "$0")/usage.sh"
usage_from_header "$@"
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-docs/bench}
pairs=${PAIRS:-6}
port=18660
tmp=$(mktemp -d)
. tools/bench/serve_lib.sh
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$tmp"' EXIT

for store in on off; do
  if [ $store = on ]; then cp configs/bench-store-cpu.toml "$tmp/c.toml"
  else awk '/^\[kv_store\]/ { skip = 1 } !skip' configs/bench-store-cpu.toml > "$tmp/c.toml"; fi
  serve "$tmp/c.toml"
  build/troupe bench serve --url "http://127.0.0.1:$port" --shared-prefix "$pairs:2:2000" --requests $((2 * pairs)) \
      --prompt-len 8 --output-len 4 --rate 0.2 --arrival fixed --concurrency 1 --seed 3 --quiet --detailed \
      --json "$out/store-cpu-$store.json" > /dev/null
  stop
done

/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
def seconds(name):
    t = json.load(open(f"{out}/store-cpu-{name}.json"))["ttfts"]
    return [x for x in t[0::2]], [x for x in t[1::2]]  # first of each pair, second
first_on, second_on = seconds("on")
first_off, second_off = seconds("off")
m = lambda v: statistics.median(v) * 1e3
print("| run | first of a pair, computed (ms) | second, other replica (ms) |")
print("|---|---|---|")
print(f"| with [kv_store] | {m(first_on):.1f} | {m(second_on):.1f} (pulled from the store) |")
print(f"| without | {m(first_off):.1f} | {m(second_off):.1f} (recomputed) |")
print(f"\nTTFT median of the second request: store {m(second_on):.1f} ms, recompute {m(second_off):.1f} ms: {m(second_off) / m(second_on):.1f}x")
PY
