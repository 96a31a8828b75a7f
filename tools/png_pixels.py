#!/usr/bin/env python3
"""Counts the drawn pixels of a PNG screenshot (8-bit RGB or RGBA, not interlaced, as
headless Chromium writes them), with the standard library alone: the pixels whose colour is
saturated (chart lines and fills, not the page's greys and text), and those near each
colour given as #rrggbb. Prints `saturated N` and `#rrggbb N` lines.

usage: png_pixels.py FILE [#rrggbb ...]"""
import struct
import sys
import zlib


def read_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path}: not a PNG file")
    pos, idat, head = 8, b"", None
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = head
    if depth != 8 or colour not in (2, 6) or interlace:
        sys.exit(f"{path}: only 8-bit RGB/RGBA non-interlaced PNGs (depth {depth}, colour type {colour})")
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return width, height, bpp, rows


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    width, height, bpp, rows = read_png(sys.argv[1])
    wanted = [(c, tuple(int(c[i:i + 2], 16) for i in (1, 3, 5))) for c in sys.argv[2:]]
    saturated, near = 0, [0] * len(wanted)
    for line in rows:
        for x in range(0, width * bpp, bpp):
            r, g, b = line[x], line[x + 1], line[x + 2]
            if max(r, g, b) - min(r, g, b) > 60:
                saturated += 1
            for k, (_, (wr, wg, wb)) in enumerate(wanted):
                if abs(r - wr) + abs(g - wg) + abs(b - wb) < 60:
                    near[k] += 1
    print(f"size {width}x{height}")
    print(f"saturated {saturated}")
    for (c, _), n in zip(wanted, near):
        print(f"{c} {n}")


if __name__ == "__main__":
    main()
