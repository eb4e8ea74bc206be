"""`powerinfer run -cnv` with a harmony (gpt-oss) model (harmony_model.py, whose reply is fixed):
the template is detected; each turn prints the reasoning between [Start thinking] and
[End thinking], then the final channel's answer, with no message header; --hide-reasoning
prints the answer alone; the second turn, whose rendering drops the first reply's analysis,
is answered after its re-feed; a context too small for the conversation shifts and rebuilds
instead of failing."""
import os
import subprocess

import pytest

import harmony_model

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("PI_BIN", os.path.join(ROOT, "build", "bin", "powerinfer"))
THOUGHT = "[Start thinking]\n" + harmony_model.REASONING + "\n[End thinking]\n\n"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("harmony") / "tiny-harmony.gguf")
    harmony_model.build(path)
    return path


def converse(model, lines, *flags):
    r = subprocess.run([BIN, "run", "-m", model, "-cnv", "-n", "200", "-t", "1", "-s", "1", *flags],
                       input="".join(line + "\n" for line in lines), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


def test_reasoning_then_answer_every_turn(model):
    out, err = converse(model, ["Show me code", "Again"], "--reasoning-effort", "low")
    assert "conversation mode: chat template gpt-oss" in err
    assert out.count(THOUGHT + harmony_model.ANSWER) == 2, out
    assert "<|" not in out
    assert "[context shift" not in err


def test_hide_reasoning_prints_the_answer_only(model):
    out, _ = converse(model, ["Show me code", "Again"], "--hide-reasoning")
    assert out.count("> " + harmony_model.ANSWER) == 2, out
    assert "[Start thinking]" not in out and harmony_model.REASONING not in out


def test_a_small_context_shifts_and_goes_on(model):
    # About 200 prompt tokens and 50 for the reply: the second and third turns do not fit 320
    # tokens with the earlier ones; the reply is cut by a shift, so the turn after is rebuilt.
    out, err = converse(model, ["Show me code", "Again", "Once more"], "-c", "320",
                        "--hide-reasoning")
    assert "[context shift" in err
    assert out.count(harmony_model.ANSWER) == 3, out


def test_bad_reasoning_effort_is_a_one_line_error(model):
    r = subprocess.run([BIN, "run", "-m", model, "-cnv", "--reasoning-effort", "max"], input="",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "--reasoning-effort must be low, medium or high" in r.stderr


def test_plain_run_prints_every_message_and_stops_at_return(model):
    # Without -cnv the text is the model's as written (as llama.cpp's raw completion): the
    # analysis message, its <|end|> (which does not stop the text), the final message, and
    # nothing after <|return|>.
    prompt = "<|start|>user<|message|>Show me code<|end|><|start|>assistant"
    r = subprocess.run([BIN, "run", "-m", model, "-p", prompt, "-n", "300", "-t", "1", "-s", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "<|channel|>analysis<|message|>" + harmony_model.REASONING + "<|end|>" in out, out
    assert "<|start|>assistant<|channel|>final<|message|>" + harmony_model.ANSWER in out, out
    assert out.rstrip().endswith(harmony_model.ANSWER.rstrip()), out
