#!/usr/bin/env bash
# The fault and control tests (ctest label `fault`: admin_test, cluster_auth_test, launch_test,
# multi_head_test, multiprocess_test, the worker-group and process tests) on a busy machine, two at
# a time (none runs alone any more: the failure detector tells a starved node from a dead one): two
# busy loops, each pinned to a core, run beside them for as long as they run. Bugs users hit
# (requests orphaned by a stalled host, heartbeats that flapped) showed only under load.
# With TROUPE_BUSY_LOAD_PID naming a running process that is itself CPU-bound work (the quick
# start's sanitizer tests), the loops run at nice 10 while it does, filling only the cycles it
# leaves idle, and at full priority once it ends: the cores stay as busy as with the loops alone,
# and the work gets done meanwhile. (Raising a priority back needs root, as CI has; without it
# the loops run at full priority throughout.)
#
# usage: scripts/busy_fault_tests.sh [BUILD_DIR] [RUNS]   (default build, 1; extra runs stop at the first failure)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
runs=${2:-1}
cores=$(nproc)
load=${TROUPE_BUSY_LOAD_PID:-}
if [ -n "$load" ] && { ! kill -0 "$load" 2>/dev/null || [ "$(id -u)" -ne 0 ]; }; then load=""; fi
loops=()
for c in 0 1; do
  nice -n "$([ -n "$load" ] && echo 10 || echo 0)" taskset -c $((c % cores)) sh -c 'while :; do :; done' &
  loops+=($!)
done
if [ -n "$load" ]; then
  # tail --pid returns when that process ends; the loops then go back to full priority.
  (tail --pid="$load" -f /dev/null; renice -n 0 -p "${loops[@]}" >/dev/null) &
  loops+=($!)
fi
trap 'kill "${loops[@]}" 2>/dev/null || true' EXIT
beside="two busy loops pinned beside the tests"
[ -n "$load" ] && beside="two busy loops pinned beside the tests, at nice 10 while process $load (the sanitizer tests) runs"
for run in $(seq 1 "$runs"); do
  echo "busy_fault_tests: run $run of $runs, $beside (load $(cut -d' ' -f1 /proc/loadavg))"
  ctest --test-dir "$build" -L fault -j2 --output-on-failure --timeout 1500
done
