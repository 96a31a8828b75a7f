#!/usr/bin/python3
"""Writes tests/fixtures/data/gpt2_tiny/{encoder.json,vocab.bpe}: a GPT-2-format tokenizer
small enough to commit (the 256 byte tokens in GPT-2's byte alphabet, 44 merges of English
pieces, <|endoftext|> last: 301 tokens), for the tests that a vocabulary given in OpenAI's
format is embedded in checkpoints as a tokenizer.json (tests/test_gguf_tokenizer.c,
tests/cli_gpt2_tokenizer.sh). Standard library only: python3 tools/make_gpt2_tiny_tokenizer.py"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_fixtures import bytes_to_unicode  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fixtures", "data",
                   "gpt2_tiny")


def main():
    table = bytes_to_unicode()
    encoder = {table[b]: b for b in range(256)}
    merges = []
    # each word built left to right, one merge per step ("Ġ" is the space byte, "Ċ" newline)
    for word in ["Ġthe", "the", "Ġand", "Ġcat", "Ġsat", "Ġmat", "Ġon", "Ġhat", "'s", "'ll", "ĠĠĠĠ", "ĊĊ", "The",
                 "They", "Ġworld", "Hello", "ing", "er"]:
        left = word[0]
        for c in word[1:]:
            if left + c not in encoder:
                merges.append(f"{left} {c}")
                encoder[left + c] = len(encoder)
            left += c
    encoder["<|endoftext|>"] = len(encoder)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "encoder.json"), "w", encoding="utf-8") as f:
        json.dump(encoder, f, ensure_ascii=False)
    with open(os.path.join(OUT, "vocab.bpe"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    print(f"{OUT}: {len(encoder)} tokens, {len(merges)} merges")


if __name__ == "__main__":
    main()
