#!/usr/bin/python3
"""PyTorch reference for frozen parameters (cf_graph_param_freeze): a small LLaMA whose
matrices are frozen (requires_grad=False) and whose embedding and RMSNorm weights train.

Writes tests/fixtures/train/llama_frozen.cffx (tests/test_frozen.c compares):
  * "q8_0"              the frozen matrices as GGUF q8_0 blocks, concatenated in the order of
                        meta "frozen" (each row its whole blocks: d f16, 32 int8 q);
  * "param/NAME"        the initial trainable weights (embedding, norms);
  * "tokens"            [STEPS, BATCH, SEQ + 1] batches;
  * for each case in meta "cases" (q8_0: the matrices are the blocks' values d * q;
    bf16: those values rounded to bf16, nearest even):
      "CASE/losses"       the STEPS losses of AdamW training the trainable weights,
      "CASE/grad/NAME"    their gradients at the first step,
      "CASE/final/NAME"   their values after the STEPS updates.
Every block has a q of magnitude 127, so quantizing its values again (ggml's rule) gives the
same block. PyTorch computes in float64 (the frozen values are exact there); AdamW: constant
lr, betas, eps, no weight decay, global-norm clipping over the trainable gradients only.

usage: /usr/bin/python3 tools/make_frozen_fixture.py [--out tests/fixtures/train]
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as ref  # noqa: E402  (its LLaMA forward and fixture writer)

STEPS = 5
BATCH = 2
SEQ = 16
CONFIG = dict(arch="llama", vocab_size=32, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
              intermediate_size=64, max_position_embeddings=SEQ, rope_theta=10000.0, rms_norm_eps=1e-5,
              tie_word_embeddings=False)
OPTIM = dict(learning_rate=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0, grad_clip=1.0)


def is_matrix(name, shape):
    return len(shape) == 2 and "embed_tokens" not in name


def q8_0_blocks(shape, gen):
    """Random q8_0 rows (whole blocks) and their values: d an f16 near 1/(sqrt(in) * 127) * 2,
    q in [-127, 127] with one q of magnitude 127 per block."""
    rows, cols = shape
    assert cols % 32 == 0
    nb = rows * cols // 32
    q = torch.randint(-127, 128, (nb, 32), generator=gen, dtype=torch.int64)
    at = torch.randint(0, 32, (nb,), generator=gen)
    sign = torch.where(torch.rand(nb, generator=gen) < 0.5, -1, 1)
    q[torch.arange(nb), at] = 127 * sign
    scale = 2.0 / (np.sqrt(cols) * 127.0)
    d = (scale * (0.5 + torch.rand(nb, generator=gen))).numpy().astype(np.float16)
    raw = bytearray()
    for b in range(nb):
        raw += d[b].tobytes() + q[b].to(torch.int8).numpy().tobytes()
    values = (d.astype(np.float32)[:, None] * q.numpy().astype(np.float32)).reshape(rows, cols)
    return bytes(raw), values


def train(P, frozen_values, tokens):
    params = {n: p.clone().requires_grad_(True) for n, p in P.items()}
    W = dict(params)
    W.update({n: torch.tensor(v, dtype=torch.float64) for n, v in frozen_values.items()})  # requires_grad=False
    o = OPTIM
    opt = torch.optim.AdamW(list(params.values()), lr=o["learning_rate"], betas=(o["beta1"], o["beta2"]),
                            eps=o["eps"], weight_decay=o["weight_decay"])
    out, losses = {}, []
    for step in range(STEPS):
        opt.zero_grad()
        logits = ref.llama_forward(CONFIG, W, tokens[step, :, :SEQ])
        loss = ref.loss_fn(logits, tokens[step, :, 1:])
        loss.backward()
        if step == 0:
            for n, p in params.items():
                out["grad/" + n] = p.grad.numpy().copy()
        torch.nn.utils.clip_grad_norm_(list(params.values()), o["grad_clip"])
        opt.step()
        losses.append(loss.item())
    out["losses"] = np.array(losses)
    for n, p in params.items():
        out["final/" + n] = p.detach().numpy().copy()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "train"))
    args = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    gen = torch.Generator().manual_seed(36)
    shapes = ref.llama_shapes(CONFIG)
    frozen = [n for n, s in shapes.items() if is_matrix(n, s)]
    blob, q8_values = bytearray(), {}
    for n in frozen:
        raw, v = q8_0_blocks(shapes[n], gen)
        blob += raw
        q8_values[n] = v
    P = {n: w.detach() for n, w in ref.init_params({n: s for n, s in shapes.items() if n not in frozen}, gen).items()}
    tokens = torch.randint(0, CONFIG["vocab_size"], (STEPS, BATCH, SEQ + 1), generator=gen)
    records = {"q8_0": np.frombuffer(bytes(blob), dtype=np.int8), "tokens": tokens.to(torch.int32).numpy()}
    for n, p in P.items():
        records["param/" + n] = p.numpy().copy()
    bf16_values = {n: torch.tensor(v, dtype=torch.float32).to(torch.bfloat16).to(torch.float32).numpy()
                   for n, v in q8_values.items()}
    for case, values in (("q8_0", q8_values), ("bf16", bf16_values)):
        for k, v in train(P, values, tokens).items():
            records[case + "/" + k] = v
        print(case, "losses", " ".join(f"{x:.6f}" for x in records[case + "/losses"]))
    meta = {"model_config": CONFIG, "batch_size": BATCH, "seq_length": SEQ, "steps": STEPS, "optimizer": OPTIM,
            "frozen": frozen, "trainable": list(P), "cases": ["q8_0", "bf16"]}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "llama_frozen.cffx")
    ref.write_cffx(path, meta, records)
    print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
