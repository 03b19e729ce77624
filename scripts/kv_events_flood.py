# Usage: /usr/bin/python3 scripts/kv_events_flood.py tcp://127.0.0.1:5558 PID  (beside build/troupe serve configs/kv-aware.toml)
# Send four 256 MiB "requests" to a KV-event replay socket; print the head's RSS, then ask a
# real replay and count what comes back before the -1 marker.
import zmq, sys, time, struct
ep, pid = sys.argv[1], int(sys.argv[2])
def rss():
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS:"): return int(l.split()[1]) // 1024
ctx = zmq.Context()
print("rss before (MB):", rss())
big = b"x" * (256 << 20)
for i in range(4):
    d = ctx.socket(zmq.DEALER); d.setsockopt(zmq.LINGER, 0); d.connect(ep)
    d.send_multipart([b"", big])
time.sleep(3)
print("rss after four 256 MiB messages (MB):", rss())
d = ctx.socket(zmq.DEALER); d.setsockopt(zmq.LINGER, 0); d.setsockopt(zmq.RCVTIMEO, 20000); d.connect(ep)
d.send_multipart([b"", struct.pack(">q", 0)])
n = 0
while True:
    f = d.recv_multipart()
    seq = struct.unpack(">q", f[1])[0]
    if seq == -1: break
    n += 1
print("replayed batches before the end marker:", n)
