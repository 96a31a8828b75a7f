#!/usr/bin/env python3
"""`make bench-serve`: load on `cformers serve` over loopback, and on llama.cpp's llama-server.

For each concurrency level a fresh server is started; REQUESTS streamed completions with
prompts of PROMPT_MIN..PROMPT_MAX random token ids (a fixed seed) and exactly GEN generated
tokens each (ignore_eos) are sent by that many client threads. Reported per level: requests/s
and aggregate generated tokens/s over the level's wall time, time to first token and
inter-token latency (gaps between streamed events that carry text) as medians and p99 over
all requests, and from /metrics the peak KV blocks, KV waste and preemptions.

The peer: where a llama-server binary is found (--peer-llama-server, default
$LLAMACPP_DIR/build/bin/llama-server; bench/llamacpp_build.sh makes it, --build-llamacpp runs
that), the same checkpoint is exported to GGUF in the same dtype (`cformers convert --to
gguf`) and, at each level right after ours, llama-server gets the identical load: --parallel
slots = the concurrency, a context of slots x (PROMPT_MAX + GEN), the same threads and KV
dtype, continuous batching, the same /v1/completions bodies (prompts as token ids), read by
the same client. Every request's generated token count is checked against GEN (llama-server's
streamed usage), and each server's /metrics total of generated tokens against REQUESTS x GEN.

The model is a ~110M LLaMA (llama2.c's stories110M shape) with random weights of a trained
model's spread (logits spread over several units, not near-flat), written once as a llama2.c
file and converted (bf16 weights) with the Llama 2 tokenizer, or any checkpoint given with
--model. With the peer, the greedy texts of both servers at the lowest concurrency are
compared: the share of prompts identical, and where one first differs, cformers' top-two
logit margin there (from its logprobs). Standard library only; bounded in requests and time.
"""
import argparse
import array
import http.client
import json
import os
import random
import re
import socket
import struct
import subprocess
import sys
import threading
import time


def spread_floats(rng, n, exponent):
    """n float32s (little-endian bytes) of random sign and magnitude in [2^exponent, 2^(exponent+1)),
    every one drawn afresh: random bytes whose sign and exponent bits are then set by
    bytes.translate, at C speed (pure Python floats would take minutes for 110M weights)."""
    e = exponent + 127
    raw = bytearray(rng.randbytes(4 * n))
    raw[3::4] = raw[3::4].translate(bytes((b & 0x80) | (e >> 1) for b in range(256)))
    raw[2::4] = raw[2::4].translate(bytes(((e & 1) << 7) | (b & 0x7F) for b in range(256)))
    return raw


def write_random_llama2c(path, dim=768, hidden=2048, layers=12, heads=12, vocab=32000, seq=1024):
    """A llama2.c v0 file (shared classifier) of random weights with a trained model's spread,
    norms 1: matrix entries of magnitude 1/32..1/16 (a gain of ~1.4 per 768-wide product,
    like a trained LLaMA's), the embedding (also the classifier) 1/16..1/8, so that logits
    spread over several units and greedy decoding has a clear winner at almost every step.
    Every weight is drawn afresh: an earlier version tiled a block of 2^20 floats, which
    made token t and t + 4096 share an embedding row, so their logits tied exactly and the
    greedy choice between them was arbitrary."""
    rng = random.Random(1)
    head = dim // heads

    def rand(f, n, exponent=-5):
        while n > 0:
            take = min(n, 1 << 22)
            f.write(spread_floats(rng, take, exponent))
            n -= take

    def ones(f, n):
        array.array("f", [1.0] * n).tofile(f)

    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("7i", dim, hidden, layers, heads, heads, vocab, seq))
        rand(f, vocab * dim, -4)
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


