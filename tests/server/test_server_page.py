"""The chat page at / in headless Chromium. The Markdown renderer (src/server/chat_markdown.cpp),
taken from the served page, renders every construct exactly and lets no HTML of its input
through (script, event handlers, javascript: links), checked in the browser's DOM. The page
loads, names the model, sends a message (?prompt=) and shows the streamed answer and its speed;
with a harmony model (tests/chat/harmony_model.py, whose reply is fixed) the answer is rendered
Markdown with a code block, the reasoning is folded in a <details> block, and the <script> the
model wrote is text. Screenshots are kept as test artifacts (build/test-artifacts/)."""
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "chat"))
import harmony_model  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = os.environ.get("PI_ARTIFACT_DIR", os.path.join(ROOT, "build", "test-artifacts"))
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
LINK = ' target="_blank" rel="noopener noreferrer"'


def chromium(url, *args):
    # A fresh profile per run: a profile still locked by a previous browser makes it exit.
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                               "--hide-scrollbars", "--window-size=1000,700",
                               "--user-data-dir=" + profile, "--virtual-time-budget=15000",
                               *args, url],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=120,
                              text=True)


def finished_dom(url):
    """The page's DOM once its reply is done. Headless Chromium's virtual time runs on while a
    streamed body is still arriving, so on a loaded machine a dump can come before the answer:
    try a few times."""
    for _ in range(5):
        dom = chromium(url, "--dump-dom").stdout
        if 'data-done="1"' in dom:
            break
    return dom


MARKDOWN = {
    "h1": ("# Title", "<h1>Title</h1>"),
    "h2": ("## A *b* ##", "<h2>A <em>b</em></h2>"),
    "emphasis": ("**bold**, *it*, _it_, __b__, ~~del~~ and *x*",
                 "<p><strong>bold</strong>, <em>it</em>, <em>it</em>, <strong>b</strong>, "
                 "<del>del</del> and <em>x</em></p>"),
    "not emphasis": ("snake_case_name and 2 * 3 * 4", "<p>snake_case_name and 2 * 3 * 4</p>"),
    "escaped": ("\\*not em\\* \\_x\\_", "<p>*not em* _x_</p>"),
    "inline code": ("Use `a<b>` and ``x`y``", "<p>Use <code>a&lt;b&gt;</code> and <code>x`y</code></p>"),
    "fence": ("```js\nif (a < b) f('x');\n  two\n```\nafter",
              "<pre><code class=\"language-js\">if (a &lt; b) f(&#39;x&#39;);\n  two</code></pre><p>after</p>"),
    "tilde fence": ("~~~\n*raw*\n~~~", "<pre><code>*raw*</code></pre>"),
    "unclosed fence": ("```python\nprint(1)", "<pre><code class=\"language-python\">print(1)</code></pre>"),
    "inline fence": ("```a```", "<p><code>a</code></p>"),
    "list": ("- a\n- b\n  - c\n- d", "<ul><li>a</li><li>b<ul><li>c</li></ul></li><li>d</li></ul>"),
    "loose list": ("1. x\n\n2. y", "<ol><li><p>x</p></li><li><p>y</p></li></ol>"),
    "numbered": ("3. x\n4. *y*", "<ol start=\"3\"><li>x</li><li><em>y</em></li></ol>"),
    "paragraphs": ("line one\nline two\n\npara", "<p>line one<br>line two</p><p>para</p>"),
    "list after text": ("Steps:\n- a", "<p>Steps:</p><ul><li>a</li></ul>"),
    "quote": ("> quote\n> more", "<blockquote><p>quote<br>more</p></blockquote>"),
    "table": ("| a | b |\n|---|:-:|\n| 1 | `2` |",
              "<table><thead><tr><th>a</th><th style=\"text-align:center\">b</th></tr></thead>"
              "<tbody><tr><td>1</td><td style=\"text-align:center\"><code>2</code></td></tr></tbody></table>"),
    "rule": ("a\n\n---\n\nb", "<p>a</p><hr><p>b</p>"),
    "link": ("[the *docs*](https://example.com/a?b=1&c=2)",
             "<p><a href=\"https://example.com/a?b=1&amp;c=2\"" + LINK + ">the <em>docs</em></a></p>"),
    "autolink": ("see https://x.org/y.", "<p>see <a href=\"https://x.org/y\"" + LINK + ">https://x.org/y</a>.</p>"),
    "script": ("<script>window.pwned=1</script>", "<p>&lt;script&gt;window.pwned=1&lt;/script&gt;</p>"),
    "img": ("<img src=x onerror=\"window.pwned=1\">", "<p>&lt;img src=x onerror=&quot;window.pwned=1&quot;&gt;</p>"),
    "js link": ("[x](javascript:window.pwned=1)", "<p>[x](javascript:window.pwned=1)</p>"),
    "data link": ("[x](data:text/html,hi)", "<p>[x](data:text/html,hi)</p>"),
    "bold html": ("**<b>x</b>**", "<p><strong>&lt;b&gt;x&lt;/b&gt;</strong></p>"),
    "code html": ("`<svg onload=window.pwned=1>`", "<p><code>&lt;svg onload=window.pwned=1&gt;</code></p>"),
}
# Only checked for what reaches the DOM: no element or attribute of the input survives.
HOSTILE = [
    "<svg onload=\"window.pwned=1\"></svg>",
    "[x](https://a.com\" onmouseover=\"window.pwned=1)",
    "[x](https://a.com'onmouseover='window.pwned=1')",
    "```\"><img src=x onerror=window.pwned=1>\ncode\n```",
    "<a href='javascript:window.pwned=1'>x</a>",
    "| <img src=x onerror=window.pwned=1> |\n|---|\n| <script>window.pwned=1</script> |",
    "- <iframe src=javascript:window.pwned=1></iframe>",
    "![i](x onerror=window.pwned=1)",
    "https://a.com/<img/src/onerror=window.pwned=1>",
    "\u0000<script>window.pwned=1</script>",
]


