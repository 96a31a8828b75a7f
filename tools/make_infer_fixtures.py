#!/usr/bin/python3
"""Makes tests/fixtures/infer/: one tiny random LLaMA (GQA, untied classifier) saved as
llama2.c v0, v1 and v2 (int8) files, as a Hugging Face f32 directory and as a sharded bf16
one (q/k rows in HF's rotate-half order), plus the float64 PyTorch logits of a prompt
(tools/torch_logits_reference.py) that every import must reproduce.

    /usr/bin/python3 tools/make_infer_fixtures.py tests/fixtures/infer"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_logits_reference as ref  # noqa: E402

DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, VOCAB, SEQ = 16, 48, 2, 4, 2, 48, 32
GROUP = 32
TOKENS = [1, 7, 33, 2, 40, 11, 19, 5]


def make_weights(rng):
    kv_dim = KV_HEADS * DIM // HEADS
    r = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)
    w = dict(emb=r(VOCAB, DIM), att_norm=1 + r(LAYERS, DIM), ffn_norm=1 + r(LAYERS, DIM), norm=1 + r(DIM),
             wq=r(LAYERS, DIM, DIM), wk=r(LAYERS, kv_dim, DIM), wv=r(LAYERS, kv_dim, DIM), wo=r(LAYERS, DIM, DIM),
             w1=r(LAYERS, HIDDEN, DIM), w2=r(LAYERS, DIM, HIDDEN), w3=r(LAYERS, HIDDEN, DIM), cls=r(VOCAB, DIM))
    return w


def params():
    return struct.pack("<7i", DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, VOCAB, SEQ)


def write_v0(path, w):
    head = DIM // HEADS
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, -VOCAB, SEQ))  # negative: own classifier
        for k in ["emb", "att_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3", "norm"]:
            f.write(w[k].tobytes())
        f.write(np.zeros(SEQ * head, dtype=np.float32).tobytes())  # the unused RoPE tables
        f.write(w["cls"].tobytes())


def v1_header(version, extra=b""):
    h = struct.pack("<Ii", 0x616B3432, version) + params() + struct.pack("B", 0) + extra
    return h + b"\0" * (256 - len(h))


def write_v1(path, w):
    with open(path, "wb") as f:
        f.write(v1_header(1))
        for k in ["att_norm", "ffn_norm", "norm", "emb", "wq", "wk", "wv", "wo", "w1", "w2", "w3", "cls"]:
            f.write(w[k].tobytes())


def quantize(a):
    g = a.reshape(-1, GROUP)
    scale = (np.abs(g).max(axis=1) / 127.0).astype(np.float32)
    q = np.round(g / scale[:, None]).astype(np.int8)
    return q, scale, (q.astype(np.float32) * scale[:, None]).reshape(a.shape)


def write_v2(path, w):
    """Returns the dequantised weights, which the v2 import must reproduce exactly."""
    deq = dict(w)
    with open(path, "wb") as f:
        f.write(v1_header(2, struct.pack("<i", GROUP)))
        for k in ["att_norm", "ffn_norm", "norm"]:
            f.write(w[k].tobytes())
        for k in ["emb", "wq", "wk", "wv", "wo", "w1", "w2", "w3", "cls"]:
            parts = w[k] if w[k].ndim == 3 else [w[k]]
            outs = []
            for t in parts:
                q, s, d = quantize(t)
                f.write(q.tobytes())
                f.write(s.tobytes())
                outs.append(d)
            deq[k] = np.stack(outs) if w[k].ndim == 3 else outs[0]
    return deq


def to_hf_rows(a, heads):
    """Interleaved rows -> HF rotate-half rows (what HF's convert_llama_weights_to_hf does)."""
    hd = a.shape[0] // heads
    return a.reshape(heads, hd // 2, 2, a.shape[1]).transpose(0, 2, 1, 3).reshape(a.shape)


def hf_tensors(w):
    t = {"model.embed_tokens.weight": w["emb"], "model.norm.weight": w["norm"], "lm_head.weight": w["cls"]}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = w["att_norm"][i]
        t[p + "post_attention_layernorm.weight"] = w["ffn_norm"][i]
        t[p + "self_attn.q_proj.weight"] = to_hf_rows(w["wq"][i], HEADS)
        t[p + "self_attn.k_proj.weight"] = to_hf_rows(w["wk"][i], KV_HEADS)
        t[p + "self_attn.v_proj.weight"] = w["wv"][i]
        t[p + "self_attn.o_proj.weight"] = w["wo"][i]
        t[p + "mlp.gate_proj.weight"] = w["w1"][i]
        t[p + "mlp.down_proj.weight"] = w["w2"][i]
        t[p + "mlp.up_proj.weight"] = w["w3"][i]
    return t


def bf16(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, tensors, dtype):
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        data = bf16(a).tobytes() if dtype == "BF16" else np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def hf_config():
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": DIM,
            "intermediate_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS, "vocab_size": VOCAB, "max_position_embeddings": SEQ,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "float32"}


def write_hf(d, w, dtype, shards):
    os.makedirs(d, exist_ok=True)
    json.dump(hf_config(), open(os.path.join(d, "config.json"), "w"), indent=1)
    t = hf_tensors(w)
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), t, dtype)
        return
    names = list(t)
    weight_map = {}
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: t[n] for n in names[s::shards]}
        write_safetensors(os.path.join(d, fname), part, dtype)
        weight_map.update({n: fname for n in part})
    json.dump({"metadata": {}, "weight_map": weight_map}, open(os.path.join(d, "model.safetensors.index.json"), "w"),
              indent=1)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    w = make_weights(np.random.default_rng(7))
    write_v0(os.path.join(out, "tiny_v0.bin"), w)
    write_v1(os.path.join(out, "tiny_v1.bin"), w)
    deq = write_v2(os.path.join(out, "tiny_v2.bin"), w)
    write_hf(os.path.join(out, "tiny_hf"), w, "F32", 1)
    write_hf(os.path.join(out, "tiny_hf_bf16_sharded"), w, "BF16", 2)
    # The reference runs the HF directory (rotate-half rope), so it also checks the q/k permutation.
    c, tw = ref.load_hf(os.path.join(out, "tiny_hf"))
    ref.write_reference(os.path.join(out, "tiny.logits"), TOKENS, ref.forward(c, tw, TOKENS).numpy())
    wd = hf_tensors(deq)
    c2 = dict(c)
    tw2 = {k: ref.torch.from_numpy(v.astype(np.float64)) for k, v in wd.items()}
    ref.write_reference(os.path.join(out, "tiny_v2.logits"), TOKENS, ref.forward(c2, tw2, TOKENS).numpy())


if __name__ == "__main__":
    main()
