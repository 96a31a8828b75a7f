"""The Python package against the command line: configs (presets and MindFormers files)
with their exact parameter counts, stories260K logits through AutoModel equal to what
`cformers validate` computes, greedy generate equal to `cformers generate`, a 20-step
Trainer run whose losses equal the CLI's bit for bit, and C errors as exceptions with
the CLI's message. Run by CTest (tests/python_test.sh) with CFORMERS_LIBRARY, CFORMERS_BIN,
CFORMERS_DATA_DIR and CFORMERS_SOURCE_DIR set; assets that are missing skip their test."""
import json
import os
import struct
import subprocess
import warnings

import numpy as np
import pytest

import cformers

BIN = os.environ.get("CFORMERS_BIN", "cformers")
DATA = os.environ.get("CFORMERS_DATA_DIR", "../shared/data")
SRC = os.environ.get("CFORMERS_SOURCE_DIR", ".")
STORIES = os.path.join(DATA, "stories260K", "stories260K.bin")
TOK512 = os.path.join(DATA, "stories260K", "tok512.bin")
MF = os.path.join(SRC, "tests", "fixtures", "mindformers")


def cli(*args, check=True):
    r = subprocess.run([BIN, *args], capture_output=True, text=True, env=dict(os.environ, CFORMERS_THREADS="1"))
    if check and r.returncode != 0:
        raise AssertionError(f"cformers {' '.join(args)}: exit {r.returncode}: {r.stderr}")
    return r


@pytest.fixture(scope="module")
def stories(tmp_path_factory):
    if not (os.path.exists(STORIES) and os.path.exists(TOK512)):
        pytest.skip(f"no {STORIES} (shared asset)")
    path = str(tmp_path_factory.mktemp("ckpt") / "stories260K.ckpt")
    cli("convert", "--from", "llama2c", STORIES, "--tokenizer", TOK512, "--output", path)
    return path


# ------------------------------------------------------------------ AutoConfig

@pytest.mark.parametrize("name,count", [("llama2_7b", 6738415616), ("llama2_13b", 13015864320),
                                        ("llama3_8b", 8030261248), ("gpt2", 124439808), ("stories260k", 260032)])
def test_preset_param_count(name, count):
    cfg = cformers.AutoConfig.from_pretrained(name)
    assert cfg.param_count == count
    assert cfg.num_parameters() == count


def test_config_attributes_and_overrides():
    cfg = cformers.AutoConfig.from_pretrained("llama2_7b", runner_config__batch_size=4)
    assert (cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.intermediate_size) == (4096, 32, 32, 11008)
    assert cfg.batch_size == 4 and cfg["runner_config.seq_length"] == 4096
    assert cfg.use_flash_attention is True and cfg.rope_theta == 10000.0 and cfg.arch == "llama"
    cfg.num_layers = 2
    assert cfg.num_layers == 2 and cfg.param_count < 6738415616
    assert "runner_config.batch_size" in cfg.keys()


def test_config_mindformers_yaml():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = cformers.AutoConfig.from_pretrained(os.path.join(MF, "finetune_llama3_8b.yaml"))
    assert cfg.param_count == 8030261248 and cfg.num_kv_heads == 8 and cfg.intermediate_size == 14336
    assert cfg.beta2 == 0.95 and cfg.clip_grad_norm == 0.5 and cfg.run_mode == "finetune"
    assert any("context.device_target: has no effect here" in str(w.message) for w in caught)
    gpt2 = cformers.AutoConfig.from_pretrained(os.path.join(MF, "run_gpt2.yaml"))
    assert gpt2.param_count == 124439808 and gpt2.arch == "gpt2"


def test_config_yaml_round_trip(tmp_path):
    cfg = cformers.AutoConfig.from_pretrained("gpt2", runner_config__batch_size=3)
    path = tmp_path / "c.yaml"
    cfg.save_pretrained(path)
    again = cformers.AutoConfig.from_pretrained(path)
    assert again.to_dict() == cfg.to_dict()


