#!/usr/bin/python3
"""PyTorch reference for cformers training: LLaMA and GPT-2, written to cformers' conventions.

Writes one fixture file per architecture (tests/fixtures/train/{llama,gpt2}.cffx) holding the
config, the token batches, the initial weights, the logits / loss / every gradient of the
first step, and the losses, learning rates and parameters of 10 AdamW steps with warmup +
cosine schedule and global-norm clipping. tests/test_train_reference.c compares the engine
against them.

Conventions (the engine must match them exactly):
  * weights are [out, in] like nn.Linear; parameter names follow Hugging Face
    (model.layers.{i}.self_attn.q_proj.weight, transformer.h.{i}.attn.c_attn.weight, ...);
    GPT-2's c_attn / c_fc / c_proj are Linear-shaped here (HF stores Conv1D [in, out]);
  * RoPE rotates interleaved pairs (x[2i], x[2i+1]) of each head, freq_i = theta^(-2i/head_dim),
    with LLaMA-3 frequency scaling when rope_scaling_factor > 1;
  * grouped-query attention: query head h reads kv head h / (num_heads / num_kv_heads);
  * loss = mean cross-entropy over all B*T tokens; labels are the inputs shifted by one;
  * AdamW: p -= lr*wd*p, then Adam with bias correction (torch.optim.AdamW); weight decay only
    on matmul weights (not norms, biases, embeddings, or a tied output layer);
  * clipping: g *= min(1, max_norm / (||g||_2 + 1e-6)) over all gradients together;
  * lr(step) for step s = 0..: warmup lr*(s+1)/warmup_steps while s < warmup_steps, then
    cosine from lr down to min_lr over the remaining total_steps - warmup_steps steps.

Everything is computed in float64 and stored as float32, so the reference carries no f32
rounding of its own.

Fixture container (little-endian), read by tests/fixture_io.h:
  "CFFX" u32 version=1 u32 count, then count records of
  u16 name_len, name bytes, u8 dtype (0 = f32, 3 = int8/bytes, 4 = i32 as in cformers/dtype.h),
  u8 ndim, i64 dims[ndim], raw data.
The record "meta" holds the JSON description (bytes). "adam_noise_mask/<name>" (bytes, 1 =
masked) marks elements whose gradient is zero in exact arithmetic, left out of the
final-parameter comparison.

usage: /usr/bin/python3 tools/torch_reference.py [--out tests/fixtures/train]
"""
import argparse
import json
import math
import os
import struct

import numpy as np
import torch

STEPS = 10
BATCH = 2
SEQ = 16

LLAMA = dict(arch="llama", vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
             intermediate_size=64, max_position_embeddings=SEQ, rope_theta=10000.0,
             rope_scaling_factor=4.0, rope_low_freq_factor=1.0, rope_high_freq_factor=4.0,
             rope_original_max_position=16, rms_norm_eps=1e-5, tie_word_embeddings=False)
GPT2 = dict(arch="gpt2", vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=4,
            intermediate_size=64, max_position_embeddings=SEQ, rms_norm_eps=1e-5, tie_word_embeddings=True)
OPTIM = dict(learning_rate=1e-2, min_lr=1e-3, warmup_steps=3, total_steps=STEPS, beta1=0.9, beta2=0.95,
             eps=1e-8, weight_decay=0.1, grad_clip=1.0)


# ---------------------------------------------------------------- models

def rope_freqs(c):
    hd = c["hidden_size"] // c["num_heads"]
    freqs = c["rope_theta"] ** (-torch.arange(0, hd, 2) / hd)
    factor = c.get("rope_scaling_factor", 0.0)
    if factor and factor > 1.0:  # LLaMA 3.1 scaling
        old = c["rope_original_max_position"]
        low_wavelen = old / c["rope_low_freq_factor"]
        high_wavelen = old / c["rope_high_freq_factor"]
        out = []
        for f in freqs.tolist():
            wavelen = 2 * math.pi / f
            if wavelen < high_wavelen:
                out.append(f)
            elif wavelen > low_wavelen:
                out.append(f / factor)
            else:
                smooth = (old / wavelen - c["rope_low_freq_factor"]) / (
                    c["rope_high_freq_factor"] - c["rope_low_freq_factor"])
                out.append((1 - smooth) * f / factor + smooth * f)
        freqs = torch.tensor(out)
    return freqs


