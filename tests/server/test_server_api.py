"""`powerinfer serve` through the official OpenAI client and llama.cpp's endpoints: answers,
streaming, stop strings, usage counts, and the same text as `powerinfer run`."""
import concurrent.futures as cf
import json
import os

import openai
import pytest

from conftest import MODEL, ROOT, run_cli

PROMPTS = ["And God said", "In the beginning", "The LORD is my shepherd", "Jesus wept"]


def client(server, key="none"):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=60)


def test_health_models_props_slots(start_server):
    s = start_server("-np", 2, "-c", 512, "--chat-template", "chatml")
    assert s.get("/health") == (200, '{"status":"ok"}')
    models = client(s).models.list()
    assert [m.id for m in models.data] == ["kjv-relu.pwri.gguf"]
    status, text = s.get("/props")
    props = json.loads(text)
    assert status == 200 and props["total_slots"] == 2 and props["chat_template"] == "chatml"
    assert props["default_generation_settings"]["n_ctx"] == 256
    status, text = s.get("/slots")
    assert status == 200 and [x["id"] for x in json.loads(text)] == [0, 1]
    status, page = s.get("/")
    assert status == 200 and "<textarea" in page and "/v1/chat/completions" in page


@pytest.mark.parametrize("temp", [0.0, 0.8])
def test_completion_equals_run_with_any_slots_and_load(start_server, temp):
    want = {p: run_cli(p, 24, 11, temp) for p in PROMPTS}
    for slots in (1, 3):
        s = start_server("-np", slots, "-c", 256 * slots)
        c = client(s)

        def ask(p):
            r = c.completions.create(model="x", prompt=p, max_tokens=24, seed=11, temperature=temp)
            return p, r

        # Every prompt twice at once: more requests than slots, different batches each time.
        with cf.ThreadPoolExecutor(8) as ex:
            results = list(ex.map(ask, PROMPTS * 2))
        for p, r in results:
            assert r.choices[0].text == want[p], (slots, p)
            assert r.usage.completion_tokens <= 24
            assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_llama_completion_and_usage_counts(start_server):
    s = start_server("-np", 2, "-c", 512)
    status, tok = s.post("/tokenize", {"content": "And God said", "add_special": True})
    assert status == 200
    n_prompt = len(tok["tokens"])
    status, r = s.post("/completion", {"prompt": "And God said", "n_predict": 10, "seed": 1,
                                       "ignore_eos": True})
    assert status == 200, r
    assert r["tokens_predicted"] == 10 and r["tokens_evaluated"] == n_prompt
    assert r["stopped_limit"] and r["timings"]["predicted_n"] == 10
    assert r["content"] == run_cli("And God said", 10, 1, extra=["--ignore-eos"])
    r2 = client(s).completions.create(model="x", prompt="And God said", max_tokens=10, seed=1,
                                      extra_body={"ignore_eos": True})
    assert r2.usage.prompt_tokens == n_prompt and r2.usage.completion_tokens == 10
    assert r2.choices[0].finish_reason == "length"
    status, d = s.post("/detokenize", {"tokens": tok["tokens"]})
    assert status == 200 and d["content"].endswith("And God said")


