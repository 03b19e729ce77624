#!/usr/bin/env bash
# The shared-prefix benchmark of docs/performance.md: 16 system prompts of 1,000 tokens, many
# users asking short questions (interleaved), against 4 replicas with round_robin,
# least_loaded and kv_aware routing; then one replica answering a repeated 1,000-token prompt
# with and without prefix caching. Writes docs/bench/prefix-BACKEND-*.json, each policy's latency
# plots (-latency.png, -cdf.png) and prints a table.
#
# usage: tools/bench/prefix_routing.sh sim|cpu     (after building: cmake --build build)
. "$(dirname "$0")/usage.sh"
usage_from_header "$@"
set -euo pipefail
backend=${1:?usage: tools/bench/prefix_routing.sh sim|cpu}
cd "$(dirname "$0")/../.."
config=configs/bench-prefix-$backend.toml
out=${OUT:-docs/bench}
case $backend in
  sim) users=64; rate=120; repeat_n=32 ;;
  cpu) users=8; rate=1.5; repeat_n=12 ;;
  *) echo "usage: $0 sim|cpu" >&2; exit 2 ;;
esac
rate=${RATE:-$rate}                                    # requests per second
policies=${POLICIES:-round_robin least_loaded kv_aware}
port=18650
tmp=$(mktemp -d)
. tools/bench/serve_lib.sh
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$tmp"' EXIT

for policy in $policies; do
  # round_robin takes no parameters: drop the [router.params] table for it
  awk -v p="$policy" '/^\[router.params\]/ { skip = (p == "round_robin") } /^$/ { skip = 0 } !skip' "$config" |
    sed "s/^policy = .*/policy = \"$policy\"/" > "$tmp/$policy.toml"
  serve "$tmp/$policy.toml"
  build/troupe bench serve --url "http://127.0.0.1:$port" --shared-prefix "16:$users:1000" --shuffle \
      --prompt-len 24 --prompt-dist uniform --output-len 16 --rate $rate --seed 1 --quiet \
      --json "$out/prefix-$backend-$policy.json" --plot "$out/prefix-$backend-$policy" > "$tmp/$policy.txt"
  stop
done

for caching in true false; do
  sed -e "s/^replicas = .*/replicas = 1/" -e "s/^prefix_caching = .*/prefix_caching = $caching/" "$config" > "$tmp/one-$caching.toml"
  serve "$tmp/one-$caching.toml"
  build/troupe bench serve --url "http://127.0.0.1:$port" --shared-prefix "1:$repeat_n:1000" --prompt-len 8 \
      --output-len 8 --concurrency 1 --seed 2 --quiet --json "$out/prefix-$backend-one-caching-$caching.json" > /dev/null
  stop
done

/usr/bin/python3 - "$backend" "$out" <<'PY'
import json, sys
backend, out = sys.argv[1], sys.argv[2]
rows = {p: json.load(open(f"{out}/prefix-{backend}-{p}.json")) for p in ("round_robin", "least_loaded", "kv_aware")}
print(f"{backend}: 4 replicas, 16 system prompts x 1,000 tokens, shuffled users")
print("| policy | TTFT p50 ms | TTFT p90 ms | output tok/s | requests/s | prefix hit rate | ideal |")
print("|---|---|---|---|---|---|---|")
for p, j in rows.items():
    print(f"| {p} | {j['median_ttft_ms']:.1f} | {j['p90_ttft_ms']:.1f} | {j['output_throughput']:.1f} | "
          f"{j['request_throughput']:.2f} | {j.get('prefix_cache_hit_rate', float('nan')):.3f} | "
          f"{j.get('prefix_cache_hit_rate_ideal', float('nan')):.3f} |")
rr, kv = rows["round_robin"], rows["kv_aware"]
print(f"kv_aware vs round_robin, TTFT p90: {rr['p90_ttft_ms'] / kv['p90_ttft_ms']:.1f}x better; "
      f"hit rate {kv['prefix_cache_hit_rate'] / kv['prefix_cache_hit_rate_ideal']:.3f} of the ideal")
on = json.load(open(f"{out}/prefix-{backend}-one-caching-true.json"))
off = json.load(open(f"{out}/prefix-{backend}-one-caching-false.json"))
print(f"one replica, a repeated 1,000-token prompt: TTFT median {off['median_ttft_ms']:.1f} ms without caching, "
      f"{on['median_ttft_ms']:.1f} ms with ({off['median_ttft_ms'] / on['median_ttft_ms']:.1f}x)")
PY
