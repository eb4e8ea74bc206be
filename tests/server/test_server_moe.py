"""`powerinfer serve` on a mixture-of-experts file: several sequences batched through the
experts (each chosen expert read once per batch) and, for smallthinker, through sliding-window
layers whose attention lists are cut per sequence by position. The text is the same for any
slot count and load (a random tiny model emits arbitrary bytes, so the one-slot server, not
`powerinfer run`'s raw stdout, is the reference)."""
import concurrent.futures as cf
import os
import subprocess
import sys

import openai
import pytest

from conftest import ROOT

PROMPTS = ["And God said", "In the beginning", "The LORD is my shepherd", "Jesus wept"]


@pytest.fixture(scope="module")
def smallthinker(tmp_path_factory):
    """A tiny random smallthinker file: 5 layers (0 and 4 global without RoPE, 1-3 through a
    4-position window), 8 sigmoid-gated ReGLU experts, top 2, down stored transposed."""
    path = str(tmp_path_factory.mktemp("moe") / "st.gguf")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "reference", "make_tiny_model.py"),
                    "--arch", "smallthinker", "--outtype", "q8_0", "--layers", "5", "--swa", "4",
                    "--transpose-down", "--seed", "7", "--out", path], check=True, timeout=300)
    return path


@pytest.mark.parametrize("temp", [0.0, 0.8])
def test_moe_completions_do_not_depend_on_slots_or_load(start_server, smallthinker, temp):
    texts = {}
    for slots in (1, 3):
        s = start_server("-np", slots, "-c", 256 * slots, model=smallthinker)
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=60)

        def ask(p):
            return p, c.completions.create(model="x", prompt=p, max_tokens=16, seed=5, temperature=temp)

        # One slot: one request at a time. Three: every prompt twice at once, mixed in batches.
        with cf.ThreadPoolExecutor(1 if slots == 1 else 8) as ex:
            results = list(ex.map(ask, PROMPTS if slots == 1 else PROMPTS * 2))
        for p, r in results:
            got = (r.choices[0].text, r.usage.completion_tokens)
            if slots == 1:
                texts[p] = got
            else:
                assert got == texts[p], p
    assert len(set(texts.values())) > 1  # the prompts lead somewhere different
