"""The Python package (python/powerinfer over the nanobind extension) on the bundled model.

Run against the build tree (PYTHONPATH=build/python, set by tests/python_pkg/CMakeLists.txt) or
an installed package: greedy text equals `powerinfer run`'s byte for byte, streaming yields the
same text, chat sessions continue, errors are powerinfer.Error with the engine's message, and
the GIL is released while the engine computes.
"""
import json
import logging
import os
import pathlib
import subprocess
import sys
import threading
import time

import pytest

import powerinfer

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = str(ROOT / "models" / "kjv-relu" / "kjv-relu.pwri.gguf")
POWERINFER = os.environ.get("PI_POWERINFER", str(ROOT / "build" / "bin" / "powerinfer"))


@pytest.fixture(scope="module")
def engine():
    return powerinfer.Engine(MODEL)


MOE_MODEL = str(ROOT / "models" / "kjv-moe" / "kjv-moe.gguf")


def run_text(prompt, n, model=MODEL):
    out = subprocess.run([POWERINFER, "run", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0",
                          "--no-display-prompt"], capture_output=True, check=True)
    return out.stdout.decode("utf-8").removesuffix("\n")


def test_greedy_text_equals_powerinfer_run(engine):
    got = engine.generate("In the beginning", max_tokens=40, temperature=0)
    assert got == run_text("In the beginning", 40)
    assert "".join(engine.generate("In the beginning", max_tokens=40, temperature=0, stream=True)) == got


def test_mixture_of_experts_model():
    """The bundled MoE (smallthinker: routed before attention, sparse ReGLU experts) through the
    package: its info, and greedy text equal to `powerinfer run`'s."""
    moe = powerinfer.Engine(MOE_MODEL)
    assert moe.info["architecture"] == "smallthinker"
    got = moe.generate("In the beginning", max_tokens=32, temperature=0)
    assert got and got == run_text("In the beginning", 32, MOE_MODEL)
    # Experts read from the file into a cache of 21 of its 48 (moe_ram: bytes): the same text;
    # a file read into memory is refused by name.
    mapped = powerinfer.Engine(MOE_MODEL, load="map")
    assert mapped.generate("In the beginning", max_tokens=32, temperature=0, moe_ram=10 << 20) == got
    with pytest.raises(powerinfer.Error, match="needs the file mapped"):
        powerinfer.Engine(MOE_MODEL, load="read").session(moe_ram=10 << 20)


def test_info_tokens_and_sessions(engine):
    info = engine.info
    assert info["architecture"] == "llama" and info["powerinfer"] and info["n_layer"] == 6
    ids = engine.tokenize("And God said")
    assert ids[0] == engine._e.bos
    assert engine.detokenize(ids) == "And God said"
    s = engine.session(temperature=0, n_ctx=128)
    s.feed("And God said")
    first = s.generate(max_tokens=8)
    assert s.n_past == len(ids) + 8
    assert s.timings["n_eval"] == 8
    s.reset()
    s.feed("And God said")
    assert s.generate(max_tokens=8) == first  # a reset session repeats itself
    # Seeded sampling is reproducible.
    a = engine.generate("In", max_tokens=16, temperature=0.9, seed=7)
    b = engine.generate("In", max_tokens=16, temperature=0.9, seed=7)
    assert a == b


def test_chat_session_continues(engine):
    chat = engine.chat_session(template="chatml", system="Answer briefly.", temperature=0)
    one = chat.send("Who begat Enos?", max_tokens=12)
    two = "".join(chat.send("And then?", max_tokens=12, stream=True))
    assert one and two
    assert [m[0] for m in chat.messages] == ["system", "user", "assistant", "user", "assistant"]
    answer = engine.chat([{"role": "user", "content": "Who begat Enos?"}], max_tokens=12,
                         template="chatml", temperature=0)
    assert isinstance(answer, str) and answer


