"""powerinfer: local LLM inference with activation sparsity (PowerInfer), from Python.

    import powerinfer
    engine = powerinfer.Engine("model.gguf")
    print(engine.generate("In the beginning", max_tokens=32, temperature=0))
    for piece in engine.generate("In the beginning", max_tokens=32, stream=True):
        print(piece, end="", flush=True)
    chat = engine.chat_session(template="chatml")
    print(chat.send("Who begat Enos?"))

Errors are powerinfer.Error, with the engine's one-line message. Computing releases the GIL.
An Engine may be shared between threads; a Session (and a ChatSession) is used by one thread at
a time.
"""
from __future__ import annotations

import json
from typing import Iterator, Sequence

from ._powerinfer import Engine as _Engine
from ._powerinfer import Error
from ._powerinfer import json_schema_to_grammar as _json_schema_to_grammar
from ._powerinfer import _profile
from ._powerinfer import _quantize
from ._powerinfer import Session as _Session
from ._powerinfer import _ReplySplit
from ._powerinfer import _Generator
from ._powerinfer import session_options as _session_options

__all__ = ["Engine", "Session", "ChatSession", "Error", "json_schema_to_grammar", "profile", "quantize"]

# Session keywords: the engine's option table (name, kind, help), plus json_schema (turned into
# a grammar here). Defaults are the engine's.
_OPTIONS = {name: (kind, help) for name, kind, help in _session_options()}


def json_schema_to_grammar(schema) -> str:
    """GBNF whose sentences are the JSON documents `schema` (a dict or JSON text) accepts."""
    return _json_schema_to_grammar(schema if isinstance(schema, str) else json.dumps(schema))


def quantize(input: str, output: str, type: str = "q4_0", allow_requantize: bool = False,
             overrides=None, threads: int = 2, progress: bool = False) -> dict:
    """Writes a copy of the model file `input` to `output` with its large matrices converted to
    `type` (a type such as "q8_0", a llama.cpp mix such as "q4_k_m", or its numeric file-type
    id), as `powerinfer quantize` does. `overrides`: {glob over tensor names: type} or
    ["PATTERN=TYPE", ...], first match wins. Returns the report: sizes, tensors converted and
    copied, and per output type the round-trip RMSE. A bad type, override or file is a
    powerinfer.Error naming it."""
    if isinstance(overrides, dict):
        overrides = [f"{k}={v}" for k, v in overrides.items()]
    return _quantize(str(input), str(output), str(type), allow_requantize, list(overrides or ()),
                     threads, progress)


def profile(model: str, text: str, output: str, n_ctx: int = 512, n_batch: int = 512, threads: int = 0,
            max_tokens: int = 0, progress: bool = False) -> dict:
    """Runs the model file over `text` (chunks of n_ctx tokens from an empty cache) and writes
    how often each FFN neuron fires (and, for a mixture of experts, how often each expert is
    chosen and reused) to `output`, the statistics `powerinfer plan --stats` and hybrid sessions
    (activation_stats=) read, as `powerinfer profile` does. Returns n_tokens and a summary per
    layer (activity and the top fifth's share of the firings; for experts the least and most
    chosen shares and the reuse rate)."""
    return _profile(str(model), text, str(output), n_ctx, n_batch, threads, max_tokens, progress)


