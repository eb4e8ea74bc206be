#!/usr/bin/env python3
"""Builds the tokenizer test oracles: trains small vocabularies with the reference libraries,
writes each as a metadata-only GGUF file, and records what the libraries make of a broad set
of test strings.

    make_oracle_data.py OUT_DIR

Models (OUT_DIR/<name>.gguf, with OUT_DIR/<name>.cases):
  spm_llama     sentencepiece BPE, byte fallback: the settings of tools/train/train_tokenizer.py
  spm_special   the same plus user-defined and control symbols
  spm_plain     no dummy prefix, no byte fallback (unknown characters become <unk>)
  spm_unused    spm_llama with every fourth normal piece marked unused
  bpe_gpt2      Hugging Face tokenizers byte-level BPE, GPT-2 pre-tokenizer regex
  bpe_llama3    the same trained with the Llama 3 regex split (and ignore_merges)
  bpe_qwen2     the same trained with the Qwen2 regex split (single digits; merges not
                ignored). Qwen2's own tokenizer.json also NFC-normalizes the text first; the
                engine, like llama.cpp, does not, so this oracle has no normalizer.
  bpe_o200k     the same trained with the o200k_base regex split (GPT-4o, gpt-oss; merges
                not ignored, as llama.cpp loads pre "gpt-4o")

Case file lines, tab-separated; text as hex of its UTF-8 bytes, ids space-separated:
  E  parse_special  add_bos  text  ids         encode(text) must give ids
  D  skip_special   ids  text                  decode(ids) must give text exactly
  L  policy  skip_special  ids  text           decode(ids) with invalid UTF-8 replaced by
                                               U+FFFD (policy: byte = one per byte as in
                                               sentencepiece, subpart = per maximal subpart
                                               as in Rust/Python) must give text
  P  text  ends                                the pre-tokens of text end at these byte offsets
                                               (text may be ill-formed UTF-8: see
                                               pretokenize_bytes)
The last line is "END <count>"; a file without it is incomplete.

The output directory is written under a temporary name and renamed into place, so a reader
never sees a half-written set. Exits non-zero with a message naming what is missing when the
Python packages are not installed (scripts/install-deps.sh installs them).
"""
import io
import json
import os
import random
import shutil
import sys
import unicodedata

try:
    import sentencepiece as spm
    import tokenizers
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError as e:  # pragma: no cover - the message is the point
    sys.stderr.write(f"make_oracle_data.py: missing Python package ({e}); "
                     "run scripts/install-deps.sh to create .venv with sentencepiece and tokenizers\n")
    sys.exit(2)

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_tiny as gg  # noqa: E402

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# tiktoken's o200k_base pat_str, written as tiktoken writes it; llama.cpp's
# LLAMA_VOCAB_PRE_TYPE_GPT4O quotes the same regex.
O200K_REGEX = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])

# --------------------------------------------------------------------------------------
# Training text

WORDS_INTL = [
    "café", "élève", "naïve", "façade", "déjà", "garçon", "über", "Straße", "Größe", "Äpfel",
    "mañana", "niño", "señor", "coração", "São", "Ελληνικά", "καλημέρα", "Русский", "привет",
    "мир", "日本語", "東京", "こんにちは", "中文", "你好", "世界", "안녕하세요", "한국어",
    "مرحبا", "العالم", "שלום", "नमस्ते", "हिन्दी", "ไทย", "Tiếng", "Việt", "😀", "👍", "❤️",
    "👨‍👩‍👧", "🎉", "½", "²", "€", "£", "—", "“quoted”", "…",
]
CODE_LINES = [
    "def main(argv):", "    return 0", "for (int i = 0; i < n; ++i) {", "\tsum += a[i];", "}",
    "if x == None: raise ValueError('bad')", "#include <stdio.h>", "let v: Vec<u32> = vec![1, 2];",
    "SELECT id, name FROM users WHERE age >= 18;", "<div class=\"row\">&nbsp;</div>",
    "    x = [i ** 2 for i in range(10)]  # squares", "std::vector<int> v{1, 2, 3};",
]


