#!/usr/bin/env python3
"""Build the KJV training corpus: clean prose, deterministic train/val/test split.

Source: the Debian package `bible-kjv-text` (compressed text in /usr/lib/bible.data),
read through its viewer `bible` from the package `bible-kjv`:

    bible -f Gen1:1-Rev22:21      # one verse per line, "Ge1:1 In the beginning ..."

Cleaning: the leading "Book C:V" reference is removed, runs of whitespace are collapsed,
and the verses of one chapter are joined with single spaces into one prose line.
Output files therefore hold one chapter per line (1189 chapters in total).

Split (deterministic, by whole chapters, i = chapter index in canonical order):
    i % 20 == 9  -> validation     i % 20 == 19 -> test (held out)     otherwise -> train
which is 90/5/5 by chapter count and samples every part of the book evenly.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

REF_RE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")

# Short prompts for smoke tests and golden logits (each well under 16 tokens with BOS).
PROMPTS = [
    "In the beginning God created",
    "And the LORD spake unto Moses, saying,",
    "The LORD is my shepherd;",
    "Blessed are the poor in spirit:",
    "And it came to pass, when",
]


def read_raw(raw_path):
    if raw_path:
        with open(raw_path, encoding="utf-8") as f:
            return f.read()
    try:
        out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True,
                             capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit("`bible` not found: apt-get install bible-kjv bible-kjv-text (or pass --raw FILE)")
    return out.stdout


def parse_chapters(raw):
    """Return [(book, chapter, text)] in canonical order."""
    chapters = []
    for n, line in enumerate(raw.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        m = REF_RE.match(line)
        if not m:
            sys.exit(f"unparsable line {n}: {line[:80]!r}")
        book, chap, text = m.group(1), int(m.group(2)), m.group(4)
        text = " ".join(text.split())
        if chapters and chapters[-1][0] == book and chapters[-1][1] == chap:
            chapters[-1][2].append(text)
        else:
            chapters.append((book, chap, [text]))
    return [(b, c, " ".join(v)) for b, c, v in chapters]


def split_of(i):
    r = i % 20
    return "val" if r == 9 else "test" if r == 19 else "train"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--raw", help="use this dump of `bible -f Gen1:1-Rev22:21` instead of running `bible`")
    ap.add_argument("--work", default="tools/train/work", help="scratch output folder")
    ap.add_argument("--model-dir", default="models/kjv-relu", help="bundled model folder (heldout.txt, prompts.txt)")
    ap.add_argument("--max-heldout-bytes", type=int, default=300_000,
                    help="truncate the held-out copy in --model-dir to at most this many bytes (whole chapters)")
    args = ap.parse_args()

    raw = read_raw(args.raw)
    chapters = parse_chapters(raw)
    print(f"parsed {len(chapters)} chapters, raw sha256 {hashlib.sha256(raw.encode()).hexdigest()[:16]}")
    if len(chapters) != 1189:
        print(f"warning: expected 1189 chapters, got {len(chapters)}", file=sys.stderr)

    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.model_dir, exist_ok=True)
    splits = {"train": [], "val": [], "test": []}
    for i, (book, chap, text) in enumerate(chapters):
        splits[split_of(i)].append((f"{book}{chap}", text))

    manifest = {}
    for name, items in splits.items():
        path = os.path.join(args.work, f"{name}.txt")
        with open(path, "w", encoding="utf-8") as f:
            for _, text in items:
                f.write(text + "\n")
        size = os.path.getsize(path)
        manifest[name] = {"chapters": [ref for ref, _ in items], "bytes": size}
        print(f"{name:5s}: {len(items):4d} chapters, {size:8d} bytes -> {path}")
    with open(os.path.join(args.work, "splits.json"), "w") as f:
        json.dump(manifest, f, indent=1)

    # Held-out copy for the engine's perplexity test: whole chapters up to the byte limit.
    held = os.path.join(args.model_dir, "heldout.txt")
    total = 0
    with open(held, "w", encoding="utf-8") as f:
        for _, text in splits["test"]:
            n = len((text + "\n").encode("utf-8"))
            if total + n > args.max_heldout_bytes:
                break
            f.write(text + "\n")
            total += n
    if total != manifest["test"]["bytes"]:
        print(f"note: heldout.txt truncated to {total} of {manifest['test']['bytes']} bytes")
    shutil.copyfile(held, os.path.join(args.work, "heldout.txt"))
    with open(os.path.join(args.model_dir, "prompts.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(PROMPTS) + "\n")
    print(f"wrote {held} ({total} bytes) and {os.path.join(args.model_dir, 'prompts.txt')}")


if __name__ == "__main__":
    main()
