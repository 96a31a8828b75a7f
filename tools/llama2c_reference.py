#!/usr/bin/python3
"""Independent check of cformers generation: a NumPy port of llama2.c's run.c
(forward pass, greedy argmax sampling, tokenizer decode) on a llama2.c checkpoint.

    /usr/bin/python3 tools/llama2c_reference.py MODEL.bin TOKENIZER.bin [STEPS] > expected.txt

Prints exactly what `./run MODEL.bin -z TOKENIZER.bin -t 0.0 -n STEPS` prints with an empty
prompt (BOS=1 start, stop when BOS is sampled). Used to make
tests/fixtures/infer/stories260K_greedy.txt."""
import struct
import sys

import numpy as np


def load_model(path):
    raw = open(path, "rb").read()
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = struct.unpack("7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    w = np.frombuffer(raw, dtype=np.float32, offset=28)
    head = dim // n_heads
    kv_dim = n_kv * head
    off = 0

    def take(*shape):
        nonlocal off
        n = int(np.prod(shape))
        a = w[off:off + n].reshape(shape)
        off += n
        return a

    p = dict(dim=dim, hidden=hidden, n_layers=n_layers, n_heads=n_heads, n_kv=n_kv, vocab=vocab, seq_len=seq_len)
    p["emb"] = take(vocab, dim)
    p["att_norm"] = take(n_layers, dim)
    p["wq"] = take(n_layers, dim, dim)
    p["wk"] = take(n_layers, kv_dim, dim)
    p["wv"] = take(n_layers, kv_dim, dim)
    p["wo"] = take(n_layers, dim, dim)
    p["ffn_norm"] = take(n_layers, dim)
    p["w1"] = take(n_layers, hidden, dim)
    p["w2"] = take(n_layers, dim, hidden)
    p["w3"] = take(n_layers, hidden, dim)
    p["final_norm"] = take(dim)
    off += seq_len * head // 2  # legacy freq_cis_real
    off += seq_len * head // 2  # legacy freq_cis_imag
    p["wcls"] = p["emb"] if shared else take(vocab, dim)
    return p


def rmsnorm(x, w):
    ss = np.float32(np.mean(x * x, dtype=np.float32)) + np.float32(1e-5)
    return (x * np.float32(1.0 / np.sqrt(ss))).astype(np.float32) * w


def forward(p, token, pos, kc, vc):
    dim, n_heads, n_kv = p["dim"], p["n_heads"], p["n_kv"]
    head = dim // n_heads
    x = p["emb"][token].copy()
    for l in range(p["n_layers"]):
        xb = rmsnorm(x, p["att_norm"][l])
        q = p["wq"][l] @ xb
        k = p["wk"][l] @ xb
        v = p["wv"][l] @ xb
        for i in range(0, dim, 2):
            freq = np.float32(1.0) / np.float32(np.power(np.float32(10000.0), np.float32((i % head) / head)))
            val = np.float32(pos) * freq
            fcr, fci = np.float32(np.cos(val)), np.float32(np.sin(val))
            vecs = (q, k) if i < k.shape[0] else (q,)
            for vec in vecs:
                v0, v1 = vec[i], vec[i + 1]
                vec[i] = v0 * fcr - v1 * fci
                vec[i + 1] = v0 * fci + v1 * fcr
        kc[l, pos] = k
        vc[l, pos] = v
        out = np.zeros(dim, dtype=np.float32)
        for h in range(n_heads):
            kvh = h // (n_heads // n_kv)
            qh = q[h * head:(h + 1) * head]
            keys = kc[l, :pos + 1, kvh * head:(kvh + 1) * head]
            att = (keys @ qh) / np.float32(np.sqrt(head))
            att = np.exp(att - att.max())
            att /= att.sum()
            out[h * head:(h + 1) * head] = att @ vc[l, :pos + 1, kvh * head:(kvh + 1) * head]
        x = x + p["wo"][l] @ out
        xb = rmsnorm(x, p["ffn_norm"][l])
        h1 = p["w1"][l] @ xb
        h3 = p["w3"][l] @ xb
        hb = h1 * (np.float32(1.0) / (np.float32(1.0) + np.exp(-h1))) * h3
        x = x + p["w2"][l] @ hb
    x = rmsnorm(x, p["final_norm"])
    return p["wcls"] @ x


def load_tokenizer(path, vocab):
    raw = open(path, "rb").read()
    off = 4
    pieces = []
    for _ in range(vocab):
        _score, n = struct.unpack_from("fi", raw, off)
        off += 8
        pieces.append(raw[off:off + n])
        off += n
    return pieces


def decode(pieces, prev, tok):
    piece = pieces[tok]
    if prev == 1 and piece.startswith(b" "):
        piece = piece[1:]
    if len(piece) == 6 and piece.startswith(b"<0x") and piece.endswith(b">"):
        piece = bytes([int(piece[3:5], 16)])
    return piece


def main():
    model, tok_path = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    p = load_model(model)
    pieces = load_tokenizer(tok_path, p["vocab"])
    kv_dim = p["n_kv"] * (p["dim"] // p["n_heads"])
    kc = np.zeros((p["n_layers"], p["seq_len"], kv_dim), dtype=np.float32)
    vc = np.zeros_like(kc)
    out = sys.stdout.buffer
    token, pos = 1, 0
    while pos < steps:
        logits = forward(p, token, pos, kc, vc)
        nxt = int(np.argmax(logits))
        pos += 1
        if nxt == 1:
            break
        piece = decode(pieces, token, nxt)
        if len(piece) == 1 and not (32 <= piece[0] < 127 or piece[0] in b"\t\n\r\x0b\x0c"):
            piece = b""  # run.c's safe_printf skips unprintable single bytes
        out.write(piece)
        token = nxt
    out.write(b"\n")


if __name__ == "__main__":
    main()