def served_page(start_server):
    s = start_server("-np", 1, "-c", 256, "--chat-template", "chatml")
    status, page = s.get("/")
    assert status == 200
    return s, page


@needs_chromium
def test_markdown_renders_exactly_and_lets_no_html_through(start_server, tmp_path):
    _, page = served_page(start_server)
    m = re.search(r'<script id="markdown">(.*?)</script>', page, re.S)
    assert m, "the page has no Markdown renderer"
    cases = {k: v[0] for k, v in MARKDOWN.items()}
    cases.update({f"hostile {i}": h for i, h in enumerate(HOSTILE)})
    doc = tmp_path / "markdown.html"
    doc.write_text(
        "<!doctype html><meta charset='utf-8'><body><pre id='out'></pre><div id='holder'></div>"
        "<script>window.pwned = 0;</script><script>" + m.group(1) + "</script><script>"
        # "</" escaped: a "</script>" in a case must not end this script.
        "const cases = " + json.dumps(cases).replace("</", "<\\/") + ";\n"
        "const out = {};\n"
        "for (const k in cases) out[k] = renderMarkdown(cases[k]);\n"
        "const holder = document.getElementById('holder');\n"
        "for (const k in out) holder.insertAdjacentHTML('beforeend', '<div>' + out[k] + '</div>');\n"
        "setTimeout(() => {\n"
        "  for (const a of holder.querySelectorAll('a')) a.dispatchEvent(new MouseEvent('mouseover'));\n"
        "  out.__pwned = window.pwned;\n"
        "  out.__elements = [...holder.querySelectorAll('script,img,svg,iframe')].map(e => e.tagName);\n"
        "  out.__handlers = [...holder.querySelectorAll('*')].flatMap(e => [...e.attributes])"
        "      .map(a => a.name).filter(n => n.startsWith('on'));\n"
        "  out.__hrefs = [...holder.querySelectorAll('a')].map(a => a.getAttribute('href'));\n"
        "  document.getElementById('out').textContent = JSON.stringify(out);\n"
        "}, 300);\n</script>", encoding="utf-8")
    dom = chromium(doc.as_uri(), "--dump-dom").stdout
    got = re.search(r'<pre id="out">(.*?)</pre>', dom, re.S)
    assert got and got.group(1), dom[-2000:]
    out = json.loads(html.unescape(got.group(1)))
    for name, (_, want) in MARKDOWN.items():
        assert out[name] == want, name
    assert out["__pwned"] == 0
    assert out["__elements"] == []
    assert out["__handlers"] == []
    assert all(re.match(r"https?://", h) for h in out["__hrefs"]), out["__hrefs"]
    for i in range(len(HOSTILE)):
        assert "<script" not in out[f"hostile {i}"] and "<img" not in out[f"hostile {i}"]


