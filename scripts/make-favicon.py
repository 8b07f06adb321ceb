#!/usr/bin/env python3
"""Writes shared/api/src/pages/assets/favicon.ico, the icon `GET /favicon.ico` serves
(docs/API.md §13): a white envelope on a blue rounded square, 16×16 and 32×32, each a PNG
inside one ICO file. Standard library only; the output is deterministic, so running it again
changes nothing unless this script changed.

    python3 scripts/make-favicon.py
"""

import os
import struct
import zlib

BLUE = (0x0B, 0x57, 0xD0)
WHITE = (0xFF, 0xFF, 0xFF)
SAMPLES = 6  # per pixel and axis: anti-aliasing by supersampling


def inside_rounded_square(x, y, size, radius):
    cx = min(max(x, radius), size - radius)
    cy = min(max(y, radius), size - radius)
    return (x - cx) ** 2 + (y - cy) ** 2 <= radius**2


def distance_to_segment(px, py, ax, ay, bx, by):
    dx, dy = bx - ax, by - ay
    t = max(0.0, min(1.0, ((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy)))
    qx, qy = ax + t * dx, ay + t * dy
    return ((px - qx) ** 2 + (py - qy) ** 2) ** 0.5


def shade(x, y):
    """The colour at (x, y) in a 32-unit square: None outside the icon."""
    if not inside_rounded_square(x, y, 32.0, 7.0):
        return None
    # The envelope: a white card, its flap a blue V.
    left, right, top, bottom = 6.0, 26.0, 10.0, 24.0
    if left <= x <= right and top <= y <= bottom:
        middle = ((left + right) / 2, 18.0)
        flap = min(
            distance_to_segment(x, y, left, top, *middle),
            distance_to_segment(x, y, right, top, *middle),
        )
        return BLUE if flap <= 1.5 else WHITE
    return BLUE


def render(size):
    rows = []
    scale = 32.0 / size
    for j in range(size):
        row = bytearray([0])  # filter: none
        for i in range(size):
            r = g = b = a = 0
            for sj in range(SAMPLES):
                for si in range(SAMPLES):
                    x = (i + (si + 0.5) / SAMPLES) * scale
                    y = (j + (sj + 0.5) / SAMPLES) * scale
                    c = shade(x, y)
                    if c is not None:
                        r, g, b, a = r + c[0], g + c[1], b + c[2], a + 1
            n = SAMPLES * SAMPLES
            if a:
                row += bytes([round(r / a), round(g / a), round(b / a), round(255 * a / n)])
            else:
                row += bytes(4)
        rows.append(bytes(row))
    return b"".join(rows)


def png(size):
    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)  # 8-bit RGBA
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(render(size), 9))
        + chunk(b"IEND", b"")
    )


def ico(sizes):
    images = [png(s) for s in sizes]
    out = struct.pack("<HHH", 0, 1, len(images))
    offset = 6 + 16 * len(images)
    for size, data in zip(sizes, images):
        out += struct.pack("<BBBBHHII", size % 256, size % 256, 0, 0, 1, 32, len(data), offset)
        offset += len(data)
    return out + b"".join(images)


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "shared", "api", "src", "pages", "assets", "favicon.ico")
    data = ico([16, 32])
    with open(path, "wb") as f:
        f.write(data)
    print(f"{os.path.normpath(path)}: {len(data)} bytes")
