#!/usr/bin/env bash
# The planning example of docs/performance.md: a trace in the Azure LLM inference format (made
# here, seeded: 12,000 requests over 5 minutes at 20 to 60 requests/s, rising and falling; prompts
# lognormal around 300 tokens, answers around 60, within models/kjv's 1,024 positions), a profile
# of this machine (troupe bench engine, troupe bench kv-transfer over TCP as between nodes,
# troupe bench serve at concurrency 1 on configs/local.toml), then troupe plan for
# ttft_p99=1s,itl_p99=50ms with at most 8 replicas, once searched and once exhaustively.
# Writes docs/bench/plan-example-{trace.csv,profile.json,plan.txt,exhaustive.txt,topology.toml,
# plot.svg} and checks that troupe deploy kubernetes accepts the topology.
#
# usage: tools/bench/plan_example.sh     (after building: cmake --build build)
. "$(dirname "$0")/usage.sh"
usage_from_header "$@"
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-docs/bench}
port=18695
tmp=$(mktemp -d)
. tools/bench/serve_lib.sh
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$tmp"' EXIT
mkdir -p "$out"

trace=$out/plan-example-trace.csv
/usr/bin/python3 - "$trace" <<'PY'
import datetime, math, random, sys
rng = random.Random(30)
start = datetime.datetime(2024, 5, 10, 9, 0, 0)
t, rows = 0.0, []
while len(rows) < 12000:
    rate = 40 - 20 * math.cos(2 * math.pi * t / 300)  # 20 requests/s at the ends, 60 in the middle
    t += rng.expovariate(rate)
    prompt = min(900, max(16, int(rng.lognormvariate(math.log(300), 0.6))))
    answer = min(1024 - prompt, max(1, int(rng.lognormvariate(math.log(60), 0.7))))
    stamp = (start + datetime.timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
    rows.append(f"{stamp},{prompt},{answer}")
open(sys.argv[1], "w").write("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
PY

profile=$out/plan-example-profile.json
build/troupe bench engine --model models/kjv --kv-dtype f32 --fit-profile "$profile" > /dev/null
build/troupe bench kv-transfer --sizes 1,4,16 --backend tcp --fit-profile "$profile" > /dev/null
serve configs/local.toml
build/troupe bench serve --url "http://127.0.0.1:$port" --concurrency 1 --requests 24 --prompt-len 256 --prompt-dist uniform \
    --output-len 64 --seed 3 --quiet --fit-profile "$profile" > /dev/null
stop

slo=ttft_p99=1s,itl_p99=50ms
/usr/bin/time -f "%e s" -o "$tmp/searched.time" build/troupe plan --trace "$trace" --slo $slo --profile "$profile" --max-replicas 8 \
    -o "$out/plan-example-topology.toml" --plot "$out/plan-example-plot.svg" > "$out/plan-example-plan.txt"
/usr/bin/time -f "%e s" -o "$tmp/exhaustive.time" build/troupe plan --trace "$trace" --slo $slo --profile "$profile" --max-replicas 8 \
    --exhaustive -o "$tmp/exhaustive.toml" > "$out/plan-example-exhaustive.txt"
build/troupe deploy kubernetes "$out/plan-example-topology.toml" -o "$tmp/k8s" > /dev/null 2>&1
cat "$out/plan-example-plan.txt"
echo "searched in $(cat "$tmp/searched.time"); exhaustively in $(cat "$tmp/exhaustive.time"): $(grep -h 'topologies simulated' "$out"/plan-example-exhaustive.txt | sed 's/.*; //')"
if cmp -s <(grep '^cheapest' "$out/plan-example-plan.txt") <(grep '^cheapest' "$out/plan-example-exhaustive.txt"); then
  echo "the same choice as the exhaustive search"
else
  echo "a different choice from the exhaustive search:"; grep '^cheapest' "$out/plan-example-exhaustive.txt"
fi
echo "troupe deploy kubernetes $out/plan-example-topology.toml: $(ls "$tmp/k8s" | wc -l) files"