def test_harmony_chat_answers_with_the_reasoning_apart(tmp_path):
    """A gpt-oss (harmony) chat: generation goes past the <|end|> of the analysis message to the
    <|return|> of the final one; send() returns the answer, `reasoning` the analysis channel
    (as the server's content and reasoning_content), every turn; Engine.chat likewise. The tiny
    model (tests/chat/harmony_model.py) always replies with the same two messages."""
    sys.path.insert(0, str(ROOT / "tests" / "chat"))
    import harmony_model

    path = str(tmp_path / "harmony.gguf")
    harmony_model.build(path)
    e = powerinfer.Engine(path)
    kind, _, keep, end = e._e.reply_format()
    assert kind == "harmony" and keep and end  # <|end|> kept, <|return|> and <|call|> end
    chat = e.chat_session(temperature=0, n_ctx=2048)
    assert chat.send("Show me code", max_tokens=400) == harmony_model.ANSWER
    assert chat.reasoning == harmony_model.REASONING
    assert "".join(chat.send("Again", max_tokens=400, stream=True)) == harmony_model.ANSWER
    assert chat.reasoning == harmony_model.REASONING
    assert [m[0] for m in chat.messages] == ["user", "assistant", "user", "assistant"]
    assert chat.messages[1][1] == harmony_model.ANSWER  # history keeps the final channel only
    assert e.chat([{"role": "user", "content": "hi"}], max_tokens=400, temperature=0) == harmony_model.ANSWER
    # Stopping at the first end of generation, as a plain session does, cuts the reply after
    # the analysis message.
    s = e.session(temperature=0, n_ctx=2048)
    s.feed(e._e.render_chat([("user", "hi")], "", True))
    assert harmony_model.ANSWER not in s.generate(max_tokens=400)


def test_errors_are_powerinfer_errors(engine, tmp_path):
    with pytest.raises(powerinfer.Error, match="/nonexistent/model.gguf"):
        powerinfer.Engine("/nonexistent/model.gguf")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(pathlib.Path(MODEL).read_bytes()[:100000])
    with pytest.raises(powerinfer.Error, match="cut.gguf"):
        powerinfer.Engine(str(cut))
    with pytest.raises(powerinfer.Error, match="load must be"):
        powerinfer.Engine(MODEL, load="sideways")
    with pytest.raises(powerinfer.Error, match="context"):
        s = engine.session(n_ctx=8)
        s.feed("In the beginning God created the heaven and the earth. " * 4)
    with pytest.raises(powerinfer.Error, match="template"):
        engine.chat([{"role": "user", "content": "x"}], template="no-such-template")
    with pytest.raises(TypeError, match="unknown option"):
        engine.session(temprature=0)
    assert issubclass(powerinfer.Error, Exception)


def test_gil_is_released_while_computing(engine):
    """A Python thread keeps counting while one engine call computes a long prompt (one token
    per forward pass, ~0.1 s in one call): the GIL is not held by the engine's compute (held,
    the counter would stand still for the whole call)."""
    stop = threading.Event()
    ticks = []

    def count():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.0005)

    tokens = engine.tokenize("In the beginning God created the heaven and the earth. " * 18)
    s = engine.session(temperature=0, n_threads=1, n_batch=1, n_ctx=256)
    t = threading.Thread(target=count)
    t.start()
    try:
        time.sleep(0.01)
        start = len(ticks)
        began = time.perf_counter()
        s.feed(tokens)
        elapsed = time.perf_counter() - began
        during = len(ticks) - start
    finally:
        stop.set()
        t.join()
    assert elapsed > 0.02, "the prompt was too quick to tell"
    assert during >= 5, f"{during} ticks in {elapsed:.3f} s"


