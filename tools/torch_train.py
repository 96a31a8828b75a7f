#!/usr/bin/python3
"""The PyTorch peer of `cformers train`: the same model, optimizer and schedule, trained by
PyTorch (python3-torch), for the benchmark and the demo's loss-curve comparison.

The model is the one in tools/torch_reference.py (same conventions, same parameter names),
here in float32 with the reference implementations' initialisation (normal(0,
initializer_range) weights, unit norms, zero biases).

  bench: random tokens, times optimizer steps and prints one JSON line
         {"tokens_per_s": median over the timed steps, "step_s": [...], ...}
  curve: trains on a text file with a byte-level vocabulary (the demo's setup: the last
         eval_split of the file is held out) and prints {"step": s, "val_loss": x} JSON lines

Both take the resolved config YAML that `cformers config show` prints.

usage: /usr/bin/python3 tools/torch_train.py bench CONFIG.yaml [--steps 5] [--warmup 2] [--threads N]
       /usr/bin/python3 tools/torch_train.py curve CONFIG.yaml --text input.txt [--threads N]
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
import torch_reference as ref  # noqa: E402


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


def init_params(mc, gen):
    shapes = (ref.llama_shapes if mc["arch"] == "llama" else ref.gpt2_shapes)(mc)
    std = float(mc.get("initializer_range", 0.02))
    params = {}
    for n, shape in shapes.items():
        if len(shape) == 2:
            w = torch.randn(shape, generator=gen) * std
        elif n.endswith(".bias"):
            w = torch.zeros(shape)
        else:
            w = torch.ones(shape)
        params[n] = w.requires_grad_(True)
    return params, shapes


def decays(name, shape, o):
    """optimizer.no_decay_*, as the trainer applies them (src/train/trainer.c)."""
    bias = name.endswith(".bias")
    norm = len(shape) == 1 and not bias
    return not ((ref.is_embedding(name) and o.get("no_decay_embeddings", True)) or
                (bias and o.get("no_decay_biases", True)) or (norm and o.get("no_decay_norms", True)))


def make_optimizer(cfg, params, shapes):
    o = cfg["optimizer"]
    decay = [p for n, p in params.items() if decays(n, shapes[n], o)]
    no_decay = [p for n, p in params.items() if not decays(n, shapes[n], o)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": float(o["weight_decay"])},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=float(cfg["lr_schedule"]["learning_rate"]),
                             betas=(float(o["beta1"]), float(o["beta2"])), eps=float(o["eps"]))


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
    def __init__(self, cfg, mc, seed):
        self.cfg, self.mc = cfg, mc
        self.forward = ref.llama_forward if mc["arch"] == "llama" else ref.gpt2_forward
        self.params, shapes = init_params(mc, torch.Generator().manual_seed(seed))
        self.opt = make_optimizer(cfg, self.params, shapes)
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


def bench(args):
    cfg, mc = load_config(args.config)
    rc = cfg["runner_config"]
    B, T = int(rc["batch_size"]), int(rc["seq_length"])
    tr = Trainer(cfg, mc, int(cfg.get("seed", 1234)))
    gen = torch.Generator().manual_seed(0)
    times = []
    for step in range(args.warmup + args.steps):
        batches = [torch.randint(0, mc["vocab_size"], (B, T + 1), generator=gen) for _ in range(tr.accum)]
        t0 = time.perf_counter()
        tr.step(step, batches)
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({"tokens_per_s": B * T * tr.accum / med, "step_s": times, "threads": torch.get_num_threads(),
                      "torch": torch.__version__}))


def curve(args):
    cfg, mc = load_config(args.config)
    rc = cfg["runner_config"]
    B, T = int(rc["batch_size"]), int(rc["seq_length"])
    data = np.frombuffer(open(args.text, "rb").read(), dtype=np.uint8).astype(np.int64)
    n_val = int(len(data) * float(cfg["train_dataset"].get("eval_split", 0.1)))
    train, val = torch.from_numpy(data[:-n_val]), torch.from_numpy(data[-n_val:])
    seed = int(cfg.get("seed", 1234))
    tr = Trainer(cfg, mc, seed)
    gen = torch.Generator().manual_seed(seed + 1)

    def windows(src, n, g):
        starts = torch.randint(0, len(src) - T - 1, (n,), generator=g)
        return torch.stack([src[s:s + T + 1] for s in starts.tolist()])

    eval_every, eval_steps = int(rc["eval_interval"]), int(rc.get("eval_steps", 8))
    for step in range(int(rc["train_steps"])):
        loss = tr.step(step, [windows(train, B, gen) for _ in range(tr.accum)])
        if (step + 1) % eval_every == 0 or step + 1 == int(rc["train_steps"]):
            vg = torch.Generator().manual_seed(seed + 2)  # the same held-out batches every time
            with torch.no_grad():
                vl = sum(tr.loss(windows(val, B, vg)).item() for _ in range(eval_steps)) / eval_steps
            print(json.dumps({"step": step + 1, "train_loss": loss, "val_loss": vl}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("bench", "curve"))
    ap.add_argument("config")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--text")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    bench(args) if args.mode == "bench" else curve(args)


if __name__ == "__main__":
    main()
