#!/usr/bin/env bash
# Admission control under overload: the `small` model on one replica (configs/local.toml)
# against the same with [admission] (configs/admission.toml). The sustainable rate is measured
# first (closed loop, 32 at a time: the replica's batched throughput); then each config gets
# Poisson arrivals at 5x that rate.
# Reports each run's goodput (requests/s that finished within the TTFT SLO), refused requests
# (429) with the time it took to be refused (rejection latency), and the server's peak RSS.
# JSON in $out.
#   tools/bench/admission.sh [OUT_DIR]
. "$(dirname "$0")/usage.sh"
usage_from_header "$@"
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/bench-admission}
mkdir -p "$out"
tmp=$(mktemp -d)
port=${PORT:-18400}
. tools/bench/serve_lib.sh
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$tmp"' EXIT

serve configs/local.toml
build/troupe bench serve --url "http://127.0.0.1:$port" --concurrency 32 --requests 96 --prompt-len 64 --output-len 32 \
  --json "$out/sustainable.json" --quiet
stop
rate=$(/usr/bin/python3 -c "import json; print(json.load(open('$out/sustainable.json'))['request_throughput'])")
over=$(/usr/bin/python3 -c "print(round(5 * $rate, 3))")
echo "sustainable: $rate req/s; overload: $over req/s"

for cfg in local admission; do
  serve configs/$cfg.toml
  peak=0
  ( while kill -0 $server 2>/dev/null; do
      rss=$(awk '/VmRSS/ {print $2}' /proc/$server/status 2>/dev/null || echo 0)
      [ "${rss:-0}" -gt "$peak" ] && peak=$rss && echo $peak > "$tmp/peak-$cfg"
      sleep 0.2
    done ) &
  sampler=$!
  build/troupe bench serve --url "http://127.0.0.1:$port" --rate "$over" --requests 300 --prompt-len 64 --output-len 32 \
    --goodput "ttft:3000" --json "$out/$cfg.json" --quiet --seed 1 > "$tmp/run-$cfg.log" 2>&1 || true  # 429s count as failed
  stop
  wait $sampler 2>/dev/null || true
  /usr/bin/python3 - "$out/$cfg.json" "$cfg" "$(cat "$tmp/peak-$cfg" 2>/dev/null || echo 0)" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:>10}: completed {j['completed']}, refused {j.get('refused', 0)} (of {j['failed']} failed), goodput {j.get('request_goodput') or 0:.3f} req/s "
      f"(TTFT <= 3 s), median TTFT {j.get('median_ttft_ms', 0):.0f} ms, p99 {j.get('p99_ttft_ms', 0):.0f} ms, "
      f"rejection p50 {j.get('median_rejection_ms', 0):.1f} ms p99 {j.get('p99_rejection_ms', 0):.1f} ms, peak RSS {int(sys.argv[3]) / 1024:.0f} MiB")
PY
done
