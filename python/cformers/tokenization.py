"""AutoTokenizer: SentencePiece models, llama2.c tokenizer.bin, Hugging Face tokenizer.json,
or the tokenizer embedded in a cformers checkpoint."""
import ctypes
import os

from . import _lib
from ._lib import lib, check, encode

_NAMES = ("tokenizer.json", "tokenizer.model", "tokenizer.bin")


class AutoTokenizer:
    def __init__(self, handle, owner=None):
        self._handle = handle
        self._owner = owner  # a model that owns the handle, or None when this object does

    @classmethod
    def from_pretrained(cls, path):
        """A tokenizer file, a checkpoint (.ckpt) with one embedded, or a directory holding
        tokenizer.json / tokenizer.model / tokenizer.bin."""
        path = os.fspath(path)
        if os.path.isdir(path):
            for name in _NAMES:
                if os.path.exists(os.path.join(path, name)):
                    path = os.path.join(path, name)
                    break
        return cls(check(lib.cf_api_tokenizer_load(encode(path)), lambda h: not h))

    def __del__(self):
        if getattr(self, "_handle", None) and self._owner is None:
            lib.cf_api_tokenizer_free(self._handle)
        self._handle = None

    @property
    def vocab_size(self):
        return lib.cf_api_tokenizer_vocab_size(self._handle)

    @property
    def bos_token_id(self):
        v = lib.cf_api_tokenizer_bos(self._handle)
        return None if v < 0 else v

    @property
    def eos_token_id(self):
        v = lib.cf_api_tokenizer_eos(self._handle)
        return None if v < 0 else v

    def __len__(self):
        return self.vocab_size

    def encode(self, text, add_special_tokens=True):
        """Token ids of text (BOS first with add_special_tokens, when the vocabulary has one)."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, not {type(text).__name__}")
        ids = _lib.i32p()
        n = check(lib.cf_api_tokenizer_encode(self._handle, encode(text), int(add_special_tokens), ctypes.byref(ids)),
                  lambda r: r < 0)
        try:
            return [ids[i] for i in range(n)]
        finally:
            lib.cf_api_free(ids)

    def decode(self, ids, skip_special_tokens=False):
        ids = [int(i) for i in _flat(ids)]
        if skip_special_tokens:
            special = {self.bos_token_id, self.eos_token_id}
            ids = [i for i in ids if i not in special]
        arr = (ctypes.c_int32 * max(1, len(ids)))(*ids)
        return _lib.take_string(lib.cf_api_tokenizer_decode(self._handle, arr, len(ids)))

    def batch_decode(self, sequences, skip_special_tokens=False):
        return [self.decode(s, skip_special_tokens) for s in sequences]

    def __call__(self, text, add_special_tokens=True, padding=False, return_tensors=None):
        """As Hugging Face tokenizers: {"input_ids": ..., "attention_mask": ...} for a str or
        a list of str; return_tensors="np" pads to the longest (right, with pad = eos or 0)
        and returns NumPy arrays."""
        single = isinstance(text, str)
        batch = [self.encode(t, add_special_tokens) for t in ([text] if single else text)]
        if return_tensors is None and not padding:
            ids = batch[0] if single else batch
            mask = [1] * len(ids) if single else [[1] * len(b) for b in batch]
            return {"input_ids": ids, "attention_mask": mask}
        if return_tensors not in (None, "np"):
            raise ValueError(f"return_tensors must be 'np' (cformers returns NumPy arrays), not {return_tensors!r}")
        import numpy as np
        width = max(len(b) for b in batch)
        pad = self.eos_token_id or 0
        ids = np.full((len(batch), width), pad, dtype=np.int32)
        mask = np.zeros((len(batch), width), dtype=np.int32)
        for r, b in enumerate(batch):
            ids[r, :len(b)] = b
            mask[r, :len(b)] = 1
        return {"input_ids": ids, "attention_mask": mask}


def _flat(ids):
    try:
        import numpy as np
        if isinstance(ids, np.ndarray):
            return ids.reshape(-1).tolist()
    except ImportError:
        pass
    return list(ids)
