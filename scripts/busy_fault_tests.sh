#!/usr/bin/env bash
# The fault and control tests (ctest label `fault`: admin_test, cluster_auth_test, launch_test,
# multi_head_test, multiprocess_test, the worker-group and process tests) on a busy machine, two at
# a time (none runs alone any more: the failure detector tells a starved node from a dead one): two
# busy loops, each pinned to a core, run beside them for as long as they run. Bugs users hit
# (requests orphaned by a stalled host, heartbeats that flapped) showed only under load.
# With TROUPE_BUSY_LOAD_PID naming a running process that already keeps the cores busy at full
# priority (the quick start's sanitizer tests), the loops start when it ends, not before.
#
# usage: scripts/busy_fault_tests.sh [BUILD_DIR] [RUNS]   (default build, 1; extra runs stop at the first failure)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
runs=${2:-1}
cores=$(nproc)
load=${TROUPE_BUSY_LOAD_PID:-}
if [ -n "$load" ] && ! kill -0 "$load" 2>/dev/null; then load=""; fi
loops=()
for c in 0 1; do
  if [ -n "$load" ]; then
    # tail --pid returns when that process ends; the subshell then becomes the loop.
    (tail --pid="$load" -f /dev/null; exec taskset -c $((c % cores)) sh -c 'while :; do :; done') &
  else
    taskset -c $((c % cores)) sh -c 'while :; do :; done' &
  fi
  loops+=($!)
done
trap 'kill "${loops[@]}" 2>/dev/null || true' EXIT
beside="two busy loops pinned beside the tests"
[ -n "$load" ] && beside="beside process $load (the sanitizer tests), then two busy loops pinned"
for run in $(seq 1 "$runs"); do
  echo "busy_fault_tests: run $run of $runs, $beside (load $(cut -d' ' -f1 /proc/loadavg))"
  ctest --test-dir "$build" -L fault -j2 --output-on-failure --timeout 1500
done