class Session:
    """A KV cache, a sampler and a thread pool over an Engine: feed text, generate, repeat.

    Keyword options: n_ctx, n_batch, n_threads, n_seq_max (sequences embed() evaluates
    together), dense, device, vram_budget (bytes), n_gpu_layers, cache_type_k and
    cache_type_v (the KV cache's types: "f16", "q8_0" or "q4_0"), moe_ram (bytes: a mixture of
    experts larger than memory holds its weights in this much RAM, experts read from the file
    on demand; load the Engine with load="map") and the sampling settings temperature, top_k, top_p, min_p, repeat_penalty,
    repeat_last_n, presence_penalty, frequency_penalty, seed; constrained output: grammar
    (GBNF text) or json_schema (a dict or JSON text): generation stops when the text is
    complete. Session.options() lists every keyword (also swa_full, repack, n_cpu_moe,
    expert_cache, sparse_threshold, ...); an option not given has the engine's default.
    """

    @staticmethod
    def options() -> dict[str, tuple[str, str]]:
        """Every keyword option: name -> (kind, one line of help), from the engine's table."""
        return dict(_OPTIONS)

    def __init__(self, engine: "Engine", **opts):
        unknown = set(opts) - set(_OPTIONS) - {"json_schema"}
        if unknown:
            raise TypeError(f"unknown option(s): {', '.join(sorted(unknown))}")
        self.engine = engine
        schema = opts.pop("json_schema", None)
        if schema is not None:
            if opts.get("grammar"):
                raise TypeError("give grammar or json_schema, not both")
            opts["grammar"] = json_schema_to_grammar(schema)
        self._s = _Session.create(engine._e, **opts)

    @property
    def n_past(self) -> int:
        return self._s.n_past

    @property
    def n_ctx(self) -> int:
        return self._s.n_ctx

    @property
    def timings(self) -> dict:
        return self._s.timings

    @property
    def tokens(self) -> list[int]:
        """The token ids the session's context holds, in order."""
        return self._s.seq_tokens(0)

    def reset(self) -> None:
        self._s.reset()

    def embed(self, inputs: str | Sequence[int] | Sequence[str | Sequence[int]], pooling: str = "mean",
              normalize: bool = True):
        """Embedding vectors (lists of n_embd floats) pooled from the final hidden states:
        "mean", "last" or "cls" pooling, divided by their Euclidean norm when normalize.
        One input (text or token ids) gives one vector; a list of inputs a list of them.
        pooling="none" gives every token's vector instead: an input gives a list of them.
        Embedding uses the session's context, which is empty afterwards."""
        single = isinstance(inputs, str) or (len(inputs) > 0 and isinstance(inputs[0], int))
        items = [inputs] if single else list(inputs)
        if not items:
            raise Error("embed: no inputs")
        add_bos = self.engine._e.add_bos
        toks = [self.engine.tokenize(x, add_bos=add_bos) if isinstance(x, str) else list(x) for x in items]
        rows = self._s.embed(toks, pooling, normalize)  # per input: its list of vectors
        self._s.reset()
        if pooling != "none":
            rows = [r[0] for r in rows]
        return rows[0] if single else rows

    def save_state(self, path: str) -> int:
        """Writes the context (its KV cache and tokens) to a file that load_state restores,
        as run --prompt-cache does; returns the bytes written."""
        return self._s.save_state(path, self._s.seq_tokens(0))

    def load_state(self, path: str) -> list[int]:
        """Restores a file written by save_state into this empty session (of the same model
        and KV cache types): generation continues as if its tokens had been fed. Returns them."""
        if self.n_past:
            raise Error(f"{path}: load_state needs an empty session (reset() first)")
        return list(self._s.load_state(path))

    def feed(self, text_or_tokens: str | Sequence[int], add_bos: bool | None = None) -> None:
        """Evaluates text (tokenized with special tokens parsed; BOS first when the session is
        empty and the vocabulary wants it) or token ids after what the session holds."""
        if isinstance(text_or_tokens, str):
            if add_bos is None:
                add_bos = self.n_past == 0 and self.engine._e.add_bos
            tokens = self.engine.tokenize(text_or_tokens, add_bos=add_bos)
        else:
            tokens = list(text_or_tokens)
        self._s.prompt(tokens)

    def stream(self, max_tokens: int = 128, stop_at_eog: bool = True, end_ids: Sequence[int] = (),
               keep_ids: Sequence[int] = (), stop: Sequence[str] = (),
               shown_ids: Sequence[int] = ()) -> Iterator[str]:
        """Generates up to max_tokens tokens, yielding text as it becomes valid UTF-8. With
        stop_at_eog it stops before an end-of-generation token not in keep_ids, or one in
        end_ids (a chat format's reply ends: Engine.reply_format). `stop`: strings that end
        the text before them (as the server's "stop"); text that may begin one is held back
        until it is clear. Control tokens add no text unless in shown_ids. The engine's
        generation loop, the one the CLI and the server use."""
        stops = [stop] if isinstance(stop, str) else list(stop)
        gen = _Generator(self.engine._e, self._s.seq_tokens(0), max_tokens, stops, not stop_at_eog,
                         list(end_ids), list(keep_ids), list(shown_ids))
        while True:
            end = gen.sample(self._s)
            piece = gen.take()
            gen.feed(self._s)
            if piece:
                yield piece.decode("utf-8", errors="replace")
            if end != "none":
                break
        rest = gen.finish()
        if rest:
            yield rest.decode("utf-8", errors="replace")

    def generate(self, max_tokens: int = 128, stream: bool = False, stop_at_eog: bool = True,
                 stop: Sequence[str] = ()):
        """The continuation of what the session holds: a str, or an iterator of pieces; it ends
        before the first of the `stop` strings."""
        it = self.stream(max_tokens, stop_at_eog, stop=stop)
        return it if stream else "".join(it)


def _reply(session: "Session", engine: "Engine", template: str, prompt: str, max_tokens: int,
           reasoning: list[str]) -> Iterator[str]:
    """The answer of a chat reply generated after `prompt` (already fed), as the server gives
    `content`: generation runs to the format's end of reply (harmony: <|return|>, not the
    <|end|> that closes its analysis message) and the reasoning (harmony's analysis channel,
    <think> blocks) goes to `reasoning` instead."""
    kind, shown, keep, end = engine._e.reply_format(template)
    split = _ReplySplit(kind, kind == "think" and prompt.rstrip(" \n").endswith("<think>"))

    def parts(reasoning_bytes: bytes, content: bytes) -> str:
        if reasoning_bytes:
            reasoning.append(reasoning_bytes.decode("utf-8", errors="replace"))
        return content.decode("utf-8", errors="replace")

    for piece in session.stream(max_tokens, end_ids=end, keep_ids=keep, shown_ids=shown):
        text = parts(*split.push(piece.encode("utf-8")))
        if text:
            yield text
    text = parts(*split.finish())
    if text:
        yield text


