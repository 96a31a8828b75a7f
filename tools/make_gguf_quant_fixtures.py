#!/usr/bin/python3
"""Makes tests/fixtures/gguf/quants.bin: blocks of GGUF's quantized tensor types as llama.cpp's
ggml writes them (ggml_quantize_chunk) and the floats ggml's own dequantize_row_<type> gives
back, so test_gguf_quants checks cformers' dequantization against ggml's, value for value.

    LLAMACPP_LIB=/tmp/llamacpp/build/bin python3 tools/make_gguf_quant_fixtures.py \\
        tests/fixtures/gguf/quants.bin

LLAMACPP_LIB: a directory with libggml-base.so (bench/llamacpp_build.sh builds one); numpy.
File: "GGQF", u32 count, u32 rows, u32 cols, the input rows * cols f32; then per type: u32
ggml type, u32 bytes, the blocks ggml_quantize_chunk made of the input (no importance
matrix: ggml's reference rules), then the rows * cols f32 dequantize_row_<type> gives back.
All little-endian."""
import ctypes
import os
import struct
import sys

import numpy as np

# ggml_type: q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K
TYPES = {"q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "q4_K": 12, "q5_K": 13, "q6_K": 14}
ROWS, COLS = 3, 256  # one K-quant super-block a row


def main(out):
    lib = ctypes.CDLL(os.path.join(os.environ.get("LLAMACPP_LIB", "/tmp/llamacpp/build/bin"), "libggml-base.so"))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    rng = np.random.default_rng(2026)
    # rows of different scales, a row with an outlier and a row of mostly zeros (empty blocks)
    x = (rng.standard_normal((ROWS, COLS)) * np.array([[0.02], [1.0], [30.0]])).astype(np.float32)
    x[1, 5] = 90.0
    x[2, 64:160] = 0.0
    parts = [b"GGQF", struct.pack("<III", len(TYPES), ROWS, COLS), x.astype("<f4").tobytes()]
    for name, t in TYPES.items():
        lib.ggml_quantize_init(t)
        row = lib.ggml_row_size(t, COLS)
        q = ctypes.create_string_buffer(row * ROWS)
        n = lib.ggml_quantize_chunk(t, x.ctypes.data, q, 0, ROWS, COLS, None)
        assert n == row * ROWS, (name, n, row)
        deq = getattr(lib, "dequantize_row_" + name)
        deq.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        y = np.zeros((ROWS, COLS), np.float32)
        deq(q, y.ctypes.data, ROWS * COLS)
        parts += [struct.pack("<II", t, n), q.raw[:n], y.astype("<f4").tobytes()]
        print(f"{name}: {n} bytes, max |x - dequantized| {np.abs(x - y).max():.4g}")
    with open(out, "wb") as f:
        f.write(b"".join(parts))


if __name__ == "__main__":
    main(sys.argv[1])
