# Usage: /usr/bin/python3 scripts/kv_port_flood.py PORT PID  (a node's KV-transfer port, from ss -ltnp, and its pid)
# Flood a KV-transfer TCP port with connections that declare 16 MiB requests (the old wire
# format's body length) and never send them; print the target's RSS before and during.
import socket, struct, sys, time
port, pid = int(sys.argv[1]), int(sys.argv[2])
def rss():
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS:"): return int(l.split()[1]) // 1024
print("rss before (MB):", rss())
socks = []
for i in range(64):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"TKV2" + struct.pack("<I", 16 << 20) + b"\0" * 65536)
    socks.append(s)
time.sleep(1.0)
print("rss during (MB):", rss())
answered = 0
for s in socks:
    s.settimeout(10)
    try:
        d = s.recv(8)
        if len(d) >= 4: answered += 1
    except Exception: pass
print("connections answered with a refusal:", answered, "of 64")
print("rss after (MB):", rss())
