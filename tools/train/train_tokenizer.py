#!/usr/bin/env python3
"""Train a LLaMA-style SentencePiece BPE tokenizer on the training split.

Settings follow the original LLaMA tokenizer: BPE, byte fallback (256 <0xXX> pieces),
split digits, identity normalisation (no NFKC), no whitespace squeezing, a dummy prefix
space, unk=0 <unk>, bos=1 <s>, eos=2 </s>, no pad. Vocabulary size 4096.
"""
import argparse
import hashlib
import io
import os

import sentencepiece as spm


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", default="tools/train/work/train.txt")
    ap.add_argument("--out-dir", default="tools/train/work", help="writes tokenizer.model here")
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    os.makedirs(args.out_dir, exist_ok=True)
    buf = io.BytesIO()  # train in memory so the output path is not baked into the model file
    spm.SentencePieceTrainer.train(
        input=args.input,
        model_writer=buf,
        model_type="bpe",
        vocab_size=args.vocab_size,
        byte_fallback=True,
        split_digits=True,
        character_coverage=1.0,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        allow_whitespace_only_pieces=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        max_sentence_length=1 << 17,   # lines are whole chapters (up to ~25 KB)
        shuffle_input_sentence=False,  # use every line, in file order: deterministic
        num_threads=args.threads,
        minloglevel=1,
    )
    model = os.path.join(args.out_dir, "tokenizer.model")
    with open(model, "wb") as f:
        f.write(buf.getvalue())
    digest = hashlib.sha256(buf.getvalue()).hexdigest()[:16]
    sp = spm.SentencePieceProcessor(model_file=model)
    print(f"wrote {model}: vocab {sp.vocab_size()}, sha256 {digest}")
    sample = "In the beginning God created the heaven and the earth. 1611"
    print("sample:", sp.encode(sample, out_type=str))
    with open(args.input, encoding="utf-8") as f:
        text = f.read()
    n_tok = len(sp.encode(text))
    print(f"{args.input}: {len(text)} chars -> {n_tok} tokens ({len(text) / n_tok:.2f} chars/token)")


if __name__ == "__main__":
    main()