def license_lines():
    root = "/usr/share/common-licenses"
    lines = []
    if os.path.isdir(root):
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, encoding="utf-8", errors="replace") as f:
                    lines.extend(line.rstrip("\n") for line in f)
    return [l for l in lines if l.strip()]


def training_lines(rng):
    lines = license_lines()
    english = " ".join(lines).split() or ["the", "of", "and", "to", "in", "a", "is", "that"]
    for _ in range(4000):
        n = rng.randint(3, 14)
        words = []
        for _ in range(n):
            r = rng.random()
            if r < 0.55:
                words.append(rng.choice(english))
            elif r < 0.85:
                words.append(rng.choice(WORDS_INTL))
            else:
                words.append(str(rng.randint(0, 99999)))
        sep = rng.choice([" ", " ", " ", "  ", "\t"])
        lines.append(sep.join(words))
    for _ in range(400):
        lines.append("\n".join(rng.choice(CODE_LINES) for _ in range(rng.randint(1, 4))))
    return lines


# --------------------------------------------------------------------------------------
# Test strings

HANDCRAFTED = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\n \n", "x", "Hello world",
    " Hello world", "Hello world ", "  leading two", "trailing two  ", "multiple   inner    spaces",
    "tabs\tand\ttabs", "\t\tindented", "line1\nline2\r\nline3\rline4", "a \n\n  b", "a\n\n\tb",
    "In the beginning God created the heaven and the earth.",
    "And God said, Let there be light: and there was light.",
    "1611", "3.14159", "0123456789", "1,000,000", "12345678901234567890", " 42", "a1b2c3",
    "version 2.0.1-rc3", "x=1e-10", "$9.99",
    "don't", "I'm", "they're", "we've", "you'll", "he'd", "it's", "DON'T", "I'M", "They'RE",
    "'s", "x'ſa", "''s", "rock 'n' roll", "'hello'", "O'Neil's", " 've", "'ll'll",
    "café", "naïve façade", "Ünïcödé", "e\u0301", "Ελληνικά κείμενο", "Русский текст",
    "日本語のテキスト", "中文字符", "한국어", "العربية نص", "עברית", "हिन्दी", "ไทย", "Tiếng Việt",
    "ŉ", "ﬁ", "ǅ", "Ⅻ", "²³", "①②", "٣٤٥", "１２３", "〇", "ſ",
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇺🇸🇬🇧", "emoji 😀 in text", "😀😀😀", " 👍", "a😀b",
    "\u00a0", "a\u00a0b", "\u3000x", "\u2028", "\x0b\x0c", "\x1c\x1f", "a\u200bb", "\ufeff",
    "\x00", "a\x00b", "\x7f", "\u0085", "\u2003\u2003x",
    "def f(x):\n    return x**2  # square\n", "int main() { return 0; }",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "<html><body class=\"x\">&amp;</body></html>", "SELECT * FROM t WHERE id=42;",
    "$HOME/.config/app.json", "a->b", "x != y && y >= z", "```python\nprint('hi')\n```",
    "{\"key\": [1, 2, 3]}", "    indented code\n        more", "a\\nb\\t",
    "<s>", "</s>", "<unk>", "<s>Hello</s>", "Hello<|im_end|>",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>",
    "a<|endoftext|>b", "<tool>x</tool>", "x <tool> y", "<|im_end", "<<|im_end|>>",
    "<|im_end|><|im_end|>", " <|im_start|> ", "<tool><tool>", "<|sep|>", "a<|sep|> b",
    "\u2581", "\u2581\u2581x", "x\u2581 y", "<0x41>", "\u0120Hello", "\u010a",
    "The quick brown fox jumps over the lazy dog. " * 8,
    "a" * 300, " " * 64, "\n" * 17, "ab" * 100, "😀" * 20, "1" * 50, "!?" * 30,
]

