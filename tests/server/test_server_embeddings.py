"""Embeddings from `powerinfer serve`: /v1/embeddings through the official OpenAI client (which
asks for base64 unless told otherwise) and llama.cpp's /embedding, the same vectors as
`powerinfer embed`, generation in other slots undisturbed, and 400 for bad input."""
import base64
import concurrent.futures as cf
import json
import subprocess

import numpy as np
import openai
import pytest

from conftest import BIN, MODEL, run_cli

PROMPTS = ["And God said", "In the beginning", "The LORD is my shepherd", "Jesus wept"]
N_EMBD = 256  # the bundled model's


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=60)


def cli_embed(prompts, pooling="mean"):
    """`powerinfer embed --embd-output-format json`'s vectors, f32 [len(prompts), n_embd]."""
    args = [BIN, "embed", "-m", MODEL, "-t", "1", "--pooling", pooling,
            "--embd-output-format", "json"]
    for p in prompts:
        args += ["-p", p]
    out = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True,
                         timeout=120).stdout
    d = json.loads(out)
    assert [x["index"] for x in d["data"]] == list(range(len(prompts)))
    return np.array([x["embedding"] for x in d["data"]], dtype=np.float32)


@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_openai_client_equals_cli(start_server, pooling):
    want = cli_embed(PROMPTS, pooling)
    s = start_server("-np", 2, "-c", 512, "--pooling", pooling)
    c = client(s)
    r = c.embeddings.create(model="x", input=PROMPTS)  # base64 on the wire
    assert r.object == "list" and r.model == "kjv-relu.pwri.gguf"
    assert [d.index for d in r.data] == [0, 1, 2, 3]
    got = np.array([d.embedding for d in r.data], dtype=np.float32)
    assert got.shape == (4, N_EMBD)
    assert np.array_equal(got, want)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    n_tokens = sum(len(s.post("/tokenize", {"content": p, "add_special": True})[1]["tokens"])
                   for p in PROMPTS)
    assert r.usage.prompt_tokens == r.usage.total_tokens == n_tokens
    f = c.embeddings.create(model="x", input=PROMPTS[1], encoding_format="float")
    assert len(f.data) == 1 and np.array_equal(np.array(f.data[0].embedding, np.float32), want[1])
    # Token ids as input: the same as the text they encode.
    ids = s.post("/tokenize", {"content": PROMPTS[2], "add_special": True})[1]["tokens"]
    t = c.embeddings.create(model="x", input=[ids], encoding_format="float")
    assert np.array_equal(np.array(t.data[0].embedding, np.float32), want[2])


def test_pooling_none_gives_every_tokens_state(start_server):
    """--pooling none: /embedding answers each input's tokens' states, unnormalised (as
    llama.cpp), whose last is the raw `last` vector; /v1/embeddings cannot carry them: 400."""
    s = start_server("--pooling", "none")
    texts = ["In the beginning", "Jesus wept"]
    status, r = s.post("/embedding", {"content": texts})
    assert status == 200, r
    assert [x["index"] for x in r] == [0, 1]
    last = subprocess.run([BIN, "embed", "-m", MODEL, "-t", "1", "--pooling", "last",
                           "--embd-normalize", "-1", "--embd-output-format", "array",
                           "-p", texts[0], "-p", texts[1]],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True,
                          timeout=120).stdout
    last = np.array(json.loads(last), np.float32)
    for i, t in enumerate(texts):
        n = len(s.post("/tokenize", {"content": t, "add_special": True})[1]["tokens"])
        rows = np.array(r[i]["embedding"], np.float32)
        assert rows.shape == (n, N_EMBD)
        assert np.array_equal(rows[-1], last[i])
        assert not np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-3)
    status, one = s.post("/embedding", {"content": texts[1]})
    assert status == 200 and np.array_equal(np.array(one["embedding"], np.float32),
                                            np.array(r[1]["embedding"], np.float32))
    status, e = s.post("/v1/embeddings", {"input": "Jesus wept"})
    assert status == 400 and "pooling 'none'" in e["error"]["message"], e
    with pytest.raises(openai.BadRequestError):
        client(s).embeddings.create(model="x", input="Jesus wept")


