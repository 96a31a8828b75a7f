"""ctypes bindings of libcformers' stable C API (include/cformers/api.h).

The library is found, in order, at $CFORMERS_LIBRARY, next to this package (where
`pip install` puts it), or through the system's library path.
"""
import ctypes
import ctypes.util
import os

from .errors import CformersError

_HERE = os.path.dirname(os.path.abspath(__file__))


def _find_library():
    env = os.environ.get("CFORMERS_LIBRARY")
    if env:
        return env
    for name in ("libcformers.so", "libcformers.so.0"):
        path = os.path.join(_HERE, name)
        if os.path.exists(path):
            return path
    found = ctypes.util.find_library("cformers")
    if found:
        return found
    raise ImportError("cformers: libcformers.so not found: set CFORMERS_LIBRARY to its path, or pip install ./python")


lib = ctypes.CDLL(_find_library())

c_char_p, c_int, c_int64, c_double, c_void_p, c_size_t = (
    ctypes.c_char_p, ctypes.c_int, ctypes.c_int64, ctypes.c_double, ctypes.c_void_p, ctypes.c_size_t)
i32p = ctypes.POINTER(ctypes.c_int32)
f32p = ctypes.POINTER(ctypes.c_float)
WARNING_FN = ctypes.CFUNCTYPE(None, c_char_p, c_void_p)
RECORD_FN = ctypes.CFUNCTYPE(None, c_char_p, c_void_p)

_SIGNATURES = {
    "cf_api_version": (c_int, []),
    "cf_api_last_error": (c_char_p, []),
    "cf_api_free": (None, [c_void_p]),
    "cf_api_set_warning_handler": (None, [WARNING_FN, c_void_p]),
    "cf_api_config_load": (c_void_p, [c_char_p, ctypes.POINTER(c_char_p), c_int]),
    "cf_api_config_load_for_run": (c_void_p, [c_char_p, ctypes.POINTER(c_char_p), c_int]),
    "cf_api_config_free": (None, [c_void_p]),
    "cf_api_config_set": (c_int, [c_void_p, c_char_p]),
    "cf_api_config_get": (c_int, [c_void_p, c_char_p, c_char_p, c_size_t]),
    "cf_api_config_key": (c_char_p, [c_int]),
    "cf_api_config_param_count": (c_int64, [c_void_p]),
    "cf_api_config_yaml": (c_void_p, [c_void_p]),
    "cf_api_convert_hf": (c_int, [c_char_p, c_char_p]),
    "cf_api_convert_llama2c": (c_int, [c_char_p, c_char_p, c_char_p]),
    "cf_api_tokenizer_load": (c_void_p, [c_char_p]),
    "cf_api_tokenizer_free": (None, [c_void_p]),
    "cf_api_tokenizer_vocab_size": (c_int, [c_void_p]),
    "cf_api_tokenizer_bos": (c_int, [c_void_p]),
    "cf_api_tokenizer_eos": (c_int, [c_void_p]),
    "cf_api_tokenizer_encode": (c_int64, [c_void_p, c_char_p, c_int, ctypes.POINTER(i32p)]),
    "cf_api_tokenizer_decode": (c_void_p, [c_void_p, i32p, c_int64]),
    "cf_api_model_load": (c_void_p, [c_char_p, c_int64, c_char_p]),
    "cf_api_model_free": (None, [c_void_p]),
    "cf_api_model_set_lora": (c_int, [c_void_p, c_char_p]),
    "cf_api_model_vocab_size": (c_int, [c_void_p]),
    "cf_api_model_max_seq": (c_int64, [c_void_p]),
    "cf_api_model_config": (c_void_p, [c_void_p]),
    "cf_api_model_tokenizer": (c_void_p, [c_void_p]),
    "cf_api_model_logits": (c_int, [c_void_p, i32p, c_int64, f32p]),
    "cf_api_model_generate_ids": (c_int64, [c_void_p, i32p, c_int64, c_int64, c_double, c_int, c_double,
                                            ctypes.c_uint64, i32p]),
    "cf_api_model_generate_text": (c_void_p, [c_void_p, c_void_p, c_char_p, c_int64, c_double, c_int, c_double,
                                              ctypes.c_uint64]),
    "cf_api_trainer_create": (c_void_p, [c_void_p, c_int, c_int, RECORD_FN, c_void_p]),
    "cf_api_trainer_free": (None, [c_void_p]),
    "cf_api_trainer_train": (c_int, [c_void_p]),
    "cf_api_trainer_evaluate": (c_int, [c_void_p, ctypes.POINTER(c_double)]),
    "cf_api_trainer_steps_done": (c_int64, [c_void_p]),
}
for _name, (_res, _args) in _SIGNATURES.items():
    _fn = getattr(lib, _name)
    _fn.restype, _fn.argtypes = _res, _args

API_VERSION = lib.cf_api_version()


def last_error():
    return lib.cf_api_last_error().decode("utf-8", "replace")


def check(result, failed):
    """Raises CformersError with the C library's message when `failed(result)`."""
    if failed(result):
        raise CformersError(last_error())
    return result


def take_string(ptr):
    """A char * the API allocated, as str, freed."""
    if not ptr:
        raise CformersError(last_error())
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        lib.cf_api_free(ptr)


def encode(s):
    return s.encode("utf-8") if isinstance(s, str) else s
