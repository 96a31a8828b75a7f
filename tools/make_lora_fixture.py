#!/work/venv-lora/bin/python
"""PyTorch + PEFT reference for LoRA (docs/lora.md): Hugging Face's LlamaForCausalLM (tiny,
float64, eager attention) wrapped by peft.get_peft_model with LoRA r 4, alpha 8 on q_proj
and v_proj, trained 10 steps with torch.optim.AdamW over the adapters alone.

Writes tests/fixtures/lora/ (tests/test_lora.c compares):
  llama_lora.cffx
    "param/NAME"     the base weights in cformers' layout (q/k rows in interleaved-pair
                     order: Hugging Face's rotate-half rows permuted back), f32 values;
    "init/NAME"      the adapters' initial values (PEFT's kaiming-uniform A, zero B), in
                     cformers' layout (B's rows of q_proj permuted as q_proj's rows);
    "tokens"         [STEPS, BATCH, SEQ + 1] batches;
    "losses"         the STEPS losses; "final/NAME" the adapters after the STEPS updates;
    "eval_tokens"    [1, SEQ]; "peft_logits" [1, SEQ, vocab]: the PEFT model's logits there
                     after training (unmerged).
  peft_adapter/      PEFT's own save_pretrained of the trained adapter (f32 safetensors,
                     adapter_config.json): the import test reads it.
PEFT computes in float64 over f32-representable weights (HF's RMSNorm patched to stay in
float64 rather than upcast to f32; its RoPE tables are f32, as ours); AdamW: constant lr, no weight decay, clipping over the adapter gradients.

usage: /work/venv-lora/bin/python tools/make_lora_fixture.py  (venv: pip install torch peft)
       ... tools/make_lora_fixture.py --check-export DIR
  The second form loads DIR, cformers' PEFT export of the adapters it trained in
  tests/test_lora.c (CFORMERS_LORA_EXPORT_DIR=DIR build/tests/test_lora), with
  peft.PeftModel.from_pretrained over the same base, and prints the largest relative
  difference of its logits to PEFT's own trained model's (exits 1 above 1e-5). Nothing is written.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as ref  # noqa: E402  (its loss and fixture writer)

STEPS = 10
BATCH = 2
SEQ = 16
CONFIG = dict(arch="llama", vocab_size=32, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
              intermediate_size=64, max_position_embeddings=SEQ, rope_theta=10000.0, rms_norm_eps=1e-5,
              tie_word_embeddings=False)
LORA = dict(rank=4, alpha=8.0, target_modules=["q_proj", "v_proj"])
OPTIM = dict(learning_rate=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0, grad_clip=1.0)
PREFIX = "base_model.model."


def from_hf_rows(w, heads):
    """Hugging Face's rotate-half row order -> cformers' interleaved pairs (per head)."""
    rows, cols = w.shape
    hd = rows // heads
    return w.reshape(heads, 2, hd // 2, cols).transpose(1, 2).reshape(rows, cols)


def ours(name, w):
    """A tensor of the HF model (or its adapter) in cformers' layout and name."""
    c = CONFIG
    if name.endswith("lora_A.weight"):
        return w
    if "q_proj" in name:
        return from_hf_rows(w, c["num_heads"])
    if "k_proj" in name:
        return from_hf_rows(w, c["num_kv_heads"])
    return w


