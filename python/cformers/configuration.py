"""AutoConfig: a resolved cformers config (a preset, a native or MindFormers YAML file, or
a Hugging Face model directory), with its keys as attributes and the exact parameter count."""
import os
import warnings

from . import _lib
from ._lib import lib, check, encode

_KEYS = []
while True:
    _k = lib.cf_api_config_key(len(_KEYS))
    if _k is None:
        break
    _KEYS.append(_k.decode())


def _warn(line, ctx):
    warnings.warn(line.decode("utf-8", "replace"), stacklevel=2)


# Config warnings (MindFormers keys that have no effect here) become Python warnings.
_WARNING_HANDLER = _lib.WARNING_FN(_warn)
lib.cf_api_set_warning_handler(_WARNING_HANDLER, None)


def _value(text):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


class AutoConfig:
    """A cformers config. Keys read as attributes by their last name (`config.hidden_size`,
    `config.batch_size`) or by their full path (`config["runner_config.batch_size"]`)."""

    def __init__(self, handle, source=None, overrides=None):
        self._handle = handle
        # How it was resolved, so a later change resolves again from the same layers with
        # one more override, exactly as `cformers train --config SOURCE --k=v ...` does
        # (derived values such as num_kv_heads follow). None: a model's config, changed in place.
        self._source = source
        self._overrides = overrides

    @classmethod
    def from_pretrained(cls, name_or_path, **overrides):
        """A preset ("llama2_7b"), a YAML file (native or MindFormers) or a Hugging Face
        directory with config.json (its model shape; seq_length its context); keyword
        overrides by full path with '.' as '__' (runner_config__batch_size=8) or a dict
        under `overrides`."""
        extra = [f"{k.replace('__', '.')}={_text(v)}" for k, v in overrides.pop("overrides", {}).items()]
        extra += [f"{k.replace('__', '.')}={_text(v)}" for k, v in overrides.items()]
        source = os.fspath(name_or_path)  # (a Hugging Face directory is read by the C loader)
        return cls(_load(source, extra), source, extra)

    @classmethod
    def for_run(cls, name_or_path, values=None):
        """As from_pretrained with `values` ({full path: value}), loaded as `cformers train`
        loads it: a load_checkpoint's architecture is adopted, so the config need not state
        the model's shape (and must not contradict it)."""
        source, extra = os.fspath(name_or_path), [f"{k}={_text(v)}" for k, v in (values or {}).items()]
        return cls(_load(source, extra, True), source, extra)

    @classmethod
    def from_yaml(cls, path, **overrides):
        return cls.from_pretrained(path, **overrides)

    def __del__(self):
        if getattr(self, "_handle", None):
            lib.cf_api_config_free(self._handle)
            self._handle = None

    @property
    def param_count(self):
        """Exact number of trainable parameters."""
        return lib.cf_api_config_param_count(self._handle)

    def num_parameters(self):
        return self.param_count

    def keys(self):
        return list(_KEYS)

    def __getitem__(self, path):
        buf = _lib.ctypes.create_string_buffer(8192)
        check(lib.cf_api_config_get(self._handle, encode(path), buf, len(buf)), lambda r: r != 0)
        return _value(buf.value.decode("utf-8", "replace"))

    def __setitem__(self, path, value):
        self.update({path: value})

    def update(self, values):
        """Sets keys by full path ({"runner_config.batch_size": 8}); the config is resolved
        again with them as overrides, all at once, and validated."""
        assignments = [f"{k}={_text(v)}" for k, v in values.items()]
        if self._overrides is None:
            for a in assignments:
                check(lib.cf_api_config_set(self._handle, encode(a)), lambda r: r != 0)
            return
        handle = _load(self._source, self._overrides + assignments)
        lib.cf_api_config_free(self._handle)
        self._handle = handle
        self._overrides = self._overrides + assignments

    def _path(self, name):
        matches = [k for k in _KEYS if k == name or k.endswith("." + name)]
        if not matches:
            raise AttributeError(f"cformers config has no key '{name}'")
        if len(matches) > 1:
            raise AttributeError(f"'{name}' is ambiguous: {', '.join(matches)}")
        return matches[0]

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self[self._path(name)]

    def __setattr__(self, name, value):
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            self[self._path(name)] = value

    def copy(self, values=None, for_run=False):
        """A new config: this one with `values` ({full path: value}) set. for_run: loaded as
        `cformers train` loads it (a load_checkpoint's architecture adopted)."""
        assignments = [f"{k}={_text(v)}" for k, v in (values or {}).items()]
        if self._overrides is None:
            import tempfile  # a model's config: through its YAML, which loads back the same
            with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
                f.write(self.to_yaml())
            try:
                return AutoConfig(_load(f.name, assignments, for_run), None, None)
            finally:
                os.unlink(f.name)
        overrides = self._overrides + assignments
        return AutoConfig(_load(self._source, overrides, for_run), self._source, overrides)

    def to_dict(self):
        return {k: self[k] for k in _KEYS}

    def to_yaml(self):
        return _lib.take_string(lib.cf_api_config_yaml(self._handle))

    def save_pretrained(self, path):
        """Writes the config as native YAML that loads back to the same values."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_yaml())

    def __repr__(self):
        return (f"AutoConfig(arch={self['model.model_config.arch']}, params={self.param_count:,}, "
                f"hidden_size={self.hidden_size}, num_layers={self.num_layers})")


def _text(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _load(source, overrides, for_run=False):
    arr = (_lib.c_char_p * max(1, len(overrides)))(*[encode(o) for o in overrides])
    load = lib.cf_api_config_load_for_run if for_run else lib.cf_api_config_load
    return check(load(encode(source) if source is not None else None, arr, len(overrides)),
                 lambda h: not h)