def test_raw_base64_is_little_endian_f32(start_server):
    s = start_server()
    status, r = s.post("/v1/embeddings", {"input": "Jesus wept", "encoding_format": "base64"})
    assert status == 200, r
    b64 = np.frombuffer(base64.b64decode(r["data"][0]["embedding"]), dtype="<f4")
    status, f = s.post("/v1/embeddings", {"input": "Jesus wept"})
    assert status == 200 and np.array_equal(b64, np.array(f["data"][0]["embedding"], np.float32))


def test_llama_embedding_shape(start_server):
    s = start_server()
    status, r = s.post("/embedding", {"content": "In the beginning"})
    assert status == 200, r
    assert list(r) == ["embedding"] and len(r["embedding"]) == N_EMBD
    want = cli_embed(["In the beginning", "Jesus wept"])
    assert np.array_equal(np.array(r["embedding"], np.float32), want[0])
    status, r = s.post("/embedding", {"content": ["In the beginning", "Jesus wept"]})
    assert status == 200, r
    assert [x["index"] for x in r] == [0, 1]
    assert np.array_equal(np.array([x["embedding"] for x in r], np.float32), want)


def test_generation_in_other_slots_is_undisturbed(start_server):
    want = run_cli(PROMPTS[0], 24, 11, 0.0)
    vec = cli_embed([PROMPTS[1]])[0]
    s = start_server("-np", 3, "-c", 768)
    c = client(s)

    def complete(_):
        return c.completions.create(model="x", prompt=PROMPTS[0], max_tokens=24, seed=11,
                                    temperature=0.0).choices[0].text

    def embed(_):
        r = c.embeddings.create(model="x", input=PROMPTS[1], encoding_format="float")
        return np.array(r.data[0].embedding, np.float32)

    with cf.ThreadPoolExecutor(6) as ex:
        texts = [ex.submit(complete, i) for i in range(2)]
        vecs = [ex.submit(embed, i) for i in range(4)]
        assert all(t.result() == want for t in texts)
        assert all(np.array_equal(v.result(), vec) for v in vecs)
    # A slot that embedded serves completions as before.
    assert complete(0) == want


@pytest.mark.parametrize("path,body,message", [
    ("/v1/embeddings", {"input": ""}, "field 'input' is an empty string"),
    ("/v1/embeddings", {"input": []}, "field 'input' must be"),
    ("/v1/embeddings", {"input": 5}, "field 'input' must be"),
    ("/v1/embeddings", {"input": ["a", 3]}, "input[1] must be a string or an array of token ids"),
    ("/v1/embeddings", {"input": [[]]}, "input[0] must be"),
    ("/v1/embeddings", {"input": [[1, -2]]}, "input[0][1] is not a token id"),
    ("/v1/embeddings", {"input": [[1, 999999]]}, "token id 999999 is outside the vocabulary"),
    ("/v1/embeddings", {"model": "x"}, "field 'input' is required"),
    ("/v1/embeddings", {"input": "a", "encoding_format": "hex"}, "'encoding_format' must be"),
    ("/v1/embeddings", {"input": "a", "dimensions": 8}, "'dimensions' is not supported"),
    ("/v1/embeddings", {"input": "a", "pooling": "max"}, "unknown field 'pooling'"),
    ("/v1/embeddings", {"input": ["a", "In the beginning " * 100]}, "input 1 is"),
    ("/embedding", {}, "field 'content' is required"),
    ("/embedding", {"content": [[1, 2]]}, "content[0] must be a string"),
])
def test_bad_input_is_400(start_server, path, body, message):
    s = start_server("-c", 256)
    status, r = s.post(path, body)
    assert status == 400, r
    e = r["error"]
    assert e["code"] == 400 and e["type"] == "invalid_request_error"
    assert message in e["message"] and "\n" not in e["message"], e["message"]
    status, r = s.request("POST", path, raw=b"{not json")
    assert status == 400 and "not valid JSON" in r
    # The server still answers.
    assert s.post("/v1/embeddings", {"input": "a"})[0] == 200


def test_bad_input_through_the_client(start_server):
    s = start_server()
    with pytest.raises(openai.BadRequestError) as e:
        client(s).embeddings.create(model="x", input="")
    assert "empty string" in str(e.value)