def rmsnorm_f64(self, x):
    """LlamaRMSNorm without its float32 upcast, so the reference stays float64 throughout."""
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check-export", metavar="DIR")
    args = ap.parse_args()
    modeling_llama.LlamaRMSNorm.forward = rmsnorm_f64
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "lora")
    torch.manual_seed(39)
    c = CONFIG
    hf = LlamaConfig(vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
                     num_hidden_layers=c["num_layers"], num_attention_heads=c["num_heads"],
                     num_key_value_heads=c["num_kv_heads"], max_position_embeddings=SEQ, rms_norm_eps=c["rms_norm_eps"],
                     rope_theta=c["rope_theta"], tie_word_embeddings=False, initializer_range=0.2,
                     attn_implementation="eager")
    model = LlamaForCausalLM(hf)
    with torch.no_grad():  # f32-representable values, norms away from 1
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            p.copy_(p.float())
    model = model.to(torch.float64)
    base = {n: p.detach().clone() for n, p in model.state_dict().items()}
    peft_cfg = LoraConfig(r=LORA["rank"], lora_alpha=LORA["alpha"], target_modules=LORA["target_modules"],
                          lora_dropout=0.0, bias="none")
    model = get_peft_model(model, peft_cfg)
    adapters = {n[len(PREFIX):].replace(".default", ""): p for n, p in model.named_parameters() if p.requires_grad}
    with torch.no_grad():
        for p in adapters.values():
            p.copy_(p.float())  # f32-representable A
    records = {}
    for n, w in base.items():
        records["param/" + n] = ours(n, w).numpy().copy()
    for n, p in adapters.items():
        records["init/" + n] = ours(n, p.detach()).numpy().copy()
    tokens = torch.randint(0, c["vocab_size"], (STEPS, BATCH, SEQ + 1))
    o = OPTIM
    opt = torch.optim.AdamW(list(adapters.values()), lr=o["learning_rate"], betas=(o["beta1"], o["beta2"]),
                            eps=o["eps"], weight_decay=o["weight_decay"])
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        logits = model(input_ids=tokens[step, :, :SEQ]).logits
        loss = ref.loss_fn(logits, tokens[step, :, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(adapters.values()), o["grad_clip"])
        opt.step()
        losses.append(loss.item())
    print("losses", " ".join(f"{x:.6f}" for x in losses))
    records["losses"] = np.array(losses)
    records["tokens"] = tokens.to(torch.int32).numpy()
    for n, p in adapters.items():
        records["final/" + n] = ours(n, p.detach()).numpy().copy()
    eval_tokens = torch.randint(0, c["vocab_size"], (1, SEQ))
    with torch.no_grad():
        records["peft_logits"] = model(input_ids=eval_tokens).logits.numpy().copy()
    records["eval_tokens"] = eval_tokens.to(torch.int32).numpy()
    if args.check_export:
        from peft import PeftModel
        fresh = LlamaForCausalLM(hf).to(torch.float64)
        fresh.load_state_dict(base)
        theirs = PeftModel.from_pretrained(fresh, args.check_export).to(torch.float64)
        with torch.no_grad():
            got = theirs(input_ids=eval_tokens).logits.numpy()
        want = records["peft_logits"]
        err = float(np.abs(got - want).max() / np.abs(want).max())
        print(f"PEFT over cformers' export {args.check_export}: logits relative error {err:.3g}")
        sys.exit(0 if err <= 1e-5 else 1)
    for n, w in model.state_dict().items():  # the frozen base is bit-unchanged by training
        if "lora_" not in n:
            key = n.replace(PREFIX, "").replace(".base_layer", "")
            assert torch.equal(w, base[key]), n
    meta = {"model_config": c, "batch_size": BATCH, "seq_length": SEQ, "steps": STEPS, "optimizer": o, "lora": LORA,
            "base": list(base), "adapters": list(adapters)}
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "llama_lora.cffx")
    ref.write_cffx(path, meta, records)
    print(f"{path}: {os.path.getsize(path)} bytes")
    adir = os.path.join(out, "peft_adapter")
    shutil.rmtree(adir, ignore_errors=True)
    model.to(torch.float32).save_pretrained(adir)
    for extra in os.listdir(adir):  # PEFT's model card: not needed
        if extra not in ("adapter_config.json", "adapter_model.safetensors"):
            os.remove(os.path.join(adir, extra))
    with open(os.path.join(adir, "adapter_config.json")) as f:
        cfg = json.load(f)
    print("adapter_config:", {k: cfg[k] for k in ("r", "lora_alpha", "target_modules", "peft_type")})


if __name__ == "__main__":
    main()
