"""Reads a cformers checkpoint (docs/checkpoint-format.md) into numpy arrays, checking the
header and index CRCs as the C reader does.

  import ckpt_reader
  tensors, meta = ckpt_reader.read("out/checkpoint_step0.ckpt")
"""
import json
import struct

import numpy as np

MAGIC = b"CFCKPT\0\0"
DTYPES = {"f32": np.float32, "i32": np.int32, "i8": np.int8, "f16": np.float16}


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def read(path):
    """{name: array} for every f32/i32/i8/f16 tensor (bf16 is skipped), and the metadata."""
    blob = open(path, "rb").read()
    if blob[:8] != MAGIC:
        raise ValueError(f"{path}: not a cformers checkpoint (magic {blob[:8]!r})")
    version, _, size, idx_off, idx_size, meta_off, meta_size, crc_im, crc_head = struct.unpack_from("<IIQQQQQII", blob, 8)
    if crc32c(blob[:60]) != crc_head:
        raise ValueError(f"{path}: header CRC mismatch")
    if version != 1 or size != len(blob):
        raise ValueError(f"{path}: version {version}, file size {len(blob)} (header says {size})")
    if crc32c(blob[idx_off:meta_off + meta_size]) != crc_im:
        raise ValueError(f"{path}: offset {idx_off}: index/metadata CRC mismatch")
    index = json.loads(blob[idx_off:idx_off + idx_size])
    meta = json.loads(blob[meta_off:meta_off + meta_size])
    tensors = {}
    for t in index:
        if t["dtype"] in DTYPES:
            data = np.frombuffer(blob, DTYPES[t["dtype"]], t["nbytes"] // np.dtype(DTYPES[t["dtype"]]).itemsize,
                                 t["offset"])
            tensors[t["name"]] = data.reshape(t["shape"])
    return tensors, meta