def one_request(host, port, prompt, gen, out, index=None, model=None):
    """One streamed /v1/completions of GEN tokens (under `model`, an adapter's name, when given);
    appends its timings (times of the events that carry text) and the completion tokens the
    server reports in a usage object, if it sends one."""
    body = {"prompt": prompt, "max_tokens": gen, "temperature": 0, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}}
    body = json.dumps(dict(body, model=model) if model else body)
    c = http.client.HTTPConnection(host, port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        out.append({"error": f"HTTP {r.status}: {r.read()[:200]!r}"})
        return
    times, usage, text = [], None, []
    for line in r:
        if not line.startswith(b"data: "):
            continue
        if line.strip() == b"data: [DONE]":
            break
        ev = json.loads(line[6:])
        if ev.get("usage"):
            usage = ev["usage"].get("completion_tokens")
        if ev.get("choices") and ev["choices"][0].get("text"):
            times.append(time.perf_counter())
            text.append(ev["choices"][0]["text"])
    c.close()
    if not times:
        out.append({"error": "no tokens"})
        return
    out.append({"ttft": times[0] - t0, "gaps": [b - a for a, b in zip(times, times[1:])], "end": times[-1] - t0,
                "events": len(times), "completion_tokens": usage, "prompt_index": index, "text": "".join(text)})


def metrics(host, port):
    """The Prometheus text of /metrics as {name{labels}: value}."""
    c = http.client.HTTPConnection(host, port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    vals = {}
    for line in text.splitlines():
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$', line)
        if m:
            vals[m.group(1)] = float(m.group(2))
    return vals


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kv_dtype(args):
    """The KV dtype our server uses: --kv-cache among the extra flags, else f32 with f32 weights
    and bf16 otherwise (docs/serving.md)."""
    if "--kv-cache" in args.serve_args:
        return args.serve_args[args.serve_args.index("--kv-cache") + 1]
    return "f32" if args.dtype == "f32" else "bf16"


def gguf_matrix_types(path):
    """The ggml type names of a GGUF v2/v3 file's 2-D tensors (its header read with struct)."""
    with open(path, "rb") as f:
        def rd(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]

        def skip_value(t):
            if t == 8:  # string
                f.seek(rd("Q"), 1)
            elif t == 9:  # array
                et, n = rd("I"), rd("Q")
                for _ in range(n):
                    skip_value(et)
            else:
                f.seek({0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}[t], 1)

        if f.read(4) != b"GGUF" or rd("I") not in (2, 3):
            raise SystemExit(f"{path}: not a GGUF v2/v3 file")
        n_tensors, n_kv = rd("Q"), rd("Q")
        for _ in range(n_kv):
            f.seek(rd("Q"), 1)
            skip_value(rd("I"))
        types = set()
        for _ in range(n_tensors):
            f.seek(rd("Q"), 1)
            dims = rd("I")
            f.seek(8 * dims, 1)
            t = rd("I")
            rd("Q")
            if dims == 2:
                types.add({0: "f32", 1: "f16", 8: "q8_0", 30: "bf16"}.get(t, f"ggml type {t}"))
        return types


def write_adapters(args):
    """--lora N: N random LoRA adapters of rank --lora-rank on every layer's q, k, v and o
    projections of the model (shapes from `cformers inspect --json`), as PEFT directories
    under --workdir; returns their `serve --lora NAME=DIR` arguments."""
    info = json.loads(subprocess.run([args.bin, "inspect", args.model, "--json"], check=True, capture_output=True,
                                     text=True).stdout)
    rng, r, flags = random.Random(11), args.lora_rank, []
    targets = [t for t in info["tensors"] if re.search(r"self_attn\.[qkvo]_proj\.weight$", t["name"])]
    for k in range(args.lora):
        d = os.path.join(args.workdir, f"adapter{k}_r{r}")
        os.makedirs(d, exist_ok=True)
        header, blobs, offset = {}, [], 0
        for t in targets:
            out, inp = t["shape"]
            module = "base_model.model." + t["name"][:-len(".weight")]
            for ab, shape, scale in (("A", (r, inp), 1 / inp ** 0.5), ("B", (out, r), 0.02)):
                data = array.array("f", (rng.uniform(-scale, scale) for _ in range(shape[0] * shape[1]))).tobytes()
                header[f"{module}.lora_{ab}.weight"] = {"dtype": "F32", "shape": list(shape),
                                                         "data_offsets": [offset, offset + len(data)]}
                blobs.append(data)
                offset += len(data)
        text = json.dumps(header).encode()
        with open(os.path.join(d, "adapter_model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
        with open(os.path.join(d, "adapter_config.json"), "w") as f:
            json.dump({"peft_type": "LORA", "r": r, "lora_alpha": 2 * r,
                       "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}, f)
        flags += ["--lora", f"a{k}={d}"]
    return flags


def start_ours(args, concurrency, extra=()):
    """Starts `cformers serve`; returns (process, host, port) once it listens."""
    server = subprocess.Popen(
        [args.bin, "serve", "--model", args.model, "--port", "0", "--threads", str(args.threads),
         "--max-batch", str(max(concurrency, 1)), "--dtype", args.dtype] + list(extra) + args.serve_args,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = server.stdout.readline()
    m = re.search(r"http://([0-9.]+):(\d+)", line)
    if not m:
        server.kill()
        raise SystemExit("the server did not start: " + line + server.stdout.read())
    return server, m.group(1), int(m.group(2))


def start_llama_server(args, concurrency):
    """Starts llama-server on the GGUF with one slot per client, each slot a context of
    PROMPT_MAX + GEN tokens (llama.cpp rounds it up to a multiple of 256), our threads and KV
    dtype; returns (process, host, port) once /health answers 200 (after load and warmup)."""
    host, port = "127.0.0.1", free_port()
    slots = max(concurrency, 1)
    kv = kv_dtype(args)
    log = open(os.path.join(args.workdir, f"llama-server-c{concurrency}.log"), "w")
    server = subprocess.Popen(
        [args.peer_llama_server, "-m", args.gguf, "--host", host, "--port", str(port), "--parallel", str(slots),
         "-c", str(slots * (args.prompt_max + args.gen)), "-t", str(args.threads), "-tb", str(args.threads),
         "--cont-batching", "-ctk", kv, "-ctv", kv, "--metrics", "--no-webui"] + args.peer_arg,
        stdout=log, stderr=subprocess.STDOUT)
    log.close()
    deadline = time.time() + 600
    while True:
        if server.poll() is not None:
            raise SystemExit(f"llama-server exited ({server.returncode}); see {log.name}")
        try:
            c = http.client.HTTPConnection(host, port, timeout=5)
            c.request("GET", "/health")
            status = c.getresponse().status
            c.close()
            if status == 200:
                break
        except OSError:
            pass
        if time.time() > deadline:
            server.kill()
            raise SystemExit(f"llama-server did not become ready in 600 s; see {log.name}")
        time.sleep(0.5)
    return server, host, port


def run_level(args, server_name, concurrency, prompts):
    """One level on one server: a fresh server, the load, its /metrics; the row of the table."""
    lora = server_name == "cformers+lora"
    if lora:
        server, host, port = start_ours(args, concurrency, args.lora_flags)
    else:
        server, host, port = (start_ours if server_name == "cformers" else start_llama_server)(args, concurrency)
    try:
        results, queue, lock = [], list(enumerate(prompts)), threading.Lock()

        def worker():
            while True:
                with lock:
                    if not queue:
                        return
                    i, p = queue.pop(0)
                one_request(host, port, p, args.gen, results, i, f"a{i % args.lora}" if lora else None)

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
    for r in results:
        if "error" in r:
            print(f"  {server_name}: a request failed: {r['error']}", file=sys.stderr)
    # exactly GEN tokens per request: per request where the server reports usage in the stream,
    # and in all from the server's counter of generated tokens
    short = [r["completion_tokens"] for r in ok if r["completion_tokens"] not in (None, args.gen)]
    generated = met.get("cformers_generation_tokens_total", met.get("llamacpp:tokens_predicted_total"))
    if short or generated is None or generated != len(prompts) * args.gen:
        raise SystemExit(f"{server_name} at concurrency {concurrency}: generated {generated} tokens in all, "
                         f"not {len(prompts)} x {args.gen} (per request: {short[:5]})")
    gaps = [g for r in ok for g in r["gaps"]]
    return {
        "server": server_name, "concurrency": concurrency, "requests": len(prompts),
        "failed": len(results) - len(ok), "wall_s": wall, "requests_per_s": len(ok) / wall,
        "tokens_per_s": len(ok) * args.gen / wall, "generated_tokens": generated,
        "streamed_events": sum(r["events"] for r in ok),
        "usage_checked": sum(r["completion_tokens"] is not None for r in ok),
        "ttft_p50_s": percentile([r["ttft"] for r in ok], 50), "ttft_p99_s": percentile([r["ttft"] for r in ok], 99),
        "itl_p50_s": percentile(gaps, 50), "itl_p99_s": percentile(gaps, 99),
        "kv_blocks_peak": met.get("cformers_kv_blocks_peak"), "kv_blocks_total": met.get("cformers_kv_blocks_total"),
        "kv_waste": met.get("cformers_kv_waste_ratio"),
        "preemptions": (met.get('cformers_preemptions_total{mode="swap"}', 0) +
                        met.get('cformers_preemptions_total{mode="recompute"}', 0)) if server_name.startswith("cformers")
        else None,
        "texts": {r["prompt_index"]: r["text"] for r in ok},
        "step_cost_s": [met.get(f'cformers_step_cost_model_seconds{{term="{t}"}}')
                        for t in ("step", "decode_token", "prefill_token", "attended_1024")],
        "step_cost_error_s": met.get("cformers_step_cost_model_error_seconds"),
        "step_target_s": met.get("cformers_step_time_target_seconds"),
    }


def setup_peer(args):
    """Resolves the llama-server binary (building it on request) and exports the model to GGUF
    in the served dtype; returns False, saying why, when the peer is skipped."""
    if args.no_peer:
        return False
    bin_ = args.peer_llama_server or os.path.join(args.llamacpp_dir, "build/bin/llama-server")
    if args.build_llamacpp and not args.peer_llama_server and not os.access(bin_, os.X_OK):
        subprocess.run(["bash", os.path.join(os.path.dirname(os.path.abspath(__file__)), "llamacpp_build.sh"),
                        "llama-server"], check=True, env=dict(os.environ, LLAMACPP_DIR=args.llamacpp_dir))
    if not os.access(bin_, os.X_OK):
        print(f"peer skipped: no llama-server at {bin_} (bench/llamacpp_build.sh llama-server, or "
              f"--build-llamacpp, builds it; --peer-llama-server BIN names one)", file=sys.stderr)
        return False
    args.peer_llama_server = bin_
    if args.dtype not in ("f32", "bf16", "q8_0"):
        print(f"peer skipped: no GGUF export for --dtype {args.dtype}", file=sys.stderr)
        return False
    args.gguf = os.path.join(args.workdir, os.path.splitext(os.path.basename(args.model))[0] + f"_{args.dtype}.gguf")
    if not os.path.exists(args.gguf) or os.path.getmtime(args.gguf) < os.path.getmtime(args.model):
        print(f"exporting {args.model} to {args.gguf} ...", file=sys.stderr)
        # --to gguf keeps the checkpoint's dtype, or quantizes to q8_0
        subprocess.run([args.bin, "convert", "--to", "gguf", args.model, "--output", args.gguf] +
                       (["--dtype", "q8_0"] if args.dtype == "q8_0" else []), check=True,
                       stdout=subprocess.DEVNULL)
    types = gguf_matrix_types(args.gguf)
    if types != {args.dtype}:
        print(f"peer skipped: {args.gguf} holds {'/'.join(sorted(types))} matrices, not {args.dtype} "
              f"(export a {args.dtype} checkpoint)", file=sys.stderr)
        return False
    return True


def first_difference(a, b):
    """The first byte at which two texts' UTF-8 differ (None when equal)."""
    a, b = a.encode(), b.encode()
    if a == b:
        return None
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def margins_at(args, concurrency, prompts, where):
    """cformers' greedy completions of prompts[i] for i in `where` (a dict of prompt index to
    the byte where the peer's text first differs), with logprobs: for each, the token whose
    text holds that byte, its position, and the top-two logprob margin there (= the logit
    margin: the log-softmax subtracts the same number from both). Requests run together:
    the server's texts do not depend on the batch."""
    server, host, port = start_ours(args, concurrency)
    out, lock = {}, threading.Lock()

    def one(i):
        body = json.dumps({"prompt": prompts[i], "max_tokens": args.gen, "temperature": 0, "ignore_eos": True,
                           "logprobs": 5})
        c = http.client.HTTPConnection(host, port, timeout=600)
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        choice = json.loads(c.getresponse().read())["choices"][0]
        c.close()
        lp = choice["logprobs"]
        k = max(j for j, off in enumerate(lp["text_offset"]) if off <= where[i])
        top = sorted(lp["top_logprobs"][k].items(), key=lambda kv: -kv[1])
        with lock:
            out[i] = {"token": k, "text": choice["text"], "top": top[:2],
                      "margin": top[0][1] - top[1][1] if len(top) > 1 else float("inf")}

    try:
        threads = [threading.Thread(target=one, args=(i,)) for i in where]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        server.terminate()
        server.wait()
    return out


def agreement(args, rows, prompts):
    """Greedy agreement of the two servers at their lowest common concurrency level: the share of
    prompts whose texts are identical, and for each other one where it first differs and
    cformers' top-two logit margin there (a margin below ~1e-4 is a near-tie that rounding
    decides, not a wrong engine). Returns the summary (also printed)."""
    levels = sorted({r["concurrency"] for r in rows if r["server"] == "llama.cpp"})
    if not levels:
        return None
    c = levels[0]
    ours = next(r for r in rows if r["server"] == "cformers" and r["concurrency"] == c)["texts"]
    theirs = next(r for r in rows if r["server"] == "llama.cpp" and r["concurrency"] == c)["texts"]
    common = sorted(set(ours) & set(theirs))
    where = {i: d for i in common if (d := first_difference(ours[i], theirs[i])) is not None}
    same = len(common) - len(where)
    print(f"greedy agreement with llama-server (concurrency {c}, {args.gen} tokens each): {same} of {len(common)} "
          f"prompts identical ({100 * same / max(len(common), 1):.0f}%)")
    found = margins_at(args, c, prompts, where) if where else {}
    detail = []
    for i in sorted(where):
        m = found[i]
        if m["text"] != ours[i]:
            print(f"  prompt {i}: cformers' text with logprobs differs from its streamed one (batch invariance broken?)")
        (t1, l1), (t2, l2) = (m["top"] + [("-", float("nan"))] * 2)[:2]
        print(f"  prompt {i}: first differs at byte {where[i]} (cformers' token {m['token']} of {args.gen}); "
              f"top two there {t1!r} {l1:.6f}, {t2!r} {l2:.6f}: margin {m['margin']:.3g}")
        detail.append({"prompt": i, "byte": where[i], "token": m["token"], "margin": m["margin"]})
    ties = sum(d["margin"] < 1e-4 for d in detail)
    if detail:
        print(f"  {ties} of {len(detail)} differences at a top-two margin below 1e-4")
    return {"concurrency": c, "prompts": len(common), "identical": same, "differences": detail}


def fmt_ms(s):
    return f"{s * 1e3:>7.0f}ms"


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
    ap.add_argument("--llamacpp-dir", default=os.environ.get("LLAMACPP_DIR", "/tmp/cformers-llamacpp"),
                    help="llama.cpp build of bench/llamacpp_build.sh ($LLAMACPP_DIR)")
    ap.add_argument("--peer-llama-server", metavar="BIN",
                    help="llama-server to compare with (default: LLAMACPP_DIR/build/bin/llama-server if present)")
    ap.add_argument("--build-llamacpp", action="store_true",
                    help="build llama-server under LLAMACPP_DIR first if it is missing (long; never in CI)")
    ap.add_argument("--peer-arg", action="append", default=[], metavar="ARG",
                    help="one more llama-server argument (repeatable; later ones override ours, e.g. "
                         "--peer-arg=-ctk --peer-arg=f16)")
    ap.add_argument("--no-peer", action="store_true", help="only cformers")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--lora", type=int, default=0, metavar="N",
                    help="also serve N random LoRA adapters (rank --lora-rank on q, k, v, o) over the model, the "
                         "requests spread over them round robin (server 'cformers+lora'), against the base alone")
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("serve_args", nargs="*", help="more `cformers serve` flags (after --)")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    if not args.model:
        args.model = os.path.join(args.workdir, "llama110m_spread_bf16.ckpt")
        if not os.path.exists(args.model):
            raw = os.path.join(args.workdir, "llama110m.bin")
            print("writing a random ~110M LLaMA (once) ...", file=sys.stderr)
            write_random_llama2c(raw)
            tok = os.path.join(args.data, "llama2c-tokenizer/tokenizer.bin")
            subprocess.run([args.bin, "convert", "--from", "llama2c", raw, "--tokenizer", tok, "--dtype", "bf16",
                            "--output", args.model], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            os.remove(raw)
    servers = ["cformers"] + (["llama.cpp"] if setup_peer(args) else [])
    if args.lora:
        args.lora_flags = write_adapters(args)
        servers.insert(1, "cformers+lora")
    rng = random.Random(7)
    prompts = [[1] + [rng.randrange(3, args.vocab) for _ in range(rng.randint(args.prompt_min, args.prompt_max) - 1)]
               for _ in range(args.requests)]
    rows = []
    print(f"model {os.path.basename(args.model)}, {args.dtype} weights, {kv_dtype(args)} KV, {args.threads} threads, "
          f"prompts {args.prompt_min}-{args.prompt_max} tokens, {args.gen} generated each")
    print(f"{'server':<9} {'conc':>4} {'reqs':>4} {'wall s':>7} {'req/s':>6} {'tok/s':>7} {'TTFT p50':>9} "
          f"{'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8} {'KV peak':>8} {'waste':>6} {'preempt':>7}")
    for c in [int(x) for x in args.concurrency.split(",")]:
        n = args.requests_c1 if c == 1 else args.requests
        for name in servers:
            r = run_level(args, name, c, prompts[:n])
            rows.append(r)
            kv = (f"{r['kv_blocks_peak']:>8.0f} {100 * (r['kv_waste'] or 0):>5.2f}% {r['preemptions']:>7.0f}"
                  if name.startswith("cformers") else f"{'-':>8} {'-':>6} {'-':>7}")
            print(f"{name:<9} {c:>4} {n:>4} {r['wall_s']:>7.1f} {r['requests_per_s']:>6.2f} {r['tokens_per_s']:>7.1f} "
                  f"{fmt_ms(r['ttft_p50_s'])} {fmt_ms(r['ttft_p99_s'])} {r['itl_p50_s'] * 1e3:>6.1f}ms "
                  f"{r['itl_p99_s'] * 1e3:>6.1f}ms {kv}", flush=True)
            if r["failed"]:
                print(f"  {r['failed']} requests failed", file=sys.stderr)
            if name == "cformers" and None not in r["step_cost_s"]:
                a_, b_, c_, d_ = (1e3 * x for x in r["step_cost_s"])
                print(f"  step cost model: {a_:.2f} ms + {b_:.2f} ms/decode token + {c_:.2f} ms/prompt token + "
                      f"{d_:.3f} ms/1024 attended positions, rms error {1e3 * r['step_cost_error_s']:.2f} ms "
                      f"(target {1e3 * r['step_target_s']:.0f} ms)", flush=True)
    for name in servers:
        mine = [r for r in rows if r["server"] == name]
        if mine and mine[0]["concurrency"] == 1 and mine[0]["tokens_per_s"] > 0:
            for r in mine[1:]:
                print(f"{name} concurrency {r['concurrency']}: {r['tokens_per_s'] / mine[0]['tokens_per_s']:.1f}x "
                      f"the tokens/s of concurrency 1")
    for c in sorted({r["concurrency"] for r in rows} if args.lora else ()):
        a = [r for r in rows if r["concurrency"] == c and r["server"] == "cformers+lora"]
        b = [r for r in rows if r["concurrency"] == c and r["server"] == "cformers"]
        if a and b and b[0]["tokens_per_s"] > 0:
            print(f"concurrency {c}: {args.lora} LoRA adapters (rank {args.lora_rank}) at "
                  f"{a[0]['tokens_per_s'] / b[0]['tokens_per_s']:.2f}x the base model's tokens/s")
    if "llama.cpp" in servers:
        for c in sorted({r["concurrency"] for r in rows}):
            a = [r for r in rows if r["concurrency"] == c and r["server"] == "cformers"]
            b = [r for r in rows if r["concurrency"] == c and r["server"] == "llama.cpp"]
            if a and b and b[0]["tokens_per_s"] > 0:
                print(f"concurrency {c}: cformers at {a[0]['tokens_per_s'] / b[0]['tokens_per_s']:.2f}x "
                      f"llama-server's tokens/s")
    agree = agreement(args, rows, prompts) if "llama.cpp" in servers else None
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "agreement": agree}, f, indent=1)


if __name__ == "__main__":
    main()
