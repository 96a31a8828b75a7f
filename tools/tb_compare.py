#!/usr/bin/env python3
"""Checks a run's TensorBoard event files against its metrics.jsonl with TensorBoard's own
reader: every number of every metrics event must be the scalar <event>/<field> at that
step (as f32). Prints "N scalars match" or the first mismatches and exits 1.

usage: tools/tb_compare.py OUTPUT_DIR   (needs `pip install tensorboard`)
"""
import json
import os
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def main():
    run = sys.argv[1]
    acc = EventAccumulator(os.path.join(run, "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    seen = {(tag, e.step): e.value for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag)}
    want, bad, step = 0, [], 0
    for line in open(os.path.join(run, "metrics.jsonl")):
        ev = json.loads(line)
        step = ev.get("step", step)
        for key, value in ev.items():
            if key in ("event", "time", "step") or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            want += 1
            got = seen.get((f"{ev['event']}/{key}", step))
            if got is None or got != f32(float(value)):
                bad.append(f"{ev['event']}/{key} at step {step}: metrics {value}, TensorBoard {got}")
    if bad or want == 0:
        print("\n".join(bad[:10]) or "no scalars in the metrics file")
        return 1
    print(f"{want} scalars match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
