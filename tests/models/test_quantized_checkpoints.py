"""AWQ and GPTQ checkpoints loaded as stored, end to end, against the numpy reference (reference.py)
run on weights this file dequantizes itself from the stored tensors, following the methods' public
format definitions (not hlx's C++ unpacking):

AWQ (version gemm): qweight int32 [in, out / 8], qzeros int32 [in / group, out / 8]; word c holds
  columns 8c .. 8c + 7 with column 8c + j in bits 4 * pos[j] .. +3, pos = [0, 4, 1, 5, 2, 6, 3, 7]
  (AutoAWQ packs with order [0, 2, 4, 6, 1, 3, 5, 7]); scales f16 [in / group, out];
  W[out, in] = ((q - z) * s).T with the row group = in // group.
GPTQ (auto-gptq / optimum, checkpoint_format gptq): qweight int32 [in / 8, out], row 8r + i in bits
  4i..4i+3 of word r; qzeros int32 [groups, out / 8], column 8c + i in bits 4i..; the stored value is
  zero - 1; scales f16 [groups, out]; g_idx int32 [in]: W[:, k] uses group g_idx[k].

hlx quantizes the activations of these products per row and weight group to int16 (matmul_int4.h;
test_int4_reference.quantize_act_groups: the group of input k is k // group_size for AWQ, g_idx[k]
for GPTQ) and multiplies them by these weights with f32 accumulation, so the reference's quantized
linear layers are s_a * q_a @ W in f64 (the other layers, stored f32, x @ W as reference.py). The
engine's and numpy's f32 activations differ by ~1e-6 relative (norm and softmax orders), and where
that straddles an int16 rounding midpoint the two take an activation one step (max |x| / 32767 of
its group) apart; a few such steps over a run move the tiny fixtures' logits by at most 4.6e-4 of
their std (measured: 0.0002-0.0015 at std 3.1-4.1). So: logits of every row within LOGIT_REL_TOL x
the reference logits' std (test_int4_reference.py's), a reading with the nibbles in plain order
(or g_idx ignored) more than 100x farther, and 32 greedy tokens equal or diverging only where the
reference's top-2 gap is below twice the measured logit error (a step-sized near-tie). Bad inputs: a wrong
packed shape, a group size not dividing K, a missing scales tensor, a NaN scale, an unknown method or
bit width: each a nonzero exit whose message names the tensor or option.

Run: /usr/bin/python3 test_quantized_checkpoints.py --hlx path/to/hlx
"""
import argparse
import json
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402
from test_int4_reference import LOGIT_REL_TOL, quantize_act_groups  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
from hlxtest import check, failures, run  # noqa: E402

N_NEW = 32
PROMPTS = [[5, 17, 42, 99, 3, 250, 7], [300, 12, 77, 140, 9, 64, 201, 33], [1, 2, 3, 4, 5, 6, 7, 8, 9],
           [311, 47, 180, 26, 95, 160, 4]]


def nibbles(words):
    """int32 [..., c] -> uint8 [..., c, 8]: nibble i = bits 4i..4i+3."""
    u = words.astype(np.int64) & 0xFFFFFFFF
    return np.stack([(u >> (4 * i)) & 15 for i in range(8)], axis=-1).astype(np.int64)


AWQ_POS = [0, 4, 1, 5, 2, 6, 3, 7]


def dequant_awq(qweight, qzeros, scales, group, plain_order=False):
    pos = list(range(8)) if plain_order else AWQ_POS
    q = nibbles(qweight)[..., pos].reshape(qweight.shape[0], -1)  # [in, out]
    z = nibbles(qzeros)[..., pos].reshape(qzeros.shape[0], -1)    # [groups, out]
    rows = np.arange(q.shape[0]) // group
    w = (q - z[rows]).astype(np.float64) * scales.astype(np.float64)[rows]
    return w.T  # [out, in]


