#!/usr/bin/env bash
# The speculative-decoding benchmark of docs/performance.md: one target served without
# speculation, with n-gram lookup and with a draft model proposing, each under the same topology
# (configs/local.toml's scheduler, f16 KV), loaded by troupe bench serve at concurrency 1, 4, 16
# and 32, greedy. Prints per run: output tok/s, ITL p50/p99, the mean accepted length (tokens per
# verify step of a speculating request), the engine's tokens per step and mean step cost (forward
# plus proposing, from the server's counters; prefill steps are counted too, so with speculation,
# whose steps are fewer, this overstates a verify step: `troupe bench engine --verify K` times one
# alone), the speedup over speculation off, and the speedup
# those measured costs predict: (tokens per step / step cost) against speculation off's. Their
# ratio is what the engine loses outside the forward (scheduling, rollback, streaming). With
# ROUNDS=R each method runs R times, servers alternating, and the table holds medians (a small
# model's step differs by up to 20% from one server start to the next; `spread` shows it).
# Writes OUT/speculative-NAME-PROMPTS.tsv (the table), .raw.tsv (every run) and the JSON of each
# run's last round.
#
# usage: tools/bench/speculative.sh     (after building: cmake --build build)
#   MODEL=models/kjv            the target (tools/train/widen_kjv.py builds the 1b-sized one)
#   DRAFT=models/kjv-draft      the draft model
#   PROMPTS=continuation        continuation: windows of MODEL/heldout.txt continued;
#                               repeat: a held-out passage quoted, then its first words again: an
#                               answer that repeats the passage is what n-gram lookup finds
#                               (whether the model repeats it is up to the model)
#   CONCURRENCY="1 4 16 32"  METHODS="off ngram draft"  PROMPT_LEN=128  OUTPUT_LEN=128
#   REQUESTS=N                  requests per run (default: twice the concurrency, at least 8)
#   K=4  ROUNDS=1  NAME=kjv  OUT=docs/bench
. "$(dirname "$0")/usage.sh"
usage_from_header "$@"
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-docs/bench}
model=${MODEL:-models/kjv}
draft=${DRAFT:-models/kjv-draft}
prompts=${PROMPTS:-continuation}
name=${NAME:-$(basename "$model")}-$prompts
methods=${METHODS:-off ngram draft}
levels=${CONCURRENCY:-1 4 16 32}
port=18660
tmp=$(mktemp -d)
. tools/bench/serve_lib.sh
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$tmp"' EXIT
mkdir -p "$out"

topology() {  # METHOD: configs/local.toml's shape on $model, with [pools.speculative] for METHOD
  cat <<EOF
[model]
path = "$model"
backend = "cpu"
[[nodes]]
name = "head"
address = "127.0.0.1:0"
[[pools]]
name = "main"
replicas = 1
nodes = ["head"]
EOF
  case $1 in
    ngram) printf '[pools.speculative]\nmethod = "ngram"\nk = %s\n' "${K:-4}" ;;
    draft) printf '[pools.speculative]\nmethod = "draft"\ndraft_model = "%s"\nk = %s\n' "$draft" "${K:-4}" ;;
  esac
  cat <<EOF
[scheduler]
max_batched_tokens = 2048
max_seqs = 128
chunk = 512
kv_memory = "512MiB"
kv_dtype = "f16"
[router]
policy = "least_loaded"
[timeouts]
heartbeat = "1s"
connection = "5s"
request = "600s"
EOF
}