class ChatSession:
    """A conversation: each send() renders the messages with the chat template and feeds only
    what the session does not hold yet (templates are prefix-stable). send() returns the
    answer; a model's reasoning (gpt-oss's analysis channel, Qwen3's <think> block) is kept
    apart in `reasoning`, the last reply's, as the server's `reasoning_content`."""

    def __init__(self, engine: "Engine", template: str = "", system: str | None = None, **opts):
        self.engine = engine
        self.template = template
        self.messages: list[tuple[str, str]] = [("system", system)] if system else []
        self.session = Session(engine, **opts)
        self.reasoning = ""
        self._held = ""

    def send(self, content: str, max_tokens: int = 128, stream: bool = False):
        self.messages.append(("user", content))
        prompt = self.engine._e.render_chat(self.messages, self.template, True)
        self.session.feed(prompt[len(self._held):] if prompt.startswith(self._held) else prompt)
        self._held = prompt
        start = self.session.n_past

        def run() -> Iterator[str]:
            answer, reasoning = [], []
            for piece in _reply(self.session, self.engine, self.template, prompt, max_tokens, reasoning):
                answer.append(piece)
                yield piece
            self.reasoning = "".join(reasoning)
            self.messages.append(("assistant", "".join(answer)))
            # The answer is fed again next turn as the template lays it out (from scratch where
            # sliding-window layers no longer hold the window before it).
            if self.session._s.seq_can_truncate(0, start):
                self.session._s.seq_rm(0, start, -1)
            else:
                self.session.reset()
                self._held = ""

        it = run()
        return it if stream else "".join(it)


class Engine:
    """A model loaded once: Engine(path, load="auto"|"map"|"read", mlock=False,
    check_tensors=False, repack=True)."""

    def __init__(self, path: str, **load_opts):
        self._e = _Engine.load(str(path), **load_opts)

    @property
    def info(self) -> dict:
        return self._e.info

    def tokenize(self, text: str, add_bos: bool = True, special: bool = True) -> list[int]:
        return self._e.tokenize(text, add_bos, special)

    def detokenize(self, tokens: Sequence[int], skip_special: bool = True) -> str:
        return self._e.detokenize(list(tokens), skip_special).decode("utf-8", errors="replace")

    def session(self, **opts) -> Session:
        return Session(self, **opts)

    def chat_session(self, template: str = "", system: str | None = None, **opts) -> ChatSession:
        return ChatSession(self, template, system, **opts)

    def embed(self, inputs, pooling: str = "mean", normalize: bool = True, **opts):
        """Embedding vectors of one input (text or token ids) or a list of them, as
        `powerinfer embed` computes them (Session.embed); several inputs are evaluated together,
        up to 8 sequences at a time unless n_seq_max is given."""
        several = not isinstance(inputs, str) and len(inputs) > 0 and not isinstance(inputs[0], int)
        opts.setdefault("n_seq_max", max(1, min(len(inputs), 8)) if several else 1)
        return Session(self, **opts).embed(inputs, pooling, normalize)

    def generate(self, prompt: str, max_tokens: int = 128, stream: bool = False, stop: Sequence[str] = (),
                 **opts):
        """Text generated after `prompt` (a fresh session with the options given), ending before
        the first of the `stop` strings."""
        s = Session(self, **opts)
        s.feed(prompt)
        return s.generate(max_tokens, stream=stream, stop=stop)

    def perplexity(self, text: str, n_ctx: int = 0, n_chunks: int = 0, kl_save: str | None = None,
                   kl_base: str | None = None, **opts) -> dict:
        """Perplexity on `text` as `powerinfer perplexity` (and llama.cpp) computes it: chunks
        of n_ctx tokens (0: kl_base's, else 512) from an empty cache, the second half of each
        scored; at most n_chunks of them (0: kl_base's, else all). Returns ppl, ppl_err and the
        counts; kl_save writes a base, kl_base compares with one (the "kl" entry: mean, median,
        p99 and max KL divergence, same_top1, base_ppl). `opts`: Session options (n_threads,
        dense, device, ...)."""
        return self._e.perplexity(text, n_ctx, n_chunks, str(kl_save or ""), str(kl_base or ""), **opts)

    def chat(self, messages: Sequence[dict], max_tokens: int = 128, template: str = "",
             stream: bool = False, **opts):
        """The assistant's answer to OpenAI-style messages [{"role": ..., "content": ...}]
        (without its reasoning: ChatSession keeps that apart)."""
        pairs = [(m["role"], m["content"]) for m in messages]
        s = Session(self, **opts)
        prompt = self._e.render_chat(pairs, template, True)
        s.feed(prompt)
        it = _reply(s, self, template, prompt, max_tokens, [])
        return it if stream else "".join(it)
