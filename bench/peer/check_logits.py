#!/usr/bin/python3
"""Does a GGUF from hf_to_gguf.py mean the same model as its checkpoint? Every row's logits of a
prompt of token ids from llama.cpp (logits.mjs) against `hlx logits --all` on the checkpoint.

  check_logits.py --hlx build/bin/hlx --checkpoint DIR GGUF [--hlx-weights int4] [--tokens 16]

Prints, per GGUF, the relative L2 distance of the logit rows (worst and median over rows) and how
many rows agree on the top-1 token; exits 1 if a bf16/f16 file's worst row is above --max-rel-l2.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_file_type(path):
    """general.file_type of a GGUF (llama_ftype: 1 f16, 32 bf16, 2 q4_0, ...), None if absent."""
    with open(path, "rb") as f:
        def scalar(t):
            fmt = SCALAR[t]
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

        def string():
            (n,) = struct.unpack("<Q", f.read(8))
            return f.read(n).decode()

        def skip(t):
            if t == 8:
                string()
            elif t == 9:
                et, n = struct.unpack("<IQ", f.read(12))
                for _ in range(n):
                    skip(et)
            else:
                scalar(t)

        magic, _version, _n_tensors, n_kv = struct.unpack("<4sIQQ", f.read(24))
        assert magic == b"GGUF", path
        for _ in range(n_kv):
            key = string()
            (t,) = struct.unpack("<I", f.read(4))
            if key == "general.file_type":
                return scalar(t)
            skip(t)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf", nargs="+")
    ap.add_argument("--hlx", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--hlx-weights", default=None, help="hlx --weights (int8|int4); default: as stored")
    ap.add_argument("--tokens", type=int, default=16, help="prompt length (default 16)")
    ap.add_argument("--max-rel-l2", type=float, default=0.05,
                    help="fail a bf16/f16 GGUF whose worst row is further than this (default 0.05)")
    a = ap.parse_args()

    with open(os.path.join(a.checkpoint, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    rng = np.random.default_rng(7)
    ids = ",".join(str(t) for t in rng.integers(259, vocab, a.tokens))
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        ref_path = os.path.join(tmp, "hlx.npy")
        cmd = [a.hlx, "logits", "-m", a.checkpoint, "--tokens", ids, "--all", "-o", ref_path, "--threads", "2"]
        if a.hlx_weights:
            cmd += ["--weights", a.hlx_weights]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        ref = np.load(ref_path).astype(np.float64).reshape(a.tokens, vocab)
        for gguf in a.gguf:
            out = os.path.join(tmp, "llama.f32")
            subprocess.run(["node", os.path.join(HERE, "logits.mjs"), gguf, ids, out], check=True)
            got = np.fromfile(out, dtype=np.float32).astype(np.float64).reshape(a.tokens, vocab)
            rel = np.linalg.norm(got - ref, axis=1) / np.linalg.norm(ref, axis=1)
            top1 = int((got.argmax(1) == ref.argmax(1)).sum())
            file_type = gguf_file_type(gguf)
            exact = file_type in (0, 1, 32)  # f32, f16, bf16: no quantization
            bad = exact and not a.hlx_weights and rel.max() > a.max_rel_l2
            failed |= bad
            print(json.dumps({"gguf": gguf, "hlx_weights": a.hlx_weights or "as stored", "file_type": file_type, "rows": a.tokens,
                              "rel_l2_max": round(float(rel.max()), 5), "rel_l2_median": round(float(np.median(rel)), 5),
                              "top1_agree": f"{top1}/{a.tokens}", "ok": not bad}))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
