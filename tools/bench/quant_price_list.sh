#!/usr/bin/env bash
# The price list of docs/quantization.md: the held-out perplexity of a model under each weight
# format and each KV dtype. Each GGUF mix is written with `troupe model quantize --type MIX
# --out FILE.gguf`, each folder format or mix with `--type q8_0|q4_0|int8|q4_k_m... --out DIR`,
# and every one is scored with `troupe eval perplexity` on the model's heldout.txt (f32 KV); then the original
# model is scored under each KV dtype. Prints two markdown tables: format, size on disk,
# perplexity and change from the original; KV dtype, perplexity and change from f16.
#
# usage: tools/bench/quant_price_list.sh     (after building: cmake --build build)
#   MODEL=models/kjv     a Hugging Face llama folder with heldout.txt (or TEXT=FILE)
#   MIXES="q8_0 q6_k q5_k_m q4_k_m iq4_xs q4_0 q3_k_m q2_k"   FOLDERS="q8_0 q4_0 int8 q6_k q4_k_m iq4_xs"
#   KV="f32 f16 bf16 int8"   OUT=/tmp/troupe-price-list (the quantized copies; removed after)
. "$(dirname "$0")/usage.sh"
usage_from_header "$@"
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${MODEL:-models/kjv}
text=${TEXT:-$model/heldout.txt}
out=${OUT:-/tmp/troupe-price-list}
troupe=build/troupe
[ -x "$troupe" ] || { echo "build first: cmake --build build" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT

ppl() {  # perplexity of $1 with KV dtype $2
  "$troupe" eval perplexity --model "$1" --text "$text" --kv-dtype "$2" --json 2>/dev/null |
    /usr/bin/python3 -c 'import json, sys; print("%.4f" % json.load(sys.stdin)["perplexity"])'
}
size() { du -sb --apparent-size "$1" | cut -f1 | awk '{ printf "%.2f MB", $1 / 1e6 }'; }
change() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.2f%%", (a / b - 1) * 100 }'; }

base=$(ppl "$model" f32)
echo "| weights | size | held-out perplexity | change |"
echo "|---|---|---|---|"
echo "| original | $(size "$model"/model.safetensors) | $base | — |"
for mix in ${MIXES:-q8_0 q6_k q5_k_m q4_k_m iq4_xs q4_0 q3_k_m q2_k}; do
  f="$out/$mix.gguf"
  "$troupe" model quantize --type "$mix" --model "$model" --out "$f" >/dev/null 2>&1
  p=$(ppl "$f" f32)
  echo "| GGUF $mix | $(size "$f") | $p | $(change "$p" "$base") |"
done
for fmt in ${FOLDERS:-q8_0 q4_0 int8 q6_k q4_k_m iq4_xs}; do
  d="$out/folder-$fmt"
  "$troupe" model quantize --type "$fmt" --model "$model" --out "$d" >/dev/null 2>&1
  p=$(ppl "$d" f32)
  echo "| folder $fmt | $(size "$d"/model.safetensors) | $p | $(change "$p" "$base") |"
done
echo
echo "| KV dtype | held-out perplexity | change from f16 |"
echo "|---|---|---|"
f16=$(ppl "$model" f16)
for kv in ${KV:-f32 f16 bf16 int8}; do
  p=$(ppl "$model" "$kv")
  echo "| $kv | $p | $(change "$p" "$f16") |"
done
