#!/usr/bin/python3
"""Tiny random models of each family, saved by a current transformers (so config.json has
the newest layout: rope_parameters, layer_types, ...), with Hugging Face's own float32
logits and greedy tokens, for tests/test_families.c.

    python3 tools/make_family_fixtures.py [OUT [NAME...]]   (OUT: tests/fixtures/families; NAMEs: only those)

makes (once) a venv at /work/venv-families (override: CFORMERS_FAMILY_VENV) with torch and
transformers from PyPI and re-runs itself there. For each family NAME it writes OUT/NAME/:
config.json and model.safetensors (save_pretrained), reference.logits (the prompt's
logits, tools/torch_logits_reference.py's format) and greedy.txt (the prompt's ids on the
first line, then the 32 ids transformers' generate(do_sample=False) appends). The prompt
(40 tokens) is longer than Mistral's sliding window (8), so the window takes effect."""
import json
import os
import subprocess
import sys

VENV = os.environ.get("CFORMERS_FAMILY_VENV", "/work/venv-families")
HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT_LEN, NEW_TOKENS, WINDOW = 40, 32, 8
SMALL = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6)

# name: (config class, model class, config overrides)
FAMILIES = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=False)),
    "qwen2_tied": ("Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=True)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=WINDOW, tie_word_embeddings=False)),
    # head_dim 16, not hidden_size / num_attention_heads = 8: q and o are 64 wide
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=16, tie_word_embeddings=False)),
    # local (window 8) and global layers alternating; caps low enough to bite on these
    # logits, query_pre_attn_scalar not head_dim (8), so every Gemma 2 knob takes effect
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(head_dim=8, sliding_window=WINDOW, query_pre_attn_scalar=12,
                                                        attn_logit_softcapping=3.0, final_logit_softcapping=2.0)),
    # fused qkv_proj and gate_up_proj; Phi3Config's default pad token 32000 is past the vocabulary
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(tie_word_embeddings=False, pad_token_id=0, bos_token_id=1,
                                                  eos_token_id=2)),
    # Gemma 3 text: q/k norms, two rope bases (local 10000, global 1e6: far apart), layers
    # local, local, global (pattern 3 from layer_types), no soft-caps
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               dict(head_dim=8, sliding_window=WINDOW, query_pre_attn_scalar=12, num_hidden_layers=3,
                    layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                    rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                     "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
}
# (1 + w) norms (Gemma): weights around 0, so the scale is around 1
OFFSET_NORMS = {"gemma2", "gemma3"}


def ensure_venv():
    py = os.path.join(VENV, "bin", "python3")
    if os.path.abspath(sys.prefix) == os.path.abspath(VENV):
        return
    if not os.path.exists(py):
        subprocess.check_call([sys.executable, "-m", "venv", VENV])
        subprocess.check_call([py, "-m", "pip", "install", "-q", "torch", "transformers", "safetensors", "numpy"])
    os.execv(py, [py] + sys.argv)


def make(name, out, torch, transformers):
    sys.path.insert(0, HERE)
    import torch_logits_reference as ref

    config_class, model_class, extra = FAMILIES[name]
    torch.manual_seed(sum(map(ord, name)))
    settings = {**SMALL, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, **extra}
    cfg = getattr(transformers, config_class)(**settings)
    cfg._attn_implementation = "eager"
    model = getattr(transformers, model_class)(cfg).float().eval()
    with torch.no_grad():  # weights large enough that greedy argmaxes are clear, norms around 1
        for pname, p in model.named_parameters():
            one = 0 if name in OFFSET_NORMS else 1
            p.copy_(one + 0.1 * torch.randn_like(p) if "norm" in pname else 0.2 * torch.randn_like(p))
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    for extra_file in ("generation_config.json",):
        if os.path.exists(os.path.join(d, extra_file)):
            os.remove(os.path.join(d, extra_file))
    g = torch.Generator().manual_seed(7)
    prompt = torch.randint(0, SMALL["vocab_size"], (1, PROMPT_LEN), generator=g)
    with torch.no_grad():
        logits = model(prompt).logits[0].float().numpy()
        ids = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, eos_token_id=None,
                             pad_token_id=0)[0].tolist()
        full = model(torch.tensor([ids])).logits[0].float()
    # the smallest gap between the top two logits along the greedy path (near ties could flip)
    top2 = full[PROMPT_LEN - 1:-1].topk(2, dim=-1).values
    margin = (top2[:, 0] - top2[:, 1]).min().item()
    ref.write_reference(os.path.join(d, "reference.logits"), prompt[0].tolist(), logits)
    with open(os.path.join(d, "greedy.txt"), "w") as f:
        f.write(" ".join(map(str, ids[:PROMPT_LEN])) + "\n" + " ".join(map(str, ids[PROMPT_LEN:])) + "\n")
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    print(f"{d}: {size} bytes, smallest greedy margin {margin:.4f}")


def main():
    ensure_venv()
    import torch
    import transformers

    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "fixtures", "families")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    only = sys.argv[2:]  # family names: remake only these (the others' files are kept)
    for name in FAMILIES:
        if not only or name in only:
            make(name, out, torch, transformers)
    path = os.path.join(out, "versions.json")
    versions = json.load(open(path)) if only and os.path.exists(path) else {}
    made = {"transformers": transformers.__version__, "torch": torch.__version__}
    if only:  # the families remade now, by a newer transformers than the rest
        for name in only:
            versions.setdefault("families", {})[name] = made
    else:
        versions = made
    json.dump(versions, open(path, "w"), indent=1)


if __name__ == "__main__":
    main()
