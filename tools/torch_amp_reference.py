#!/usr/bin/python3
"""PyTorch reference for cformers' mixed-precision training (docs/precision.md).

For the LLaMA and GPT-2 models of tools/torch_reference.py (same shapes, optimizer and
schedule), trains 10 AdamW steps in float32 master weights with the products in low
precision and writes tests/fixtures/train/{llama,gpt2}_amp.cffx: the initial weights, the
token batches and, per step, the loss of
  * "losses_bf16": torch.autocast("cpu", dtype=torch.bfloat16) around the model: every
    matmul (projections, MLP, attention scores and values) in bf16;
  * "losses_f16": float16 products, emulated (PyTorch 1.13's CPU autocast has no float16):
    both operands and the result of each projection / MLP matmul rounded to f16 (attention
    stays f32, as in cformers), the gradients flowing back through them as well, with a
    static loss scale of 2^16 (GradScaler's initial scale) that never overflows here.
In both, the output layer and the loss are float32, as cformers keeps them (autocast
alone would round the logits, and the loss with them, to bf16); norms, softmax, residual
sums and AdamW run in float32. The model runs in float32 (autocast ignores float64).

usage: /usr/bin/python3 tools/torch_amp_reference.py [--out tests/fixtures/train]
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as ref  # noqa: E402

F16_SCALE = 2.0 ** 16


class RoundF16:
    """Within `with RoundF16():`, a @ b rounds both operands and its result to float16, as
    autocast would (and, through autograd, the gradients that flow back through them); the
    sums themselves are float32.
    (Tensor.__matmul__ is swapped: 1.13's TorchFunctionMode does not see `@`.)"""
    active = True
    matmul = torch.Tensor.__matmul__

    @staticmethod
    def rounded(a, b):
        if not RoundF16.active:
            return RoundF16.matmul(a, b)
        return RoundF16.matmul(a.half().float(), b.half().float()).half().float()

    def __enter__(self):
        torch.Tensor.__matmul__ = RoundF16.rounded

    def __exit__(self, *exc):
        torch.Tensor.__matmul__ = RoundF16.matmul


def f32_head(x, w):
    with torch.autocast("cpu", enabled=False):
        saved, RoundF16.active = RoundF16.active, False
        try:
            return torch.matmul(x.float(), w.float().T)
        finally:
            RoundF16.active = saved


def f32_attention(q, k, v, attention=ref.attention):
    saved, RoundF16.active = RoundF16.active, False
    try:
        return attention(q, k, v)
    finally:
        RoundF16.active = saved


def train(c, forward, P0, tokens, mode):
    o = ref.OPTIM
    P = {n: p.detach().clone().requires_grad_(True) for n, p in P0.items()}
    decay = [p for n, p in P.items() if ref.decays(n, p.shape)]
    no_decay = [p for n, p in P.items() if not ref.decays(n, p.shape)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["learning_rate"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    losses = []
    for step in range(ref.STEPS):
        opt.zero_grad()
        scale = 1.0
        if mode == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = forward(c, P, tokens[step, :, :ref.SEQ])
        elif mode == "f32":
            logits = forward(c, P, tokens[step, :, :ref.SEQ])
        else:
            scale = F16_SCALE
            ref.attention = f32_attention
            try:
                with RoundF16():
                    logits = forward(c, P, tokens[step, :, :ref.SEQ])
            finally:
                ref.attention = f32_attention.__defaults__[0]
        loss = ref.loss_fn(logits.float(), tokens[step, :, 1:])
        (loss * scale).backward()
        for p in P.values():
            assert torch.isfinite(p.grad).all(), "the f16 reference overflowed"
            p.grad /= scale
        torch.nn.utils.clip_grad_norm_(list(P.values()), o["grad_clip"])
        lr = ref.lr_at(step, o)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "train"))
    args = ap.parse_args()
    torch.set_default_dtype(torch.float32)
    ref.output_layer = f32_head
    os.makedirs(args.out, exist_ok=True)
    for c, fwd, shapes, seed in ((ref.LLAMA, ref.llama_forward, ref.llama_shapes, 1),
                                 (ref.GPT2, ref.gpt2_forward, ref.gpt2_shapes, 2)):
        gen = torch.Generator().manual_seed(seed)
        P = ref.init_params(shapes(c), gen)
        tokens = torch.randint(0, c["vocab_size"], (ref.STEPS, ref.BATCH, ref.SEQ + 1), generator=gen)
        records = {"tokens": tokens.to(torch.int32).numpy()}
        for n, p in P.items():
            records["param/" + n] = p.detach().numpy().copy()
        for mode in ("bf16", "f16"):
            records["losses_" + mode] = np.array(train(c, fwd, P, tokens, mode))
        records["losses_f32"] = np.array(train(c, fwd, P, tokens, "f32"))
        meta = {"model_config": c, "batch_size": ref.BATCH, "seq_length": ref.SEQ, "steps": ref.STEPS,
                "optimizer": ref.OPTIM, "lr_schedule": "warmup_cosine", "params": list(shapes(c)),
                "f16_loss_scale": F16_SCALE, "torch": torch.__version__}
        path = os.path.join(args.out, c["arch"] + "_amp.cffx")
        ref.write_cffx(path, meta, records)
        print(f"{path}: {os.path.getsize(path)} bytes")
        for mode in ("f32", "bf16", "f16"):
            print(f"  {mode:4}: " + " ".join(f"{x:.4f}" for x in records["losses_" + mode]))


if __name__ == "__main__":
    main()
