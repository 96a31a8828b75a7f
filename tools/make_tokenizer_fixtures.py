#!/usr/bin/python3
"""Writes tests/fixtures/data/tok_*.txt: the ids reference tokenizers give for edge cases
and for Tiny Shakespeare, which tests/test_tokenizer.c compares cformers against.

  SentencePiece: python3-sentencepiece (Debian) on the llama2.c tokenizer.model and tok512.model.
  GPT-2: OpenAI's original encoder.py algorithm (below), which needs the `regex` module:
      /usr/bin/python3 -m venv /tmp/rv && /tmp/rv/bin/pip install regex
      /tmp/rv/bin/python tools/make_tokenizer_fixtures.py gpt2
      /tmp/rv/bin/python tools/make_tokenizer_fixtures.py llama3
  The llama3 mode also writes llama3_style.json: a tokenizer.json with LLaMA-3's Split
  pattern, ignore_merges and special tokens around GPT-2's first 3000 merges (LLaMA-3's
  own 128K vocabulary is not among the shared assets), and the ids the Hugging Face BPE
  algorithm gives with it.
  Without an argument it writes the SentencePiece fixtures (run with /usr/bin/python3).

Fixture lines:  T <text as hex>  /  I <ids...>  (one edge case each)
                L <ids...>       (one line of the corpus, for the first LINES lines)
                H <mode> <number of ids> <FNV-1a 64 of the ids as little-endian u32>
Tiny Shakespeare is encoded line by line (without the newline) for SentencePiece, since
that is how LLaMA-style data is usually fed, and as one whole text for GPT-2."""
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.environ.get("CFORMERS_DATA_DIR", os.path.join(ROOT, "..", "shared", "data"))
OUT = os.path.join(ROOT, "tests", "fixtures", "data")
LINES = 300

EDGE_CASES = [
    "", " ", "   ", "\n", "Hello world", "  leading spaces", "trailing spaces  ", "multiple   spaces   inside",
    "tabs\tand\nnewlines\n\nhere\r\n", "unicode: héllo wörld ñ 日本語 Ελληνικά русский",
    "emoji 🤗🤗 and 🦙", "control \x01\x02\x1b\x7f bytes", "I'm sure we'll say they've done it, don't you'd?",
    "numbers 12345 3.14159 1,000,000 ٣٤", "literal <s> </s> <unk> <|endoftext|>", "\u2581 a literal block",
    "a" * 3000, "supercalifragilisticexpialidocious" * 40, "x" + " " * 50 + "y",
    "!!!???...,,,;;;", "Mixed CASE and Punctuation: (brackets) [square] {curly}", "   \t  \n  ",
    "ﬁ ligature and ½ fraction and Ⅻ numeral", "ZWJ 👨‍👩‍👧 and combining é",
    "digits 1234567 and 12", "SHOUTING IT'S THEY'LL", "(parenthesised) \"quoted\"", "\n\n\nfoo",
    "  \n  x \r\n\ty", "end with spaces\n  ",
]


def fnv(ids):
    h = 0xcbf29ce484222325
    for b in b"".join(struct.pack("<I", i) for i in ids):
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def write(name, encode, corpus_mode):
    text = open(os.path.join(DATA, "tinyshakespeare", "input.txt"), encoding="utf-8").read()
    lines = text.split("\n")
    path = os.path.join(OUT, name)
    with open(path, "w") as f:
        for case in EDGE_CASES:
            f.write("T " + case.encode("utf-8").hex() + "\n")
            f.write("I " + " ".join(map(str, encode(case))) + "\n")
        all_ids = []
        if corpus_mode == "lines":
            for k, line in enumerate(lines):
                ids = encode(line)
                if k < LINES:
                    f.write("L " + " ".join(map(str, ids)) + "\n")
                all_ids += ids
        else:
            all_ids = encode(text)
            for line in lines[:LINES]:
                f.write("L " + " ".join(map(str, encode(line))) + "\n")
        f.write(f"H {corpus_mode} {len(all_ids)} {fnv(all_ids):016x}\n")
    print(f"wrote {path}: {len(all_ids)} corpus ids")


GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_MERGES = 3000


def gpt2_files():
    enc = json.load(open(os.path.join(DATA, "gpt2-tokenizer", "encoder.json"), encoding="utf-8"))
    merges = open(os.path.join(DATA, "gpt2-tokenizer", "vocab.bpe"), encoding="utf-8").read().split("\n")[1:-1]
    return enc, merges


def write_llama3_style_json(path):
    enc, merges = gpt2_files()
    merges = merges[:LLAMA3_MERGES]
    vocab = {tok: i for tok, i in enc.items() if i < 256 + LLAMA3_MERGES}
    n = len(vocab)
    doc = {"version": "1.0",
           "added_tokens": [{"id": n, "content": "<|begin_of_text|>", "special": True},
                            {"id": n + 1, "content": "<|end_of_text|>", "special": True}],
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
           "model": {"type": "BPE", "ignore_merges": True, "vocab": vocab, "merges": merges}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
    return vocab, merges


def bytes_to_unicode():
    """GPT-2's encoder.py table: printable bytes stand for themselves, the others 256 + k."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def gpt2_encoder(pattern=GPT2_PATTERN, files=None, ignore_merges=False):
    import regex as re
    enc, merges = files or gpt2_files()
    ranks = {tuple(m.split()): i for i, m in enumerate(merges)}
    byte_encoder = bytes_to_unicode()
    pat = re.compile(pattern)
    cache = {}

    def bpe(token):
        if token in cache:
            return cache[token]
        word = tuple(token)
        while len(word) > 1:
            pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
            best = min(pairs, key=lambda p: ranks.get(p, float("inf")))
            if best not in ranks:
                break
            new, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and (word[i], word[i + 1]) == best:
                    new.append(word[i] + word[i + 1])
                    i += 2
                else:
                    new.append(word[i])
                    i += 1
            word = tuple(new)
        cache[token] = word
        return word

    def encode(text):
        ids = []
        for tok in re.findall(pat, text):
            tok = "".join(byte_encoder[b] for b in tok.encode("utf-8"))
            if ignore_merges and tok in enc:
                ids.append(enc[tok])
            else:
                ids += [enc[p] for p in bpe(tok)]
        return ids

    return encode


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    if sys.argv[1:] == ["gpt2"]:
        write("tok_gpt2.txt", gpt2_encoder(), "whole")
    elif sys.argv[1:] == ["llama3"]:
        files = write_llama3_style_json(os.path.join(OUT, "llama3_style.json"))
        write("tok_llama3.txt", gpt2_encoder(LLAMA3_PATTERN, files, ignore_merges=True), "whole")
    else:
        import sentencepiece as spm
        for model, name in [("llama2c-tokenizer/tokenizer.model", "tok_llama2.txt"),
                            ("stories260K/tok512.model", "tok_tok512.txt")]:
            sp = spm.SentencePieceProcessor(model_file=os.path.join(DATA, model))
            write(name, lambda s: sp.encode(s), "lines")
