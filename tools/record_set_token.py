#!/usr/bin/env python3
"""Sets token INDEX of an uncompressed record shard (docs/record-format.md) to ID and fixes
the chunk and index checksums, so the shard is intact except for that id: what a shard made
by another tool or with another vocabulary looks like to the loader. Tests use it to check
that an id past the vocabulary is refused with the shard and offset named.

    record_set_token.py SHARD INDEX ID
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ckpt_reader import crc32c  # noqa: E402  (CRC32C, as cf_crc32c(0, data, len))


def set_token(path, index, token_id):
    """Rewrites token `index` of the shard at `path` as `token_id`; returns its byte offset."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    width, _vocab, _eos, flags, n_chunks = struct.unpack_from("<IIiII", data, 12)
    n_docs, n_tokens, index_offset = struct.unpack_from("<QQQ", data, 32)
    if flags & 1:
        raise SystemExit(f"{path}: zstd chunks; this tool edits uncompressed shards")
    if not 0 <= index < n_tokens:
        raise SystemExit(f"{path}: token {index} of {n_tokens}")
    at = 72 + index * width
    struct.pack_into("<H" if width == 2 else "<I", data, at, token_id)
    for c in range(n_chunks):  # the chunk holding the token gets its checksum again
        entry = index_offset + 24 * c
        offset, stored = struct.unpack_from("<QI", data, entry)
        if offset <= at < offset + stored:
            struct.pack_into("<I", data, entry + 16, crc32c(data[offset:offset + stored]))
    body = 24 * n_chunks + 8 * (n_docs + 1)
    struct.pack_into("<I", data, index_offset + body, crc32c(data[index_offset:index_offset + body]))
    with open(path, "wb") as f:
        f.write(data)
    return at


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    print(set_token(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
