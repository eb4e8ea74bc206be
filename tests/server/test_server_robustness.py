"""`powerinfer serve` under abuse: bad requests, API keys, limits, a full queue, clients that
disconnect or read slowly. After each, the server must keep serving."""
import concurrent.futures as cf
import json
import socket
import time

import openai
import pytest

LONG = {"prompt": "And God said", "n_predict": 3000, "ignore_eos": True, "seed": 1}


def ok_after(s, headers=None):
    status, r = s.post("/completion", {"prompt": "And God said", "n_predict": 4}, headers=headers)
    assert status == 200, r
    assert r["tokens_predicted"] == 4 or r["stopped_eos"]


def error_of(status, body, want_status, want_type, part=""):
    assert status == want_status, body
    assert set(body) == {"error"}, body
    e = body["error"]
    assert e["code"] == want_status and e["type"] == want_type, e
    assert part in e["message"], e


def wait_for(cond, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def raw_stream(s, body, rcvbuf=None):
    """Opens a streaming request on a raw socket and returns it after the headers came."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect(("127.0.0.1", s.port))
    data = json.dumps({**body, "stream": True}).encode()
    sock.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    sock.settimeout(30)
    got = b""
    while b"data: " not in got:
        chunk = sock.recv(256 if rcvbuf is None else 1)
        assert chunk, got
        got += chunk
    return sock


def busy_slots(s):
    return sum(1 for x in json.loads(s.get("/slots")[1]) if x["is_processing"])


def test_bad_requests_get_the_right_status_and_error_object(start_server):
    s = start_server("-np", 1, "-c", 256, "--max-body", 4096, "--chat-template", "chatml")
    error_of(*s.post("/v1/completions", raw=b"{not json"), 400, "invalid_request_error", "not valid JSON")
    error_of(*s.post("/v1/completions", {"prompt": "a", "temperature": "hot"}), 400,
             "invalid_request_error", "'temperature' must be a number")
    error_of(*s.post("/v1/chat/completions", {"messages": "hi"}), 400, "invalid_request_error",
             "'messages' must be an array")
    error_of(*s.post("/v1/completions", {"prompt": "a", "frobnicate": True}), 400,
             "invalid_request_error", "unknown field 'frobnicate'")
    error_of(*s.post("/v1/chat/completions", {"messages": [{"role": "tool", "content": "x"}]}),
             400, "invalid_request_error", "role 'tool'")
    error_of(*s.post("/v1/completions", {"prompt": "a", "response_format": {"type": "xml"}}),
             400, "invalid_request_error", "not one of text, json_object, json_schema")
    error_of(*s.post("/v1/completions", {"prompt": "a", "grammar": "root ::= ("}), 400,
             "invalid_request_error", "grammar: line 1, column")
    error_of(*s.post("/v1/completions", {"prompt": "a", "json_schema": {"type": "int"}}), 400,
             "invalid_request_error", "unknown type 'int'")
    error_of(*s.post("/v1/completions", {"prompt": "word " * 600}), 400, "invalid_request_error",
             "at most 255 fit")
    error_of(*s.post("/v1/completions", {"prompt": "x" * 8000}), 413, "invalid_request_error",
             "too large")
    error_of(*s.post("/detokenize", {"tokens": [1, 99999]}), 400, "invalid_request_error", "tokens[1]")
    error_of(*s.post("/nowhere", {}), 404, "not_found_error")
    ok_after(s)
    c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.BadRequestError):
        c.completions.create(model="x", prompt="a", max_tokens=-7)


def test_api_key(start_server):
    s = start_server("-np", 1, "-c", 256, "--api-key", "sekrit")
    assert s.get("/health")[0] == 200  # stays open
    error_of(*s.post("/completion", {"prompt": "a"}), 401, "authentication_error")
    error_of(*s.post("/completion", {"prompt": "a"}, headers={"Authorization": "Bearer nope"}),
             401, "authentication_error")
    assert s.get("/metrics")[0] == 401
    ok_after(s, headers={"Authorization": "Bearer sekrit"})
    c = openai.OpenAI(base_url=s.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        c.completions.create(model="x", prompt="a", max_tokens=2)
    good = openai.OpenAI(base_url=s.url + "/v1", api_key="sekrit", max_retries=0)
    assert good.completions.create(model="x", prompt="a", max_tokens=2).usage.completion_tokens <= 2


def test_more_requests_than_slots_and_health_under_load(start_server):
    s = start_server("-np", 2, "-c", 512, "--max-queue", 16)
    with cf.ThreadPoolExecutor(10) as ex:
        futures = [ex.submit(s.post, "/completion", {"prompt": "And God said", "n_predict": 40,
                                                     "seed": i, "ignore_eos": True})
                   for i in range(8)]
        assert wait_for(lambda: busy_slots(s) == 2)
        for _ in range(5):
            assert s.get("/health", timeout=10)[0] == 200
        results = [f.result(timeout=120) for f in futures]
    assert all(st == 200 and r["tokens_predicted"] == 40 for st, r in results)
    m = s.metrics()
    assert m["requests_finished_total"] == 8 and m["tokens_predicted_total"] == 320


def test_queue_full_gives_503(start_server):
    s = start_server("-np", 1, "-c", 4096, "--max-queue", 1)
    first = raw_stream(s, LONG)       # holds the slot
    assert wait_for(lambda: busy_slots(s) == 1)
    with cf.ThreadPoolExecutor(1) as ex:
        queued = ex.submit(s.post, "/completion", {"prompt": "a", "n_predict": 2})
        assert wait_for(lambda: s.metrics()["requests_deferred"] == 1)
        status, body = s.post("/completion", {"prompt": "b", "n_predict": 2})
        error_of(status, body, 503, "unavailable_error", "queue is full")
        first.close()                  # frees the slot: the queued request runs
        assert queued.result(timeout=60)[0] == 200
    assert s.metrics()["requests_rejected_total"] == 1
    ok_after(s)


def test_disconnect_frees_the_slot(start_server):
    s = start_server("-np", 1, "-c", 4096)
    sock = raw_stream(s, LONG)
    assert busy_slots(s) == 1
    sock.close()
    assert wait_for(lambda: busy_slots(s) == 0, timeout=5)
    assert s.metrics()["requests_cancelled_total"] == 1
    # Not streamed: the server writes leading whitespace while it works and notices too.
    sock = socket.create_connection(("127.0.0.1", s.port))
    data = json.dumps(LONG).encode()
    sock.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                 str(len(data)).encode() + b"\r\n\r\n" + data)
    assert wait_for(lambda: busy_slots(s) == 1)
    time.sleep(0.3)
    sock.close()
    assert wait_for(lambda: busy_slots(s) == 0, timeout=5)
    assert s.metrics()["requests_cancelled_total"] == 2
    ok_after(s)


def test_slow_reader_does_not_stall_others(start_server):
    s = start_server("-np", 2, "-c", 8192)
    slow = raw_stream(s, LONG, rcvbuf=1024)   # then reads nothing more for a while
    try:
        for i in range(3):
            status, r = s.post("/completion", {"prompt": "In the beginning", "n_predict": 30,
                                               "seed": i, "ignore_eos": True}, timeout=30)
            assert status == 200 and r["tokens_predicted"] == 30
        for _ in range(3):  # a byte a second
            assert slow.recv(1)
            time.sleep(1)
    finally:
        slow.close()
    assert wait_for(lambda: busy_slots(s) == 0, timeout=10)
    ok_after(s)


def test_bad_flags_are_one_line_errors(start_server):
    import subprocess
    from conftest import BIN, MODEL
    s = start_server("-np", 1, "-c", 256)

    def serve(*args):
        model = [] if "-m" in args else ["-m", MODEL]
        return subprocess.run([BIN, "serve", *model, *map(str, args)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=60)

    for args, part in [(("-np", 0, "--port", 0), "-np must be 1..64"),
                       (("--port", s.port), f"cannot listen on 127.0.0.1:{s.port}"),
                       (("--port", 0, "--chat-template", "bogus"), "unknown chat template 'bogus'"),
                       (("--port", 0, "--temp", -1), "temperature"),
                       (("-m", "/nonexistent.gguf", "--port", 0), "/nonexistent.gguf")]:
        r = serve(*args)
        assert r.returncode == 1, (args, r.stdout)
        assert part in r.stdout, (args, r.stdout)
    ok_after(s)
