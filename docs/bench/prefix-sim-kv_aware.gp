set terminal pngcairo size 1000,600 noenhanced
set grid
set output 'docs/bench/prefix-sim-kv_aware-latency.png'
set title 'Latency over the run'
set xlabel 'request start (s)'
set ylabel 'ms'
set logscale y
plot 'docs/bench/prefix-sim-kv_aware-requests.dat' using 1:3 with points pt 7 ps 0.5 title 'E2E latency', 'docs/bench/prefix-sim-kv_aware-requests.dat' using 1:2 with points pt 7 ps 0.5 title 'TTFT'
set output 'docs/bench/prefix-sim-kv_aware-cdf.png'
set title 'Latency CDFs'
set xlabel 'ms'
set ylabel 'fraction of samples'
unset logscale y
set logscale x
set key bottom right
plot 'docs/bench/prefix-sim-kv_aware-cdf.dat' index 0 using 1:2 with lines lw 2 title 'TTFT', '' index 1 using 1:2 with lines lw 2 title 'TPOT', '' index 2 using 1:2 with lines lw 2 title 'ITL', '' index 3 using 1:2 with lines lw 2 title 'E2E'
