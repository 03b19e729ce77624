#!/bin/bash
# Run from the repository root beside `build/troupe launch configs/admin.toml --port 8000`.
# Kill decode-0 seven times in a row under `troupe launch configs/admin.toml`, each as soon as
# it is running again; print how long each return took, and what the node agent decided.
state() { build/troupe admin status --json --config configs/admin.toml | /usr/bin/python3 -c "import json,sys; j=json.load(sys.stdin); print([r['state'] for r in j['replicas'] if r['name']=='decode-0'][0])"; }
for i in 1 2 3 4 5 6 7; do
  t0=$(date +%s.%N)
  build/troupe admin kill decode-0 --config configs/admin.toml > /dev/null
  back=""
  for k in $(seq 1 150); do
    s=$(state); if [ "$s" = running ]; then back=$(echo "$(date +%s.%N) - $t0" | bc); break; fi; sleep 0.2
  done
  echo "kill $i: ${back:-not back within 30 s} (state $(state))"
done