repeat_prompts() {  # ShareGPT file: each human turn quotes ~PROMPT_LEN/2 tokens' worth of verses and starts them again
  /usr/bin/python3 - "$model/heldout.txt" "$1" "${PROMPT_LEN:-128}" <<'EOF'
import json, sys
verses = [l for l in open(sys.argv[1]).read().splitlines() if len(l) > 40]
words, out = max(8, int(sys.argv[3]) * 3 // 8), []
for i in range(0, len(verses) - 4, 3):
    passage = " ".join(" ".join(verses[i:i + 4]).split()[:words])
    start = " ".join(passage.split()[:6])
    out.append({"conversations": [{"from": "human", "value": passage + "\n\n" + start},
                                  {"from": "gpt", "value": passage[len(start):]}]})
json.dump(out, open(sys.argv[2], "w"))
EOF
}

dataset=(--dataset-name text --dataset-path "$model/heldout.txt" --prompt-len "${PROMPT_LEN:-128}" --output-len "${OUTPUT_LEN:-128}")
if [ "$prompts" = repeat ]; then
  repeat_prompts "$tmp/repeat.json"
  dataset=(--dataset-name sharegpt --dataset-path "$tmp/repeat.json")
elif [ "$prompts" != continuation ]; then
  echo "unknown PROMPTS=$prompts (continuation, repeat)" >&2; exit 2
fi

counters() {  # the sums of the counters the prediction needs, in one scrape
  curl -s "http://127.0.0.1:$port/metrics" | awk '
    function add(n) { if ($1 ~ "^troupe:" n "_total([{]|$)") s[n] += $NF }
    { add("generation_tokens"); add("replica_engine_steps"); add("replica_forward_seconds");
      add("spec_decode_propose_seconds"); add("spec_decode_num_drafts"); add("spec_decode_num_accepted_tokens") }
    END { printf "%.0f %.0f %.6f %.6f %.0f %.0f", s["generation_tokens"], s["replica_engine_steps"],
          s["replica_forward_seconds"], s["spec_decode_propose_seconds"], s["spec_decode_num_drafts"],
          s["spec_decode_num_accepted_tokens"] }'
}

raw="$out/speculative-$name.raw.tsv"  # one line per run, the summary's input
printf 'round\tmethod\tconc\ttok_s\titl_p50_ms\titl_p99_ms\ttokens\tsteps\tstep_seconds\tdrafts\taccepted\n' > "$raw"
for round in $(seq "${ROUNDS:-1}"); do
  for method in $methods; do
    case $method in off | ngram | draft) ;; *) echo "unknown method $method" >&2; exit 2 ;; esac
    topology "$method" > "$tmp/$method.toml"
    serve "$tmp/$method.toml"
    # Warm-up, not measured: the first requests of a server pay for page faults and cold caches.
    build/troupe bench serve --url "http://127.0.0.1:$port" "${dataset[@]}" --requests 4 --concurrency 4 --seed 2 --quiet > /dev/null
    for c in $levels; do
      read -r g0 s0 f0 p0 d0 a0 <<< "$(counters)"
      json="$out/speculative-$name-$method-c$c.json"
      requests=${REQUESTS:-$((c * 2 > 8 ? c * 2 : 8))}
      build/troupe bench serve --url "http://127.0.0.1:$port" "${dataset[@]}" --requests "$requests" --concurrency "$c" \
        --seed 1 --quiet --json "$json" > /dev/null
      read -r g1 s1 f1 p1 d1 a1 <<< "$(counters)"
      /usr/bin/python3 - "$json" "$round" "$method" "$c" "$g0" "$s0" "$f0" "$p0" "$d0" "$a0" "$g1" "$s1" "$f1" "$p1" "$d1" "$a1" >> "$raw" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
g0, s0, f0, p0, d0, a0, g1, s1, f1, p1, d1, a1 = map(float, sys.argv[5:17])
print("\t".join(sys.argv[2:5] + [f"{j['output_throughput']:.2f}", f"{j['p50_itl_ms']:.2f}", f"{j['p99_itl_ms']:.2f}",
                                 f"{g1 - g0:.0f}", f"{s1 - s0:.0f}", f"{f1 - f0 + p1 - p0:.4f}", f"{d1 - d0:.0f}", f"{a1 - a0:.0f}"]))
EOF
      tail -1 "$raw" >&2
    done
    stop
  done
done

# The summary: per method and concurrency, the median over rounds of each figure; speedups against
# speculation off's median; predicted: tokens per second of forward and proposing against off's.
/usr/bin/python3 - "$raw" "$out/speculative-$name.tsv" <<'EOF'
import csv, statistics, sys
runs = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
med = statistics.median
rows, base = [], {}
for key in dict.fromkeys((r["method"], r["conc"]) for r in runs):
    rs = [r for r in runs if (r["method"], r["conc"]) == key]
    f = lambda name: med([float(r[name]) for r in rs])
    tps = [float(r["tok_s"]) for r in rs]
    m = dict(method=key[0], conc=key[1], rounds=len(rs), tok_s=f("tok_s"), itl_p50_ms=f("itl_p50_ms"),
             itl_p99_ms=f("itl_p99_ms"), accepted_len=1 + f("accepted") / f("drafts") if f("drafts") else 1.0,
             tok_per_step=f("tokens") / f("steps"), step_ms=1000 * f("step_seconds") / f("steps"),
             rate=med([float(r["tokens"]) / float(r["step_seconds"]) for r in rs]), spread=(max(tps) - min(tps)) / med(tps))
    if key[0] == "off":
        base[key[1]] = m
    rows.append(m)
cols = ["method", "conc", "rounds", "tok_s", "itl_p50_ms", "itl_p99_ms", "accepted_len", "tok_per_step", "step_ms",
        "speedup", "predicted", "measured_over_predicted", "spread"]
with open(sys.argv[2], "w") as out:
    out.write("\t".join(cols) + "\n")
    print(f"{'method':6} {'conc':>4} {'tok/s':>8} {'itl p50':>8} {'itl p99':>8} {'accepted':>8} {'tok/step':>8} "
          f"{'step ms':>8} {'speedup':>8} {'predicted':>9} {'m/p':>6} {'spread':>6}")
    for m in rows:
        b = base.get(m["conc"])
        m["speedup"] = m["tok_s"] / b["tok_s"] if b else float("nan")
        m["predicted"] = m["rate"] / b["rate"] if b else float("nan")
        m["measured_over_predicted"] = m["speedup"] / m["predicted"]
        out.write("\t".join(str(round(m[c], 3)) if isinstance(m[c], float) else str(m[c]) for c in cols) + "\n")
        print(f"{m['method']:6} {m['conc']:>4} {m['tok_s']:8.1f} {m['itl_p50_ms']:8.2f} {m['itl_p99_ms']:8.2f} "
              f"{m['accepted_len']:8.2f} {m['tok_per_step']:8.2f} {m['step_ms']:8.2f} {m['speedup']:8.3f} "
              f"{m['predicted']:9.3f} {m['measured_over_predicted']:6.3f} {m['spread']:6.2f}")
print("wrote " + sys.argv[2])
EOF
