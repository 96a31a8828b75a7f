#!/usr/bin/env python3
"""`make bench-dp`: data-parallel training, weak scaling (docs/distributed.md).

For each model, 1 rank x 1 thread against 2 ranks x 1 thread at the same per-rank batch,
for each all-reduce scheme (MPI without overlap, with overlap, hierarchical, 1-bit), over
each link: shared memory (both ranks on this machine), and the simulated two-node
cluster's TCP link shaped to 10 Gbit/s and 1 Gbit/s (scripts/netsim.sh, which needs root
and network namespaces; skipped with a message where it cannot be made). Runs are
interleaved in rounds and every figure is a median: of the steps after warm-up within a
run, then of the rounds.

Reported per scheme: tokens/s, scaling efficiency (2-rank tokens/s over twice the 1-rank
tokens/s), communication seconds per step (bucket start to done on the communication
thread), the seconds the update waited for it (exposed), and the fraction of the
communication hidden behind backward: (t_no_overlap - t_overlap) / t_comm, with t_comm the
exposed communication of the run without overlap, and the same from the exposed times alone,
1 - exposed / t_comm, which other load on the machine moves less than the step times (a
compute slowdown from a competing process shows in the first, not in the second).

With --quality it instead trains the demo config (tiny_shakespeare, 400 steps, the
stories260K tokenizer) on 2 ranks uncompressed and 1-bit compressed and compares the
validation losses (target: the last within 2%).

usage: bench/bench_dp.py [--build DIR] [--models llama_15m:8:256,llama_42m:2:512]
                         [--links shm,10gbit,1gbit] [--schemes noov,ov,hier,onebit] [--steps N]
                         [--rounds R] [--quality]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

SCHEMES = [  # (name, --schemes key, flags)
    ("MPI, no overlap", "noov", ["--parallel_config.overlap_comm=false", "--parallel_config.hierarchical_allreduce=off"]),
    ("MPI, overlap", "ov", ["--parallel_config.overlap_comm=true", "--parallel_config.hierarchical_allreduce=off"]),
    ("hierarchical", "hier", ["--parallel_config.overlap_comm=true", "--parallel_config.hierarchical_allreduce=on"]),
    ("1-bit", "onebit", ["--parallel_config.overlap_comm=true", "--parallel_config.hierarchical_allreduce=off",
               "--parallel_config.gradient_compression=onebit", "--parallel_config.freeze_step=1"]),
]


def run(cmd, env=None):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"bench-dp: {' '.join(cmd)} failed:\n{p.stdout[-3000:]}")
    return p.stdout


def steps_of(out_dir, warmup):
    rows = []
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("event") == "train" and r["step"] > warmup:
                rows.append(r)
    return rows


def median_of(rows, key):
    vals = [r.get(key, 0.0) for r in rows]
    return statistics.median(vals) if vals else 0.0


def netsim(action, rate=None):
    cmd = ["bash", "scripts/netsim.sh", action] + (["--rate", rate] if rate else [])
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    ap.add_argument("--models", default="llama_15m:8:256,llama_42m:2:512")
    ap.add_argument("--links", default="shm,10gbit,1gbit")
    ap.add_argument("--steps", type=int, default=8, help="steps per run (the first 2 are warm-up)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--schemes", default="noov,ov,hier,onebit",
                    help="which of: noov (MPI without overlap, the reference of 'hidden'), ov, hier, onebit")
    ap.add_argument("--text", default=os.path.join(os.environ.get("CFORMERS_DATA_DIR", "../shared/data"),
                                                   "tinyshakespeare/input.txt"))
    ap.add_argument("--quality", action="store_true", help="1-bit against uncompressed on the demo config")
    args = ap.parse_args()
    wanted = set(args.schemes.split(",")) | {"noov"}
    SCHEMES[:] = [s for s in SCHEMES if s[1] in wanted]
    binary = os.path.abspath(os.path.join(args.build, "cformers"))
    if args.quality:
        return quality(binary, os.path.dirname(os.path.dirname(args.text)))
    if not os.path.exists(args.text):
        sys.exit(f"bench-dp: no {args.text} (set CFORMERS_DATA_DIR)")
    work = tempfile.mkdtemp(prefix="cformers_bench_dp_")
    warmup = 2
    results = {}
    try:
        for link in args.links.split(","):
            launch = ["mpirun", "--allow-run-as-root", "-n", "2", "-x", "CFORMERS_THREADS=1"]
            if link == "shm":
                launch += ["--bind-to", "core"]
            else:
                up = netsim("up", link)
                if up.returncode != 0:
                    print(f"bench-dp: skipping the {link} link: scripts/netsim.sh up failed: {up.stdout.strip()[-300:]}")
                    continue
                # mpirun starts inside the first node's namespace; the agent enters the second.
                launch = (netsim("mpirun-prefix").stdout.split() + launch[:1] + netsim("mpirun-args").stdout.split()
                          + launch[1:])
            for model in args.models.split(","):
                preset, batch, seq = model.split(":")
                common = ["train", "--config", preset, f"--train_dataset.data_dir={os.path.abspath(args.text)}",
                          f"--runner_config.batch_size={batch}", f"--runner_config.seq_length={seq}",
                          f"--runner_config.train_steps={args.steps}", "--lr_schedule.warmup_steps=0",
                          "--runner_config.log_interval=1",
                          "--runner_config.eval_interval=0", "--runner_config.sample_interval=0",
                          "--runner_config.save_interval=0", "--callbacks.checkpoint_monitor.keep_checkpoint_max=1",
                          "--quiet"]
                for rnd in range(args.rounds):
                    out = os.path.join(work, "one")
                    shutil.rmtree(out, ignore_errors=True)
                    env = dict(os.environ, CFORMERS_THREADS="1")
                    run(["taskset", "-c", "0", binary] + common + [f"--output_dir={out}"], env)
                    rows = steps_of(out, warmup)
                    results.setdefault((link, preset, "1 rank"), []).append(
                        {"step": median_of(rows, "step_seconds"), "comm": 0.0, "wait": 0.0, "bytes": 0.0,
                         "tokens": int(batch) * int(seq)})
                    for name, _, flags in SCHEMES:
                        out = os.path.join(work, "two")
                        shutil.rmtree(out, ignore_errors=True)
                        run(launch + [binary] + common + flags + [f"--output_dir={out}"])
                        rows = steps_of(out, warmup)
                        results.setdefault((link, preset, name), []).append(
                            {"step": median_of(rows, "step_seconds"), "comm": median_of(rows, "comm_seconds"),
                             "wait": median_of(rows, "comm_wait_seconds"),
                             "bytes": median_of(rows, "comm_bytes_sent"), "tokens": 2 * int(batch) * int(seq)})
                    print(f"  {link} {preset}: round {rnd + 1}/{args.rounds} done", file=sys.stderr)
                report(results, link, preset)
            if link != "shm":
                netsim("down")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(results, link, preset):
    def med(name, key):
        return statistics.median(r[key] for r in results[(link, preset, name)])

    one_tps = med("1 rank", "tokens") / med("1 rank", "step")
    t_no = med("MPI, no overlap", "step")
    t_comm = med("MPI, no overlap", "wait")
    print(f"\n{preset} over {link}: 1 rank x 1 thread {one_tps:.0f} tokens/s "
          f"(step {1000 * med('1 rank', 'step'):.0f} ms)")
    print(f"  {'scheme':<16} {'tokens/s':>9} {'scaling':>8} {'step ms':>8} {'comm ms':>8} {'exposed ms':>10} "
          f"{'hidden':>7} {'hidden (exposed)':>16} {'MB sent':>8}")
    for name, _, _ in SCHEMES:
        step = med(name, "step")
        tps = med(name, "tokens") / step
        ours = name != "MPI, no overlap" and t_comm > 0
        hidden = (t_no - step) / t_comm if ours else float("nan")
        by_wait = 1 - med(name, "wait") / t_comm if ours else float("nan")
        print(f"  {name:<16} {tps:9.0f} {100 * tps / (2 * one_tps):7.1f}% {1000 * step:8.0f} "
              f"{1000 * med(name, 'comm'):8.1f} {1000 * med(name, 'wait'):10.1f} "
              f"{'' if hidden != hidden else f'{100 * hidden:6.0f}%':>7} "
              f"{'' if by_wait != by_wait else f'{100 * by_wait:6.0f}%':>16} {med(name, 'bytes') / 1e6:8.2f}")
    sys.stdout.flush()


def quality(binary, data):
    work = tempfile.mkdtemp(prefix="cformers_bench_dp_quality_")
    try:
        tok = os.path.join(data, "stories260K/tok512.model")
        run([binary, "preprocess", "--input", os.path.join(data, "tinyshakespeare/input.txt"), "--tokenizer", tok,
             "--output", os.path.join(work, "data"), "--valid-fraction", "0.05", "--quiet"])
        evals = {}
        for mode in ("none", "onebit"):
            out = os.path.join(work, mode)
            run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "2", "-x", "CFORMERS_THREADS=1", binary,
                 "train", "--config", "tiny_shakespeare", f"--output_dir={out}",
                 f"--train_dataset.data_dir={os.path.join(work, 'data')}", f"--train_dataset.tokenizer={tok}",
                 "--runner_config.sample_interval=0", f"--parallel_config.gradient_compression={mode}", "--quiet"])
            with open(os.path.join(out, "metrics.jsonl")) as f:
                evals[mode] = [json.loads(l) for l in f if '"event":"eval"' in l]
        print("demo config on 2 ranks, validation loss (1-bit after parallel_config.freeze_step):")
        for a, b in zip(evals["none"], evals["onebit"]):
            print(f"  step {a['step']:>4}  uncompressed {a['val_loss']:.4f}  1-bit {b['val_loss']:.4f}  "
                  f"({100 * (b['val_loss'] / a['val_loss'] - 1):+.1f}%)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
