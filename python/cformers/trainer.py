"""Trainer: `cformers train` in process. Callbacks receive every metrics record (the
objects metrics.jsonl holds) as the run goes."""
import json
import math
import os

from . import _lib
from ._lib import lib, check
from .configuration import AutoConfig


class TrainerCallback:
    """Override what you need; `record` is the metrics record as a dict."""

    def on_log(self, record):  # every record
        pass

    def on_step_end(self, record):  # {"event": "train", "step": ..., "loss": ..., ...}
        pass

    def on_evaluate(self, record):  # {"event": "eval", "step": ..., "val_loss": ...}
        pass


class Trainer:
    """Trainer(config, train_dataset=None, eval_split=None, output_dir=None, callbacks=None,
    **overrides): config is an AutoConfig, a preset name or a YAML file (native or
    MindFormers); train_dataset a record directory or a .txt file (train_dataset.data_dir);
    overrides by full path with '.' as '__' (runner_config__train_steps=20)."""

    def __init__(self, config, train_dataset=None, eval_split=None, output_dir=None, callbacks=None, quiet=True,
                 overwrite=True, **overrides):
        values = {k.replace("__", "."): v for k, v in overrides.items()}
        if train_dataset is not None:
            values["train_dataset.data_dir"] = os.fspath(train_dataset)
        if eval_split is not None:
            values["train_dataset.eval_split"] = eval_split
        if output_dir is not None:
            values["output_dir"] = os.fspath(output_dir)
        # loaded as `cformers train` loads it (load_checkpoint's architecture adopted); the
        # caller's config stays as it was
        config = config.copy(values, for_run=True) if isinstance(config, AutoConfig) else \
            AutoConfig.for_run(config, values)
        self.config = config
        self.callbacks = list(callbacks or [])
        self.log_history = []
        self._callback = _lib.RECORD_FN(self._on_record)  # kept alive as long as the trainer
        self._error = None
        self._handle = check(lib.cf_api_trainer_create(config._handle, int(quiet), int(overwrite), self._callback, None),
                             lambda h: not h)

    def __del__(self):
        if getattr(self, "_handle", None):
            lib.cf_api_trainer_free(self._handle)
            self._handle = None

    def add_callback(self, callback):
        self.callbacks.append(callback)

    def _on_record(self, text, ctx):
        record = json.loads(text.decode("utf-8"))
        self.log_history.append(record)
        try:
            for cb in self.callbacks:
                if callable(cb) and not isinstance(cb, TrainerCallback):
                    cb(record)
                    continue
                cb.on_log(record)
                if record.get("event") == "train":
                    cb.on_step_end(record)
                elif record.get("event") == "eval":
                    cb.on_evaluate(record)
        except BaseException as e:  # raised again after the C call returns
            if self._error is None:
                self._error = e

    def train(self):
        """Trains to runner_config.train_steps (or epochs passes over the data); returns
        {"global_step": N, "losses": [loss of each step]}."""
        rc = lib.cf_api_trainer_train(self._handle)
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        check(rc, lambda r: r != 0)
        losses = {r["step"]: r["loss"] for r in self.log_history if r.get("event") == "train"}
        return {"global_step": self.steps_done, "losses": [losses[s] for s in sorted(losses)]}

    def evaluate(self):
        """Mean loss over runner_config.eval_steps held-out batches (train_dataset.eval_split)."""
        loss = _lib.c_double()
        check(lib.cf_api_trainer_evaluate(self._handle, _lib.ctypes.byref(loss)), lambda r: r != 0)
        result = {"eval_loss": loss.value, "eval_perplexity": math.exp(loss.value), "step": self.steps_done}
        for cb in self.callbacks:
            if isinstance(cb, TrainerCallback):
                cb.on_evaluate(dict(result, event="evaluate"))
        return result

    @property
    def steps_done(self):
        return lib.cf_api_trainer_steps_done(self._handle)
