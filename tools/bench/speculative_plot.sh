#!/usr/bin/env bash
# Draws speedup against concurrency from the tables tools/bench/speculative.sh wrote: one line per
# target and proposer, speculation off at 1. Needs gnuplot (scripts/install-deps.sh installs it).
#
# usage: tools/bench/speculative_plot.sh OUT.png TABLE.tsv...   (e.g. docs/bench/speculative-*.tsv)
. "$(dirname "$0")/usage.sh"
usage_from_header "$@"
[ $# -ge 2 ] || { usage; exit 2; }
set -euo pipefail
png=$1
shift
plots=()
for t in "$@"; do
  name=$(basename "$t" .tsv)
  name=${name#speculative-}
  for method in ngram draft; do
    grep -q "^$method	" "$t" || continue
    # columns: method conc rounds tok_s ... speedup (10th)
    plots+=("'$t' using (strcol(1) eq '$method' ? \$2 : NaN):10 with linespoints lw 2 pt 7 title '$name $method'")
  done
done
joined=$(IFS=,; echo "${plots[*]}")
gnuplot <<EOF
set terminal pngcairo size 900,560 noenhanced
set output '$png'
set datafile separator tab
set key autotitle columnhead
set grid
set logscale x 2
set xtics (1, 4, 16, 32)
set xrange [0.8:40]
set xlabel 'concurrency'
set ylabel 'output tok/s against speculation off'
set title 'Speculative decoding: speedup against concurrency (greedy, troupe bench serve)'
set key outside right
plot 1 with lines dt 2 lc rgb 'gray' title 'off', $joined
EOF
echo "wrote $png"
