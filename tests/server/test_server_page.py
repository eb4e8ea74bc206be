"""The chat page at / in headless Chromium: it loads, sends a message (?prompt=), shows the
streamed answer; a screenshot is kept as a test artifact (build/test-artifacts/chat_page.png)."""
import os
import re
import shutil
import subprocess
import tempfile
import urllib.parse

import pytest

from conftest import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = os.environ.get("PI_ARTIFACT_DIR", os.path.join(ROOT, "build", "test-artifacts"))


def chromium(url, *args):
    # A fresh profile per run: a profile still locked by a previous browser makes it exit.
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                               "--hide-scrollbars", "--window-size=1000,600",
                               "--user-data-dir=" + profile, "--virtual-time-budget=15000",
                               *args, url],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=120,
                              text=True)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_chat_page_streams_an_answer(start_server):
    s = start_server("-np", 1, "-c", 256, "--chat-template", "chatml")
    url = s.url + "/?" + urllib.parse.urlencode({"prompt": "And God said", "max_tokens": 16, "seed": 1})
    # Headless Chromium's virtual time runs on while a streamed body is still arriving, so on a
    # loaded machine a dump can come before the answer: try a few times.
    for _ in range(5):
        dom = chromium(url, "--dump-dom").stdout
        m = re.search(r'<div class="msg assistant"[^>]*>([^<]+)</div>', dom)
        if m and m.group(1).strip():
            break
    assert '<div class="msg user">And God said</div>' in dom
    assert m and m.group(1).strip(), dom[-2000:]
    assert int(s.metrics()["tokens_predicted_total"]) > 0
    if 'data-done="1"' in dom:
        assert re.search(r"[0-9]+ tokens, [0-9.]+ tokens/s", dom), dom[-2000:]
    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = os.path.join(ARTIFACTS, "chat_page.png")
    chromium(url, "--screenshot=" + shot)
    assert os.path.getsize(shot) > 1000
