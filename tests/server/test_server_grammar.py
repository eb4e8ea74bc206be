"""Constrained output on the bundled model: JSON Schema output from `powerinfer run` and from
the server validates with the `jsonschema` package for 100 seeds each; the server takes
llama.cpp's `grammar` and `json_schema` fields and OpenAI's `response_format` (through the
official client), and gives `run`'s text for the same seed."""
import json

import jsonschema
import openai

from conftest import run_cli

SCHEMA = {
    "type": "object",
    "properties": {
        "book": {"enum": ["Genesis", "Exodus", "Psalms", "John"]},
        "chapter": {"type": "integer"},
        "verse": {"type": "string", "maxLength": 40},
        "names": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
        "holy": {"type": "boolean"},
    },
    "required": ["book", "chapter", "verse"],
}
PROMPT = "And the LORD spake unto Moses, saying"


def test_run_json_schema_output_validates_for_100_seeds():
    texts = []
    for seed in range(100):
        out = run_cli(PROMPT, 120, seed, extra=("-j", json.dumps(SCHEMA)))
        jsonschema.validate(json.loads(out), SCHEMA)
        texts.append(out)
    assert len(set(texts)) > 50  # sampling still varies within the grammar


def test_server_json_schema_fields_validate_and_match_run(start_server):
    s = start_server("-np", 2, "-c", 512)
    c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=60)
    for seed in range(100):
        r = c.completions.create(model="m", prompt=PROMPT, max_tokens=120, seed=seed,
                                 extra_body={"json_schema": SCHEMA})
        doc = json.loads(r.choices[0].text)
        jsonschema.validate(doc, SCHEMA)
        assert r.choices[0].finish_reason == "stop"
        if seed < 5:
            assert r.choices[0].text == run_cli(PROMPT, 120, seed, extra=("-j", json.dumps(SCHEMA)))
    # OpenAI's response_format, both kinds, on the chat endpoint.
    r = c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Name a verse"}], max_tokens=120, seed=1,
        response_format={"type": "json_schema", "json_schema": {"name": "verse", "schema": SCHEMA}})
    jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)
    r = c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Say something"}], max_tokens=200, seed=2,
        temperature=0, response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:
        assert r.choices[0].message.content.startswith("{")
    # llama.cpp's /completion with a GBNF grammar.
    status, body = s.post("/completion", {"prompt": PROMPT, "n_predict": 30, "seed": 3,
                                          "grammar": 'root ::= ("yea" | "nay") "."'})
    assert status == 200 and body["content"] in ("yea.", "nay."), body
    # Streaming under a grammar gives the same text.
    stream = c.completions.create(model="m", prompt=PROMPT, max_tokens=120, seed=7, stream=True,
                                  extra_body={"json_schema": SCHEMA})
    streamed = "".join(ch.choices[0].text for ch in stream if ch.choices)
    jsonschema.validate(json.loads(streamed), SCHEMA)
    assert streamed == run_cli(PROMPT, 120, 7, extra=("-j", json.dumps(SCHEMA)))
