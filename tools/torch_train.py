#!/usr/bin/python3
"""The PyTorch peer of `cformers train`: the same model, optimizer and schedule, trained by
PyTorch, for the benchmark and the demo's loss-curve comparison.

The model is the one in tools/torch_reference.py (same conventions, same parameter names),
here in float32.

  bench: the reference implementations' initialisation (normal(0, initializer_range)
         weights, unit norms, zero biases) and random tokens; times optimizer steps and
         prints one JSON line {"tokens_per_s": median over the timed steps, "step_s": [...],
         "mode": ..., ...}, or {"error": ...} and exit status 1 when the mode fails (no
         SDPA in PyTorch 1.x, a torch.compile failure). Modes, combinable (PyTorch 2.x):
           (none)           eager, the reference's own attention (masked softmax)
           --sdpa           attention by scaled_dot_product_attention(is_causal=True)
           --compile        forward + loss under torch.compile (compiled during the
                            warmup steps, so compile time is not timed; at least 1)
           --autocast-bf16  forward + loss under CPU autocast to bfloat16
           --autocast-f16   the same to float16
         AdamW is the fused CPU kernel where PyTorch has one (2.4+), else the default.
  curve: replays a cformers run exactly: its initial weights (`cformers train
         --save-initial CKPT`) and every batch it trained and evaluated on (`--dump-batches
         FILE`), so only the arithmetic differs; prints {"step", "train_loss", "val_loss"}
         JSON lines at the steps the run evaluated

Both take a resolved config YAML: what `cformers config show` prints, or the config.yaml
the trainer writes to output_dir.

usage: PYTHON tools/torch_train.py bench CONFIG.yaml [--steps 5] [--warmup 2] [--threads N]
              [--sdpa] [--compile] [--autocast-bf16 | --autocast-f16]
       /usr/bin/python3 tools/torch_train.py curve CONFIG.yaml --batches FILE --init CKPT [--threads N]
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_reader  # noqa: E402
import torch_reference as ref  # noqa: E402

BATCH_TRAIN, BATCH_EVAL = 1, 2  # record kinds of --dump-batches (src/train/batch_dump.h)


def load_config(path):
    """The YAML part of `cformers config show` (up to the memory table after a blank line)."""
    with open(path) as f:
        cfg = yaml.safe_load(f.read().split("\n\n\n")[0].split("\nparameters:")[0])
    mc = dict(cfg["model"]["model_config"])
    mc["arch"] = str(mc.get("arch", mc.get("type", "llama"))).lower()
    mc["arch"] = "gpt2" if "gpt" in mc["arch"] else "llama"
    mc.setdefault("num_kv_heads", mc["num_heads"])
    mc.setdefault("rope_scaling_factor", 0.0)
    return cfg, mc


def param_shapes(mc):
    return (ref.llama_shapes if mc["arch"] == "llama" else ref.gpt2_shapes)(mc)


def init_params(mc, gen):
    std = float(mc.get("initializer_range", 0.02))
    params = {}
    for n, shape in param_shapes(mc).items():
        if len(shape) == 2:
            w = torch.randn(shape, generator=gen) * std
        elif n.endswith(".bias"):
            w = torch.zeros(shape)
        else:
            w = torch.ones(shape)
        params[n] = w.requires_grad_(True)
    return params


def load_params(mc, path):
    """The model's weights from a cformers checkpoint, checked against the config's shapes."""
    tensors, _ = ckpt_reader.read(path)
    params = {}
    for n, shape in param_shapes(mc).items():
        if n not in tensors or tuple(tensors[n].shape) != tuple(shape):
            sys.exit(f"{path}: tensor {n} missing or not of shape {list(shape)}")
        params[n] = torch.from_numpy(tensors[n].astype(np.float32)).requires_grad_(True)
    return params


def decays(name, shape, o):
    """optimizer.no_decay_*, as the trainer applies them (src/train/trainer.c)."""
    bias = name.endswith(".bias")
    norm = len(shape) == 1 and not bias
    return not ((ref.is_embedding(name) and o.get("no_decay_embeddings", True)) or
                (bias and o.get("no_decay_biases", True)) or (norm and o.get("no_decay_norms", True)))


def make_optimizer(cfg, params, shapes, fused=False):
    """AdamW over the trainer's decay groups; fused: PyTorch's fused CPU kernel (2.4+) when
    this PyTorch has one, else its default implementation."""
    o = cfg["optimizer"]
    decay = [p for n, p in params.items() if decays(n, shapes[n], o)]
    no_decay = [p for n, p in params.items() if not decays(n, shapes[n], o)]
    groups = [{"params": decay, "weight_decay": float(o["weight_decay"])}, {"params": no_decay, "weight_decay": 0.0}]
    kw = dict(lr=float(cfg["lr_schedule"]["learning_rate"]), betas=(float(o["beta1"]), float(o["beta2"])),
              eps=float(o["eps"]))
    if fused:
        try:
            return torch.optim.AdamW(groups, fused=True, **kw)
        except (RuntimeError, TypeError, ValueError):
            pass
    return torch.optim.AdamW(groups, **kw)


def schedule(cfg, total):
    s = cfg["lr_schedule"]
    t = int(s.get("total_steps") or 0) or total
    warm = int(round(float(s.get("warmup_ratio") or 0) * t)) or int(s.get("warmup_steps") or 0)
    kind = str(s.get("type", "cosine")).lower()
    peak, end = float(s["learning_rate"]), float(s.get("lr_end", 0.0))

    def lr(step):
        if step < warm:
            return peak * (step + 1) / warm
        p = min(1.0, (step - warm) / max(1, t - warm))
        if "cos" in kind:
            return end + 0.5 * (peak - end) * (1 + math.cos(math.pi * p))
        if "linear" in kind:
            return peak - (peak - end) * p
        return peak
    return lr


class Trainer:
    def __init__(self, cfg, mc, params, fused_adamw=False):
        self.cfg, self.mc = cfg, mc
        self.forward = ref.llama_forward if mc["arch"] == "llama" else ref.gpt2_forward
        self.params = params
        self.opt = make_optimizer(cfg, self.params, param_shapes(mc), fused_adamw)
        rc = cfg["runner_config"]
        self.accum = int(rc.get("gradient_accumulation_steps", 1))
        self.clip = float(cfg["optimizer"].get("clip_grad_norm", 0.0))
        self.lr = schedule(cfg, int(rc["train_steps"]))

    def loss(self, batch):
        logits = self.forward(self.mc, self.params, batch[:, :-1])
        return ref.loss_fn(logits, batch[:, 1:])

    def step(self, step, micro_batches):
        self.opt.zero_grad()
        total = 0.0
        for b in micro_batches:
            loss = self.loss(b) / len(micro_batches)
            loss.backward()
            total += loss.item()
        if self.clip > 0:
            torch.nn.utils.clip_grad_norm_(list(self.params.values()), self.clip)
        for g in self.opt.param_groups:
            g["lr"] = self.lr(step)
        self.opt.step()
        return total


def bench_mode(args):
    """The mode's name: eager | sdpa | compile | sdpa+compile, +autocast-bf16 / -f16."""
    mode = "+".join(m for m, on in (("sdpa", args.sdpa), ("compile", args.compile)) if on) or "eager"
    amp = "bf16" if args.autocast_bf16 else "f16" if args.autocast_f16 else ""
    return mode + ("+autocast-" + amp if amp else "")


