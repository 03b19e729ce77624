#!/usr/bin/python3
# Measures what clients that leave cost a running `troupe serve`: RSS and the open-connections
# gauge after 20,000 half-closed `GET /health` connections (each must be answered) and after
# 10,000 streaming clients that disconnect after their first token (16 at a time).
# Usage: scripts/http_leak_check.py PORT PID   (PID: the serve process, for /proc/PID/status)
import socket, sys, json, threading, time
port=int(sys.argv[1]); pid=sys.argv[2]
def rss():
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1])
def metric(name):
    s=socket.create_connection(("127.0.0.1",port)); s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    d=b""
    while True:
        x=s.recv(65536)
        if not x: break
        d+=x
    s.close()
    for l in d.decode().splitlines():
        if l.startswith(name): return l.split()[-1]
def half_closed(n):
    for i in range(n):
        s=socket.create_connection(("127.0.0.1",port))
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"); s.shutdown(socket.SHUT_WR)
        d=b""
        while True:
            x=s.recv(4096)
            if not x: break
            d+=x
        assert d.startswith(b"HTTP/1.1 200"), d[:40]
        s.close()
body=json.dumps({"prompt":[5,6,7,8],"max_tokens":200,"stream":True,"ignore_eos":True}).encode()
req=b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"%(len(body),body)
def mid_stream(n):
    for i in range(n):
        s=socket.create_connection(("127.0.0.1",port)); s.sendall(req)
        d=b""
        while b'"text"' not in d:
            x=s.recv(4096)
            if not x: break
            d+=x
        s.close()
half_closed(200); mid_stream(50)
time.sleep(2)
r0=rss(); print("warm RSS kB", r0, "open", metric("troupe:http_connections_open"))
t=time.time(); half_closed(20000); print("20000 half-closed in %.1fs"%(time.time()-t))
time.sleep(1); r1=rss(); print("after half-closed RSS kB", r1, "delta", r1-r0, "open", metric("troupe:http_connections_open"))
t=time.time()
ths=[threading.Thread(target=mid_stream,args=(10000//16,)) for _ in range(16)]
[x.start() for x in ths]; [x.join() for x in ths]
print("10000 mid-stream disconnects in %.1fs"%(time.time()-t))
time.sleep(3); r2=rss(); print("after mid-stream RSS kB", r2, "delta", r2-r1, "open", metric("troupe:http_connections_open"), "running", metric("troupe:num_requests_running"), "kv", metric("troupe:kv_cache_usage_perc"))
