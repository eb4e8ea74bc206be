"""Starts `powerinfer serve` on a free loopback port for a test and stops it afterwards."""
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("PI_BIN", os.path.join(ROOT, "build", "bin", "powerinfer"))
MODEL = os.path.join(ROOT, "models", "kjv-relu", "kjv-relu.pwri.gguf")


class Server:
    def __init__(self, *args, model=MODEL):
        self.args = [BIN, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", "-t", "1",
                     *map(str, args)]
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.log = []
        self.port = None
        deadline = time.time() + 60
        while self.port is None:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("server exited: " + "".join(self.log))
            self.log.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            if time.time() > deadline:
                raise RuntimeError("server did not start: " + "".join(self.log))
        # Keep draining the log so the server never blocks on a full pipe.
        self._drain = threading.Thread(target=self._read_log, daemon=True)
        self._drain.start()
        self.url = f"http://127.0.0.1:{self.port}"
        while True:
            status, _ = self.get("/health")
            if status == 200:
                break
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("server never became healthy: " + "".join(self.log))
            time.sleep(0.05)

    def _read_log(self):
        for line in self.proc.stdout:
            self.log.append(line)

    def request(self, method, path, body=None, headers=None, timeout=60, raw=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def get(self, path, **kw):
        try:
            return self.request("GET", path, **kw)
        except (urllib.error.URLError, ConnectionError):
            return None, ""

    def post(self, path, body=None, **kw):
        status, text = self.request("POST", path, body, **kw)
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def metrics(self):
        _, text = self.get("/metrics")
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, v = line.split()
                out[k.replace("powerinfer_", "")] = float(v)
        return out

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def start_server():
    servers = []

    def start(*args, **kwargs):
        s = Server(*args, **kwargs)
        servers.append(s)
        return s

    yield start
    for s in servers:
        code = s.stop()
        assert code == 0, "server did not stop cleanly:\n" + "".join(s.log[-20:])


def run_cli(prompt, n, seed, temp=None, extra=(), model=MODEL):
    """The text `powerinfer run` generates (stdout without the prompt and the final newline)."""
    args = [BIN, "run", "-m", model, "-p", prompt, "-n", str(n), "-s", str(seed), "-t", "1",
            "--no-display-prompt", *extra]
    if temp is not None:
        args += ["--temp", str(temp)]
    out = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True,
                         timeout=120).stdout.decode()
    assert out.endswith("\n")
    return out[:-1]