def bench_steps(args, cfg, mc):
    """Median step time (and all timings) of the mode; raises what the mode raises."""
    rc = cfg["runner_config"]
    B, T = int(rc["batch_size"]), int(rc["seq_length"])
    if args.sdpa:
        if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            raise RuntimeError(f"PyTorch {torch.__version__} has no scaled_dot_product_attention")
        ref.attention = ref.sdpa_attention
    tr = Trainer(cfg, mc, init_params(mc, torch.Generator().manual_seed(int(cfg.get("seed", 1234)))),
                 fused_adamw=True)
    amp = torch.bfloat16 if args.autocast_bf16 else torch.float16 if args.autocast_f16 else None
    plain = tr.loss

    def loss(batch):  # autocast inside, so that torch.compile traces it
        with torch.autocast("cpu", dtype=amp or torch.bfloat16, enabled=amp is not None):
            return plain(batch)
    if args.compile:
        if not hasattr(torch, "compile"):
            raise RuntimeError(f"PyTorch {torch.__version__} has no torch.compile")
        loss = torch.compile(loss)
    tr.loss = loss
    gen = torch.Generator().manual_seed(0)
    warmup = max(args.warmup, 1) if args.compile else args.warmup
    times, warm = [], []
    for step in range(warmup + args.steps):
        batches = [torch.randint(0, mc["vocab_size"], (B, T + 1), generator=gen) for _ in range(tr.accum)]
        t0 = time.perf_counter()
        tr.step(step, batches)
        (times if step >= warmup else warm).append(time.perf_counter() - t0)
    return B * T * tr.accum, times, warm


