#!/usr/bin/env bash
# The two quick-start commands of the README:
#   scripts/quickstart.sh run    install dependencies, build, run the main job
#   scripts/quickstart.sh test   install dependencies, build, run the whole test suite
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
case "$mode" in run|test) ;; *) echo "usage: $0 run|test" >&2; exit 2 ;; esac

scripts/install-deps.sh
if [ "$mode" = test ]; then
  # The unit tests (all of them there), and the fuzz targets on their seed corpora, under
  # AddressSanitizer and UndefinedBehaviorSanitizer in a second tree built with clang (libFuzzer
  # is clang's). -O1 with line tables only: what ASan's documentation recommends, and enough for
  # symbolized reports with file:line; -O2 -g made this tree compile about a third slower.
  # That tree compiles from now on at the lowest CPU priority, beside the release tree's build
  # and then its tests: it takes only the time they leave idle (a configure step, a link that
  # waits for its libraries, a test waiting on a child process), so they run as they would
  # without it. Started only once the release tree had built, it still had six and a half
  # minutes of a 31-minute run to go when the release tests ended. In a process group of its own
  # (setsid), so that a change of priority and an early exit reach every compiler it started.
  mkdir -p build-asan
  asan_log=build-asan/sanitizer-build.log
  setsid --wait bash -c 'CC=clang CXX=clang++ cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
      -DTROUPE_SANITIZE=ON -DTROUPE_FUZZ=ON -DTROUPE_DISABLE_CUDA=ON &&
    exec nice -n 19 cmake --build build-asan -j"$(nproc)" --target sanitized' >"$asan_log" 2>&1 &
  asan_build=$!
  trap 'kill -- -"$asan_build" 2>/dev/null || kill "$asan_build" 2>/dev/null || true' EXIT
fi
# The release tree builds the integration tests; the sanitizer tree builds the unit tests
# (tests/CMakeLists.txt: TROUPE_UNIT_TESTS).
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTROUPE_UNIT_TESTS=OFF
cmake --build build -j"$(nproc)"

if [ "$mode" = run ]; then
  # The main job: serve the embedded default topology (its model, models/kjv, is committed)
  # through the OpenAI API on 127.0.0.1:8000 until Ctrl-C; it prints how to send a request.
  exec ./build/troupe serve configs/local.toml
fi
# A failing test's output comes where it failed, amid the others'; its failed checks are repeated
# last, where a log's tail shows them.
failed_checks() {
  echo "quickstart: the failed checks, from build/Testing/Temporary/LastTest.log:" >&2
  grep -aE 'error: in "|Test Failed|Timeout|Exception' build/Testing/Temporary/LastTest.log |
    sed 's/\x1b\[[0-9;]*m//g' | tail -n 40 >&2 || true
}
if ! ctest --test-dir build --output-on-failure -j2 --timeout 1500 -LE fault; then
  failed_checks
  exit 8
fi
# The sanitizer tree, which built meanwhile in the cycles the release tree left idle, is
# awaited (at full priority now, if it is still building: nothing else runs).
asan_group=$(ps -o pgid= -p "$asan_build" 2>/dev/null | tr -d ' ' || true)
[ "$asan_group" = "$asan_build" ] && renice -n 0 -g "$asan_group" >/dev/null 2>&1 || true
if ! wait "$asan_build"; then
  cat "$asan_log"
  echo "quickstart: the sanitizer tree did not build (its output is above, and in $asan_log)" >&2
  exit 1
fi
trap - EXIT
tail -n 2 "$asan_log"
# The fault and control tests run once on a loaded machine: what they claim must hold there,
# where the bugs users hit (orphaned requests, flapping heartbeats) showed. Beside them run the
# sanitizer tree's tests, two at a time (CPU-bound work that has to be done anyway), and two busy
# loops pinned to the cores at nice 10 filling what those leave idle, at full priority once they
# are done (scripts/busy_fault_tests.sh): the cores are as busy as with the loops alone.
asan_tests_log=build-asan/sanitized-tests.log
ctest --test-dir build-asan --output-on-failure -j2 --timeout 600 -L 'unit|fuzz' -E '^example_' >"$asan_tests_log" 2>&1 &
asan_tests=$!
trap 'kill "$asan_tests" 2>/dev/null || true' EXIT
export TROUPE_BUSY_LOAD_PID=$asan_tests
fault_status=0
scripts/busy_fault_tests.sh build 1 || fault_status=$?
asan_status=0
wait "$asan_tests" || asan_status=$?
trap - EXIT
echo "quickstart: the sanitizer tree's unit tests and fuzz targets (beside the fault tests; also in $asan_tests_log):"
cat "$asan_tests_log"
if [ "$fault_status" -ne 0 ]; then
  failed_checks
  exit 8
fi
# Functions over 80 lines, files over 800 and include cycles: printed, not enforced.
/usr/bin/python3 scripts/code_shape.py || true
exit "$asan_status"
