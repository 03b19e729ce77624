#!/usr/bin/env bash
# The soak benchmark (not a test): 8 closed-loop streaming clients for DURATION seconds (default
# 1800) against `troupe launch configs/three-local.toml --netns` (each node in a network namespace
# of its own; a copy of the topology with an admin endpoint and a third replica slot, for the
# console's faults), with a fault every 20 s drawn at random (seed SEED) from:
#   kill      kill -9 of a node process (launch restarts it)
#   stop      SIGSTOP of a node for 2-10 s, then SIGCONT
#   cut       a node's link cut in its network namespace for 5-20 s, then restored
#   replica   `troupe admin kill decode-N` (its node agent restarts it)
#   scale     `troupe admin scale decode 3`, or back to 2
# Every request is seeded, so its text must equal an undisturbed run's wherever it ran. Reports
# requests sent, completed, failed with an error, orphaned (neither, within 240 s: must be 0),
# answers that differ from the undisturbed run's (must be 0), and the p99 time to first token of
# the requests started within 20 s after each kind of fault; then checks the head's book is empty
# (`troupe admin requests`) and its HTTP connections are back to one. Writes OUT/soak.json.
#
# usage: DURATION=1800 SEED=1 OUT=docs/bench tools/bench/soak.sh     (as root, after building)
. "$(dirname "$0")/usage.sh"
usage_from_header "$@"
set -euo pipefail
cd "$(dirname "$0")/../.."
duration=${DURATION:-1800}
out=${OUT:-docs/bench}
seed=${SEED:-1}
port=${PORT:-18900}
admin_port=$((port + 10))
tmp=$(mktemp -d)
mkdir -p "$out"
topo="$tmp/soak.toml"
sed -e 's/^replicas = 2/replicas = 2\nmax_replicas = 3\nwarm_replicas = 0/' configs/three-local.toml > "$topo"
printf '\n[admin]\nendpoint = "tcp://127.0.0.1:%d"\nevents = "tcp://127.0.0.1:%d"\n' "$admin_port" $((admin_port + 1)) >> "$topo"
admin() { build/troupe admin --endpoint "tcp://127.0.0.1:$admin_port" --events "tcp://127.0.0.1:$((admin_port + 1))" "$@"; }
launcher=""
cleanup() {
  [ -n "$launcher" ] && kill -TERM "$launcher" 2>/dev/null && wait "$launcher" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
build/troupe launch "$topo" --netns --port "$port" > "$tmp/launch.log" 2>&1 &
launcher=$!
for _ in $(seq 1 240); do curl -sf "127.0.0.1:$port/health" | grep -q '"replicas_live":2' && break; sleep 0.5; done
curl -sf "127.0.0.1:$port/health" | grep -q '"replicas_live":2' || { tail -30 "$tmp/launch.log"; echo "soak: the cluster did not come up" >&2; exit 1; }
/usr/bin/python3 tools/bench/soak_clients.py reference "$port" "$tmp/reference.json"

node_pid() { pgrep -f "troupe node $topo --name $1" | head -1; }
host_if_of() {  # the host side of a node's veth pair: its namespace trp<tag>n<k> has trp<tag>h<k>
  local ns
  ns=$(ip netns identify "$1")
  echo "${ns%n*}h${ns##*n}"
}
faults="$tmp/faults.log"
: > "$faults"
fault() { echo "$(date +%s.%N) $*" >> "$faults"; echo "soak: $(date +%T) fault: $*"; }
scaled=0
/usr/bin/python3 tools/bench/soak_clients.py run "$port" "$tmp/reference.json" "$duration" "$faults" "$tmp/clients.json" &
clients=$!
RANDOM=$seed
end=$((SECONDS + duration - 20))
while [ $SECONDS -lt $end ]; do
  sleep 20
  node=node-$([ $((RANDOM % 2)) -eq 0 ] && echo a || echo b)
  pid=$(node_pid "$node" || true)
  [ -z "$pid" ] && { fault "none ($node is restarting)"; continue; }
  case $((RANDOM % 5)) in
    0) fault "kill $node"; kill -9 "$pid" ;;
    1) s=$((2 + RANDOM % 9)); fault "stop $node ${s}s"; kill -STOP "$pid"; (sleep "$s"; kill -CONT "$pid") & ;;
    2) s=$((5 + RANDOM % 16)); ifc=$(host_if_of "$pid"); fault "cut $node ${s}s ($ifc)"; ip link set "$ifc" down; (sleep "$s"; ip link set "$ifc" up) & ;;
    3) r=decode-$((RANDOM % 2)); fault "replica $r"; admin kill "$r" > /dev/null || true ;;
    4) if [ $scaled -eq 0 ]; then fault "scale decode 3"; admin scale decode 3 > /dev/null || true; scaled=1
       else fault "scale decode 2"; admin scale decode 2 > /dev/null || true; scaled=0; fi ;;
  esac
done
wait "$clients"
sleep 5
book=$(admin requests | tail -n +2 | grep -vc "in progress" || true)
conns=$(curl -s "127.0.0.1:$port/metrics" | awk '/^troupe:http_connections_open/ {print $2}')
/usr/bin/python3 - "$tmp/clients.json" "$out/soak.json" "$book" "$conns" "$seed" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r.update({"seed": int(sys.argv[5]), "head_requests_left": int(sys.argv[3]), "http_connections_open_after": float(sys.argv[4] or -1)})
json.dump(r, open(sys.argv[2], "w"), indent=2)
print(json.dumps(r, indent=2))
ok = r["orphaned"] == 0 and r["tokens_differing"] == 0 and r["head_requests_left"] == 0 and r["http_connections_open_after"] == 1
print("soak:", "passed" if ok else "FAILED (orphaned, differing, left or connections above)")
PY