def test_config_errors_are_the_cli_messages(tmp_path):
    with pytest.raises(cformers.CformersError) as e:
        cformers.AutoConfig.from_pretrained("lama2_7b")
    r = cli("config", "show", "lama2_7b", check=False)
    assert r.returncode != 0 and r.stderr.strip() == f"cformers config: {e.value}"
    bad = tmp_path / "bad.yaml"
    bad.write_text("runner_config:\n  batch_sise: 2\nmodel:\n  model_config:\n    pet_config: {}\n")
    with pytest.raises(cformers.CformersError) as e:
        cformers.AutoConfig.from_pretrained(bad)
    assert "did you mean runner_config.batch_size?" in str(e.value) and "pet_config.pet_type: none given is not supported (only lora)" in str(e.value)
    cfg = cformers.AutoConfig.from_pretrained("llama2_7b")
    with pytest.raises(cformers.CformersError, match="num_heads 32 is not a multiple of num_kv_heads 5"):
        cfg.num_kv_heads = 5
    assert cfg.num_kv_heads == 32  # unchanged after a refused update
    with pytest.raises(AttributeError):
        cfg.no_such_key


# ------------------------------------------------------------------ AutoTokenizer

def test_tokenizer(stories):
    if not os.path.exists(TOK512):
        pytest.skip(f"no {TOK512}")
    tok = cformers.AutoTokenizer.from_pretrained(TOK512)
    ids = tok.encode("Once upon a time")
    assert ids[0] == tok.bos_token_id and tok.decode(ids) == "Once upon a time"
    assert tok.encode("Once upon a time", add_special_tokens=False) == ids[1:]
    batch = tok(["Once", "Once upon a time"], return_tensors="np")
    assert batch["input_ids"].shape == (2, len(ids)) and batch["attention_mask"][0].sum() == 2
    assert tok("Once")["input_ids"] == tok.encode("Once")
    from_ckpt = cformers.AutoTokenizer.from_pretrained(stories)
    assert from_ckpt.encode("Lily went home") == tok.encode("Lily went home")
    with pytest.raises(cformers.CformersError, match="outside the vocabulary"):
        tok.decode([100000])


# ------------------------------------------------------------------ AutoModel

def test_logits_equal_cli_validate(stories, tmp_path):
    model = cformers.AutoModel.from_pretrained(stories)
    assert isinstance(model, cformers.LlamaForCausalLM) and model.config.param_count == 260032
    ids = model.tokenizer.encode("Once upon a time, there was a little girl named Lily.")
    logits = model(ids)
    assert logits.shape == (len(ids), 512) and logits.dtype == np.float32
    # The logits as a reference file: `cformers validate` runs the same prompt through its
    # forward and must find them equal (tolerance 0).
    ref = tmp_path / "py.logits"
    with open(ref, "wb") as f:
        f.write(b"CFLOGITS" + struct.pack("<IIII", 1, len(ids), 512, 0))
        f.write(np.asarray(ids, "<i4").tobytes())
        f.write(np.asarray(logits, "<f4").tobytes())
    r = cli("validate", "--model", stories, "--reference", str(ref), "--tolerance", "0")
    assert r.stdout.startswith("PASS") or "\nPASS" in r.stdout, r.stdout
    assert model.config.copy({"runner_config.batch_size": 3}).batch_size == 3 and model.config.num_layers == 5
    batch = model(np.array([ids, ids]))
    assert batch.shape == (2, len(ids), 512) and np.array_equal(batch[1], logits)


