#!/usr/bin/env bash
# The speculative-decoding benchmark of docs/speculative.md: models/kjv served without
# speculation (configs/local.toml), with n-gram lookup (configs/speculative-ngram.toml) and with
# models/kjv-draft proposing (configs/speculative-draft.toml), each loaded by troupe bench serve
# with continuation prompts cut from the held-out books (models/kjv/heldout.txt), greedy, at
# concurrency 1, 4, 16 and 32. Prints output tok/s, ITL p50/p99, the mean accepted length
# (tokens per verify step, from the server's spec_decode counters) and the speedup over
# speculation off; writes docs/bench/speculative-METHOD-cC.json.
#
# usage: tools/bench/speculative.sh     (after building: cmake --build build)
#   CONCURRENCY="1 4 16 32"  METHODS="off ngram draft"  REQUESTS=64  PROMPT_LEN=128  OUTPUT_LEN=128
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then  # usage_from_header: the comment above, nothing run
  sed -n '2,/^[^#]/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-docs/bench}
methods=${METHODS:-off ngram draft}
levels=${CONCURRENCY:-1 4 16 32}
requests=${REQUESTS:-64}
port=18660
tmp=$(mktemp -d)
. tools/bench/serve_lib.sh
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$tmp"' EXIT
mkdir -p "$out"

counter() {  # the sum of a counter's series in /metrics
  curl -s "http://127.0.0.1:$port/metrics" | awk -v n="troupe:$1_total" '$1 ~ "^"n"([{]|$)" {s += $NF} END {printf "%.0f", s}'
}

declare -A base
printf '%-6s %4s %10s %9s %9s %9s %8s\n' method conc "tok/s" "itl p50" "itl p99" "accepted" speedup
for method in $methods; do
  case $method in
    off) config=configs/local.toml ;;
    ngram) config=configs/speculative-ngram.toml ;;
    draft) config=configs/speculative-draft.toml ;;
    *) echo "unknown method $method" >&2; exit 2 ;;
  esac
  serve "$config"
  for c in $levels; do
    d0=$(counter spec_decode_num_drafts); a0=$(counter spec_decode_num_accepted_tokens)
    json="$out/speculative-$method-c$c.json"
    build/troupe bench serve --url "http://127.0.0.1:$port" --dataset-name text --dataset-path models/kjv/heldout.txt \
      --prompt-len "${PROMPT_LEN:-128}" --output-len "${OUTPUT_LEN:-128}" --requests "$requests" --concurrency "$c" \
      --seed 1 --quiet --json "$json" > /dev/null
    d1=$(counter spec_decode_num_drafts); a1=$(counter spec_decode_num_accepted_tokens)
    tps=$(/usr/bin/python3 -c "import json; print(round(json.load(open('$json'))['output_throughput'], 1))")
    itl=$(/usr/bin/python3 -c "import json; j = json.load(open('$json')); print(round(j['p50_itl_ms'], 2), round(j['p99_itl_ms'], 2))")
    accepted=$(/usr/bin/python3 -c "d = $d1 - $d0; print(round(1 + ($a1 - $a0) / d, 2) if d else '-')")
    [ "$method" = off ] && base[$c]=$tps
    speedup=$(/usr/bin/python3 -c "b = '${base[$c]:-}'; print(round($tps / float(b), 2) if b else '-')")
    printf '%-6s %4s %10s %9s %9s %9s %8s\n' "$method" "$c" "$tps" $itl "$accepted" "$speedup"
  done
  stop
done
