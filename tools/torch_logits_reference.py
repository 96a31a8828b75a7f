#!/usr/bin/python3
"""PyTorch LLaMA forward (float64) that writes the logits reference file `cformers validate`
reads (format in docs/validate-reference.md).

    /usr/bin/python3 tools/torch_logits_reference.py MODEL --tokens 1,5,9 --output ref.logits

MODEL is a Hugging Face directory (config.json + model.safetensors or shards with
model.safetensors.index.json; rotary embedding in HF's rotate-half convention) or a llama2.c
.bin file (v0 / v1 header, f32; interleaved rotary pairs as in Meta's code). Safetensors are
parsed with NumPy, so neither `safetensors` nor `transformers` is needed."""
import argparse
import json
import os
import struct

import numpy as np
import torch

MAGIC = b"CFLOGITS"


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        buf = raw[8 + n + begin:8 + n + end]
        shape = e["shape"]
        if e["dtype"] == "BF16":
            u = np.frombuffer(buf, dtype=np.uint16).astype(np.uint32) << 16
            a = u.view(np.float32)
        else:
            a = np.frombuffer(buf, dtype={"F32": np.float32, "F16": np.float16}[e["dtype"]])
        out[name] = torch.from_numpy(a.astype(np.float64).reshape(shape))
    return out


def load_hf(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    w = {}
    for f in files:
        w.update(read_safetensors(os.path.join(d, f)))
    c = dict(dim=cfg["hidden_size"], n_layers=cfg["num_hidden_layers"], n_heads=cfg["num_attention_heads"],
             n_kv=cfg.get("num_key_value_heads", cfg["num_attention_heads"]), eps=cfg.get("rms_norm_eps", 1e-6),
             theta=cfg.get("rope_theta", 10000.0), interleaved=False)
    if cfg.get("tie_word_embeddings") or "lm_head.weight" not in w:
        w["lm_head.weight"] = w["model.embed_tokens.weight"]
    return c, w


def load_llama2c(path):
    raw = open(path, "rb").read()
    magic, version = struct.unpack_from("<Ii", raw, 0)
    if magic == 0x616B3432:
        if version != 1:
            raise SystemExit(f"{path}: only llama2.c v0 and v1 (f32) files are read here")
        dim, hidden, n_layers, n_heads, n_kv, vocab, seq = struct.unpack_from("<7i", raw, 8)
        shared = raw[36] != 0
        offset = 256
    else:
        dim, hidden, n_layers, n_heads, n_kv, vocab, seq = struct.unpack_from("<7i", raw, 0)
        shared, vocab, offset = vocab > 0, abs(vocab), 28
    flat = torch.from_numpy(np.frombuffer(raw, dtype=np.float32, offset=offset).astype(np.float64))
    head, kv_dim = dim // n_heads, n_kv * (dim // n_heads)
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        t = flat[pos:pos + n].reshape(shape)
        pos += n
        return t

    shapes = dict(emb=(vocab, dim), att_norm=(n_layers, dim), ffn_norm=(n_layers, dim), norm=(dim,),
                  wq=(n_layers, dim, dim), wk=(n_layers, kv_dim, dim), wv=(n_layers, kv_dim, dim),
                  wo=(n_layers, dim, dim), w1=(n_layers, hidden, dim), w2=(n_layers, dim, hidden),
                  w3=(n_layers, hidden, dim))
    order = (["att_norm", "ffn_norm", "norm", "emb", "wq", "wk", "wv", "wo", "w1", "w2", "w3"] if offset == 256 else
             ["emb", "att_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3", "norm"])
    p = {k: take(*shapes[k]) for k in order}
    if offset == 28:
        pos += seq * head  # two unused RoPE tables of seq * head / 2
    p["cls"] = p["emb"] if shared else take(vocab, dim)
    names = dict(att_norm="input_layernorm", ffn_norm="post_attention_layernorm", wq="self_attn.q_proj",
                 wk="self_attn.k_proj", wv="self_attn.v_proj", wo="self_attn.o_proj", w1="mlp.gate_proj",
                 w2="mlp.down_proj", w3="mlp.up_proj")
    w = {"model.embed_tokens.weight": p["emb"], "model.norm.weight": p["norm"], "lm_head.weight": p["cls"]}
    for k, hf in names.items():
        for i in range(n_layers):
            w[f"model.layers.{i}.{hf}.weight"] = p[k][i]
    c = dict(dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv=n_kv, eps=1e-5, theta=10000.0, interleaved=True)
    return c, w


def rope(x, theta, interleaved):
    """x: [T, heads, hd]; rotates by position T index."""
    T, _, hd = x.shape
    freqs = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), freqs)[:, None, :]
    cos, sin = torch.cos(ang), torch.sin(ang)
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out
    a, b = x[..., :hd // 2], x[..., hd // 2:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def forward(c, w, tokens):
    def rms(x, g):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + c["eps"]) * g

    T, hd = len(tokens), c["dim"] // c["n_heads"]
    x = w["model.embed_tokens.weight"][torch.tensor(tokens)]
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for i in range(c["n_layers"]):
        L = lambda n: w[f"model.layers.{i}.{n}.weight"]
        h = rms(x, L("input_layernorm"))
        q = rope((h @ L("self_attn.q_proj").T).view(T, c["n_heads"], hd), c["theta"], c["interleaved"])
        k = rope((h @ L("self_attn.k_proj").T).view(T, c["n_kv"], hd), c["theta"], c["interleaved"])
        v = (h @ L("self_attn.v_proj").T).view(T, c["n_kv"], hd)
        rep = c["n_heads"] // c["n_kv"]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        att = torch.einsum("thd,shd->hts", q, k) / hd ** 0.5 + mask
        o = torch.einsum("hts,shd->thd", torch.softmax(att, -1), v).reshape(T, -1)
        x = x + o @ L("self_attn.o_proj").T
        h = rms(x, L("post_attention_layernorm"))
        g = h @ L("mlp.gate_proj").T
        x = x + (torch.nn.functional.silu(g) * (h @ L("mlp.up_proj").T)) @ L("mlp.down_proj").T
    return rms(x, w["model.norm.weight"]) @ w["lm_head.weight"].T


def write_reference(path, tokens, logits):
    logits = np.ascontiguousarray(logits, dtype="<f4")
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<IIII", 1, len(tokens), logits.shape[1], 0))
        f.write(np.asarray(tokens, dtype="<i4").tobytes())
        f.write(logits.tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True, help="comma-separated prompt token ids")
    ap.add_argument("--output", required=True)
    a = ap.parse_args()
    c, w = load_hf(a.model) if os.path.isdir(a.model) else load_llama2c(a.model)
    tokens = [int(t) for t in a.tokens.split(",")]
    write_reference(a.output, tokens, forward(c, w, tokens).numpy())


if __name__ == "__main__":
    main()