def dequant_gptq(qweight, qzeros, scales, g_idx, plain_order=False):
    q = np.transpose(nibbles(qweight), (0, 2, 1)).reshape(-1, qweight.shape[1])  # [in, out]: row 8r + i
    z = nibbles(qzeros).reshape(qzeros.shape[0], -1) + 1                         # [groups, out]
    if plain_order:  # a reader that ignored g_idx
        g_idx = np.arange(q.shape[0]) // (q.shape[0] // scales.shape[0])
    w = (q - z[g_idx]).astype(np.float64) * scales.astype(np.float64)[g_idx]
    return w.T


class QuantModel(reference.Model):
    """reference.Model on the dequantized weights; their matmuls s_a * q_a @ W in f64."""

    def __init__(self, model_dir, plain_order=False):
        super().__init__(model_dir)
        qc = self.root["quantization_config"]
        self.gidx = {}  # id(dequantized weight) -> group of each input k
        for name in [n for n in self.w if n.endswith(".qweight")]:
            base = name[:-len(".qweight")]
            if qc["quant_method"] == "awq":
                w = dequant_awq(self.w[name], self.w[base + ".qzeros"], self.w[base + ".scales"], qc["group_size"],
                                plain_order)
                gidx = np.arange(w.shape[1]) // qc["group_size"]
            else:
                w = dequant_gptq(self.w[name], self.w[base + ".qzeros"], self.w[base + ".scales"],
                                 self.w[base + ".g_idx"], plain_order)
                gidx = np.arange(w.shape[1]) // qc["group_size"] if plain_order else self.w[base + ".g_idx"]
            self.w[base + ".weight"] = w
            self.gidx[id(w)] = np.asarray(gidx)

    def linear(self, x, w, b=None):
        if id(w) not in self.gidx:
            return super().linear(x, w, b)
        y = quantize_act_groups(x, self.gidx[id(w)]) @ np.asarray(w, dtype=np.float64).T
        if b is not None:
            y = y + b
        return y.astype(np.float32)


def test_method(hlx, tmp, family, quant):
    model_dir = os.path.join(tmp, f"{family}-{quant}")
    run([hlx, "fixture", "--family", family, "--out", model_dir, "--dtype", "f32", "--seed", "3", "--no-tokenizer",
         "--quant", quant])
    qm = QuantModel(model_dir)
    prompt = PROMPTS[0]
    want, steps = reference.greedy_model(qm, prompt, N_NEW, stop_at_eos=True)
    ref = qm.forward(prompt)
    tol = LOGIT_REL_TOL * float(ref.std())
    wrong = QuantModel(model_dir, plain_order=True).forward(prompt)
    out = os.path.join(tmp, f"{family}-{quant}.npy")
    run([hlx, "logits", "-m", model_dir, "--tokens", ",".join(map(str, prompt)), "--all", "--kv-dtype", "f32",
         "-o", out])
    got = np.load(out)
    err = float("inf")
    if check(got.shape == ref.shape, f"{family} {quant}: logits shape {got.shape}, want {ref.shape}"):
        err = float(np.abs(got - ref).max())
        far = float(np.abs(got - wrong).max())
        check(err <= tol, f"{family} {quant}: logits max abs error {err:.3g} > {tol:.3g}")
        check(far > 100 * err, f"{family} {quant}: only {far:.3g} from a plain-order reading (error {err:.3g})")
        print(f"{family} {quant}: logits max abs error {err:.3g} (tolerance {tol:.3g}); "
              f"{far:.3g} from the plain-order reading")
    toks = run([hlx, "generate", "-m", model_dir, "--tokens", ",".join(map(str, prompt)), "-n", str(N_NEW),
                "--kv-dtype", "f32"]).stdout.strip()
    got_tokens = [int(t) for t in toks.split(",")] if toks else []
    div = next((i for i in range(min(len(got_tokens), len(want))) if got_tokens[i] != want[i]), None)
    if div is None:
        check(got_tokens == want, f"{family} {quant}: generate {got_tokens} != reference {want}")
        print(f"{family} {quant}: {len(got_tokens)} greedy tokens match")
    else:
        gap = reference.top2_gap(steps[div])
        check(gap < 2 * err, f"{family} {quant}: diverges at step {div} where the reference's top-2 gap {gap:.4f} "
                             f">= 2 x the logit error {err:.4f}")
        print(f"{family} {quant}: greedy tokens equal for {div} steps, then a near-tie (gap {gap:.4f})")