@needs_chromium
def test_chat_page_streams_an_answer(start_server):
    s = start_server("-np", 1, "-c", 256, "--chat-template", "chatml")
    url = s.url + "/?" + urllib.parse.urlencode({"prompt": "And God said", "max_tokens": 16, "seed": 1})
    dom = finished_dom(url)
    assert '<div class="msg user">And God said</div>' in dom
    assert '<span id="model">kjv-relu.pwri.gguf</span>' in dom
    assert "chat template chatml" in dom
    m = re.search(r'<div class="answer">(.*?)</div>', dom, re.S)
    assert m and re.sub("<[^>]+>", "", m.group(1)).strip(), dom[-2000:]
    assert int(s.metrics()["tokens_predicted_total"]) > 0
    assert re.search(r'<div class="stats">[0-9]+ tokens, [0-9.]+ tokens/s', dom), dom[-2000:]
    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = os.path.join(ARTIFACTS, "chat_page.png")
    chromium(url, "--screenshot=" + shot)
    assert os.path.getsize(shot) > 1000


@needs_chromium
def test_chat_page_with_a_harmony_model(start_server, tmp_path):
    model = str(tmp_path / "tiny-harmony.gguf")
    harmony_model.build(model)
    s = start_server("-np", 1, "-c", 1024, model=model)
    url = s.url + "/?" + urllib.parse.urlencode({"prompt": "Show me code", "max_tokens": 400,
                                                 "reasoning_effort": "high"})
    dom = finished_dom(url)
    assert 'data-done="1"' in dom, dom[-3000:]
    assert '<span id="model">tiny-harmony.gguf</span>' in dom
    assert "chat template gpt-oss" in dom
    # The reasoning, folded (no "open"), apart from the answer, its HTML as text.
    m = re.search(r'<details class="reasoning">\s*<summary>Reasoning</summary>'
                  r'<div class="reasoning-text">(.*?)</div></details>', dom, re.S)
    assert m, dom[-3000:]
    assert html.unescape(m.group(1)) == harmony_model.REASONING
    answer = re.search(r'<div class="answer">(.*?)</div><div class="stats">', dom, re.S)
    assert answer, dom[-3000:]
    a = answer.group(1)
    assert "<h1>Hello</h1>" in a
    assert '<pre><code class="language-python">print("hi")</code></pre>' in a
    assert "<strong>code</strong>" in a and "<code>x&lt;y</code>" in a
    assert "<ul><li>one</li><li>two</li></ul>" in a
    assert '<a href="https://example.com"' in a
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in a
    assert "<script>alert" not in dom
    assert "<|" not in html.unescape(a)
    assert re.search(r'<div class="stats">[0-9]+ tokens, [0-9.]+ tokens/s', dom), dom[-2000:]
    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = os.path.join(ARTIFACTS, "chat_page_harmony.png")
    chromium(url, "--screenshot=" + shot)
    assert os.path.getsize(shot) > 1000