def test_grammar_and_json_schema_match_run(engine):
    schema = {"type": "object", "properties": {"word": {"enum": ["light", "dark"]},
                                               "n": {"type": "integer"}},
              "required": ["word", "n"]}
    text = engine.generate("And God said", max_tokens=60, temperature=0, json_schema=schema)
    doc = json.loads(text)
    assert doc["word"] in ("light", "dark") and isinstance(doc["n"], int)
    out = subprocess.run([POWERINFER, "run", "-m", MODEL, "-p", "And God said", "-n", "60",
                          "--temp", "0", "--no-display-prompt", "-j", json.dumps(schema)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True).stdout
    assert out.decode() == text + "\n"
    assert engine.generate("And God said", max_tokens=20, temperature=0.8, seed=3,
                           grammar='root ::= ("yea" | "nay") "."') in ("yea.", "nay.")
    assert "root ::=" in powerinfer.json_schema_to_grammar(schema)
    with pytest.raises(powerinfer.Error, match="unsupported keyword 'pattern'"):
        engine.generate("x", json_schema={"type": "string", "pattern": "a"})
    with pytest.raises(powerinfer.Error, match="grammar: line 1"):
        engine.generate("x", grammar="root ::= (")


def test_embeddings_equal_powerinfer_embed(engine):
    texts = ["In the beginning God created the heaven and the earth.", "Jesus wept.",
             "And God said, Let there be light: and there was light."]
    out = subprocess.run([POWERINFER, "embed", "-m", MODEL, "--embd-output-format", "array", "-t", "1"]
                         + [a for t in texts for a in ("-p", t)], capture_output=True, check=True)
    want = json.loads(out.stdout)
    got = engine.embed(texts, n_threads=1)  # three sequences evaluated together
    assert len(got) == 3 and len(got[0]) == engine.info["n_embd"]
    for g, w in zip(got, want):
        assert max(abs(a - b) for a, b in zip(g, w)) < 1e-5
        assert abs(sum(a * a for a in g) - 1.0) < 1e-5
    one = engine.embed(texts[1], pooling="last", normalize=False)
    assert isinstance(one[0], float) and abs(sum(a * a for a in one) - 1.0) > 1e-3
    s = engine.session(n_seq_max=2, n_ctx=32)  # groups split where the context is full
    assert max(abs(a - b) for a, b in zip(s.embed(texts)[2], got[2])) < 1e-5
    assert s.n_past == 0
    # pooling="none": per input, one vector per token; the last is the raw "last" vector.
    n1 = len(engine.tokenize(texts[1], add_bos=engine._e.add_bos))
    rows = engine.embed(texts[:2], pooling="none", normalize=False, n_threads=1)
    assert len(rows) == 2 and len(rows[1]) == n1 and len(rows[1][0]) == engine.info["n_embd"]
    assert rows[1][-1] == one
    single = engine.embed(texts[1], pooling="none", normalize=False, n_threads=1)
    assert single == rows[1]
    with pytest.raises(powerinfer.Error, match="pooling 'max'"):
        engine.embed("x", pooling="max")


def test_kv_cache_types_equal_run(engine):
    prompt = "And God saw the light"
    got = engine.generate(prompt, max_tokens=24, temperature=0, cache_type_k="q8_0", cache_type_v="q4_0")
    out = subprocess.run([POWERINFER, "run", "-m", MODEL, "-p", prompt, "-n", "24", "--temp", "0",
                          "--no-display-prompt", "-ctk", "q8_0", "-ctv", "q4_0"], capture_output=True, check=True)
    assert got == out.stdout.decode("utf-8").removesuffix("\n")
    with pytest.raises(powerinfer.Error, match="option 'cache_type_k': 'q5_1' is not a KV cache type"):
        engine.session(cache_type_k="q5_1")


def test_saved_state_continues_identically(engine, tmp_path):
    path = str(tmp_path / "prompt.bin")
    a = engine.session(temperature=0.8, seed=3)
    a.feed("And the evening and the morning were the first day.")
    a.generate(max_tokens=5)  # the state holds generated tokens too
    assert a.save_state(path) == os.path.getsize(path)
    want = a.generate(max_tokens=20)
    b = engine.session(temperature=0.8, seed=3)
    restored = b.load_state(path)
    assert restored == a.tokens[:len(restored)] and b.n_past == len(restored)
    # The sampler restarts from its seed in both: compare with a third session fed the tokens.
    c = engine.session(temperature=0.8, seed=3)
    c.feed(restored)
    assert b.generate(max_tokens=20) == c.generate(max_tokens=20)
    with pytest.raises(powerinfer.Error, match="empty session"):
        b.load_state(path)
    with pytest.raises(powerinfer.Error, match=str(path)):
        engine.session(cache_type_k="q8_0").load_state(path)
    pathlib.Path(path).write_bytes(pathlib.Path(path).read_bytes()[:-64])
    with pytest.raises(powerinfer.Error, match=str(path)):
        engine.session().load_state(path)
    assert want  # a's own continuation exists; the seeds differ from a fresh sampler's


def test_options_are_the_engines_table_and_logs_go_to_logging(engine, tmp_path, caplog):
    """Session keywords come from the engine's one option table (its defaults for the rest; a
    wrong kind or an unknown name is refused by name), and the engine's diagnostics reach the
    "powerinfer" logger instead of stderr."""
    opts = powerinfer.Session.options()
    assert {"n_ctx", "temperature", "cache_type_k", "moe_ram", "n_cpu_moe", "swa_full", "repack"} <= set(opts)
    assert opts["vram_budget"][0] == "bytes|none"
    with pytest.raises(powerinfer.Error, match="option 'n_ctx': expected an integer, got text"):
        engine.session(n_ctx="big")
    with pytest.raises(powerinfer.Error, match=r"option 'n_seq_max': must be in \[1, 64\], got 0"):
        engine.session(n_seq_max=0)
    with pytest.raises(TypeError, match="unknown option.*nctx"):
        engine.session(nctx=5)
    # Options the keywords did not reach before: the same greedy text with the window kept whole.
    assert engine.generate("In the beginning", max_tokens=8, temperature=0, swa_full=True, repack=False) == \
        engine.generate("In the beginning", max_tokens=8, temperature=0)
    caplog.set_level(logging.INFO, logger="powerinfer")
    engine.session(device="sim", vram_budget=4 << 20, gpu_index=str(tmp_path / "plan.gpuidx"))
    lines = [r for r in caplog.records if r.name == "powerinfer"]
    assert any(r.levelno == logging.INFO and "device memory (sim)" in r.getMessage() for r in lines), lines


def test_stop_strings_end_the_text_before_them(engine):
    """stop= (the library's StopText, as the server's "stop"): the text ends before the first
    stop string, streamed or not, however the tokens split it; no stop found: the whole text."""
    whole = engine.generate("In the beginning", max_tokens=40, temperature=0)
    word = whole[len(whole) // 2:len(whole) // 2 + 5]
    want = whole[:whole.find(word)]
    assert engine.generate("In the beginning", max_tokens=40, temperature=0, stop=[word]) == want
    assert "".join(engine.generate("In the beginning", max_tokens=40, temperature=0, stream=True,
                                   stop=["never in this text", word])) == want
    assert engine.generate("In the beginning", max_tokens=40, temperature=0, stop="never in it") == whole


def test_quantize_writes_a_copy_that_generates_and_refuses_bad_arguments(tmp_path):
    out = tmp_path / "q4.gguf"
    with pytest.raises(powerinfer.Error, match="--allow-requantize"):  # the bundled model is Q8_0
        powerinfer.quantize(MODEL, out, "q4_0")
    report = powerinfer.quantize(MODEL, out, "Q4_0", allow_requantize=True,
                                 overrides={"blk.0.*": "q8_0"}, threads=1)
    assert report["n_quantized"] > 0 and report["n_copied"] > 0
    assert report["file_out"] < report["file_in"]
    assert "q4_0" in [t["type"] for t in report["types"]]
    assert all(t["relative_rmse"] < 0.2 for t in report["types"])
    text = powerinfer.Engine(str(out)).generate("In the beginning", max_tokens=8, temperature=0)
    assert text and text == run_text("In the beginning", 8, str(out))
    with pytest.raises(powerinfer.Error, match="q9_9"):
        powerinfer.quantize(MODEL, tmp_path / "x.gguf", "q9_9")
    with pytest.raises(powerinfer.Error, match="nonsense"):
        powerinfer.quantize(MODEL, tmp_path / "x.gguf", "q8_0", overrides=["nonsense"])
    with pytest.raises(powerinfer.Error, match="input file"):
        powerinfer.quantize(MODEL, MODEL, "q8_0")


def test_perplexity_and_a_self_comparison(engine, tmp_path):
    text = (ROOT / "models" / "kjv-relu" / "heldout.txt").read_text()
    base = tmp_path / "base.kld"
    r = engine.perplexity(text, n_ctx=128, n_chunks=2, kl_save=base, n_threads=2)
    assert r["n_chunks"] == 2 and r["n_scored"] == 2 * 63
    assert 1.0 < r["ppl"] < 100.0 and r["ppl_err"] > 0
    assert "kl" not in r
    k = engine.perplexity(text, kl_base=base)  # n_ctx and chunks from the base
    assert k["n_ctx"] == 128 and k["ppl"] == r["ppl"]
    assert k["kl"]["max"] == 0.0 and k["kl"]["same_top1"] == 1.0
    with pytest.raises(powerinfer.Error, match="needs at least"):
        engine.perplexity("In the beginning", n_ctx=128)
    with pytest.raises(powerinfer.Error, match="n_threadz"):
        engine.perplexity(text, n_ctx=128, n_threadz=2)


def test_profile_writes_statistics_for_dense_and_expert_models(tmp_path):
    text = (ROOT / "models" / "kjv-relu" / "heldout.txt").read_text()
    r = powerinfer.profile(MODEL, text, tmp_path / "relu.stats.gguf", n_ctx=128, max_tokens=400, threads=2)
    assert r["n_tokens"] == 400 and not r["experts"] and len(r["layers"]) == 6
    assert all(0 < layer["activity"] < 1 and layer["top20_share"] > 0.2 for layer in r["layers"])
    assert (tmp_path / "relu.stats.gguf").stat().st_size > 0
    m = powerinfer.profile(MOE_MODEL, text, tmp_path / "moe.stats.gguf", n_ctx=128, max_tokens=400)
    assert m["experts"] and m["n_expert"] > m["n_expert_used"] > 0
    assert all(layer["most_chosen"] >= layer["least_chosen"] for layer in m["layers"])
    with pytest.raises(powerinfer.Error, match="no tokens"):
        powerinfer.profile(MODEL, "", tmp_path / "x.gguf")
