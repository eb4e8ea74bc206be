"""A harmony (gpt-oss) model behind `powerinfer serve`, through the official OpenAI client: the
template is detected; chat answers carry the analysis channel as reasoning_content and the
final channel as content, streamed and not, with no message header in either; <|end|> does
not end the reply, <|return|> does; reasoning_format none gives the reply as written; the
reasoning effort reaches the system message; raw completions show the headers. The model
(tests/chat/harmony_model.py) writes a fixed reply whatever the sampling, so the checks are
exact."""
import json
import os
import sys

import openai
import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "chat"))
import harmony_model  # noqa: E402

REPLY = ("<|channel|>analysis<|message|>" + harmony_model.REASONING +
         "<|end|><|start|>assistant<|channel|>final<|message|>" + harmony_model.ANSWER)
MSGS = [{"role": "user", "content": "Show me code"}]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("harmony") / "tiny-harmony.gguf")
    return path, harmony_model.build(path)


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=60)


def test_chat_splits_analysis_from_final(start_server, model):
    s = start_server("-c", 1024, model=model[0])
    props = json.loads(s.get("/props")[1])
    assert props["chat_template"] == "gpt-oss"
    r = client(s).chat.completions.create(model="x", messages=MSGS, max_tokens=400)
    m = r.choices[0].message
    assert m.content == harmony_model.ANSWER
    assert m.reasoning_content == harmony_model.REASONING
    assert r.choices[0].finish_reason == "stop"
    # Every token of the reply counts, headers included; <|return|> ends it and is not counted.
    assert r.usage.completion_tokens == model[1]


def test_streamed_chat_has_no_headers_and_reasoning_first(start_server, model):
    s = start_server("-c", 1024, model=model[0])
    chunks = list(client(s).chat.completions.create(model="x", messages=MSGS, max_tokens=400,
                                                    stream=True))
    reasoning, content, order = "", "", []
    for ch in chunks:
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        r = getattr(d, "reasoning_content", None) or ""
        for piece, kind in ((r, "r"), (d.content or "", "c")):
            assert "<|" not in piece, piece
            if piece:
                order.append(kind)
        reasoning += r
        content += d.content or ""
    assert reasoning == harmony_model.REASONING
    assert content == harmony_model.ANSWER
    assert order == sorted(order, reverse=True), "reasoning comes before the answer"
    assert "r" in order and "c" in order  # (a fast model's tokens arrive a few chunks at a time)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_reasoning_format_none_gives_the_reply_as_written(start_server, model):
    s = start_server("-c", 1024, "--reasoning-format", "none", model=model[0])
    m = client(s).chat.completions.create(model="x", messages=MSGS, max_tokens=400).choices[0].message
    assert m.content == REPLY
    assert getattr(m, "reasoning_content", None) is None
    # A request asks for the split back.
    status, body = s.post("/v1/chat/completions", {"messages": MSGS, "reasoning_format": "auto"})
    assert status == 200 and body["choices"][0]["message"]["content"] == harmony_model.ANSWER


def test_reasoning_effort_reaches_the_system_message(start_server, model):
    """The vocabulary has no merges, so a prompt is one token per byte: "Reasoning: low",
    "medium" and "high" differ by their lengths."""
    s = start_server("-c", 1024, "--reasoning-effort", "high", model=model[0])
    c = client(s)

    def prompt_tokens(**kw):
        return c.chat.completions.create(model="x", messages=MSGS, max_tokens=1, **kw).usage.prompt_tokens

    low, medium, high = (prompt_tokens(reasoning_effort=e) for e in ("low", "medium", "high"))
    assert (medium - low, high - low) == (3, 1)
    assert prompt_tokens() == high  # the server's --reasoning-effort
    status, body = s.post("/v1/chat/completions", {"messages": [{"role": "system", "content": "Be kind."}] + MSGS,
                                                   "max_tokens": 1, "reasoning_effort": "high"})
    # The developer message: "<|start|>developer<|message|># Instructions\n\nBe kind.\n\n<|end|>".
    assert status == 200
    assert body["usage"]["prompt_tokens"] - high == 3 + len("developer# Instructions\n\nBe kind.\n\n")
    status, body = s.post("/v1/chat/completions", {"messages": MSGS, "reasoning_effort": "extreme"})
    assert status == 400 and "reasoning_effort" in body["error"]["message"]


def test_completions_show_headers_and_stop_at_return(start_server, model):
    s = start_server("-c", 1024, model=model[0])
    prompt = "<|start|>user<|message|>hi<|end|><|start|>assistant"
    r = client(s).completions.create(model="x", prompt=prompt, max_tokens=400)
    assert r.choices[0].text == REPLY
    assert r.choices[0].finish_reason == "stop"


def test_cut_off_while_thinking(start_server, model):
    s = start_server("-c", 1024, model=model[0])
    r = client(s).chat.completions.create(model="x", messages=MSGS, max_tokens=6)
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "length"
    assert m.content == ""
    assert m.reasoning_content and harmony_model.REASONING.startswith(m.reasoning_content)
