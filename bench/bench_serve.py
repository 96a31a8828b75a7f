#!/usr/bin/env python3
"""`make bench-serve`: load on `cformers serve` over loopback.

For each concurrency level a fresh server is started; REQUESTS streamed completions with
prompts of PROMPT_MIN..PROMPT_MAX random token ids (a fixed seed) and exactly GEN generated
tokens each (ignore_eos) are sent by that many client threads. Reported per level: requests/s
and aggregate generated tokens/s over the level's wall time, time to first token and
inter-token latency (gaps between streamed events) as medians and p99 over all requests,
and from /metrics the peak KV blocks, KV waste and preemptions.

The model is a ~110M LLaMA (llama2.c's stories110M shape) with random weights, written
once as a llama2.c file and converted (bf16 weights) with the Llama 2 tokenizer, or any
checkpoint given with --model. Standard library only; bounded in requests and time.
"""
import argparse
import array
import http.client
import json
import os
import random
import re
import struct
import subprocess
import sys
import threading
import time


def write_random_llama2c(path, dim=768, hidden=2048, layers=12, heads=12, vocab=32000, seq=1024):
    """A llama2.c v0 file (shared classifier) of uniform(-0.02, 0.02) weights, norms 1."""
    rng = random.Random(1)
    block = array.array("f", [(rng.random() * 2 - 1) * 0.02 for _ in range(1 << 20)])
    head = dim // heads

    def rand(f, n):
        off = rng.randrange(1 << 19)
        while n > 0:
            take = min(n, len(block) - off)
            block[off:off + take].tofile(f)
            n -= take
            off = 0

    def ones(f, n):
        array.array("f", [1.0] * n).tofile(f)

    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("7i", dim, hidden, layers, heads, heads, vocab, seq))
        rand(f, vocab * dim)
        ones(f, layers * dim)
        for _ in range(4):  # wq, wk, wv, wo
            rand(f, layers * dim * dim)
        ones(f, layers * dim)
        rand(f, layers * hidden * dim)
        rand(f, layers * dim * hidden)
        rand(f, layers * hidden * dim)
        ones(f, dim)
        rand(f, seq * head)  # freq_cis_real / imag (unused: RoPE is recomputed)
        rand(f, seq * head)
    os.replace(path + ".tmp", path)


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def one_request(host, port, prompt, gen, out):
    body = json.dumps({"prompt": prompt, "max_tokens": gen, "temperature": 0, "stream": True, "ignore_eos": True})
    c = http.client.HTTPConnection(host, port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        out.append({"error": r.status})
        return
    times = []
    for line in r:
        if not line.startswith(b"data: "):
            continue
        if line.strip() == b"data: [DONE]":
            break
        ch = json.loads(line[6:])["choices"][0]
        if ch.get("text"):
            times.append(time.perf_counter())
    c.close()
    if not times:
        out.append({"error": "no tokens"})
        return
    out.append({"ttft": times[0] - t0, "gaps": [b - a for a, b in zip(times, times[1:])], "end": times[-1] - t0})


def metrics(host, port):
    c = http.client.HTTPConnection(host, port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    vals = {}
    for line in text.splitlines():
        m = re.match(r'^(cformers_[a-z_]+(?:\{[^}]*\})?) (\S+)$', line)
        if m:
            vals[m.group(1)] = float(m.group(2))
    return vals


def run_level(args, concurrency, prompts):
    server = subprocess.Popen(
        [args.bin, "serve", "--model", args.model, "--port", "0", "--threads", str(args.threads),
         "--max-batch", str(max(concurrency, 1)), "--dtype", args.dtype] + args.serve_args,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = server.stdout.readline()
        m = re.search(r"http://([0-9.]+):(\d+)", line)
        if not m:
            raise SystemExit("the server did not start: " + line + server.stdout.read())
        host, port = m.group(1), int(m.group(2))
        results, queue, lock = [], list(prompts), threading.Lock()

        def worker():
            while True:
                with lock:
                    if not queue:
                        return
                    p = queue.pop(0)
                one_request(host, port, p, args.gen, results)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        met = metrics(host, port)
    finally:
        server.terminate()
        server.wait()
    ok = [r for r in results if "error" not in r]
    gaps = [g for r in ok for g in r["gaps"]]
    return {
        "concurrency": concurrency, "requests": len(prompts), "failed": len(results) - len(ok),
        "wall_s": wall, "requests_per_s": len(ok) / wall, "tokens_per_s": len(ok) * args.gen / wall,
        "ttft_p50_s": percentile([r["ttft"] for r in ok], 50), "ttft_p99_s": percentile([r["ttft"] for r in ok], 99),
        "itl_p50_s": percentile(gaps, 50), "itl_p99_s": percentile(gaps, 99),
        "kv_blocks_peak": met.get("cformers_kv_blocks_peak"), "kv_blocks_total": met.get("cformers_kv_blocks_total"),
        "kv_waste": met.get("cformers_kv_waste_ratio"),
        "preemptions": met.get('cformers_preemptions_total{mode="swap"}', 0) +
                       met.get('cformers_preemptions_total{mode="recompute"}', 0),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/cformers")
    ap.add_argument("--model", help="checkpoint (default: the random ~110M LLaMA, made once under --workdir)")
    ap.add_argument("--workdir", default="/tmp/cformers_bench_serve")
    ap.add_argument("--data", default=os.environ.get("CFORMERS_DATA_DIR", "../shared/data"))
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--requests-c1", type=int, default=8, help="requests at concurrency 1 (each runs alone)")
    ap.add_argument("--concurrency", default="1,4,16,32")
    ap.add_argument("--prompt-min", type=int, default=32)
    ap.add_argument("--prompt-max", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=32000, help="prompt token ids are drawn below this")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("serve_args", nargs="*", help="more `cformers serve` flags (after --)")
    args = ap.parse_args()
    if not args.model:
        os.makedirs(args.workdir, exist_ok=True)
        args.model = os.path.join(args.workdir, "llama110m_bf16.ckpt")
        if not os.path.exists(args.model):
            raw = os.path.join(args.workdir, "llama110m.bin")
            print("writing a random ~110M LLaMA (once) ...", file=sys.stderr)
            write_random_llama2c(raw)
            tok = os.path.join(args.data, "llama2c-tokenizer/tokenizer.bin")
            subprocess.run([args.bin, "convert", "--from", "llama2c", raw, "--tokenizer", tok, "--dtype", "bf16",
                            "--output", args.model], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            os.remove(raw)
    rng = random.Random(7)
    prompts = [[1] + [rng.randrange(3, args.vocab) for _ in range(rng.randint(args.prompt_min, args.prompt_max) - 1)]
               for _ in range(args.requests)]
    rows = []
    print(f"model {os.path.basename(args.model)}, {args.dtype} weights, {args.threads} threads, prompts "
          f"{args.prompt_min}-{args.prompt_max} tokens, {args.gen} generated each")
    print(f"{'conc':>4} {'reqs':>4} {'wall s':>7} {'req/s':>6} {'tok/s':>7} {'TTFT p50':>9} {'TTFT p99':>9} "
          f"{'ITL p50':>8} {'ITL p99':>8} {'KV peak':>8} {'waste':>6} {'preempt':>7}")
    for c in [int(x) for x in args.concurrency.split(",")]:
        n = args.requests_c1 if c == 1 else args.requests
        r = run_level(args, c, prompts[:n])
        rows.append(r)
        print(f"{c:>4} {n:>4} {r['wall_s']:>7.1f} {r['requests_per_s']:>6.2f} {r['tokens_per_s']:>7.1f} "
              f"{r['ttft_p50_s'] * 1e3:>7.0f}ms {r['ttft_p99_s'] * 1e3:>7.0f}ms {r['itl_p50_s'] * 1e3:>6.1f}ms "
              f"{r['itl_p99_s'] * 1e3:>6.1f}ms {r['kv_blocks_peak']:>8.0f} {100 * (r['kv_waste'] or 0):>5.2f}% "
              f"{r['preemptions']:>7.0f}", flush=True)
        if r["failed"]:
            print(f"  {r['failed']} requests failed", file=sys.stderr)
    if rows and rows[0]["concurrency"] == 1 and rows[0]["tokens_per_s"] > 0:
        for r in rows[1:]:
            print(f"concurrency {r['concurrency']}: {r['tokens_per_s'] / rows[0]['tokens_per_s']:.1f}x the tokens/s "
                  f"of concurrency 1")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