INVALID_UTF8 = [
    b"\xff", b"a\xffb", b"\xc0\xaf", b"\xc1\xbf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
    b"\xe6\xbc", b"\xe6\xbcA", b"\x80", b"\xbf\xbf", b"\xf0\x9f\x98", b"\xf0\x9f\x98 x",
    b"\xe0\x80\xaf", b"\xf8\x88\x80\x80\x80", b"ok \xfe\xfe ok", b"\xc3", b"\xc3\xa9\xc3",
]

# Against the o200k split's case-aware word alternatives (and the other splits' letter runs):
# case changes inside words, letters that are in both of its letter sets (Lm, Lo) or in only
# one (Lu, Lt / Ll), combining marks (in both sets but not \p{L}), contractions in any case,
# digit runs, punctuation before newlines and slashes, and whitespace around all of them.
CASED = [
    "camelCase", "camelCaseHTMLParser", "getHTTPResponseCode", "ALLCAPSlower", "ALLCAPS",
    "Title Case Words", "iPhone iOS macOS", "XMLHttpRequest", "aB", "Ab", "AB", "ab", "a B",
    "HelloWorld's", "McDonald's", "O'NEIL'S", "DON'T", "don'T", "You'Re", "WE'LL", "i'M",
    "THEY'VE", "she'D", "it'S", "x'ſ", "X'ſ", "'S", "''RE", "A'b", "a'B", "can't've",
    "e\u0301", "E\u0301", "e\u0301E\u0301e", "\u0301", "\u0301abc", "\u0301ABC", " \u0301A",
    "a\u0301\u0302\u0303b", "Cafe\u0301 CAFE\u0301", "!\u0301", "1\u0301", "\n\u0301x",
    "\u20dd", "A\u20ddb", "नमस्ते दुनिया", "हिन्दीHindi", "क्षत्रिय", "한국어 Korean", "한국Eo",
    "日本語English", "中文ABC中文", "ABC日本", "مَرْحَبًا بالعالم", "العربيةAR", "ไทยThai",
    "ʰ", "ʰA", "Aʰ", "ʰa", "aʰ", "ʰʰA", "Aʰa", "ABCʰ", "ʰABC", "ʰaB", "ーカタカナー", "々A",
    "ǅ", "ǅungla", "ǄUNGLA", "ǅUNGLA", "ǅǅ", "aǅ", "ǅa", "ǈǋǲ", "ᾈᾉ", "Aǅb", " ǅ'S",
    "ª", "Aªb", "ºA", "ß", "SSß", "ßSS", "İstanbul", "ıI", "Σίσυφος ΣΊΣΥΦΟΣ", "ǆǅǄ",
    "ǄEMAL", "ſS", "ǰ", "Ⅻ", "ⅻx", "ⓐⒶ", "𝐀𝐚", "𝔄b", "Ꭰꭰ",
    "1", "12", "123", "1234", "12345", "123456", "1234567", "a1234567b", " 1234567 ",
    "٣٤٥٦٧", "१२३४", "１２３４５", "²³⁴⁵", "①②③④", "1٢3४5", "12ab34", "A1B2",
    "a/b//c", "a/b//c///d", "/", "//", "/ /", " /x", "http://example.com/a/b", "x/\ny",
    "!!\n\n", "!!\n\n/", "...\r\n", "...\r\n/", "./\n/\n", ".\n//x", "?\r/\r/", "-\n",
    "a.\n\nb", " !\n", "  !\n", "\n!", "\n/", "x \n/", ")\n\n\n", "!\t\n",
    "   leading", "trailing   ", "  two words  ", "\t\tTabbed\tWords\t", "\tX", " \tX",
    "\r\n", "\r\n\r\n", "a\r\nb", "a \r\n b", "\r\rx", "\n \n x", " \n\n ", "\u00a0X",
    "x\u3000Y", "\u2028A", "\x0bA", "\x0cb",
    "😀", "😀A", "A😀", "👍🏽Yes", "👨‍👩‍👧", "🇺🇸USA", "❤️love", "😀/\n", " 😀 ",
    "\x00A", "A\x00b", "\u200bA", "A\u200db", "\ufeffA", "\ue000A", "\U000F0000b",
]

