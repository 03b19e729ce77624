#!/usr/bin/python3
"""The clients of tools/bench/soak.sh: streaming completions against a running head, checked
against an undisturbed run's, and the report.

  soak_clients.py reference PORT OUT.json        one undisturbed answer per prompt
  soak_clients.py run PORT REF.json SECONDS FAULTS.log OUT.json [CLIENTS]
                                                 CLIENTS (8) closed-loop streams for SECONDS,
                                                 then the report (FAULTS.log: "unix_time kind")

Each request is seeded (temperature 0.8, its prompt's seed), so wherever it runs, and however
often it moves, its text must equal the reference's. A request that neither finished (its
finish_reason and data: [DONE]) nor failed with an error within REQUEST_LIMIT seconds is
orphaned."""
import http.client
import json
import random
import sys
import threading
import time

REQUEST_LIMIT = 240.0  # seconds: past this, a request that has not ended counts as orphaned
PROMPTS = [
    "In the beginning", "And the LORD said unto Moses", "Blessed is the man", "The LORD is my shepherd",
    "And it came to pass", "Hear, O Israel", "For God so loved", "Then answered Jesus",
    "And the earth was without form", "Praise ye the LORD", "Wisdom is the principal thing", "Vanity of vanities",
    "And he said unto them", "O LORD, thou hast searched me", "Let not your heart be troubled", "The heavens declare",
]


def body_of(i):
    return {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 48 + 16 * (i % 5), "stream": True, "temperature": 0.8,
            "seed": 1000 + i, "ignore_eos": True}


def stream(port, i):
    """One request: (outcome, text, ttft_s, seconds, detail); outcome is done, error or orphaned."""
    t0 = time.time()
    text, ttft = "", None
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_LIMIT)
        c.request("POST", "/v1/completions", json.dumps(body_of(i)), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return "error", "", None, time.time() - t0, f"HTTP {r.status}: {r.read()[:200]!r}"
        finished = None
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                return ("done" if finished else "error"), text, ttft, time.time() - t0, "" if finished else "[DONE] without a finish_reason"
            ev = json.loads(data)
            if "error" in ev:
                return "error", text, ttft, time.time() - t0, json.dumps(ev["error"])[:200]
            for ch in ev.get("choices", []):
                if ch.get("text") and ttft is None:
                    ttft = time.time() - t0
                text += ch.get("text", "")
                finished = ch.get("finish_reason") or finished
        return "error", text, ttft, time.time() - t0, "the stream was cut"
    except (TimeoutError, OSError, http.client.HTTPException) as e:
        if time.time() - t0 >= REQUEST_LIMIT - 1:
            return "orphaned", text, ttft, time.time() - t0, "no end within %.0f s" % REQUEST_LIMIT
        return "error", text, ttft, time.time() - t0, repr(e)[:200]


def reference(port, out):
    ref = {}
    for i in range(len(PROMPTS) * 5):
        outcome, text, _, _, detail = stream(port, i)
        assert outcome == "done", f"the undisturbed run failed request {i}: {detail}"
        ref[str(i)] = text
    json.dump(ref, open(out, "w"))
    print(f"reference: {len(ref)} answers")


def percentile(v, p):
    if not v:
        return None
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def run(port, ref_path, seconds, faults_path, out, clients):
    ref = json.load(open(ref_path))
    results, lock = [], threading.Lock()
    end = time.time() + seconds

    def client(k):
        rng = random.Random(k)
        while time.time() < end:
            i = rng.randrange(len(ref))
            start = time.time()
            outcome, text, ttft, secs, detail = stream(port, i)
            with lock:
                results.append({"i": i, "start": start, "outcome": outcome, "ttft": ttft, "seconds": secs, "detail": detail,
                                "same": outcome != "done" or text == ref[str(i)]})

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    faults = []
    for line in open(faults_path):
        ts, kind = line.split(None, 1)
        faults.append((float(ts), kind.strip()))
    after = {}
    for ts, kind in faults:
        name = kind.split()[0]
        after.setdefault(name, []).extend(r["ttft"] for r in results if r["ttft"] is not None and ts <= r["start"] < ts + 20)
    report = {
        "seconds": seconds, "clients": clients, "faults": len(faults),
        "faults_by_kind": {k: sum(1 for _, f in faults if f.split()[0] == k) for k in sorted({f.split()[0] for _, f in faults})},
        "sent": len(results),
        "completed": sum(r["outcome"] == "done" for r in results),
        "failed_with_error": sum(r["outcome"] == "error" for r in results),
        "orphaned": sum(r["outcome"] == "orphaned" for r in results),
        "tokens_differing": sum(not r["same"] for r in results),
        "ttft_p99_s": percentile([r["ttft"] for r in results if r["ttft"] is not None], 99),
        "ttft_p99_s_within_20s_after_fault": {k: percentile(v, 99) for k, v in sorted(after.items())},
        "errors": sorted({r["detail"] for r in results if r["outcome"] != "done"})[:20],
    }
    json.dump(report, open(out, "w"), indent=2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    if sys.argv[1] == "reference":
        reference(int(sys.argv[2]), sys.argv[3])
    else:
        run(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), sys.argv[5], sys.argv[6], int(sys.argv[7]) if len(sys.argv) > 7 else 8)
