#!/usr/bin/python3
"""Regenerates the seed corpus of fuzz_image: small PNGs and JPEGs of each colour mode the decoder
handles, plus the hostile inputs of issue 24 (a 1x599186 PNG of ~2.4 KB whose CLIP resize used to
take ~1.9 GB; a wide one; a header declaring a huge size).

Run with Debian's interpreter (it has PIL):  /usr/bin/python3 tests/fuzz/make_image_seeds.py
"""
import io
import os
import struct
import zlib

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, 'corpus', 'fuzz_image')


def write(name, blob):
    assert len(blob) < 4096, (name, len(blob))  # run.sh passes -max_len=4096
    with open(os.path.join(OUT, name), 'wb') as f:
        f.write(blob)


def save(img, fmt, **kw):
    b = io.BytesIO()
    img.save(b, fmt, **kw)
    return b.getvalue()


def png_chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))


def adam7_png(a):
    """An Adam7-interlaced 8-bit RGB PNG of array a (PIL cannot write interlaced PNGs)."""
    h, w, _ = a.shape
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    raw = b''
    for x0, y0, dx, dy in passes:
        sub = a[y0::dy, x0::dx]
        if sub.size:
            raw += b''.join(b'\x00' + row.tobytes() for row in sub)
    ihdr = struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 1)
    return (b'\x89PNG\r\n\x1a\n' + png_chunk(b'IHDR', ihdr) + png_chunk(b'IDAT', zlib.compress(raw)) +
            png_chunk(b'IEND', b''))


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(24)
    rgb = Image.fromarray(rng.integers(0, 256, size=(5, 7, 3), dtype=np.uint8), 'RGB')
    write('rgb_7x5.png', save(rgb, 'PNG'))
    write('rgb_7x5_interlaced.png', adam7_png(np.asarray(rgb)))
    write('rgba_7x5.png', save(rgb.convert('RGBA'), 'PNG'))
    write('gray1_9x4.png', save(rgb.convert('1'), 'PNG'))
    write('palette_trns.png', save(rgb.convert('P'), 'PNG', transparency=3))
    g16 = Image.fromarray(rng.integers(0, 65536, size=(4, 6)).astype(np.uint16))
    write('gray16_6x4.png', save(g16, 'PNG'))
    write('rgb_7x5.jpg', save(rgb, 'JPEG', quality=90))
    write('gray_7x5.jpg', save(rgb.convert('L'), 'JPEG'))
    write('cmyk_7x5.jpg', save(rgb.convert('CMYK'), 'JPEG'))
    exif = Image.Exif()
    exif[0x0112] = 6
    write('rgb_exif6.jpg', save(rgb, 'JPEG', exif=exif.tobytes()))
    write('rgb_exif8.png', save(rgb, 'PNG', exif=exif.tobytes()))
    # Issue 24: 1x599186 (under the 16.7 M pixel decode limit), aspect ratio 599186.
    write('tall_1x599186.png', save(Image.new('RGB', (1, 599186)), 'PNG', optimize=True))
    write('tall_1x60000.png', save(Image.new('RGB', (1, 60000), (5, 6, 7)), 'PNG', optimize=True))  # fits the fuzzer's cap
    write('wide_40000x1.png', save(Image.new('RGB', (40000, 1), (9, 99, 199)), 'PNG', optimize=True))
    write('ratio_200_1x200.png', save(Image.new('RGB', (1, 200), (1, 2, 3)), 'PNG'))
    write('ratio_201_201x1.png', save(Image.new('RGB', (201, 1), (1, 2, 3)), 'PNG'))
    # A valid signature and IHDR declaring 100000 x 100000 with no data.
    ihdr = struct.pack('>IIBBBBB', 100000, 100000, 8, 2, 0, 0, 0)
    write('huge_header.png', b'\x89PNG\r\n\x1a\n' + png_chunk(b'IHDR', ihdr))


if __name__ == '__main__':
    main()
