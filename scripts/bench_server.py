#!/usr/bin/env python3
"""Benchmarks `powerinfer serve` (docs/BENCHMARKS.md):
  1. aggregate decode tokens/s with B busy slots (B concurrent streamed /completion requests,
     same prompt length and -n as `powerinfer batched-bench -npp P -ntg N -npl B`), timed by
     the client over the window in which all B requests are generating (from the last one's
     first token to the first one's last; tokens counted by the per-token probabilities each
     event carries): requests that arrive a step apart have their prompts evaluated while the
     others decode, and batched-bench's S_TG leaves prompts out; beside it the server's own
     figure (generated tokens over the longest `timings.predicted_ms`, which counts whole
     steps, prompt chunks of other requests included);
  2. time to first token of a 128-token prompt while 8 other slots generate, from the client
     (request sent -> first streamed token) and the server's prompt_ms.
Usage: scripts/bench_server.py -m MODEL [-t THREADS] [--slots 1,2,4,8,16] [-npp 32] [-ntg 64]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(ROOT, "build", "bin", "powerinfer")


def start(model, slots, ctx, threads):
    p = subprocess.Popen([BIN, "serve", "-m", model, "--port", "0", "-np", str(slots), "-c", str(ctx),
                          "-t", str(threads), "--max-queue", "64"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = None
    while port is None:
        line = p.stdout.readline()
        if not line:
            sys.exit("server failed to start")
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        port = int(m.group(1)) if m else None
    threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return p, url
        except Exception:  # noqa: BLE001
            time.sleep(0.1)


def post(url, body, timeout=600):
    req = urllib.request.Request(url + "/completion", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def prompt_of(n_tokens):
    # Distinct token ids through /completion's text: one short word per token is close enough;
    # the exact count is read back from tokens_evaluated.
    words = "the of and to in is was that for it with as his on be at by this had not".split()
    return " ".join(words[i % len(words)] for i in range(n_tokens - 1))


def stream(url, body):
    """[(time, tokens)] per streamed event (tokens counted by the event's per-token
    probabilities, since one event may carry several tokens), and the final message."""
    req = urllib.request.Request(url + "/completion",
                                 data=json.dumps({**body, "stream": True, "n_probs": 1}).encode(),
                                 headers={"Content-Type": "application/json"})
    events = []
    final = None
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if not line.startswith(b"data: "):
                continue
            msg = json.loads(line[6:])
            if msg.get("stop"):
                final = msg
            else:
                events.append((time.time(), len(msg.get("completion_probabilities", []))))
    return events, final


def aggregate(url, b, npp, ntg):
    body = {"prompt": prompt_of(npp), "n_predict": ntg, "ignore_eos": True, "temperature": 0,
            "cache_prompt": False}
    post(url, {**body, "n_predict": 4})  # warm-up
    out = [None] * b
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, stream(url, body))) for i in range(b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # The window in which every request is generating: from the last request's first token to
    # the first request's last token. Prompts that arrive a step late are evaluated while the
    # others already decode; batched-bench's S_TG leaves prompts out, so this window does too.
    t0 = max(ev[0][0] for ev, _ in out)
    t1 = min(ev[-1][0] for ev, _ in out)
    n = sum(k for ev, _ in out for t, k in ev if t0 < t <= t1)
    client_tps = n / (t1 - t0) if t1 > t0 else float("nan")
    finals = [f for _, f in out]
    server_tps = sum(f["tokens_predicted"] for f in finals) / (max(f["timings"]["predicted_ms"] for f in finals) / 1e3)
    return client_tps, server_tps, finals[0]["tokens_evaluated"], t1 - t0


def ttft(url, busy, npp_long=128):
    stop = threading.Event()

    def generate():
        while not stop.is_set():
            post(url, {"prompt": "the of and", "n_predict": 400, "ignore_eos": True})

    gens = [threading.Thread(target=generate, daemon=True) for _ in range(busy)]
    for g in gens:
        g.start()
    time.sleep(3)
    results = []
    for _ in range(3):
        body = json.dumps({"prompt": prompt_of(npp_long), "n_predict": 8, "stream": True,
                           "cache_prompt": False}).encode()
        req = urllib.request.Request(url + "/completion", data=body,
                                     headers={"Content-Type": "application/json"})
        t0 = time.time()
        first = None
        last = None
        with urllib.request.urlopen(req, timeout=600) as r:
            for line in r:
                if line.startswith(b"data: "):
                    if first is None:
                        first = time.time() - t0
                    last = json.loads(line[6:])
        results.append((first, last["timings"]["prompt_ms"] / 1e3, last["tokens_evaluated"]))
        time.sleep(0.5)
    stop.set()
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--slots", default="1,2,4,8,16")
    ap.add_argument("-npp", type=int, default=32)
    ap.add_argument("-ntg", type=int, default=64)
    a = ap.parse_args()
    print(f"| busy slots | decode t/s, all generating (client) | window s | "
          f"decode t/s (server timings) | prompt tokens |")
    print(f"|---:|---:|---:|---:|---:|")
    for b in map(int, a.slots.split(",")):
        p, url = start(a.model, b, b * (a.npp + a.ntg + 16), a.threads)
        try:
            client_tps, server_tps, n_eval, window = aggregate(url, b, a.npp, a.ntg)
            print(f"| {b} | {client_tps:.1f} | {window:.1f} | {server_tps:.1f} | {n_eval} |", flush=True)
        finally:
            p.terminate()
            p.wait()
    p, url = start(a.model, 9, 9 * 640, a.threads)
    try:
        for busy in (0, 8):
            for first, prompt_s, n in ttft(url, busy):
                print(f"TTFT with {busy} slots generating: {first * 1e3:.0f} ms to first token "
                      f"(server prompt {prompt_s * 1e3:.0f} ms, {n} prompt tokens)", flush=True)
    finally:
        p.terminate()
        p.wait()


if __name__ == "__main__":
    main()
