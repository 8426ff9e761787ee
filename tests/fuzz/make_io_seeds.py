#!/usr/bin/python3
"""Regenerates the small seed corpora for fuzz_safetensors and fuzz_npy (valid and hostile files).

Run with Debian's interpreter (it has numpy):  /usr/bin/python3 tests/fuzz/make_io_seeds.py
"""
import io
import json
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def st(header, data=b'', length=None):
    text = header if isinstance(header, bytes) else json.dumps(header, separators=(',', ':')).encode()
    text += b' ' * (-len(text) % 8)
    return struct.pack('<Q', len(text) if length is None else length) + text + data


def write(corpus, name, blob):
    d = os.path.join(HERE, 'corpus', corpus)
    os.makedirs(d, exist_ok=True)
    assert len(blob) < 4096, (name, len(blob))
    with open(os.path.join(d, name), 'wb') as f:
        f.write(blob)


def safetensors_seeds():
    rng = np.random.default_rng(7)
    f32 = rng.standard_normal(6).astype(np.float32).tobytes()
    bf = rng.integers(0, 1 << 16, 4, dtype=np.uint16).tobytes()
    hdr = {'__metadata__': {'format': 'pt'},
           'a': {'dtype': 'F32', 'shape': [2, 3], 'data_offsets': [0, 24]},
           'b': {'dtype': 'BF16', 'shape': [4], 'data_offsets': [24, 32]},
           'c': {'dtype': 'BOOL', 'shape': [], 'data_offsets': [32, 33]},
           'e': {'dtype': 'I64', 'shape': [0, 5], 'data_offsets': [33, 33]}}
    write('fuzz_safetensors', 'valid_mixed', st(hdr, f32 + bf + b'\x01'))
    write('fuzz_safetensors', 'valid_empty', st({}))
    ints = {'i8': ('I8', 1), 'u8': ('U8', 1), 'i16': ('I16', 2), 'i32': ('I32', 4), 'f16': ('F16', 2)}
    off, h, data = 0, {}, b''
    for name, (dt, size) in ints.items():
        h[name] = {'dtype': dt, 'shape': [3], 'data_offsets': [off, off + 3 * size]}
        off += 3 * size
        data += bytes(range(3 * size))
    write('fuzz_safetensors', 'valid_ints', st(h, data))
    write('fuzz_safetensors', 'bad_overlap', st({'a': {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]},
                                                 'b': {'dtype': 'U8', 'shape': [4], 'data_offsets': [4, 8]}}, b'\0' * 8))
    write('fuzz_safetensors', 'bad_past_end', st({'a': {'dtype': 'F32', 'shape': [4], 'data_offsets': [0, 16]}}, b'\0' * 8))
    write('fuzz_safetensors', 'bad_dtype', st({'a': {'dtype': 'F64', 'shape': [1], 'data_offsets': [0, 8]}}, b'\0' * 8))
    write('fuzz_safetensors', 'bad_shape', st({'a': {'dtype': 'F32', 'shape': [1 << 40, 1 << 40], 'data_offsets': [0, 8]}}, b'\0' * 8))
    write('fuzz_safetensors', 'bad_length', st({}, length=1 << 62))
    write('fuzz_safetensors', 'bad_json', st(b'{"a":{"dtype":"F32","shape":[1],'))


def npy_bytes(a, version=None):
    buf = io.BytesIO()
    if version is None:
        np.save(buf, a)
    else:
        np.lib.format.write_array(buf, a, version=version)
    return buf.getvalue()


def npy_seeds():
    rng = np.random.default_rng(11)
    write('fuzz_npy', 'f4_2x3', npy_bytes(rng.standard_normal((2, 3)).astype(np.float32)))
    write('fuzz_npy', 'f2_scalar', npy_bytes(np.float16(1.5)))
    write('fuzz_npy', 'i8_empty', npy_bytes(np.zeros((0, 4), np.int64)))
    write('fuzz_npy', 'i4_v2', npy_bytes(np.arange(5, dtype=np.int32), version=(2, 0)))
    write('fuzz_npy', 'i2_v3', npy_bytes(np.arange(4, dtype=np.int16), version=(3, 0)))
    write('fuzz_npy', 'u1', npy_bytes(np.arange(7, dtype=np.uint8)))
    write('fuzz_npy', 'i1', npy_bytes(np.arange(-3, 3, dtype=np.int8)))
    write('fuzz_npy', 'b1', npy_bytes(np.array([True, False, True])))
    write('fuzz_npy', 'u2_bf16', npy_bytes(np.array([0x3f80, 0xc000, 0x7fc0], np.uint16)))
    write('fuzz_npy', 'bad_fortran', npy_bytes(np.asfortranarray(np.ones((2, 3), np.float32))))
    write('fuzz_npy', 'bad_big_endian', npy_bytes(np.arange(3, dtype='>i4')))
    write('fuzz_npy', 'bad_truncated', npy_bytes(np.arange(16, dtype=np.float32))[:-7])
    write('fuzz_npy', 'bad_structured', npy_bytes(np.zeros(2, dtype=[('a', '<f4'), ('b', '<i2')])))


if __name__ == '__main__':
    safetensors_seeds()
    npy_seeds()
