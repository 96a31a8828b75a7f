#!/usr/bin/env python3
"""Reference ids for added/special tokens matched in text (cf_tokenizer_encode_special).

Takes tests/fixtures/data/llama3_style.json (a byte-level BPE with LLaMA-3's pre-tokenizer),
adds the chat control tokens of Llama 3 and ChatML plus tokens with lstrip/rstrip/single_word
and a non-special added token, saves that tokenizer.json as
tests/fixtures/data/special_tokens.json, and writes the ids Hugging Face's `tokenizers`
gives for rendered chat prompts (tokenizer.encode(text, add_special_tokens=False), i.e.
split_special_tokens=False, the default) to tests/fixtures/data/special_tokens_ids.json.

With Meta's Llama 3 tokenizer.model under CFORMERS_DATA_DIR (llama3-tokenizer/), also the ids
OpenAI's `tiktoken` gives with Meta's llama_models/llama3/tokenizer.py setup (its pattern and
256 special tokens, allowed_special="all") for a chat prompt and multilingual text, to
tests/fixtures/data/llama3_tiktoken_ids.json.

Run with a venv holding `tokenizers` and `tiktoken`: python3 -m venv /work/venv-special &&
/work/venv-special/bin/pip install tokenizers tiktoken &&
/work/venv-special/bin/python tools/make_special_token_fixtures.py
"""
import json
import os

from tokenizers import AddedToken, Tokenizer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DATA = os.path.join(ROOT, "tests", "fixtures", "data")

SPECIAL = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>", "<|im"]
FLAGGED = [  # (content, lstrip, rstrip, single_word, special)
    ("<mask>", True, False, False, True),
    ("[SEP]", False, True, False, True),
    ("word", False, False, True, True),
    ("<tool>", False, False, False, False),
]

LLAMA3 = ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>"
          "<|start_header_id|>user<|end_header_id|>\n\nHello, who are you?<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\n")
CHATML = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
          "What is 2+2? <|im_end|>\n<|im_start|>assistant\n")
TEXTS = [
    LLAMA3,
    CHATML,
    "plain text without any special token",
    "<|eot_id|><|eot_id|>x<|end_of_text|>",
    "partial <|im and <|im_end|> and <|eot_id| unterminated",
    "left   <mask> right",
    "a [SEP]   b",
    "word, sword wordy (word)",
    "call <tool>now",
    "",
]


def main():
    with open(os.path.join(DATA, "llama3_style.json")) as f:
        base = json.load(f)
    for a in base["added_tokens"]:  # the file spells only id, content and special
        for key in ("single_word", "lstrip", "rstrip", "normalized"):
            a.setdefault(key, False)
    tok = Tokenizer.from_str(json.dumps(base))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIAL])
    for content, lstrip, rstrip, single_word, special in FLAGGED:
        t = AddedToken(content, lstrip=lstrip, rstrip=rstrip, single_word=single_word, normalized=False,
                       special=special)
        (tok.add_special_tokens if special else tok.add_tokens)([t])
    tok.save(os.path.join(DATA, "special_tokens.json"))
    cases = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in TEXTS]
    with open(os.path.join(DATA, "special_tokens_ids.json"), "w") as f:
        json.dump({"tokenizer": "special_tokens.json", "cases": cases}, f, indent=1)
        f.write("\n")


LLAMA3_NAMED = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>", "<|image|>"]
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
MULTILINGUAL = ("English text, déjà vu in French, Straße auf Deutsch, Привет мир, 你好，世界！ こんにちは、"
                "안녕하세요, مرحبا بالعالم, नमस्ते दुनिया, γειά σου κόσμε, emoji 👍🏽👨‍👩‍👧 and numbers 1234567 3.14159\n\n"
                "  indented\tcode() { return x->y; }  \r\n")


def llama3_tiktoken():
    data = os.environ.get("CFORMERS_DATA_DIR", os.path.join(ROOT, "..", "shared", "data"))
    path = os.path.join(data, "llama3-tokenizer", "tokenizer.model")
    if not os.path.exists(path):
        print(f"skip: {path} not found")
        return
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    ranks = load_tiktoken_bpe(path)
    names = LLAMA3_NAMED + [f"<|reserved_special_token_{2 + i}|>" for i in range(256 - len(LLAMA3_NAMED))]
    enc = tiktoken.Encoding(name="llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks,
                            special_tokens={n: len(ranks) + i for i, n in enumerate(names)})
    texts = [LLAMA3, MULTILINGUAL, LLAMA3 + MULTILINGUAL + "<|eot_id|>", "<|reserved_special_token_250|><|image|>"]
    cases = [{"text": t, "ids": enc.encode(t, allowed_special="all")} for t in texts]
    with open(os.path.join(DATA, "llama3_tiktoken_ids.json"), "w") as f:
        json.dump({"tokenizer": "llama3-tokenizer/tokenizer.model", "cases": cases}, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
    llama3_tiktoken()
