#!/usr/bin/env bash
# Batch-1 decode of each model family against Llama's, interleaved (docs/performance.md
# "Families"): this machine's memory bandwidth drifts by a third from minute to minute, so one run
# of each family (families.sh) cannot resolve 10%. Here each family's 1B-class random model
# (`troupe model synth --preset 1b --arch FAMILY --dtype bf16`) and Llama's decode in turns,
# ROUNDS times (llama, family, llama, family, ...), each run a 16-token prompt then 64 decode
# steps; the ratio of each family run to the mean of the Llama runs on either side of it is bytes
# of weights read per second, family over Llama; the median of those is reported with its range.
#
# usage: tools/bench/families_decode.sh     (after building: cmake --build build)
#   FAMILIES="mistral qwen2 qwen3 gemma2 gemma3 granite olmo2 smollm3 phi3"   ROUNDS=3   OUT=/tmp/troupe-families-decode
. "$(dirname "$0")/usage.sh"
usage_from_header "$@"
set -euo pipefail
cd "$(dirname "$0")/../.."
families=${FAMILIES:-mistral qwen2 qwen3 gemma2 gemma3 granite olmo2 smollm3 phi3}
rounds=${ROUNDS:-3}
out=${OUT:-/tmp/troupe-families-decode}
troupe=build/troupe
[ -x "$troupe" ] || { echo "build first: cmake --build build" >&2; exit 1; }
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT
"$troupe" model synth --preset 1b --arch llama --dtype bf16 --out "$out/llama" > /dev/null 2>&1
decode() {  # bytes of weights read per second in batch-1 decode, GB/s
  "$troupe" bench engine --model "$1" --batches 1 --prompt 16 --steps 64 --json 2> /dev/null |
    /usr/bin/python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["decode"][0]["tokens_per_second"] * j["weights"]["bytes_per_step"] / 1e9)'
}
decode "$out/llama" > /dev/null  # unrecorded: a fresh machine's first run is slower
echo "| family | decode GB/s of weights (median run) | llama's around it | ratio, median | ratio range |"
echo "|---|---|---|---|---|"
for f in $families; do
  rm -rf "$out/model"
  "$troupe" model synth --preset 1b --arch "$f" --dtype bf16 --out "$out/model" > /dev/null 2>&1
  runs=("$(decode "$out/llama")")
  for _ in $(seq "$rounds"); do
    runs+=("$(decode "$out/model")" "$(decode "$out/llama")")
  done
  /usr/bin/python3 - "$f" "${runs[@]}" <<'PY'
import statistics, sys
f, runs = sys.argv[1], [float(x) for x in sys.argv[2:]]
mine = runs[1::2]
around = [(runs[i - 1] + runs[i + 1]) / 2 for i in range(1, len(runs), 2)]
ratios = sorted(m / a for m, a in zip(mine, around))
print(f"| {f} | {statistics.median(mine):.2f} | {statistics.median(around):.2f} | {statistics.median(ratios):.2f} | {ratios[0]:.2f}-{ratios[-1]:.2f} |")
PY
done
