#!/usr/bin/env bash
# Each model family's engine speed against Llama's (docs/performance.md "Families"): a 1B-class
# random model of each family (`troupe model synth --preset 1b --arch FAMILY --dtype bf16`, one
# at a time, removed after), `troupe bench engine` on it (a 512-token prefill, batch-1 decode),
# 64 decode steps (8, the default, left the same model 15% apart from run to run),
# and two ratios to the llama model's figures: decode bytes of weights read per second (decode
# tokens/s x weight bytes per step; batch-1 decode reads every weight once a step) and prefill
# GFLOP/s, each as a fraction of the ceiling the engine measured in the same run (the read
# bandwidth, the FMA peak). A family whose recipe costs nothing beyond its bytes and FLOPs sits
# near 1.0.
#
# usage: tools/bench/families.sh     (after building: cmake --build build)
#   FAMILIES="llama mistral qwen2 qwen3 gemma2 gemma3 granite olmo2 smollm3 phi3"   OUT=/tmp/troupe-families
. "$(dirname "$0")/usage.sh"
usage_from_header "$@"
set -euo pipefail
cd "$(dirname "$0")/../.."
families=${FAMILIES:-llama mistral qwen2 qwen3 gemma2 gemma3 granite olmo2 smollm3 phi3}
out=${OUT:-/tmp/troupe-families}
troupe=build/troupe
[ -x "$troupe" ] || { echo "build first: cmake --build build" >&2; exit 1; }
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT
echo "| family | weight bytes a step | decode tok/s (batch 1) | decode GB/s of weights | of the read roofline | vs llama | prefill tok/s (512) | prefill GFLOP/s | of the FMA peak | vs llama |"
echo "|---|---|---|---|---|---|---|---|---|---|"
base_bw="" base_flops=""
# One unrecorded run first: the first engine run on a fresh machine decoded about a fifth slower
# than the same model later (a llama-recipe family after it beat llama by 1.2-1.5x).
"$troupe" model synth --preset 1b --arch llama --dtype bf16 --out "$out/model" > /dev/null 2>&1
"$troupe" bench engine --model "$out/model" --batches 1 --prompt 512 --json > /dev/null 2>&1
for f in $families; do
  rm -rf "$out/model"
  "$troupe" model synth --preset 1b --arch "$f" --dtype bf16 --out "$out/model" > /dev/null 2>&1
  "$troupe" bench engine --model "$out/model" --batches 1 --prompt 512 --steps 64 --json 2> /dev/null > "$out/$f.json"
  row=$(/usr/bin/python3 - "$out/$f.json" "$base_bw" "$base_flops" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
bytes_step = j["weights"]["bytes_per_step"]
d = j["decode"][0]
tps = d["tokens_per_second"]
bw = tps * bytes_step / 1e9
flops = j["prefill"]["gflop_s"]
# The ratios are of fractions of this run's own ceilings (the read bandwidth and FMA peak the
# engine measures before it runs): the machine's memory bandwidth moved by a third between runs.
frac_bw = d["bandwidth_roofline_fraction"]
frac_flops = j["prefill"]["compute_peak_fraction"]
base_bw = float(sys.argv[2]) if sys.argv[2] else frac_bw
base_flops = float(sys.argv[3]) if sys.argv[3] else frac_flops
print(f"{bytes_step / 1e9:.2f} GB|{tps:.2f}|{bw:.2f}|{frac_bw:.2f}|{frac_bw / base_bw:.2f}|{j['prefill']['tokens_per_second']:.1f}|{flops:.1f}|{frac_flops:.2f}|{frac_flops / base_flops:.2f}|{frac_bw}|{frac_flops}")
PY
)
  IFS='|' read -r bytes tps bw fbw bwr ptps flops fflops flr raw_bw raw_flops <<< "$row"
  [ -z "$base_bw" ] && base_bw=$raw_bw && base_flops=$raw_flops
  echo "| $f | $bytes | $tps | $bw | $fbw | $bwr | $ptps | $flops | $fflops | $flr |"
done
