"""What a balancer and an operator see of one replica: /health ok, busy (every slot taken,
still 200) and draining (503); the slot and queue gauges of /metrics; the X-Replica header.
And the graceful stop: SIGTERM refuses new requests (503, Connection: close) while the
running ones finish, then the process exits 0; a second signal ends what is left with an
error that says so."""
import concurrent.futures as cf
import http.client
import json
import signal
import socket
import time

LONG = {"prompt": "And God said", "n_predict": 3000, "ignore_eos": True, "seed": 1}


def call(s, method, path, body=None, timeout=60):
    """(status, headers with lower-case names, body text) of one request on a new connection."""
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    finally:
        c.close()


def wait_for(cond, timeout=20.0):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def raw_stream(s, body):
    """Starts a streamed /completion on a raw socket; returns it once the first event came."""
    sock = socket.create_connection(("127.0.0.1", s.port))
    data = json.dumps({**body, "stream": True}).encode()
    sock.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    sock.settimeout(60)
    got = b""
    while b"data: " not in got:
        chunk = sock.recv(4096)
        assert chunk, got
        got += chunk
    return sock, got


def read_to_end(sock, got=b""):
    """Everything the server sends until it ends the chunked body (or closes)."""
    while not got.endswith(b"\r\n0\r\n\r\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    sock.close()
    return got.decode(errors="replace")


def events(text):
    return [json.loads(line[6:]) for line in text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


def busy_slots(s):
    return sum(1 for x in json.loads(s.get("/slots")[1]) if x["is_processing"])


def test_health_busy_metrics_and_replica_id(start_server):
    s = start_server("-np", 1, "-c", 4096, "--max-queue", 3, "--replica-id", "replica-a")
    status, headers, body = call(s, "GET", "/health")
    assert (status, json.loads(body)) == (200, {"status": "ok"})
    assert headers["x-replica"] == "replica-a"
    assert json.loads(call(s, "GET", "/props")[2])["replica_id"] == "replica-a"
    m = s.metrics()
    assert (m["slots_total"], m["slots_idle"], m["queue_limit"], m["draining"]) == (1, 1, 3, 0)

    sock, _ = raw_stream(s, LONG)  # holds the only slot
    status, headers, body = call(s, "GET", "/health")
    assert (status, json.loads(body)) == (200, {"status": "busy"})  # alive, but full
    m = s.metrics()
    assert (m["slots_idle"], m["requests_processing"], m["slots_usage_ratio"]) == (0, 1, 1)
    with cf.ThreadPoolExecutor(1) as ex:
        queued = ex.submit(s.post, "/completion", {"prompt": "a", "n_predict": 2})
        assert wait_for(lambda: s.metrics()["requests_deferred"] == 1)
        sock.close()  # the client goes: its slot frees and the queued request runs
        assert queued.result(timeout=60)[0] == 200
    assert wait_for(lambda: json.loads(call(s, "GET", "/health")[2]) == {"status": "ok"})


def test_sigterm_drains_running_requests_and_refuses_new_ones(start_server):
    s = start_server("-np", 2, "-c", 8192, "--drain-timeout", 120, "--replica-id", "b")
    n = 1500
    body = {"prompt": "And God said", "n_predict": n, "ignore_eos": True, "seed": 3}
    sock, got = raw_stream(s, body)
    with cf.ThreadPoolExecutor(1) as ex:
        whole = ex.submit(s.post, "/completion", body, timeout=120)
        assert wait_for(lambda: busy_slots(s) == 2)
        s.proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: call(s, "GET", "/health")[0] == 503)
        status, headers, text = call(s, "GET", "/health")
        assert json.loads(text) == {"status": "draining"}
        assert headers["connection"] == "close"
        assert s.metrics()["draining"] == 1
        # A new request is refused in a way a balancer retries elsewhere.
        status, headers, text = call(s, "POST", "/v1/completions",
                                     {"prompt": "And God said", "max_tokens": 2})
        assert status == 503, text
        assert headers["connection"] == "close" and headers["retry-after"] == "1"
        assert headers["x-replica"] == "b"
        err = json.loads(text)["error"]
        assert err["type"] == "unavailable_error" and "shutting down" in err["message"]
        # The running ones finish in full.
        status, r = whole.result(timeout=120)
        assert status == 200 and r["tokens_predicted"] == n and r["stopped_limit"], r
    last = events(read_to_end(sock, got))[-1]
    assert last["stop"] is True and last["tokens_predicted"] == n, last
    assert s.proc.wait(timeout=60) == 0
    log = "".join(s.log)
    assert "draining" in log and "drained: every accepted request finished" in log, log


def test_second_signal_ends_running_and_queued_requests_with_an_error(start_server):
    s = start_server("-np", 1, "-c", 4096, "--drain-timeout", 600, "--heartbeat", 0)
    sock, got = raw_stream(s, LONG)  # holds the only slot
    with cf.ThreadPoolExecutor(1) as ex:
        queued = ex.submit(call, s, "POST", "/completion", LONG, 120)
        assert wait_for(lambda: s.metrics()["requests_deferred"] == 1)
        s.proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: call(s, "GET", "/health")[0] == 503)
        s.proc.send_signal(signal.SIGINT)  # do not wait for them
        # Not streamed, with --heartbeat 0: nothing was sent yet, so the answer is a 503.
        status, headers, text = queued.result(timeout=60)
        assert status == 503, text
        assert "stopped before the request finished" in json.loads(text)["error"]["message"]
    # Streamed: the events end with an error object instead of the final event.
    last = events(read_to_end(sock, got))[-1]
    assert last["error"]["code"] == 503, last
    assert "stopped before the request finished" in last["error"]["message"]
    assert s.proc.wait(timeout=60) == 0
    log = "".join(s.log)
    assert "stopping without waiting" in log and "they end with an error" in log, log
