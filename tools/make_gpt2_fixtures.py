#!/usr/bin/python3
"""GPT-2 in Hugging Face's layout, checked with a plain-PyTorch GPT-2 (float64; the same
arithmetic as transformers' GPT2LMHeadModel: Conv1D weights [in, out], gelu_new, LayerNorm,
causal attention scaled by 1/sqrt(head_dim), the head tied to wte). transformers is not
needed: safetensors are parsed with NumPy (tools/torch_logits_reference.py).

    /usr/bin/python3 tools/make_gpt2_fixtures.py tests/fixtures/infer
        writes tiny_gpt2_hf/ (config.json, model.safetensors: a tiny random GPT-2) and
        tiny_gpt2.logits, the logits of a prompt (the reference `cformers validate` reads)

    /usr/bin/python3 tools/make_gpt2_fixtures.py --check HF_DIR REFERENCE.logits
        loads an HF directory (e.g. `cformers convert --to safetensors` of a GPT-2
        checkpoint) in PyTorch and compares its logits with the reference: exit 0 when
        max|diff| / max|reference| <= 1e-5, else 1"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_logits_reference as ref  # noqa: E402
from make_infer_fixtures import write_safetensors  # noqa: E402

torch = ref.torch
DIM, LAYERS, HEADS, FF, VOCAB, POSITIONS = 16, 2, 4, 64, 64, 32
EPS = 1e-5
TOKENS = [3, 17, 40, 2, 63, 11, 19, 5, 28]
TOLERANCE = 1e-5


def make_tensors(rng):
    """HF names and layouts: Conv1D weights are [in, out]; no lm_head (tied)."""
    r = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)
    t = {"transformer.wte.weight": r(VOCAB, DIM), "transformer.wpe.weight": r(POSITIONS, DIM)}
    for i in range(LAYERS):
        p = f"transformer.h.{i}."
        t[p + "ln_1.weight"], t[p + "ln_1.bias"] = 1 + r(DIM), r(DIM)
        t[p + "attn.c_attn.weight"], t[p + "attn.c_attn.bias"] = r(DIM, 3 * DIM), r(3 * DIM)
        t[p + "attn.c_proj.weight"], t[p + "attn.c_proj.bias"] = r(DIM, DIM), r(DIM)
        t[p + "ln_2.weight"], t[p + "ln_2.bias"] = 1 + r(DIM), r(DIM)
        t[p + "mlp.c_fc.weight"], t[p + "mlp.c_fc.bias"] = r(DIM, FF), r(FF)
        t[p + "mlp.c_proj.weight"], t[p + "mlp.c_proj.bias"] = r(FF, DIM), r(DIM)
    t["transformer.ln_f.weight"], t["transformer.ln_f.bias"] = 1 + r(DIM), r(DIM)
    return t


def hf_config():
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
            "vocab_size": VOCAB, "n_embd": DIM, "n_layer": LAYERS, "n_head": HEADS, "n_inner": FF,
            "n_positions": POSITIONS, "n_ctx": POSITIONS, "layer_norm_epsilon": EPS, "tie_word_embeddings": True,
            "torch_dtype": "float32"}


def load_hf(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    w = ref.read_safetensors(os.path.join(d, "model.safetensors"))
    # files saved from GPT2Model lack the "transformer." prefix
    w = {(k if k.startswith("transformer.") or k == "lm_head.weight" else "transformer." + k): v for k, v in w.items()}
    if cfg.get("tie_word_embeddings", True) or "lm_head.weight" not in w:
        w["lm_head.weight"] = w["transformer.wte.weight"]
    return cfg, w


def forward(cfg, w, tokens):
    """GPT2LMHeadModel's forward in float64: [len(tokens), vocab] logits."""
    d, heads, eps = cfg["n_embd"], cfg["n_head"], cfg.get("layer_norm_epsilon", 1e-5)
    hd = d // heads
    n = len(tokens)
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (d,), w[p + ".weight"], w[p + ".bias"], eps)
    conv1d = lambda x, p: x @ w[p + ".weight"] + w[p + ".bias"]  # HF Conv1D: weight [in, out]
    x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][:n]
    mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        q, k, v = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn").split(d, dim=-1)
        q, k, v = (t.view(n, heads, hd).transpose(0, 1) for t in (q, k, v))
        s = (q @ k.transpose(-1, -2)) / np.sqrt(hd)
        a = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v
        x = x + conv1d(a.transpose(0, 1).reshape(n, d), p + "attn.c_proj")
        h = conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc")
        h = 0.5 * h * (1.0 + torch.tanh(np.sqrt(2.0 / np.pi) * (h + 0.044715 * h ** 3)))  # gelu_new
        x = x + conv1d(h, p + "mlp.c_proj")
    return ln(x, "transformer.ln_f") @ w["lm_head.weight"].T


def read_reference(path):
    raw = open(path, "rb").read()
    _, n, vocab, _ = struct.unpack_from("<IIII", raw, 8)
    tokens = np.frombuffer(raw, dtype="<i4", count=n, offset=24).tolist()
    logits = np.frombuffer(raw, dtype="<f4", count=n * vocab, offset=24 + 4 * n).reshape(n, vocab)
    return tokens, logits


def check(hf_dir, reference):
    tokens, want = read_reference(reference)
    cfg, w = load_hf(hf_dir)
    got = forward(cfg, w, tokens).numpy()
    err = np.abs(got - want).max() / np.abs(want).max()
    print(f"{hf_dir}: PyTorch logits vs {reference}: max relative error {err:.3g} (tolerance {TOLERANCE:g})")
    return 0 if err <= TOLERANCE else 1


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--check":
        sys.exit(check(sys.argv[2], sys.argv[3]))
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    d = os.path.join(out, "tiny_gpt2_hf")
    os.makedirs(d, exist_ok=True)
    json.dump(hf_config(), open(os.path.join(d, "config.json"), "w"), indent=1)
    write_safetensors(os.path.join(d, "model.safetensors"), make_tensors(np.random.default_rng(11)), "F32")
    cfg, w = load_hf(d)
    ref.write_reference(os.path.join(out, "tiny_gpt2.logits"), TOKENS, forward(cfg, w, TOKENS).numpy())


if __name__ == "__main__":
    main()
