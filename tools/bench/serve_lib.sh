# Shared by the benchmark scripts: start `troupe serve CONFIG` on $port and wait until it answers
# /health (serve), stop it (stop). The caller sets port and tmp, and traps EXIT to kill $server.
server=""
serve() {
  build/troupe serve "$1" --port "$port" --registry-port 0 > "$tmp/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && return 0
    kill -0 $server 2>/dev/null || { cat "$tmp/serve.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "the server did not come up" >&2; exit 1
}
stop() { kill $server; wait $server 2>/dev/null || true; server=""; }
