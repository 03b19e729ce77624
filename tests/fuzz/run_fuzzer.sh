#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time: the committed seed corpus is read, new inputs
# go to a work folder in the build tree, and the final stats (executions, coverage) are printed.
# Exits non-zero on a crash, a leak, a sanitizer report or an input slower than 10 s.
set -euo pipefail
bin=$1 corpus=$2 work=$3 seconds=$4
mkdir -p "$work"
exec "$bin" "$work" "$corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=3072 -max_len=65536 \
  -print_final_stats=1 -artifact_prefix="$work/" 2>&1