def bench(args):
    cfg, mc = load_config(args.config)
    out = {"mode": bench_mode(args), "threads": torch.get_num_threads(), "torch": torch.__version__}
    try:
        tokens, times, warm = bench_steps(args, cfg, mc)
    except Exception as e:  # a mode this PyTorch lacks, a compile failure: reported, not fatal to the bench
        out["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        print(json.dumps(out), flush=True)
        return 1
    med = statistics.median(times)
    print(json.dumps({"tokens_per_s": tokens / med, "step_s": times, "warmup_s": warm, **out}), flush=True)
    return 0


def read_batches(path):
    """The records of `cformers train --dump-batches`: {step: [micro-batch, ...]} for training
    and for evaluation, each micro-batch a [rows, seq + 1] int64 tensor."""
    blob = open(path, "rb").read()
    train, evals, off = {}, {}, 0
    while off < len(blob):
        kind, step, rows, cols = np.frombuffer(blob, np.uint32, 4, off)
        off += 16
        ids = np.frombuffer(blob, np.int32, int(rows * cols), off).reshape(int(rows), int(cols))
        off += ids.nbytes
        if kind not in (BATCH_TRAIN, BATCH_EVAL) or off > len(blob):
            sys.exit(f"{path}: offset {off}: bad record (kind {kind}, {rows}x{cols})")
        (train if kind == BATCH_TRAIN else evals).setdefault(int(step), []).append(torch.from_numpy(ids.astype(np.int64)))
    return train, evals


def curve(args):
    cfg, mc = load_config(args.config)
    train, evals = read_batches(args.batches)
    tr = Trainer(cfg, mc, load_params(mc, args.init))
    steps, log_every = max(train), int(cfg["runner_config"].get("log_interval") or 10)
    for step in range(1, steps + 1):
        loss = tr.step(step - 1, train[step])
        if step % log_every == 0:
            print(f"torch step {step}/{steps}  loss {loss:.4f}", file=sys.stderr, flush=True)
        if step in evals:
            with torch.no_grad():
                vl = sum(tr.loss(b).item() for b in evals[step]) / len(evals[step])
            print(json.dumps({"step": step, "train_loss": loss, "val_loss": vl}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("bench", "curve"))
    ap.add_argument("config")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--autocast-bf16", action="store_true", help="bench: forward + loss under CPU autocast to bfloat16")
    ap.add_argument("--autocast-f16", action="store_true", help="bench: forward + loss under CPU autocast to float16")
    ap.add_argument("--sdpa", action="store_true", help="bench: attention by scaled_dot_product_attention")
    ap.add_argument("--compile", action="store_true", help="bench: forward + loss under torch.compile")
    ap.add_argument("--batches", help="curve: the file of `cformers train --dump-batches`")
    ap.add_argument("--init", help="curve: the checkpoint of `cformers train --save-initial`")
    args = ap.parse_args()
    if args.mode == "curve" and not (args.batches and args.init):
        ap.error("curve needs --batches FILE and --init CKPT")
    if args.autocast_bf16 and args.autocast_f16:
        ap.error("--autocast-bf16 and --autocast-f16 exclude each other")
    torch.set_num_threads(args.threads)
    sys.exit(bench(args) if args.mode == "bench" else curve(args))


if __name__ == "__main__":
    main()
