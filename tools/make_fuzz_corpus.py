#!/usr/bin/env python3
"""Writes the fuzzing seed corpora and dictionaries under tests/fuzz/ (see tests/fuzz/README.md).

Every seed is a tiny valid file (a few KB at most) of the format its harness reads, made here
from scratch with a fixed random seed, so the corpus can be regenerated and reviewed:

    python3 tools/make_fuzz_corpus.py [--cformers build/cformers]

With --cformers, the checkpoint seeds are made by `cformers convert` from the HF seed (so they
are exactly what the engine writes); without it the checkpoint corpus is left as it is.
The record seeds carry correct CRC32C checksums (the harness would recompute them anyway).
"""
import argparse
import json
import os
import random
import re
import struct
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUZZ = os.path.join(ROOT, "tests", "fuzz")
SEP = b"\n--cf-fuzz-file--\n"  # FUZZ_SEPARATOR in tests/fuzz/fuzz_util.h
rng = random.Random(1234)

# The tiny LLaMA every model seed describes.
V, H, I, L, NH, NKV, POS = 16, 8, 16, 1, 2, 1, 16
HD = H // NH


def floats(n):
    return [rng.uniform(-0.5, 0.5) for _ in range(n)]


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def bf16(values):
    return b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:] for v in values)


def put(target, name, data):
    d = os.path.join(FUZZ, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def put_dict(target, tokens):
    with open(os.path.join(FUZZ, target + ".dict"), "w") as f:
        f.write("# libFuzzer dictionary, written by tools/make_fuzz_corpus.py\n")
        for t in sorted(set(tokens)):
            f.write('"%s"\n' % "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "\\x%02x" % ord(c) for c in t))


# ---- tokenizers -------------------------------------------------------------------------

PIECES = ["<unk>", "<s>", "</s>", "\u2581", "e", "l", "o", "\u2581H", "ll", "\u2581w", "or", "d", "<0x0A>", "<0x41>",
          "\u2581hello", "!"]


def sp_model():
    def varint(v):
        out = b""
        while True:
            b = v & 0x7F
            v >>= 7
            out += bytes([b | (0x80 if v else 0)])
            if not v:
                return out

    def field(num, wire, payload):
        key = varint(num << 3 | wire)
        return key + (varint(len(payload)) + payload if wire == 2 else payload)

    body = b""
    for i, p in enumerate(PIECES):
        kind = 2 if i == 0 else 3 if i < 3 else 6 if p.startswith("<0x") else 1
        piece = field(1, 2, p.encode()) + field(2, 5, struct.pack("<f", -float(i))) + field(3, 0, varint(kind))
        body += field(1, 2, piece)
    trainer = field(3, 0, varint(2)) + field(35, 0, varint(1)) + field(40, 0, varint(0)) + field(41, 0, varint(1)) + \
        field(42, 0, varint(2))
    normalizer = field(1, 2, b"identity") + field(3, 0, varint(1)) + field(4, 0, varint(0)) + field(5, 0, varint(1))
    return body + field(2, 2, trainer) + field(3, 2, normalizer)


def tokenizer_bin(pieces=PIECES):
    out = struct.pack("<i", max(len(p.encode()) for p in pieces))
    for i, p in enumerate(pieces):
        b = p.replace("\u2581", " ").encode()
        out += struct.pack("<fi", -float(i), len(b)) + b
    return out


def llama3_fixture():
    with open(os.path.join(ROOT, "tests", "fixtures", "data", "llama3_style.json"), encoding="utf-8") as f:
        return json.load(f)


def byte_level_vocab():
    """The 256 byte symbols of the committed byte-level fixture (GPT-2's byte-to-unicode
    table), in its id order, and a few merges of them."""
    symbols = sorted((i, t) for t, i in llama3_fixture()["model"]["vocab"].items() if len(t) == 1)
    vocab = {t: i for i, (_, t) in enumerate(symbols)}
    merges = [("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("l", "l"), ("o", "r")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab, merges


def tokenizer_json(pretokenizer):
    vocab, merges = byte_level_vocab()
    doc = {"version": "1.0", "added_tokens": [{"id": len(vocab), "content": "<|endoftext|>", "special": True}],
           "normalizer": None, "pre_tokenizer": pretokenizer, "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "vocab": vocab, "merges": [a + " " + b for a, b in merges]}}
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


def gpt2_dir():
    vocab, merges = byte_level_vocab()
    vocab["<|endoftext|>"] = len(vocab)
    encoder = json.dumps(vocab, ensure_ascii=False, separators=(",", ":")).encode()
    bpe = ("#version: 0.2\n" + "".join(a + " " + b + "\n" for a, b in merges)).encode()
    return encoder + SEP + bpe


# ---- models -----------------------------------------------------------------------------

def hf_tensors():
    names = [("model.embed_tokens.weight", [V, H])]
    for l in range(L):
        p = "model.layers.%d." % l
        names += [(p + "self_attn.q_proj.weight", [H, H]), (p + "self_attn.k_proj.weight", [NKV * HD, H]),
                  (p + "self_attn.v_proj.weight", [NKV * HD, H]), (p + "self_attn.o_proj.weight", [H, H]),
                  (p + "mlp.gate_proj.weight", [I, H]), (p + "mlp.up_proj.weight", [I, H]),
                  (p + "mlp.down_proj.weight", [H, I]), (p + "input_layernorm.weight", [H]),
                  (p + "post_attention_layernorm.weight", [H])]
    names += [("model.norm.weight", [H]), ("lm_head.weight", [V, H])]
    return [(n, s, floats(eval("*".join(map(str, s))))) for n, s in names]


def hf_config(dtype):
    return json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
                       "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": NH,
                       "num_key_value_heads": NKV, "vocab_size": V, "max_position_embeddings": POS,
                       "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
                       "torch_dtype": dtype}, indent=1).encode()


def safetensors(tensors, dtype):
    enc, tag = (f32, "F32") if dtype == "float32" else (bf16, "BF16")
    header, data = {}, b""
    for name, shape, values in tensors:
        raw = enc(values)
        header[name] = {"dtype": tag, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def hf_seeds():
    tensors = hf_tensors()
    single = hf_config("float32") + SEP + b"" + SEP + safetensors(tensors, "float32")
    half = len(tensors) // 2
    shards = [tensors[:half], tensors[half:]]
    files = ["model-%05d-of-%05d.safetensors" % (i + 1, len(shards)) for i in range(len(shards))]
    index = json.dumps({"metadata": {}, "weight_map": {n: files[i] for i, s in enumerate(shards) for n, _, _ in s}},
                       indent=1).encode()
    sharded = hf_config("bfloat16") + SEP + index + b"".join(SEP + safetensors(s, "bfloat16") for s in shards)
    return single, sharded, tensors


def llama2c_weights(tensors):
    """The HF tensors in llama2.c's order (q/k rows back in llama2.c's interleaved layout is
    not needed for a seed: any values load)."""
    by = {n: v for n, _, v in tensors}
    layer = lambda k: [x for l in range(L) for x in by["model.layers.%d.%s.weight" % (l, k)]]
    return {"emb": by["model.embed_tokens.weight"], "att_norm": layer("input_layernorm"),
            "wq": layer("self_attn.q_proj"), "wk": layer("self_attn.k_proj"), "wv": layer("self_attn.v_proj"),
            "wo": layer("self_attn.o_proj"), "ffn_norm": layer("post_attention_layernorm"),
            "w1": layer("mlp.gate_proj"), "w2": layer("mlp.down_proj"), "w3": layer("mlp.up_proj"),
            "norm": by["model.norm.weight"], "cls": by["lm_head.weight"]}


def q8(values, gs):
    out, scales = b"", []
    for g in range(0, len(values), gs):
        group = values[g:g + gs]
        s = max(abs(x) for x in group) / 127 or 1.0
        out += bytes((round(x / s) & 0xFF) for x in group)
        scales.append(s)
    return out + f32(scales)


def llama2c_seeds(tensors):
    w = llama2c_weights(tensors)
    params = struct.pack("<7i", H, I, L, NH, NKV, V, POS)
    v0 = struct.pack("<7i", H, I, L, NH, NKV, -V, POS) + f32(
        w["emb"] + w["att_norm"] + w["wq"] + w["wk"] + w["wv"] + w["wo"] + w["ffn_norm"] + w["w1"] + w["w2"] + w["w3"] +
        w["norm"] + [0.0] * (POS * HD)) + f32(w["cls"])

    def ak42(version, body, extra=b""):
        head = struct.pack("<Ii", 0x616B3432, version) + params + bytes([1]) + extra
        return head + b"\0" * (256 - len(head)) + body

    norms = f32(w["att_norm"] + w["ffn_norm"] + w["norm"])
    mats = ["emb", "wq", "wk", "wv", "wo", "w1", "w2", "w3"]
    v1 = ak42(1, norms + f32(sum((w[k] for k in mats), [])))
    gs = 8
    v2 = ak42(2, norms + b"".join(q8(w[k], gs) for k in mats), struct.pack("<i", gs))
    return v0, v1, v2


# ---- data -------------------------------------------------------------------------------

def record_shard(zstd):
    docs = [[rng.randrange(3, V) for _ in range(n)] for n in (5, 9, 3, 7)]
    tokens = [t for d in docs for t in d]
    chunk_tokens = 8
    data, chunks = b"", []
    for c in range(0, len(tokens), chunk_tokens):
        raw = struct.pack("<%dH" % len(tokens[c:c + chunk_tokens]), *tokens[c:c + chunk_tokens])
        stored = zstd_compress(raw) if zstd else raw
        chunks.append((72 + len(data), len(stored), len(tokens[c:c + chunk_tokens]), crc32c(stored)))
        data += stored
    data += b"\0" * (-(72 + len(data)) % 8)
    index_offset = 72 + len(data)
    offsets = [0]
    for d in docs:
        offsets.append(offsets[-1] + len(d))
    index = b"".join(struct.pack("<QIIII", o, s, n, crc, 0) for o, s, n, crc in chunks)
    index += struct.pack("<%dQ" % len(offsets), *offsets)
    index += struct.pack("<I", crc32c(index))
    header = b"CFRECORD" + struct.pack("<IIIiIIQQQQI", 1, 2, V, 2, 1 if zstd else 0, len(chunks), len(docs),
                                       len(tokens), index_offset, 0x1234, 0)
    return header + struct.pack("<I", crc32c(header)) + data + index


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def zstd_compress(raw):
    with tempfile.NamedTemporaryFile() as f:
        f.write(raw)
        f.flush()
        return subprocess.run(["zstd", "-q", "-c", f.name], check=True, stdout=subprocess.PIPE).stdout


def logits_reference(n, vocab):
    return b"CFLOGITS" + struct.pack("<IIII", 1, n, vocab, 0) + struct.pack("<%di" % n, *range(1, n + 1)) + \
        f32(floats(n * vocab))


# ---- config -----------------------------------------------------------------------------

def config_seeds():
    fixtures = os.path.join(ROOT, "tests", "fixtures", "config")
    with open(os.path.join(fixtures, "full.yaml"), "rb") as f:
        full = f.read()
    put("config", "full.yaml", full)
    put("config", "full_overrides", full + SEP + b"runner_config.batch_size=8\n--model.model_config.num_layers=2\n"
        b"context.num_threads=1\nlr_schedule.type=LinearWithWarmUpLR")
    put("config", "flow_style", b"model: {model_config: {arch: gpt2, vocab_size: 64, hidden_size: 16, num_layers: 1, "
        b"num_heads: 2, max_position_embeddings: 32}}\nrunner_config: {seq_length: 16}\n")
    for name in ("unknown_key.yaml", "bad_kv_heads.yaml", "wrong_type.yaml"):
        with open(os.path.join(fixtures, name), "rb") as f:
            put("config", name, f.read())
    keys = re.findall(rb"^\s*(\w+):", full, re.M)
    put_dict("config", [k.decode() for k in keys] + [": ", "\n  ", "- ", "{", "}", "[", "]", "'", '"', "&a", "*a",
                                                      "!!str", "true", "1.0e-5", ".inf", "--", "=", SEP.decode()])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cformers", help="the cformers binary, to make the checkpoint seeds")
    args = ap.parse_args()
    config_seeds()
    put("sp_model", "tiny.model", sp_model())
    put("tokenizer_bin", "tiny.bin", tokenizer_bin())
    put("tokenizer_json", "bytelevel.json", tokenizer_json({"type": "ByteLevel", "add_prefix_space": False}))
    put("tokenizer_json", "llama3_split.json", tokenizer_json(llama3_fixture()["pre_tokenizer"]))
    put("gpt2", "tiny", gpt2_dir())
    single, sharded, tensors = hf_seeds()
    put("hf", "single_f32", single)
    put("hf", "sharded_bf16", sharded)
    for i, seed in enumerate(llama2c_seeds(tensors)):
        put("llama2c", "tiny_v%d.bin" % i, seed)
    put("records", "plain.cfrec", record_shard(False))
    put("records", "zstd.cfrec", record_shard(True))
    put("validate_ref", "n3_v32.logits", logits_reference(3, 32))
    put("validate_ref", "n20_v32.logits", logits_reference(20, 32))
    json_keys = ["model_config", "tokenizer", "tensor", "name", "dtype", "shape", "offset", "nbytes", "crc32c", "F32",
                 "BF16", "F16", "I8", "vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                 "intermediate_size", "max_position_embeddings", "rope_theta", "rms_norm_eps", "rope_scaling",
                 "tie_word_embeddings", "bos_token_id", "eos_token_id", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "weight_map", "data_offsets", "__metadata__", "torch_dtype", "factor",
                 "low_freq_factor", "high_freq_factor", "original_max_position_embeddings", "rope_type", "llama3",
                 "-1", "0", "4294967295", "1e309", "[]", "{}", "null", SEP.decode()]
    put_dict("hf", json_keys)
    put_dict("checkpoint", json_keys + ["CFCKPT\0\0"])
    put_dict("tokenizer_json", ["added_tokens", "content", "id", "special", "model", "type", "BPE", "vocab", "merges",
                                "pre_tokenizer", "ByteLevel", "Split", "pretokenizers", "pattern", "Regex", "use_regex",
                                "ignore_merges", "normalizer", "null", "-1", "4294967296", "<0x-1>", "\\u0000"])
    put_dict("gpt2", ["#version: 0.2\n", "<|endoftext|>", "\\u0120", "-1", "2147483648", SEP.decode()])
    put_dict("sp_model", ["<0x-1>", "<0xFF>", "<0x", "<unk>", "\u2581"])
    put_dict("tokenizer_bin", ["<0x-1>", "<0xFF>", "<0x", "\xff\xff\xff\x7f", "\xff\xff\xff\xff"])
    if args.cformers:
        with tempfile.TemporaryDirectory() as tmp:
            tok = os.path.join(tmp, "tokenizer.bin")
            with open(tok, "wb") as f:
                f.write(tokenizer_bin())
            src = os.path.join(tmp, "hf")
            os.mkdir(src)
            with open(os.path.join(src, "config.json"), "wb") as f:
                f.write(hf_config("float32"))
            with open(os.path.join(src, "model.safetensors"), "wb") as f:
                f.write(safetensors(tensors, "float32"))
            for dtype, tokenizer in (("f32", tok), ("bf16", None)):
                out = os.path.join(tmp, dtype + ".ckpt")
                cmd = [args.cformers, "convert", "--from", "hf", src, "--output", out, "--dtype", dtype]
                subprocess.run(cmd + (["--tokenizer", tokenizer] if tokenizer else []), check=True,
                               stdout=subprocess.DEVNULL)
                with open(out, "rb") as f:
                    put("checkpoint", "tiny_%s%s.ckpt" % (dtype, "_tokenizer" if tokenizer else ""), f.read())


if __name__ == "__main__":
    main()