def write_peft_adapter(path, cfg, rank, seed):
    """A random LoRA adapter on q_proj and v_proj of every layer, as PEFT's save_pretrained
    writes it (adapter_config.json, adapter_model.safetensors in f32)."""
    rng = np.random.default_rng(seed)
    dim, kv_dim = cfg.hidden_size, cfg.num_kv_heads * (cfg.hidden_size // cfg.num_heads)
    tensors = {}
    for layer in range(cfg.num_layers):
        for module, out in (("q_proj", dim), ("v_proj", kv_dim)):
            name = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors[name + ".lora_A.weight"] = rng.uniform(-0.5, 0.5, (rank, dim)).astype("<f4")
            tensors[name + ".lora_B.weight"] = rng.uniform(-0.5, 0.5, (out, rank)).astype("<f4")
    header, offset = {}, 0
    for name, t in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    text = json.dumps(header).encode()
    os.makedirs(path)
    with open(os.path.join(path, "adapter_model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(t.tobytes() for t in tensors.values()))
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": ["q_proj", "v_proj"]}, f)


def test_lora_adapter_equals_cli_validate(stories, tmp_path):
    base = cformers.AutoModel.from_pretrained(stories)
    adapter = str(tmp_path / "adapter")
    write_peft_adapter(adapter, base.config, 4, 7)
    model = cformers.AutoModel.from_pretrained(stories, adapter=adapter)
    ids = model.tokenizer.encode("Once upon a time, there was a little girl named Lily.")
    logits = model(ids)
    assert not np.array_equal(logits, base(ids))
    assert np.array_equal(cformers.AutoModel.from_pretrained(stories, adapter=adapter, adapter_scale=0)(ids), base(ids))
    ref = tmp_path / "lora.logits"
    with open(ref, "wb") as f:
        f.write(b"CFLOGITS" + struct.pack("<IIII", 1, len(ids), 512, 0))
        f.write(np.asarray(ids, "<i4").tobytes())
        f.write(np.asarray(logits, "<f4").tobytes())
    r = cli("validate", "--model", stories, "--lora", adapter, "--reference", str(ref), "--tolerance", "0")
    assert r.stdout.startswith("PASS") or "\nPASS" in r.stdout, r.stdout
    with pytest.raises(cformers.CformersError, match="nowhere"):
        cformers.AutoModel.from_pretrained(stories, adapter=str(tmp_path / "nowhere"))


def test_logits_match_the_committed_reference(tmp_path):
    ckpt = tmp_path / "tiny.ckpt"
    cli("convert", "--from", "llama2c", os.path.join(SRC, "tests/fixtures/infer/tiny_v1.bin"), "--output", str(ckpt))
    with open(os.path.join(SRC, "tests/fixtures/infer/tiny.logits"), "rb") as f:
        raw = f.read()
    n, vocab = struct.unpack("<II", raw[12:20])
    tokens = np.frombuffer(raw, "<i4", n, 24)
    ref = np.frombuffer(raw, "<f4", n * vocab, 24 + 4 * n).reshape(n, vocab)
    logits = cformers.AutoModel.from_pretrained(ckpt)(tokens)
    assert np.max(np.abs(logits - ref)) / np.max(np.abs(ref)) <= 1e-4  # validate's default tolerance


def test_hugging_face_directory():
    hf = os.path.join(SRC, "tests/fixtures/infer/tiny_hf")
    cfg = cformers.AutoConfig.from_pretrained(hf)
    assert (cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.vocab_size) == (16, 2, 4, 2, 48)
    model = cformers.AutoModel.from_pretrained(hf)  # converted on load
    assert model.config.param_count == cfg.param_count and model.tokenizer is None
    assert model([1, 2, 3]).shape == (3, 48)


def test_gguf_file_and_what_is_no_model(tmp_path):
    # a GGUF file loads as it is (converted in memory), with the HF directory's logits
    hf = os.path.join(SRC, "tests/fixtures/infer/tiny_hf")
    ckpt, gguf = str(tmp_path / "t.ckpt"), str(tmp_path / "t.gguf")
    cli("convert", "--from", "hf", hf, "--output", ckpt)
    cli("convert", "--to", "gguf", ckpt, "--output", gguf)
    ids = [1, 2, 3, 7]
    expected = cformers.AutoModel.from_pretrained(hf)(ids)
    assert np.array_equal(cformers.AutoModel.from_pretrained(gguf)(ids), expected)
    assert np.array_equal(cformers.AutoModel.from_pretrained(ckpt)(ids), expected)
    # a directory that is no model: the CLI's message
    with pytest.raises(cformers.CformersError, match="a directory without config.json") as e:
        cformers.AutoModel.from_pretrained(tmp_path)
    r = cli("generate", "--model", str(tmp_path), check=False)
    assert r.returncode == 1 and r.stderr.strip() == f"cformers generate: {e.value}"


def test_dtype_as_stored_or_asked(stories, tmp_path):
    # dtype="auto" (the default) runs the matmuls in the checkpoint's own dtype, as the CLI does:
    # a q4_0 checkpoint generates what `cformers generate` gives it, and asking for q4_0 on the
    # f32 checkpoint quantizes the same blocks at load
    q4 = str(tmp_path / "s4.ckpt")
    cli("convert", "--from", "llama2c", STORIES, "--tokenizer", TOK512, "--dtype", "q4_0", "--output", q4)
    r = cli("generate", "--model", q4, "--prompt", "Lily", "--temperature", "0", "-n", "40")
    text = cformers.AutoModel.from_pretrained(q4).generate("Lily", max_new_tokens=40, temperature=0)
    assert text + "\n" == r.stdout
    assert cformers.AutoModel.from_pretrained(stories, dtype="q4_0").generate(
        "Lily", max_new_tokens=40, temperature=0) == text
    with pytest.raises(ValueError, match="dtype must be"):
        cformers.AutoModel.from_pretrained(stories, dtype="int4")


def test_generate_greedy_equals_cli(stories):
    model = cformers.AutoModel.from_pretrained(stories)
    text = model.generate("", max_new_tokens=256, temperature=0)
    with open(os.path.join(SRC, "tests/fixtures/infer/stories260K_greedy.txt"), encoding="utf-8") as f:
        assert text + "\n" == f.read()
    r = cli("generate", "--model", stories, "--prompt", "Lily", "--temperature", "0", "-n", "60")
    assert model.generate("Lily", max_new_tokens=60, do_sample=False) + "\n" == r.stdout
    # ids in, ids out: the same tokens as the text
    ids = model.tokenizer.encode("Lily")
    out = model.generate(ids, max_new_tokens=60, temperature=0)
    assert model.tokenizer.decode(out) == model.generate("Lily", max_new_tokens=60, temperature=0)
    # sampling with a seed repeats
    a = model.generate("Lily", max_new_tokens=20, temperature=0.9, top_p=0.9, seed=3)
    assert a == model.generate("Lily", max_new_tokens=20, temperature=0.9, top_p=0.9, seed=3)


def test_pipeline(stories):
    gen = cformers.pipeline("text_generation", model=stories, max_new_tokens=30, temperature=0)
    out = gen("Once upon a time")
    assert out[0]["generated_text"].startswith("Once upon a time")
    assert out[0]["generated_text"] == cformers.AutoModel.from_pretrained(stories).generate(
        "Once upon a time", max_new_tokens=30, temperature=0)
    with pytest.raises(ValueError, match="not supported"):
        cformers.pipeline("translation", model=stories)


def test_model_errors(stories, tmp_path):
    with pytest.raises(cformers.CformersError) as e:
        cformers.AutoModel.from_pretrained(tmp_path / "none.ckpt")
    r = cli("generate", "--model", str(tmp_path / "none.ckpt"), check=False)
    assert r.returncode == 1 and r.stderr.strip() == f"cformers generate: {e.value}"
    model = cformers.AutoModel.from_pretrained(stories)
    with pytest.raises(cformers.CformersError, match="outside the vocabulary of 512"):
        model([1, 600])
    with pytest.raises(cformers.CformersError, match="do not fit the context"):
        model(np.ones(513, dtype=np.int32))
    with pytest.raises(ValueError):
        model(np.array([[[1]]]))
    with pytest.raises(ValueError, match="holds a llama model"):
        cformers.GPT2LMHeadModel.from_pretrained(stories)


# ------------------------------------------------------------------ Trainer

TINY = ["--model.model_config.hidden_size=32", "--model.model_config.num_layers=1",
        "--model.model_config.num_heads=2", "--model.model_config.intermediate_size=64",
        "--model.model_config.max_position_embeddings=32", "--runner_config.seq_length=32",
        "--runner_config.batch_size=2", "--runner_config.train_steps=20", "--lr_schedule.warmup_steps=2",
        "--runner_config.log_interval=1", "--runner_config.eval_interval=10", "--runner_config.eval_steps=2",
        "--train_dataset.eval_split=0.1", "--runner_config.sample_interval=0",
        "--train_dataset.tokenizer="]  # the text's bytes: no shared asset needed


def _text(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("".join(f"To be, or not to be, that is the question {i}:\n" for i in range(1, 401)))
    return path


def test_trainer_losses_equal_cli_bit_for_bit(tmp_path):
    text = _text(tmp_path)
    cli("train", "--config", "tiny_shakespeare", f"--train_dataset.data_dir={text}", f"--output_dir={tmp_path / 'cli'}",
        "--quiet", *TINY)
    with open(tmp_path / "cli" / "metrics.jsonl") as f:
        records = [json.loads(line) for line in f]
    cli_losses = [r["loss"] for r in records if r["event"] == "train"]
    cli_evals = [r["val_loss"] for r in records if r["event"] == "eval"]
    assert len(cli_losses) == 20

    class Seen(cformers.TrainerCallback):
        def __init__(self):
            self.steps, self.evals = [], []

        def on_step_end(self, record):
            self.steps.append((record["step"], record["loss"]))

        def on_evaluate(self, record):
            self.evals.append(record.get("val_loss", record.get("eval_loss")))

    seen = Seen()
    overrides = {a[2:].split("=")[0].replace(".", "__"): a.split("=", 1)[1] for a in TINY}
    trainer = cformers.Trainer("tiny_shakespeare", train_dataset=text, output_dir=tmp_path / "py", callbacks=[seen],
                               **overrides)
    result = trainer.train()
    assert result["global_step"] == 20
    assert result["losses"] == cli_losses  # bit for bit: the same doubles
    assert [loss for _, loss in seen.steps] == cli_losses and [s for s, _ in seen.steps] == list(range(1, 21))
    assert seen.evals == cli_evals and len(cli_evals) == 2
    ev = trainer.evaluate()
    assert ev["eval_loss"] == cli_evals[-1] and ev["eval_perplexity"] == pytest.approx(np.exp(cli_evals[-1]))


def test_trainer_fine_tunes_a_checkpoint_of_another_shape(tmp_path):
    """load_checkpoint's architecture is adopted, as by `cformers train`: a config that does
    not state the model's shape trains the checkpoint's, and a shape key set against the
    checkpoint is an error naming it."""
    text = _text(tmp_path)
    shape = [a for a in TINY if "model_config" in a] + ["--model.model_config.vocab_size=256"]
    cli("train", "--config", "tiny_shakespeare", f"--train_dataset.data_dir={text}", f"--output_dir={tmp_path / 'base'}",
        "--quiet", *shape, "--runner_config.seq_length=32", "--runner_config.batch_size=2",
        "--runner_config.train_steps=4", "--lr_schedule.warmup_steps=1", "--train_dataset.tokenizer=")
    run = tmp_path / "finetune.yaml"  # no model section: the shape is the checkpoint's
    run.write_text(f"load_checkpoint: {tmp_path / 'base' / 'checkpoint_step4.ckpt'}\n"
                   "runner_config: {batch_size: 2, seq_length: 32, train_steps: 3, eval_interval: 0, log_interval: 1,"
                   " sample_interval: 0}\nlr_schedule: {warmup_steps: 1}\ntrain_dataset: {tokenizer: ''}\n")
    trainer = cformers.Trainer(str(run), train_dataset=text, output_dir=tmp_path / "ft")
    assert trainer.config["model.model_config.hidden_size"] == 32
    assert trainer.config["model.model_config.vocab_size"] == 256
    assert len(trainer.train()["losses"]) == 3
    with pytest.raises(cformers.CformersError, match="num_layers: 3 contradicts load_checkpoint"):
        cformers.Trainer(str(run), train_dataset=text, output_dir=tmp_path / "bad", model__model_config__num_layers=3)


def test_trainer_mindformers_yaml_and_errors(tmp_path):
    text = _text(tmp_path)
    cfg = cformers.AutoConfig.from_pretrained(
        os.path.join(MF, "pretrain_llama2_7b.yaml"),
        overrides={"model.model_config.hidden_size": 32, "model.model_config.num_layers": 1,
                   "model.model_config.num_heads": 2, "model.model_config.vocab_size": 256,
                   "model.model_config.compute_dtype": "float32", "model.model_config.bos_token_id": -1,
                   "model.model_config.eos_token_id": -1, "model.model_config.pad_token_id": -1,
                   "runner_config.seq_length": 32, "runner_config.batch_size": 2,
                   "runner_config.gradient_accumulation_steps": 1, "parallel_config.data_parallel": 0,
                   "train_dataset.tokenizer": "", "runner_config.train_steps": 5,
                   "runner_config.log_interval": 1})
    losses = []
    trainer = cformers.Trainer(cfg, train_dataset=text, output_dir=tmp_path / "mf",
                               callbacks=[lambda r: r["event"] == "train" and losses.append(r["loss"])])
    assert len(trainer.train()["losses"]) == 5 and len(losses) == 5
    with pytest.raises(cformers.CformersError, match="warmup of 9 steps is longer than the 5-step run"):
        cformers.Trainer(cfg, train_dataset=text, output_dir=tmp_path / "w", lr_schedule__warmup_ratio=0,
                         lr_schedule__warmup_steps=9)

    def boom(record):
        raise KeyError("from the callback")

    t = cformers.Trainer(cfg, train_dataset=text, output_dir=tmp_path / "boom", callbacks=[boom])
    with pytest.raises(KeyError, match="from the callback"):
        t.train()


def test_trainer_refuses_a_shard_with_an_id_past_the_vocabulary(tmp_path):
    """A record shard holding a token id past the vocabulary raises CformersError naming the
    shard, the offset and the id (tests/cli_bad_tokens.sh checks the CLI's exit 1)."""
    tok = os.path.join(DATA, "stories260K", "tok512.model")
    if not os.path.exists(tok):
        pytest.skip(f"no {tok} (shared asset)")
    text = _text(tmp_path)
    cli("preprocess", "--input", str(text), "--tokenizer", tok, "--output", str(tmp_path / "rec"),
        "--valid-fraction", "0", "--quiet")
    import importlib.util
    spec = importlib.util.spec_from_file_location("record_set_token", os.path.join(SRC, "tools", "record_set_token.py"))
    edit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(edit)
    offset = edit.set_token(str(tmp_path / "rec" / "train-00000.cfrec"), 10, 600)
    overrides = {a[2:].split("=")[0].replace(".", "__"): a.split("=", 1)[1] for a in TINY}
    overrides.update(train_dataset__tokenizer=tok, model__model_config__vocab_size=512, runner_config__train_steps=3,
                     runner_config__eval_interval=0, train_dataset__eval_split=0)
    with pytest.raises(cformers.CformersError,
                       match=f"train-00000.cfrec: offset {offset}: token 10 has id 600 outside the vocabulary of 512"):
        cformers.Trainer("tiny_shakespeare", train_dataset=str(tmp_path / "rec"), output_dir=tmp_path / "run",
                         **overrides).train()