# --- bad inputs: a good fixture rewritten ---------------------------------------------------------

def read_st(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def write_st(path, tensors):
    """tensors: list of (name, safetensors dtype, shape, bytes)."""
    header, off, blobs = {}, 0, []
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def edited(src, dst, edit_tensors=None, edit_config=None):
    os.makedirs(dst, exist_ok=True)
    for fn in ("config.json", "generation_config.json"):
        with open(os.path.join(src, fn)) as f:
            text = f.read()
        if fn == "config.json" and edit_config:
            cfg = json.loads(text)
            edit_config(cfg["quantization_config"])
            text = json.dumps(cfg)
        with open(os.path.join(dst, fn), "w") as f:
            f.write(text)
    header, body = read_st(os.path.join(src, "model.safetensors"))
    tensors = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        tensors.append([name, info["dtype"], info["shape"], body[b:e]])
    if edit_tensors:
        tensors = edit_tensors(tensors)
    write_st(os.path.join(dst, "model.safetensors"), tensors)
    return dst


def expect_error(hlx, model_dir, needles, what):
    p = run([hlx, "generate", "-m", model_dir, "--tokens", "1,2,3", "-n", "1"], ok=False)
    ok = p.returncode != 0 and all(s in p.stderr for s in needles)
    check(ok, f"{what}: exit {p.returncode}, stderr {p.stderr.strip()!r} (want {needles})")
    if ok:
        print(f"{what}: refused: {p.stderr.strip().splitlines()[-1][:160]}")


def test_bad_inputs(hlx, tmp):
    good = os.path.join(tmp, "qwen3-awq")
    t = "model.layers.1.mlp.up_proj"

    def drop_scales(ts):
        return [x for x in ts if x[0] != t + ".scales"]

    def nan_scale(ts):
        for x in ts:
            if x[0] == t + ".scales":
                a = bytearray(x[3])
                a[2:4] = np.array([np.nan], dtype="<f2").tobytes()
                x[3] = bytes(a)
        return ts

    def wrong_shape(ts):
        for x in ts:
            if x[0] == t + ".qweight":
                x[2] = [x[2][0] // 2, x[2][1] * 2]
        return ts

    expect_error(hlx, edited(good, os.path.join(tmp, "bad1"), drop_scales), [t + ".scales"], "missing scales")
    expect_error(hlx, edited(good, os.path.join(tmp, "bad2"), nan_scale), [t + ".scales", "not finite"], "NaN scale")
    expect_error(hlx, edited(good, os.path.join(tmp, "bad3"), wrong_shape), [t + ".qweight", "shape"],
                 "wrong packed shape")

    def group48(q):
        q["group_size"] = 48  # 64 % 48 != 0
    expect_error(hlx, edited(good, os.path.join(tmp, "bad4"), edit_config=group48), ["group_size 48", "does not divide"],
                 "group size not dividing K")

    def bits8(q):
        q["bits"] = 8
    expect_error(hlx, edited(good, os.path.join(tmp, "bad5"), edit_config=bits8), ["bits 8", "unsupported"],
                 "8-bit awq")

    def method(q):
        q["quant_method"] = "bitsandbytes"
    expect_error(hlx, edited(good, os.path.join(tmp, "bad6"), edit_config=method), ["bitsandbytes"], "unknown method")

    def gemv(q):
        q["version"] = "gemv"
    expect_error(hlx, edited(good, os.path.join(tmp, "bad7"), edit_config=gemv), ["version 'gemv'"], "awq gemv")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    ap.add_argument("--quant", action="append", help="restrict to these methods (awq, gptq)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hlx_quant_") as tmp:
        for quant in args.quant or ["awq", "gptq"]:
            for family in ["qwen3", "llama", "gemma3_text"]:
                test_method(args.hlx, tmp, family, quant)
        if os.path.isdir(os.path.join(tmp, "qwen3-awq")):
            test_bad_inputs(args.hlx, tmp)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("quantized checkpoints match the numpy dequantized reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
