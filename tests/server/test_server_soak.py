"""Soak (label slow, about two minutes): several client processes send a few hundred mixed
requests (chat and completions, streamed or not, some abandoned mid-stream). No request may
fail, the server's memory must stay within a bound, and /metrics must add up."""
import json
import multiprocessing as mp
import os
import random
import socket
import time

import openai

SECONDS = float(os.environ.get("PI_SOAK_SECONDS", "110"))
CLIENTS = 4
RSS_GROWTH_BOUND_KIB = 64 * 1024  # after warm-up; the KV cache and weights are allocated up front


def client_loop(url, port, seed, out):
    rng = random.Random(seed)
    c = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
    end = time.time() + SECONDS
    done = errors = abandoned = predicted = 0
    while time.time() < end:
        kind = rng.choice(["chat", "chat_stream", "completion", "completion_stream", "abandon"])
        n = rng.randint(1, 48)
        try:
            if kind == "chat":
                r = c.chat.completions.create(model="x", max_tokens=n, seed=rng.randint(0, 99),
                                              messages=[{"role": "user", "content": "Who made the heaven?"}])
                predicted += r.usage.completion_tokens
            elif kind == "chat_stream":
                chunks = list(c.chat.completions.create(
                    model="x", max_tokens=n, stream=True, stream_options={"include_usage": True},
                    messages=[{"role": "user", "content": "And God said"}]))
                predicted += chunks[-1].usage.completion_tokens
            elif kind == "completion":
                r = c.completions.create(model="x", prompt="In the beginning", max_tokens=n)
                predicted += r.usage.completion_tokens
            elif kind == "completion_stream":
                chunks = list(c.completions.create(model="x", prompt="The LORD", max_tokens=n,
                                                   stream=True, stream_options={"include_usage": True}))
                predicted += chunks[-1].usage.completion_tokens
            else:
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
                body = json.dumps({"prompt": "And God said", "n_predict": 400, "stream": True,
                                   "ignore_eos": True}).encode()
                sock.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                             str(len(body)).encode() + b"\r\n\r\n" + body)
                got = b""
                while got.count(b"data: ") < 3:
                    chunk = sock.recv(512)
                    if not chunk:
                        break
                    got += chunk
                sock.close()
                abandoned += 1
                continue
            done += 1
        except Exception as e:  # noqa: BLE001 - any failure counts
            errors += 1
            print("client error:", kind, repr(e))
    out.put((done, errors, abandoned, predicted))


def test_soak(start_server):
    s = start_server("-np", 4, "-c", 2048, "--max-queue", 32, "--chat-template", "chatml")
    for _ in range(5):  # warm-up before the memory baseline
        assert s.post("/completion", {"prompt": "And God said", "n_predict": 32})[0] == 200
    base = s.rss_kib()
    out = mp.Queue()
    procs = [mp.Process(target=client_loop, args=(s.url, s.port, i, out)) for i in range(CLIENTS)]
    for p in procs:
        p.start()
    peak = base
    while any(p.is_alive() for p in procs):
        peak = max(peak, s.rss_kib())
        time.sleep(1)
    results = [out.get(timeout=10) for _ in procs]
    for p in procs:
        p.join()
    done = sum(r[0] for r in results)
    errors = sum(r[1] for r in results)
    abandoned = sum(r[2] for r in results)
    assert errors == 0
    assert done + abandoned >= 200, results
    assert peak - base < RSS_GROWTH_BOUND_KIB, (base, peak)

    def settled():
        m = s.metrics()
        return m["requests_processing"] == 0 and m["requests_deferred"] == 0
    end = time.time() + 30
    while not settled() and time.time() < end:
        time.sleep(0.2)
    m = s.metrics()
    assert m["requests_submitted_total"] == 5 + done + abandoned
    assert m["requests_submitted_total"] == (m["requests_finished_total"] +
                                             m["requests_cancelled_total"] + m["requests_failed_total"])
    assert m["requests_failed_total"] == 0 and m["requests_rejected_total"] == 0
    assert m["requests_finished_total"] == 5 + done + (abandoned - m["requests_cancelled_total"])
    assert m["tokens_predicted_total"] >= sum(r[3] for r in results)
    assert m["kv_cache_usage_ratio"] <= 1.0