# Bytes that are not UTF-8 among the above; only pre-tokenization is compared (see
# pretokenize_bytes).
CASED_INVALID = [
    b"\xffAbc", b"A\xffbc", b"\xffabc", b"ab\xffCD", b" \xffx", b"\xff\xfe\n/", b"\xff/x",
    b"\xc3Abc", b"x\xe6\xbc'S", b"DON\xff'T", b"\xe6\xbcA\xcc\x81", b"1\xff23", b"\xed\xa0\x80A",
]


def assigned(cp):
    c = chr(cp)
    return unicodedata.category(c) not in ("Cn", "Cs", "Co")


def random_char(rng):
    r = rng.random()
    if r < 0.30:
        return rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    if r < 0.38:
        return rng.choice("0123456789")
    if r < 0.50:
        return rng.choice(["  ", " ", " ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\r"])
    if r < 0.58:
        return rng.choice("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
    if r < 0.66:
        return rng.choice("éèêëàâäçîïôöùûüÿñÉÀÇßøåæœĳ")
    if r < 0.72:
        return rng.choice(["日", "本", "語", "中", "文", "字", "こ", "ん", "に", "ち", "は", "한", "국"])
    if r < 0.76:
        return rng.choice(["م", "ر", "ح", "ب", "ا", "ש", "ל", "ו", "ם", "न", "म", "स", "्", "ते"])
    if r < 0.82:
        return rng.choice(["😀", "👍", "🏽", "\u200d", "\ufe0f", "👨", "👩", "👧", "🎉", "🇺", "🇸", "❤"])
    if r < 0.85:
        return rng.choice(["\u0301", "\u0308", "\u0327", "ſ", "'", "’"])
    while True:  # any assigned code point, BMP or astral
        cp = rng.randint(0x80, 0x2FFFF) if rng.random() < 0.7 else rng.randint(0x80, 0xFFFF)
        if assigned(cp):
            return chr(cp)


def random_string(rng):
    n = rng.choice([1, 2, 3, 5, 8, 13, 21, 34, 55])
    return "".join(random_char(rng) for _ in range(n))


CASED_PIECES = (
    list("aAbBzZeEsStTdDmM") + ["re", "RE", "rE", "ve", "Ve", "ll", "LL", "lL", "ſ", "'", "'", "’"] +
    ["é", "É", "ß", "ǆ", "ǅ", "Ǆ", "ǈ", "ᾈ", "Σ", "σ", "ς", "İ", "ı", "ꭰ", "Ꭰ"] +  # Ll, Lt, Lu
    ["ʰ", "ʲ", "ˈ", "ー", "々", "ᵃ", "ª", "日", "本", "ا", "ל", "ก", "한", "न", "क"] +  # Lm, Lo
    ["\u0301", "\u0308", "\u094d", "\u093f", "\u093e", "\u20dd", "\u064e", "\u0e31",  # Mn, Mc, Me
     "\u3099", "\u0903"] +
    list("0123456789") + ["٣", "३", "１", "²", "Ⅻ", "①"] +
    list("!.,-()?/") + ["/", "//", "\\"] +
    [" ", " ", " ", "  ", "\t", "\n", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\x0b"] +
    ["😀", "👍", "🏽", "\u200d", "\ufe0f", "\ue000", "\x00"]
)


def cased_string(rng):
    """A random string of the pieces that the o200k split treats differently from one another."""
    n = rng.choice([1, 2, 3, 5, 8, 13, 21, 34])
    return "".join(rng.choice(CASED_PIECES) for _ in range(n))


def test_strings(rng, corpus):
    strings = list(HANDCRAFTED)
    sample = rng.sample(corpus, min(600, len(corpus)))
    strings += sample
    # Pieces of corpus lines cut at random points, to start and end words mid-way.
    for line in rng.sample(corpus, min(200, len(corpus))):
        a = rng.randint(0, len(line))
        b = rng.randint(a, len(line))
        strings.append(line[a:b])
    strings += [random_string(rng) for _ in range(700)]
    # With an rng of their own, so that the strings above stay what they were.
    cased_rng = random.Random("cased")
    strings += CASED + [cased_string(cased_rng) for _ in range(800)]
    seen = set()
    out = []
    for s in strings:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


# --------------------------------------------------------------------------------------
# Output helpers

def hexs(b):
    if isinstance(b, str):
        b = b.encode("utf-8")
    return b.hex()


def ids_str(ids):
    return " ".join(str(i) for i in ids)


def split_specials(text, specials):
    """Leftmost-longest split of text at any of the special strings -> [(is_special, str)]."""
    by_len = sorted(specials, key=len, reverse=True)
    out, raw_begin, pos = [], 0, 0
    while pos < len(text):
        hit = next((s for s in by_len if text.startswith(s, pos)), None)
        if hit is None:
            pos += 1
            continue
        if pos > raw_begin:
            out.append((False, text[raw_begin:pos]))
        out.append((True, hit))
        pos += len(hit)
        raw_begin = pos
    if raw_begin < len(text):
        out.append((False, text[raw_begin:]))
    return out


# --------------------------------------------------------------------------------------
# sentencepiece

SPM_COMMON = dict(
    model_type="bpe", character_coverage=1.0, normalization_rule_name="identity",
    remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
    unk_id=0, bos_id=1, eos_id=2, pad_id=-1, max_sentence_length=1 << 16,
    shuffle_input_sentence=False, num_threads=1, minloglevel=2,
)


def train_spm(lines, **kw):
    """Returns the serialized ModelProto."""
    buf = io.BytesIO()
    args = dict(SPM_COMMON)
    args.update(kw)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=buf, **args)
    return buf.getvalue()


def _varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, i


def _enc_varint(v):
    out = bytearray()
    while True:
        c, v = v & 0x7F, v >> 7
        out.append(c | 0x80 if v else c)
        if not v:
            return bytes(out)


def _proto_fields(b):
    """Yields (field number, wire type, raw bytes of the field, payload if length-delimited)."""
    i = 0
    while i < len(b):
        start = i
        tag, i = _varint(b, i)
        num, wire = tag >> 3, tag & 7
        payload = None
        if wire == 0:
            _, i = _varint(b, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            n, j = _varint(b, i)
            i = j + n
            payload = b[j:i]
        else:
            raise ValueError(f"unexpected protobuf wire type {wire}")
        yield num, wire, b[start:i], payload


def mark_unused(proto, ids):
    """Sets the type of the given pieces to UNUSED (5) in a serialized ModelProto (field 1:
    repeated SentencePiece {1: piece, 2: score, 3: type}). sentencepiece's Python module has
    no API for this, and the protobuf package is not a test dependency."""
    out = bytearray()
    k = 0
    for num, wire, raw, payload in _proto_fields(proto):
        if num == 1 and wire == 2:
            if k in ids:
                inner = bytearray()
                for n2, _, raw2, _ in _proto_fields(payload):
                    if n2 != 3:
                        inner += raw2
                inner += _enc_varint(3 << 3) + _enc_varint(5)
                raw = _enc_varint((1 << 3) | 2) + _enc_varint(len(inner)) + bytes(inner)
            k += 1
        out += raw
    return bytes(out)


def write_spm_gguf(sp, path, user_defined, add_space_prefix):
    n = sp.get_piece_size()
    tokens, scores, types = [], [], []
    for i in range(n):
        piece = sp.id_to_piece(i)
        tokens.append(piece)
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            t = 2
        elif sp.is_control(i):
            t = 3
        elif sp.is_byte(i):
            t = 6
        elif sp.is_unused(i):
            t = 5
        elif piece in user_defined:
            t = 4
        else:
            t = 1
        types.append(t)
    w = gg.Writer()
    w.add("general.architecture", gg.STRING, "llama")
    w.add("tokenizer.ggml.model", gg.STRING, "llama")
    w.add("tokenizer.ggml.tokens", gg.ARRAY, tokens, gg.STRING)
    w.add("tokenizer.ggml.scores", gg.ARRAY, scores, gg.F32)
    w.add("tokenizer.ggml.token_type", gg.ARRAY, types, gg.I32)
    w.add("tokenizer.ggml.bos_token_id", gg.U32, sp.bos_id())
    w.add("tokenizer.ggml.eos_token_id", gg.U32, sp.eos_id())
    w.add("tokenizer.ggml.unknown_token_id", gg.U32, sp.unk_id())
    w.add("tokenizer.ggml.add_bos_token", gg.BOOL, True)
    w.add("tokenizer.ggml.add_eos_token", gg.BOOL, False)
    w.add("tokenizer.ggml.add_space_prefix", gg.BOOL, add_space_prefix)
    w.write(path)
    return types


def spm_cases(sp, types, strings, rng):
    n = sp.get_piece_size()
    specials = [sp.id_to_piece(i) for i in range(n) if types[i] in (2, 3)]
    bos = sp.bos_id()
    lines = []
    encodings = []
    for s in strings:
        ids = sp.encode(s)
        encodings.append(ids)
        lines.append(f"E\t0\t0\t{hexs(s)}\t{ids_str(ids)}")
        lines.append(f"E\t0\t1\t{hexs(s)}\t{ids_str([bos] + ids)}")
        special_ids = []
        for is_special, part in split_specials(s, specials):
            special_ids += [sp.piece_to_id(part)] if is_special else sp.encode(part)
        lines.append(f"E\t1\t0\t{hexs(s)}\t{ids_str(special_ids)}")
        # sentencepiece's decoder drops control tokens: our skip_special=true.
        lines.append(f"D\t1\t{ids_str([bos] + ids)}\t{hexs(sp.decode([bos] + ids))}")
        lines.append(f"D\t1\t{ids_str(special_ids)}\t{hexs(sp.decode(special_ids))}")
    for b in INVALID_UTF8:
        ids = sp.encode(b)
        lines.append(f"E\t0\t0\t{hexs(b)}\t{ids_str(ids)}")
        lines.append(f"D\t1\t{ids_str(ids)}\t{hexs(sp.decode(ids))}")
    # Decoding id sequences that no encoder would produce: byte tokens that spell invalid
    # UTF-8, control and unknown tokens anywhere, and the dummy-prefix corner cases.
    def pid(p):
        return sp.piece_to_id(p)
    space = pid("\u2581")
    corner = [
        [space], [space, space], [bos, space, space], [bos, bos, pid("\u2581a")],
        [0, pid("\u2581a")], [pid("<0x20>"), pid("\u2581a")], [pid("\u2581a"), 2, pid("\u2581a")],
        [pid("<0xE6>"), pid("<0xBC>"), pid("<0xA2>")], [pid("<0xE6>"), pid("<0xBC>")],
        [pid("<0xF0>"), pid("\u2581a"), pid("<0x9F>")], [2, 2], [],
    ]
    corner += [[rng.randrange(n) for _ in range(rng.randint(1, 12))] for _ in range(300)]
    for ids in corner:
        lines.append(f"L\tbyte\t1\t{ids_str(ids)}\t{hexs(sp.decode(ids))}")
    return lines


# --------------------------------------------------------------------------------------
# Hugging Face tokenizers

BPE_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BPE_ADDED = ["<tool>", "</tool>"]


def train_bpe(lines, regex=None, ignore_merges=False):
    """Byte-level BPE with the GPT-2 split, or a Split on `regex` before the byte mapping."""
    tok = Tokenizer(models.BPE())
    if regex:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(regex), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, min_frequency=2, special_tokens=BPE_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer)
    tok.add_tokens(BPE_ADDED)
    if ignore_merges:  # Llama 3 emits a whole word that is a token without merging
        j = json.loads(tok.to_str())
        j["model"]["ignore_merges"] = True
        tok = Tokenizer.from_str(json.dumps(j))
    return tok


def write_bpe_gguf(tok, path, pre):
    j = json.loads(tok.to_str())
    vocab = tok.get_vocab(with_added_tokens=True)
    n = len(vocab)
    tokens = [None] * n
    for t, i in vocab.items():
        tokens[i] = t
    assert all(t is not None for t in tokens)
    types = [1] * n
    for a in j["added_tokens"]:
        types[a["id"]] = 3 if a["special"] else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    w = gg.Writer()
    w.add("general.architecture", gg.STRING, "gpt2")
    w.add("tokenizer.ggml.model", gg.STRING, "gpt2")
    w.add("tokenizer.ggml.pre", gg.STRING, pre)
    w.add("tokenizer.ggml.tokens", gg.ARRAY, tokens, gg.STRING)
    w.add("tokenizer.ggml.token_type", gg.ARRAY, types, gg.I32)
    w.add("tokenizer.ggml.merges", gg.ARRAY, merges, gg.STRING)
    w.add("tokenizer.ggml.bos_token_id", gg.U32, vocab["<|endoftext|>"])
    w.add("tokenizer.ggml.eos_token_id", gg.U32, vocab["<|endoftext|>"])
    w.add("tokenizer.ggml.eot_token_id", gg.U32, vocab["<|im_end|>"])
    w.add("tokenizer.ggml.add_bos_token", gg.BOOL, False)
    w.write(path)
    return vocab["<|endoftext|>"], n


def byte_ends(s, offsets):
    """Char offsets (exclusive ends) -> UTF-8 byte offsets."""
    pos = [0]
    for c in s:
        pos.append(pos[-1] + len(c.encode("utf-8")))
    return [pos[e] for _, (_, e) in offsets]


def pretokenize_bytes(tok, b):
    """Pre-token ends (byte offsets) of bytes that may be ill-formed UTF-8, which the library
    cannot take. The engine reads each byte of an ill-formed sequence as a character of no
    class: here each becomes a private-use character (Co, in no class either) for the library,
    and counts as one byte."""
    text = b.decode("utf-8", errors="surrogateescape")  # each bad byte -> U+DC80..U+DCFF
    lens = [1 if 0xDC80 <= ord(c) <= 0xDCFF else len(c.encode("utf-8")) for c in text]
    text = "".join(chr(0xF0000 + ord(c) - 0xDC00) if 0xDC80 <= ord(c) <= 0xDCFF else c for c in text)
    pos = [0]
    for n in lens:
        pos.append(pos[-1] + n)
    return [pos[e] for _, (_, e) in tok.pre_tokenizer.pre_tokenize_str(text)]


def bpe_cases(tok, bos, n, strings, rng):
    lines = []
    for s in strings:
        tok.encode_special_tokens = False
        with_special = tok.encode(s, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        plain = tok.encode(s, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        lines.append(f"E\t0\t0\t{hexs(s)}\t{ids_str(plain)}")
        lines.append(f"E\t1\t0\t{hexs(s)}\t{ids_str(with_special)}")
        lines.append(f"E\t1\t1\t{hexs(s)}\t{ids_str([bos] + with_special)}")
        lines.append(f"D\t0\t{ids_str(with_special)}\t{hexs(tok.decode(with_special, skip_special_tokens=False))}")
        lines.append(f"D\t1\t{ids_str([bos] + with_special)}\t{hexs(tok.decode([bos] + with_special, skip_special_tokens=True))}")
        lines.append(f"P\t{hexs(s)}\t{' '.join(str(e) for e in byte_ends(s, tok.pre_tokenizer.pre_tokenize_str(s)))}")
    for b in INVALID_UTF8 + CASED_INVALID:
        lines.append(f"P\t{hexs(b)}\t{' '.join(str(e) for e in pretokenize_bytes(tok, b))}")
    normal = [i for i in range(n) if tok.id_to_token(i) not in BPE_SPECIALS + BPE_ADDED]
    for _ in range(300):
        ids = [rng.choice(normal) for _ in range(rng.randint(1, 10))]
        lines.append(f"L\tsubpart\t0\t{ids_str(ids)}\t{hexs(tok.decode(ids))}")
    return lines


# --------------------------------------------------------------------------------------

def write_cases(path, lines):
    with open(path, "w", encoding="ascii") as f:
        for line in lines:
            f.write(line + "\n")
        f.write(f"END\t{len(lines)}\n")


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    out_dir = os.path.abspath(sys.argv[1])
    tmp = f"{out_dir}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)

    rng = random.Random(20240611)
    corpus = training_lines(rng)
    strings = test_strings(rng, corpus)
    summary = {"strings": len(strings), "invalid_utf8": len(INVALID_UTF8) + len(CASED_INVALID),
               "sentencepiece": spm.__version__, "tokenizers": tokenizers.__version__,
               "unicode": unicodedata.unidata_version, "models": {}}

    spm_models = {
        "spm_llama": (dict(vocab_size=2000, byte_fallback=True, split_digits=True, add_dummy_prefix=True), [], True),
        "spm_special": (dict(vocab_size=1600, byte_fallback=True, split_digits=True, add_dummy_prefix=True,
                             user_defined_symbols=["<tool>", "<|sep|>", "</tool>"],
                             control_symbols=["<|im_start|>", "<|im_end|>"]),
                        ["<tool>", "<|sep|>", "</tool>"], True),
        "spm_plain": (dict(vocab_size=1200, byte_fallback=False, split_digits=False, add_dummy_prefix=False), [], False),
        "spm_unused": (None, [], True),
    }
    protos = {}
    for name, (kw, user_defined, prefix) in spm_models.items():
        if name == "spm_unused":
            # Every fourth normal piece of spm_llama marked unused: exercises the
            # re-segmentation of unused pieces and their byte fallback.
            base = protos["spm_llama"]
            sp0 = spm.SentencePieceProcessor(model_proto=base)
            normal = {i for i in range(sp0.get_piece_size())
                      if not (sp0.is_control(i) or sp0.is_unknown(i) or sp0.is_byte(i)) and i % 4 == 0}
            protos[name] = mark_unused(base, normal)
        else:
            protos[name] = train_spm(corpus, **kw)
        sp = spm.SentencePieceProcessor(model_proto=protos[name])
        types = write_spm_gguf(sp, os.path.join(tmp, name + ".gguf"), user_defined, prefix)
        lines = spm_cases(sp, types, strings, random.Random(name))
        write_cases(os.path.join(tmp, name + ".cases"), lines)
        summary["models"][name] = {"vocab": sp.get_piece_size(), "cases": len(lines)}

    for name, pre, regex, ignore_merges in (("bpe_gpt2", "default", None, False),
                                            ("bpe_llama3", "llama-bpe", LLAMA3_REGEX, True),
                                            ("bpe_qwen2", "qwen2", QWEN2_REGEX, False),
                                            ("bpe_o200k", "gpt-4o", O200K_REGEX, False)):
        tok = train_bpe(corpus, regex, ignore_merges)
        bos, n = write_bpe_gguf(tok, os.path.join(tmp, name + ".gguf"), pre)
        lines = bpe_cases(tok, bos, n, strings, random.Random(name))
        write_cases(os.path.join(tmp, name + ".cases"), lines)
        summary["models"][name] = {"vocab": n, "cases": len(lines)}

    with open(os.path.join(tmp, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
