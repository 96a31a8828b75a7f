"""AutoModel / LlamaForCausalLM / GPT2LMHeadModel: a cformers checkpoint (or a Hugging Face
directory or a GGUF file, converted in memory on load) for inference. model(input_ids) gives NumPy logits."""
import ctypes
import os
import tempfile

from . import _lib
from ._lib import lib, check, encode
from .configuration import AutoConfig
from .tokenization import AutoTokenizer


def _checkpoint_path(path):
    """A checkpoint, Hugging Face directory or GGUF file as it is (the library converts the last
    two in memory); a llama2.c .bin converted to a temporary checkpoint."""
    path = os.fspath(path)
    if path.endswith(".bin") and not os.path.isdir(path):
        tmp = tempfile.NamedTemporaryFile(suffix=".ckpt", delete=False)
        tmp.close()
        check(lib.cf_api_convert_llama2c(encode(path), None, encode(tmp.name)), lambda r: r != 0)
        return tmp.name, True
    return path, False


class PreTrainedModel:
    """A model loaded for inference. dtype: the one its matmuls read, "auto" (the default) as the
    checkpoint stores its matrices, or "float32", "bfloat16", "q8_0", "q4_0"."""

    def __init__(self, handle, path):
        self._handle = handle
        self.name_or_path = path
        self.config = AutoConfig(lib.cf_api_model_config(handle))
        tok = lib.cf_api_model_tokenizer(handle)
        self.tokenizer = AutoTokenizer(tok, owner=self) if tok else None

    @classmethod
    def from_pretrained(cls, path, max_seq=0, dtype="auto", adapter=None, adapter_scale=1.0):
        """adapter: a LoRA adapter applied unmerged (a Hugging Face PEFT directory, as PEFT's
        save_pretrained writes it, or a cformers LoRA run's checkpoint; docs/lora.md), its
        alpha / rank times adapter_scale."""
        if dtype not in ("auto", "float32", "bfloat16", "q8_0", "q4_0"):
            raise ValueError(f"dtype must be 'auto', 'float32', 'bfloat16', 'q8_0' or 'q4_0', not {dtype!r}")
        ckpt, temporary = _checkpoint_path(path)
        try:
            handle = check(lib.cf_api_model_load(encode(ckpt), int(max_seq), encode(dtype)), lambda h: not h)
        finally:
            if temporary:
                os.unlink(ckpt)
        if adapter is not None:
            spec = os.fspath(adapter) if adapter_scale == 1.0 else f"{os.fspath(adapter)}:{float(adapter_scale)!r}"
            if lib.cf_api_model_set_lora(handle, encode(spec)) != 0:
                message = _lib.last_error()
                lib.cf_api_model_free(handle)
                raise _lib.CformersError(message)
        arch = _arch_of(handle)
        model_cls = {"llama": LlamaForCausalLM, "gpt2": GPT2LMHeadModel}[arch]
        if cls not in (AutoModel, AutoModelForCausalLM, PreTrainedModel, model_cls):
            lib.cf_api_model_free(handle)
            raise ValueError(f"{os.fspath(path)} holds a {arch} model, not a {cls.__name__}")
        return model_cls(handle, os.fspath(path))

    def __del__(self):
        if getattr(self, "_handle", None):
            lib.cf_api_model_free(self._handle)
            self._handle = None

    @property
    def vocab_size(self):
        return lib.cf_api_model_vocab_size(self._handle)

    @property
    def max_seq(self):
        return lib.cf_api_model_max_seq(self._handle)

    def __call__(self, input_ids):
        """Logits of every position: [n, vocab] for one sequence of n ids, [b, n, vocab] for a
        batch (each row a fresh sequence), as float32 NumPy arrays."""
        import numpy as np
        ids = np.asarray(input_ids)
        if ids.ndim not in (1, 2) or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"input_ids must be a 1-D or 2-D array of integers, got shape {ids.shape} {ids.dtype}")
        rows = ids.reshape(1, -1) if ids.ndim == 1 else ids
        out = np.empty((rows.shape[0], rows.shape[1], self.vocab_size), dtype=np.float32)
        for r in range(rows.shape[0]):
            row = np.ascontiguousarray(rows[r], dtype=np.int32)
            check(lib.cf_api_model_logits(self._handle, row.ctypes.data_as(_lib.i32p), row.size,
                                          out[r].ctypes.data_as(_lib.f32p)), lambda rc: rc != 0)
        return out[0] if ids.ndim == 1 else out

    forward = __call__

    def generate(self, inputs, max_new_tokens=256, temperature=0.0, top_p=1.0, top_k=0, seed=0, do_sample=None,
                 tokenizer=None):
        """Continues `inputs`. A str prompt gives the text (prompt + continuation, as
        `cformers generate --prompt` prints it); ids (list, 1-D or 2-D array) give ids
        (prompt + new ones, per row). temperature 0 is greedy (do_sample=False forces it);
        generation stops after max_new_tokens or at the end of a document."""
        if do_sample is False:
            temperature = 0.0
        if isinstance(inputs, str):
            tok = tokenizer._handle if tokenizer is not None else None
            text = _lib.take_string(lib.cf_api_model_generate_text(self._handle, tok, encode(inputs), int(max_new_tokens),
                                                                    float(temperature), int(top_k), float(top_p),
                                                                    int(seed)))
            return inputs + text
        import numpy as np
        ids = np.asarray(inputs)
        if ids.ndim not in (1, 2) or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"inputs must be a str or ids (1-D or 2-D integers), got shape {ids.shape} {ids.dtype}")
        rows = ids.reshape(1, -1) if ids.ndim == 1 else ids
        results = []
        for r in range(rows.shape[0]):
            row = np.ascontiguousarray(rows[r], dtype=np.int32)
            out = np.empty(max(1, int(max_new_tokens)), dtype=np.int32)
            n = check(lib.cf_api_model_generate_ids(self._handle, row.ctypes.data_as(_lib.i32p), row.size,
                                                    int(max_new_tokens), float(temperature), int(top_k), float(top_p),
                                                    int(seed), out.ctypes.data_as(_lib.i32p)), lambda rc: rc < 0)
            results.append(np.concatenate([row, out[:n]]))
        return results[0] if ids.ndim == 1 else results


def _arch_of(handle):
    buf = ctypes.create_string_buffer(64)
    cfg = lib.cf_api_model_config(handle)
    try:
        lib.cf_api_config_get(cfg, b"model.model_config.arch", buf, len(buf))
    finally:
        lib.cf_api_config_free(cfg)
    return buf.value.decode()


class LlamaForCausalLM(PreTrainedModel):
    """A LLaMA model (MindFormers' and Hugging Face's name for it)."""


class GPT2LMHeadModel(PreTrainedModel):
    """A GPT-2 model."""


class AutoModel(PreTrainedModel):
    """Loads whichever family the checkpoint holds."""


AutoModelForCausalLM = AutoModel
