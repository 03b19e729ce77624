#!/usr/bin/env bash
# The fault and control tests (ctest label `fault`: admin_test, cluster_auth_test, launch_test,
# multi_head_test, multiprocess_test, the worker-group and process tests) on a busy machine, two at
# a time (none runs alone any more: the failure detector tells a starved node from a dead one): two
# busy loops, each pinned to a core, run beside them for as long as they run. Bugs users hit
# (requests orphaned by a stalled host, heartbeats that flapped) showed only under load.
#
# usage: scripts/busy_fault_tests.sh [BUILD_DIR] [RUNS]   (default build, 1; extra runs stop at the first failure)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
runs=${2:-1}
cores=$(nproc)
loops=()
for c in 0 1; do
  taskset -c $((c % cores)) sh -c 'while :; do :; done' &
  loops+=($!)
done
trap 'kill "${loops[@]}" 2>/dev/null || true' EXIT
for run in $(seq 1 "$runs"); do
  echo "busy_fault_tests: run $run of $runs, two busy loops pinned beside the tests (load $(cut -d' ' -f1 /proc/loadavg))"
  ctest --test-dir "$build" -L fault -j2 --output-on-failure --timeout 1500
done