def test_streaming_equals_non_streaming(start_server):
    s = start_server("-np", 2, "-c", 512, "--chat-template", "chatml")
    c = client(s)
    whole = c.completions.create(model="x", prompt="In the beginning", max_tokens=20, seed=5)
    chunks = list(c.completions.create(model="x", prompt="In the beginning", max_tokens=20,
                                       seed=5, stream=True))
    assert "".join(ch.choices[0].text for ch in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason

    msgs = [{"role": "system", "content": "Answer in the words of the King James Bible."},
            {"role": "user", "content": "Who made the heaven?"}]
    chat = c.chat.completions.create(model="x", messages=msgs, max_tokens=16, seed=3)
    assert chat.object == "chat.completion" and chat.choices[0].message.role == "assistant"
    assert chat.id.startswith("chatcmpl-") and chat.created > 0 and chat.model
    assert chat.choices[0].finish_reason in ("stop", "length")
    stream = list(c.chat.completions.create(model="x", messages=msgs, max_tokens=16, seed=3,
                                            stream=True, stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
    assert text == chat.choices[0].message.content
    assert stream[0].choices[0].delta.role == "assistant"
    assert stream[-1].choices == [] and stream[-1].usage.total_tokens == chat.usage.total_tokens
    assert stream[-1].usage.completion_tokens == chat.usage.completion_tokens


def test_stop_strings(start_server):
    s = start_server("-np", 1, "-c", 256)
    c = client(s)
    full = c.completions.create(model="x", prompt="And God said", max_tokens=30, temperature=0)
    text = full.choices[0].text
    word = text[8:12]
    assert len(word) == 4 and word in text
    cut = text[: text.index(word)]
    for stop in (word, [word, "zzzz"]):
        r = c.completions.create(model="x", prompt="And God said", max_tokens=30,
                                 temperature=0, stop=stop)
        assert r.choices[0].text == cut and r.choices[0].finish_reason == "stop"
        streamed = "".join(ch.choices[0].text for ch in c.completions.create(
            model="x", prompt="And God said", max_tokens=30, temperature=0, stop=stop,
            stream=True))
        assert streamed == cut


def test_logprobs(start_server):
    s = start_server("-np", 1, "-c", 256, "--chat-template", "chatml")
    c = client(s)
    r = c.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}],
                                  max_tokens=6, seed=2, logprobs=True, top_logprobs=3,
                                  extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 6
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob >= t.top_logprobs[2].logprob
        assert t.logprob <= t.top_logprobs[0].logprob + 1e-6
    assert "".join(t.token for t in content) == r.choices[0].message.content


def test_prompt_cache_reuses_the_common_prefix(start_server):
    s = start_server("-np", 1, "-c", 256)
    base = "And God said, Let there be light: and there was light."
    first = s.post("/completion", {"prompt": base, "n_predict": 4, "seed": 1})[1]
    again = s.post("/completion", {"prompt": base + " And God saw", "n_predict": 4, "seed": 1})[1]
    assert first["tokens_cached"] == 0
    assert again["tokens_cached"] >= first["tokens_evaluated"] - 1
    cold = s.post("/completion", {"prompt": base + " And God saw", "n_predict": 4, "seed": 1,
                                  "cache_prompt": False})[1]
    assert cold["tokens_cached"] == 0 and cold["content"] == again["content"]


def test_reasoning_format_wiring(start_server):
    """--reasoning-format deepseek on a model that does not think: the reply stays content,
    streamed as whole, with no reasoning_content; a bad request value is a 400 naming it."""
    s = start_server("-c", 256, "--chat-template", "chatml", "--reasoning-format", "deepseek")
    c = client(s)
    msgs = [{"role": "user", "content": "Who made the heaven?"}]
    chat = c.chat.completions.create(model="x", messages=msgs, max_tokens=12, seed=3)
    assert chat.choices[0].message.content
    assert getattr(chat.choices[0].message, "reasoning_content", None) is None
    stream = list(c.chat.completions.create(model="x", messages=msgs, max_tokens=12, seed=3, stream=True))
    assert "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices) == \
        chat.choices[0].message.content
    status, body = s.post("/v1/chat/completions", {"messages": msgs, "reasoning_format": "r1"})
    assert status == 400 and "reasoning_format" in body["error"]["message"]


QWEN3_LIKE_TEMPLATE = (
    "{%- for message in messages %}{{ '<|im_start|>' + message.role + '\\n' + message.content + "
    "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}{%- endif %}")


def test_enable_thinking_through_chat_template_kwargs(start_server, tmp_path):
    """chat_template_kwargs {"enable_thinking": false} (llama.cpp's field, Qwen3's switch) opens
    the reply with an empty think block on a model whose template has the switch: the prompt
    grows by those tokens; a model without the switch ignores it; a bad value is a 400."""
    import sys

    sys.path.insert(0, os.path.join(ROOT, "tools", "convert"))
    import gguf_io

    r = gguf_io.GGUFReader(MODEL)
    path = str(tmp_path / "thinking.pwri.gguf")
    with gguf_io.GGUFWriter(path, r.magic, r.alignment) as w:
        for k, v in r.metadata.items():
            if k != "general.alignment":
                w.add(k, v, r.types[k])
        w.add("tokenizer.chat_template", QWEN3_LIKE_TEMPLATE)
        for t in r.tensors.values():
            w.add_tensor_info(t.name, t.shape, t.dtype)
        w.write_header()
        for t in r.tensors.values():
            w.write_tensor(t.name, r.raw(t.name))
    msgs = [{"role": "user", "content": "Who made the heaven?"}]
    off = {"chat_template_kwargs": {"enable_thinking": False}}

    def prompt_tokens(server, extra):
        status, body = server.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 1, **extra})
        assert status == 200, body
        return body["usage"]["prompt_tokens"]

    s = start_server("-c", 256, model=path)
    # "<think>\n\n</think>\n\n" is plain text to this vocabulary: several tokens more.
    assert prompt_tokens(s, off) >= prompt_tokens(s, {}) + 4
    status, body = s.post("/v1/chat/completions", {"messages": msgs, "chat_template_kwargs": {"enable_thinking": 0}})
    assert status == 400 and "enable_thinking must be a boolean" in body["error"]["message"]
    plain = start_server("-c", 256, "--chat-template", "chatml")
    assert prompt_tokens(plain, off) == prompt_tokens(plain, {})
