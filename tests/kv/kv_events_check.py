#!/usr/bin/python3
"""Reads a running Troupe server's KV events the way an outside consumer would, with Debian's
python3-zmq and python3-msgpack (nothing of Troupe's encoder), and checks vLLM's wire layout,
the sequence numbers, and that the replay socket resends what a late subscriber missed.

usage: kv_events_check.py PUB_ENDPOINT REPLAY_ENDPOINT HTTP_PORT TOPIC KV_DTYPE [TOKEN_IDS]
TOKEN_IDS: "hashes" (the default topology's: stored blocks carry no token ids) or "tokens".
Prints "kv events ok" and exits 0, or fails with an assertion naming what was wrong."""
import json
import sys
import urllib.request

import msgpack
import zmq

pub_ep, replay_ep, http_port, topic = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].encode()
KV_DTYPE = sys.argv[5]  # what every batch must say of its blocks
WITH_TOKENS = (sys.argv[6] if len(sys.argv) > 6 else "hashes") == "tokens"
ctx = zmq.Context()
BLOCK = 16


def complete(prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 4, "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{http_port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.status == 200, r.status


def replay(start):
    d = ctx.socket(zmq.DEALER)
    d.setsockopt(zmq.RCVTIMEO, 30000)
    d.setsockopt(zmq.LINGER, 0)
    d.connect(replay_ep)
    d.send_multipart([b"", start.to_bytes(8, "big")])
    out = []
    while True:
        frames = d.recv_multipart()
        assert len(frames) == 3 and frames[0] == b"", f"replay frames {frames!r}"
        seq = int.from_bytes(frames[1], "big", signed=True)
        if seq == -1:
            assert frames[2] == b""
            break
        out.append((seq, frames[2]))
    d.close()
    return out


def events_of(payload):
    batch = msgpack.unpackb(payload, raw=False)
    assert isinstance(batch, list) and len(batch) == 4, f"batch is not [ts, events, rank, kv_dtype]: {batch!r}"
    ts, events, rank, kv_dtype = batch
    assert kv_dtype == KV_DTYPE, f"kv_dtype {kv_dtype!r}, the cache's is {KV_DTYPE!r}"
    assert isinstance(ts, float) and ts > 1.6e9, f"timestamp {ts!r}"
    assert isinstance(rank, int) and rank in (0, 1), f"data_parallel_rank {rank!r}"
    assert isinstance(events, list)
    for e in events:
        tag = e[0]
        if tag == "BlockStored":
            assert len(e) == 7, e
            _, hashes, parent, tokens, block_size, lora_id, medium = e
            assert hashes and all(isinstance(h, int) and 0 <= h < 2 ** 64 for h in hashes), hashes
            assert parent is None or (isinstance(parent, int) and 0 <= parent < 2 ** 64), parent
            assert block_size == BLOCK, block_size
            assert len(tokens) == (BLOCK * len(hashes) if WITH_TOKENS else 0), ("token ids", WITH_TOKENS, len(tokens))
            assert lora_id is None and medium == "GPU", (lora_id, medium)
        elif tag == "BlockRemoved":
            assert len(e) == 3 and all(isinstance(h, int) for h in e[1]) and e[2] == "GPU", e
        elif tag == "AllBlocksCleared":
            assert len(e) == 1, e
        else:
            raise AssertionError(f"unknown event tag {tag!r}")
    return events


sub = ctx.socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, topic)
sub.setsockopt(zmq.RCVTIMEO, 30000)
sub.connect(pub_ep)

prompt = [3 + (i * 37) % 400 for i in range(40)]  # two full blocks and 8 tokens
complete(prompt)
# What the subscriber may have missed while it was joining, from the replay socket. The server
# queues events before answering; asking again until the first batch is there needs no sleep.
history = []
for _ in range(100):
    history = replay(0)
    if history:
        break
assert history, "the replay socket holds nothing after a request"
seqs = [s for s, _ in history]
assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) and seqs[0] == 0, f"sequence numbers {seqs}"
stored = [e for _, p in history for e in events_of(p) if e[0] == "BlockStored"]
assert stored, "no BlockStored event"
first = stored[0]
assert first[2] is None, "the first block of a chain has no parent"
assert first[3] == (prompt[:2 * BLOCK] if WITH_TOKENS else []), "BlockStored's token ids"
assert len(first[1]) == 2

# Live: a second prompt with the same two blocks and more: its new block's parent is the
# second block of the first.
prompt2 = prompt[:2 * BLOCK] + [401 + i for i in range(30)]
complete(prompt2)
live = None
while live is None:
    frames = sub.recv_multipart()  # RCVTIMEO: fails after 30 s without a message
    assert len(frames) == 3 and frames[0] == topic, f"PUB message frames {frames!r}"
    seq = int.from_bytes(frames[1], "big", signed=True)
    for e in events_of(frames[2]):
        if e[0] == "BlockStored" and e[2] == first[1][-1]:
            live = (seq, frames[2], e)
seq, payload, e = live
assert seq > seqs[-1], f"live sequence {seq} after replayed {seqs[-1]}"
assert e[3][:BLOCK] == (prompt2[2 * BLOCK:3 * BLOCK] if WITH_TOKENS else []), "the new block's tokens"

# A late subscriber asks from the start and gets everything, the live batch included, with
# the same bytes; asking from a later number gets only what follows.
late = replay(0)
assert (seq, payload) in late, "replay misses a published batch"
assert [s for s, _ in late] == list(range(len(late)))
assert all(s >= seq for s, _ in replay(seq))
print("kv events ok:", len(late), "batches,", sum(len(events_of(p)) for _, p in late), "events")