def apply_rope(x, freqs):
    """x: [B, H, T, hd]; rotates pairs (x[2i], x[2i+1]) by angle t*freq_i."""
    T = x.shape[2]
    ang = torch.arange(T)[:, None] * freqs[None, :]  # [T, hd/2]
    cos, sin = torch.cos(ang), torch.sin(ang)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def attention(q, k, v):
    """q: [B, H, T, hd], k/v: [B, KV, T, hd]; causal softmax attention with GQA."""
    H, KV = q.shape[1], k.shape[1]
    k = k.repeat_interleave(H // KV, dim=1)
    v = v.repeat_interleave(H // KV, dim=1)
    T = q.shape[2]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    s = s.masked_fill(mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def sdpa_attention(q, k, v):
    """attention() through torch.nn.functional.scaled_dot_product_attention (PyTorch 2.x's
    fused kernels), is_causal; not the default: tools/torch_train.py bench --sdpa sets
    `attention = sdpa_attention` for the benchmark."""
    H, KV = q.shape[1], k.shape[1]
    if H != KV:
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def output_layer(x, w):
    """The logits x w^T; tools/torch_amp_reference.py replaces it to keep the head in f32."""
    return x @ w.T


def llama_forward(c, P, tokens):
    B, T = tokens.shape
    H, KV = c["num_heads"], c["num_kv_heads"]
    hd = c["hidden_size"] // H
    freqs = rope_freqs(c)
    x = P["model.embed_tokens.weight"][tokens]
    for i in range(c["num_layers"]):
        p = f"model.layers.{i}."
        h = rmsnorm(x, P[p + "input_layernorm.weight"], c["rms_norm_eps"])
        q = (h @ P[p + "self_attn.q_proj.weight"].T).view(B, T, H, hd).transpose(1, 2)
        k = (h @ P[p + "self_attn.k_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
        v = (h @ P[p + "self_attn.v_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
        a = attention(apply_rope(q, freqs), apply_rope(k, freqs), v)
        x = x + a.transpose(1, 2).reshape(B, T, H * hd) @ P[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, P[p + "post_attention_layernorm.weight"], c["rms_norm_eps"])
        g = h @ P[p + "mlp.gate_proj.weight"].T
        u = h @ P[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ P[p + "mlp.down_proj.weight"].T
    x = rmsnorm(x, P["model.norm.weight"], c["rms_norm_eps"])
    head = P["model.embed_tokens.weight"] if c["tie_word_embeddings"] else P["lm_head.weight"]
    return output_layer(x, head)


def gpt2_forward(c, P, tokens):
    B, T = tokens.shape
    H, D = c["num_heads"], c["hidden_size"]
    hd = D // H
    eps = c["rms_norm_eps"]
    ln = lambda x, n: torch.nn.functional.layer_norm(x, (D,), P[n + ".weight"], P[n + ".bias"], eps)
    lin = lambda x, n: x @ P[n + ".weight"].T + P[n + ".bias"]
    x = P["transformer.wte.weight"][tokens] + P["transformer.wpe.weight"][:T]
    for i in range(c["num_layers"]):
        p = f"transformer.h.{i}."
        qkv = lin(ln(x, p + "ln_1"), p + "attn.c_attn")
        q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in qkv.split(D, dim=-1))
        a = attention(q, k, v).transpose(1, 2).reshape(B, T, D)
        x = x + lin(a, p + "attn.c_proj")
        x = x + lin(gelu_tanh(lin(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    return output_layer(ln(x, "transformer.ln_f"), P["transformer.wte.weight"])


# ---------------------------------------------------------------- parameters

def llama_shapes(c):
    D, F, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kvd = c["num_kv_heads"] * (D // c["num_heads"])
    s = {"model.embed_tokens.weight": (V, D)}
    for i in range(c["num_layers"]):
        p = f"model.layers.{i}."
        s.update({p + "input_layernorm.weight": (D,), p + "self_attn.q_proj.weight": (D, D),
                  p + "self_attn.k_proj.weight": (kvd, D), p + "self_attn.v_proj.weight": (kvd, D),
                  p + "self_attn.o_proj.weight": (D, D), p + "post_attention_layernorm.weight": (D,),
                  p + "mlp.gate_proj.weight": (F, D), p + "mlp.up_proj.weight": (F, D),
                  p + "mlp.down_proj.weight": (D, F)})
    s["model.norm.weight"] = (D,)
    if not c["tie_word_embeddings"]:
        s["lm_head.weight"] = (V, D)
    return s


def gpt2_shapes(c):
    D, F, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    s = {"transformer.wte.weight": (V, D), "transformer.wpe.weight": (c["max_position_embeddings"], D)}
    for i in range(c["num_layers"]):
        p = f"transformer.h.{i}."
        for n, out_in in (("attn.c_attn", (3 * D, D)), ("attn.c_proj", (D, D)), ("mlp.c_fc", (F, D)),
                          ("mlp.c_proj", (D, F))):
            s[p + n + ".weight"] = out_in
            s[p + n + ".bias"] = (out_in[0],)
        for n in ("ln_1", "ln_2"):
            s[p + n + ".weight"] = (D,)
            s[p + n + ".bias"] = (D,)
    s["transformer.ln_f.weight"] = (D,)
    s["transformer.ln_f.bias"] = (D,)
    return s


def is_embedding(name):
    return any(e in name for e in ("embed_tokens", "wte", "wpe"))


def decays(name, shape):
    """Weight decay only on matmul weights (2-D, not embeddings)."""
    return len(shape) == 2 and not is_embedding(name)


def init_params(shapes, gen):
    """Fixture weights: O(1) activations so that every gradient is far from zero."""
    P = {}
    for n, shape in shapes.items():
        if len(shape) == 2 and not is_embedding(n):
            w = torch.randn(shape, generator=gen) / math.sqrt(shape[1])
        elif len(shape) == 2:
            w = torch.randn(shape, generator=gen) * 0.5
        elif n.endswith(".bias"):
            w = torch.randn(shape, generator=gen) * 0.1
        else:
            w = 1 + 0.1 * torch.randn(shape, generator=gen)
        P[n] = w.requires_grad_(True)
    return P


# ---------------------------------------------------------------- training

def lr_at(step, o):
    if step < o["warmup_steps"]:
        return o["learning_rate"] * (step + 1) / o["warmup_steps"]
    progress = (step - o["warmup_steps"]) / max(1, o["total_steps"] - o["warmup_steps"])
    return o["min_lr"] + 0.5 * (o["learning_rate"] - o["min_lr"]) * (1 + math.cos(math.pi * progress))


def loss_fn(logits, labels):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def make_fixture(c, forward, shapes, seed):
    gen = torch.Generator().manual_seed(seed)
    P = init_params(shapes, gen)
    tokens = torch.randint(0, c["vocab_size"], (STEPS, BATCH, SEQ + 1), generator=gen)
    records = {"tokens": tokens.to(torch.int32).numpy()}
    for n, p in P.items():
        records["param/" + n] = p.detach().numpy().copy()

    o = OPTIM
    decay = [p for n, p in P.items() if decays(n, p.shape)]
    no_decay = [p for n, p in P.items() if not decays(n, p.shape)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["learning_rate"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    losses, lrs, norms = [], [], []
    grad_max = {n: torch.zeros_like(p) for n, p in P.items()}
    for step in range(STEPS):
        opt.zero_grad()
        logits = forward(c, P, tokens[step, :, :SEQ])
        loss = loss_fn(logits, tokens[step, :, 1:])
        loss.backward()
        if step == 0:
            records["logits"] = logits.detach().numpy()
            records["loss"] = np.array([loss.item()])
            for n, p in P.items():
                records["grad/" + n] = p.grad.numpy().copy()
        for n, p in P.items():
            grad_max[n] = torch.maximum(grad_max[n], p.grad.abs())
        norms.append(torch.nn.utils.clip_grad_norm_(list(P.values()), o["grad_clip"]).item())
        lr = lr_at(step, o)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        losses.append(loss.item())
        lrs.append(lr)
    records["losses"] = np.array(losses)
    records["lrs"] = np.array(lrs)
    records["grad_norms"] = np.array(norms)
    for n, p in P.items():
        records["final/" + n] = p.detach().numpy().copy()
        # Elements whose gradient is zero in exact arithmetic (GPT-2's key bias: softmax
        # ignores a shift shared by a row) get f32 rounding noise as gradient in any f32
        # engine, and Adam turns noise into lr-sized steps: not comparable, so marked.
        noise = grad_max[n] <= 1e-10 * grad_max[n].max()
        if noise.any():
            records["adam_noise_mask/" + n] = noise.to(torch.int8).numpy()
    meta = {"model_config": c, "batch_size": BATCH, "seq_length": SEQ, "steps": STEPS, "optimizer": o,
            "lr_schedule": "warmup_cosine", "params": list(shapes),
            "decay": [n for n in shapes if decays(n, shapes[n])]}
    return meta, records


def write_cffx(path, meta, records):
    items = [("meta", np.frombuffer(json.dumps(meta, indent=1).encode(), dtype=np.int8))]
    items += list(records.items())
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"CFFX" + struct.pack("<II", 1, len(items)))
        for name, a in items:
            a = np.ascontiguousarray(a)
            code = {np.dtype(np.int8): 3, np.dtype(np.int32): 4}.get(a.dtype, 0)
            if code == 0:
                a = a.astype("<f4")
            nb = name.encode()
            f.write(struct.pack("<H", len(nb)) + nb + struct.pack("<BB", code, a.ndim))
            f.write(struct.pack(f"<{a.ndim}q", *a.shape))
            f.write(a.tobytes())
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "train"))
    args = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    os.makedirs(args.out, exist_ok=True)
    for c, fwd, shapes, seed in ((LLAMA, llama_forward, llama_shapes, 1), (GPT2, gpt2_forward, gpt2_shapes, 2)):
        meta, rec = make_fixture(c, fwd, shapes(c), seed)
        path = os.path.join(args.out, c["arch"] + ".cffx")
        write_cffx(path, meta, rec)
        print(f"{path}: {os.path.getsize(path)} bytes, losses "
              + " ".join(f"{x:.4f}" for x in rec["losses"]) + ", grad norms "
              + " ".join(f"{x:.3f}" for x in rec["grad_norms"]))


if __name__ == "__main__":
    main()
