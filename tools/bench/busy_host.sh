#!/usr/bin/env bash
# A cluster on a busy host: `troupe launch configs/admin.toml` with LOOPS busy loops (default 8,
# load average about LOOPS + 4 on two cores) beside it, and seeded completions at concurrency 16
# (16 streaming clients, tools/bench/soak_clients.py) for DURATION seconds (default 360). Counts what a busy host did to the cluster: links declared
# dead ("is gone" lines of the nodes, replica_down lines of the head), requests that failed or
# were orphaned, answers that differ from an undisturbed run's, and requests the head still holds
# once the load has stopped (they must be none).
# TIMEOUTS="heartbeat=200ms,connection=2s" runs it with other [timeouts] (the shipped configs'
# before they were raised), to compare.
#
# usage: LOOPS=8 DURATION=360 [TIMEOUTS=...] tools/bench/busy_host.sh    (after building)
. "$(dirname "$0")/usage.sh"
usage_from_header "$@"
set -euo pipefail
cd "$(dirname "$0")/../.."
loops=${LOOPS:-8}
duration=${DURATION:-360}
port=${PORT:-18950}
admin_port=$((port + 10))
tmp=$(mktemp -d)
topo="$tmp/busy.toml"
sed -e "s/127.0.0.1:7600/127.0.0.1:$admin_port/; s/127.0.0.1:7601/127.0.0.1:$((admin_port + 1))/" configs/admin.toml > "$topo"
if [ -n "${TIMEOUTS:-}" ]; then
  IFS=, read -ra pairs <<< "$TIMEOUTS"
  for kv in "${pairs[@]}"; do
    key=${kv%%=*}; value=${kv#*=}
    sed -i "s/^$key = \"[^\"]*\"/$key = \"$value\"/" "$topo"
  done
  grep -q '^connection = "[0-9]*s"' "$topo" && sed -i '/^suspect = /d' "$topo"  # the default follows a short connection
fi
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
build/troupe launch "$topo" --port "$port" > "$tmp/launch.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 240); do curl -sf "127.0.0.1:$port/health" | grep -q '"replicas_live":2' && break; sleep 0.5; done
# The undisturbed answers first, on an idle host (under 8 loops they alone took over 6 minutes).
/usr/bin/python3 tools/bench/soak_clients.py reference "$port" "$tmp/reference.json" > /dev/null
for _ in $(seq 1 "$loops"); do sh -c 'while :; do :; done' & pids+=($!); done
: > "$tmp/faults.log"
/usr/bin/python3 tools/bench/soak_clients.py run "$port" "$tmp/reference.json" "$duration" "$tmp/faults.log" "$tmp/clients.json" 16 > /dev/null
load=$(cut -d' ' -f1 /proc/loadavg)
for p in "${pids[@]:1}"; do kill "$p" 2>/dev/null || true; done
sleep 5
left=$(build/troupe admin --endpoint "tcp://127.0.0.1:$admin_port" requests | tail -n +2 | grep -vc "in progress" || true)
/usr/bin/python3 - "$tmp/clients.json" "$tmp/launch.log" "$left" "$load" "$loops" "${TIMEOUTS:-shipped}" <<'PY'
import json, re, sys
c = json.load(open(sys.argv[1]))
log = open(sys.argv[2]).read()
out = {"timeouts": sys.argv[6], "busy_loops": int(sys.argv[5]), "seconds": c["seconds"], "load_average_1m_at_end": float(sys.argv[4]),
       "sent": c["sent"], "completed": c["completed"], "failed_with_error": c["failed_with_error"], "orphaned": c["orphaned"],
       "tokens_differing": c["tokens_differing"], "errors": c["errors"], "links_lost_by_nodes": log.count("is gone"),
       "replica_down_at_head": len(re.findall(r"replica_down ", log)), "suspect_at_head": len(re.findall(r"replica_suspect ", log)),
       "requests_left_at_head": int(sys.argv[3])}
print(json.dumps(out, indent=2))
PY
