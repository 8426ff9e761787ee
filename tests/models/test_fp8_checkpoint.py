"""FP8 block-scaled checkpoints (quant_method "fp8", weight_block_size [128, 128], as Qwen3-*-FP8
publish them) loaded as stored, end to end, against the numpy reference (reference.py) run on
weights this file dequantizes itself from the stored bytes:

float8_e4m3fn, decoded here from its definition: bit 7 sign, bits 3..6 exponent e (bias 7), bits
0..2 mantissa m; e = 0: subnormal m / 8 * 2^-6; e > 0: (1 + m / 8) * 2^(e - 7); 0x7f and 0xff are
NaN and there is no infinity (e = 15 with m < 7 is an ordinary number, up to 448).
weight F8_E4M3 [out, in], weight_scale_inv f32 [ceil(out / 128), ceil(in / 128)]:
W[n, k] = e4m3(weight[n, k]) * weight_scale_inv[n // 128, k // 128] (an f32 product).

hlx runs these layers on its int8 kernels (engine/quantized_weight.h): W is requantized per output
row by the int8 rule, which test_int8_reference.py's numpy implements from matmul_int8.h (weights
per row, activations per row to int16, exact chunked integer sums). So the reference's fp8 linear
layers are that int8 product of the dequantized W, and its other layers (lm_head, stored f32) plain
f32; with `--weights int4` every matmul weight, dequantized W included, goes through
test_int4_reference.py's int4 rule. The fixture (`hlx fixture --quant fp8`) has hidden 200,
intermediate 328, heads of 48: every layer has full and short edge blocks in both directions.

Checks: logits of every row within the int8 test's tolerance (3x the reference's own movement under
1e-7 relative input noise, at least 1e-4) of the reference; a reader that walks the scale grid in
column-major order (a wrong block layout) more than 100x farther; 32 greedy tokens equal (the
prompt is chosen with every step's top-2 gap above twice the tolerance). `--weights int4`: logits
within test_int4_reference.py's relative tolerance. Bad inputs, each a nonzero exit whose message
names the tensor or option: missing scales, a scale grid of the wrong shape, a NaN scale, a NaN
weight code, an fp8 weight of a module listed in modules_to_not_convert, fmt e5m2, an F8_E5M2
tensor, block size [64, 64], activation_scheme static.

Run: /usr/bin/python3 test_fp8_checkpoint.py --hlx path/to/hlx
"""
import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402
import test_int4_reference as int4  # noqa: E402
import test_int8_reference as int8  # noqa: E402
from test_quantized_checkpoints import check, edited, expect_error, failures, run  # noqa: E402

N_NEW = 32
BLOCK = 128
FAMILIES = ["qwen3", "llama", "gemma3_text"]


def decode_e4m3(codes):
    """uint8 array -> f32 values (NaN for 0x7f / 0xff)."""
    c = np.asarray(codes, dtype=np.int64)
    sign = np.where(c & 0x80, -1.0, 1.0)
    e = (c >> 3) & 15
    m = (c & 7).astype(np.float64)
    mag = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1.0 + m / 8.0) * np.exp2(e - 7.0))
    mag = np.where((c & 0x7f) == 0x7f, np.nan, mag)
    return (sign * mag).astype(np.float32)  # every e4m3 value is exact in f32


def dequant_fp8(codes, scale_inv, column_major=False):
    n, k = codes.shape
    s = np.asarray(scale_inv, dtype=np.float32)
    if column_major:  # a reader that walks the block grid column by column
        s = s.T.reshape(s.shape)
    full = np.repeat(np.repeat(s, BLOCK, axis=0), BLOCK, axis=1)[:n, :k]
    return decode_e4m3(codes) * full  # f32 product, one rounding, as hlx's loader


def fp8_names(model):
    return [n for n, dt in model.dtypes.items() if dt == "F8_E4M3"]


class Fp8Model(reference.Model):
    """reference.Model on the dequantized fp8 weights: those layers' matmuls are int8 products,
    the others (stored f32) plain f32."""

    def __init__(self, model_dir, column_major=False, noise_seed=None):
        super().__init__(model_dir)
        self._q = {}
        self._noise = None if noise_seed is None else np.random.default_rng(noise_seed)
        for name in fp8_names(self):
            base = name[:-len(".weight")]
            w = dequant_fp8(self.w[name], self.w[base + ".weight_scale_inv"], column_major)
            self.w[name] = w
            self._q[id(w)] = (w, int8.quantize(w))  # keep w alive so its id stays unique

    def linear(self, x, w, b=None):
        x = np.asarray(x, dtype=np.float32)
        if self._noise is not None:  # for the sensitivity measurement only
            x = x * (np.float32(1) + np.float32(int8.NOISE) * self._noise.standard_normal(x.shape).astype(np.float32))
        if id(w) not in self._q:
            return super().linear(x, w, b)
        q, scale = self._q[id(w)][1]
        y = int8.int8_matmul(x.reshape(-1, x.shape[-1]), q, scale).reshape(x.shape[:-1] + (q.shape[0],))
        if b is not None:
            y = y + b
        return y.astype(np.float32)


class Fp8Int4Model(int4.Int4Model):
    """`--weights int4`: every matmul weight (the dequantized fp8 ones included) int4-quantized."""

    def __init__(self, model_dir):
        super().__init__(model_dir)
        for name in fp8_names(self):
            base = name[:-len(".weight")]
            self.w[name] = dequant_fp8(self.w[name], self.w[base + ".weight_scale_inv"])


def logits(hlx, tmp, model_dir, prompt, tag, extra=()):
    out = os.path.join(tmp, f"{os.path.basename(model_dir)}-{tag}.npy")
    run([hlx, "logits", "-m", model_dir, "--tokens", ",".join(map(str, prompt)), "--all", "--kv-dtype", "f32",
         "-o", out, *extra])
    return np.load(out)


def test_family(hlx, tmp, family):
    model_dir = os.path.join(tmp, f"{family}-fp8")
    run([hlx, "fixture", "--family", family, "--out", model_dir, "--dtype", "f32", "--seed", "5", "--no-tokenizer",
         "--quant", "fp8"])
    qm = Fp8Model(model_dir)
    base = qm.forward(reference.CANDIDATE_PROMPTS[0])
    sens = max(float(np.abs(Fp8Model(model_dir, noise_seed=s).forward(reference.CANDIDATE_PROMPTS[0]) - base).max())
               for s in (1, 2))
    tol = max(int8.LOGIT_TOL, int8.LOGIT_TOL_FACTOR * sens)
    prompt, want = None, None
    for p in reference.CANDIDATE_PROMPTS:
        toks, steps = reference.greedy_model(qm, p, N_NEW, stop_at_eos=True)
        if len(toks) == N_NEW and min(reference.top2_gap(r) for r in steps) >= 2 * tol:
            prompt, want = p, toks
            break
    if not check(prompt is not None, f"{family} fp8: no prompt gives {N_NEW} unambiguous reference tokens"):
        return
    ref = qm.forward(prompt)
    wrong = Fp8Model(model_dir, column_major=True).forward(prompt)
    got = logits(hlx, tmp, model_dir, prompt, "stored")
    if check(got.shape == ref.shape, f"{family} fp8: logits shape {got.shape}, want {ref.shape}"):
        err = float(np.abs(got - ref).max())
        far = float(np.abs(got - wrong).max())
        check(err <= tol, f"{family} fp8: logits max abs error {err:.3g} > {tol:.3g}")
        check(far > 100 * tol, f"{family} fp8: only {far:.3g} from a column-major scale-grid reading (tol {tol:.3g})")
        print(f"{family} fp8: logits max abs error {err:.3g} (tolerance {tol:.3g}, logit std {ref.std():.2f}); "
              f"{far:.3g} from the column-major scale reading")
    toks = run([hlx, "generate", "-m", model_dir, "--tokens", ",".join(map(str, prompt)), "-n", str(N_NEW),
                "--kv-dtype", "f32"]).stdout.strip()
    got_tokens = [int(t) for t in toks.split(",")] if toks else []
    check(got_tokens == want, f"{family} fp8: generate {got_tokens} != reference {want}")
    print(f"{family} fp8: {len(got_tokens)} greedy tokens {'match' if got_tokens == want else 'MISMATCH'}")

    ref4 = Fp8Int4Model(model_dir).forward(prompt)
    got4 = logits(hlx, tmp, model_dir, prompt, "int4", ("--weights", "int4"))
    err4 = float(np.abs(got4 - ref4).max())
    tol4 = int4.LOGIT_REL_TOL * float(ref4.std())
    far4 = float(np.abs(got4 - ref).max())
    check(err4 <= tol4, f"{family} fp8 --weights int4: logits max abs error {err4:.3g} > {tol4:.3g}")
    check(far4 > err4, f"{family} fp8 --weights int4: as close to the int8 reading ({far4:.3g}) as to int4's")
    print(f"{family} fp8 --weights int4: logits max abs error {err4:.3g} (tolerance {tol4:.3g}); "
          f"{far4:.3g} from the as-stored reference")


def test_bad_inputs(hlx, tmp):
    good = os.path.join(tmp, "qwen3-fp8")
    t = "model.layers.1.mlp.up_proj"

    def drop_scales(ts):
        return [x for x in ts if x[0] != t + ".weight_scale_inv"]

    def transposed_scales(ts):
        for x in ts:
            if x[0] == t + ".weight_scale_inv":
                x[2] = [x[2][1], x[2][0]]
        return ts

    def nan_scale(ts):
        for x in ts:
            if x[0] == t + ".weight_scale_inv":
                x[3] = np.array([np.nan], dtype="<f4").tobytes() + x[3][4:]
        return ts

    def nan_code(ts):
        for x in ts:
            if x[0] == t + ".weight":
                x[3] = b"\x7f" + x[3][1:]
        return ts

    def e5m2(ts):
        for x in ts:
            if x[0] == t + ".weight":
                x[1] = "F8_E5M2"
        return ts

    expect_error(hlx, edited(good, os.path.join(tmp, "bad1"), drop_scales), [t + ".weight_scale_inv", "missing"],
                 "missing scales")
    expect_error(hlx, edited(good, os.path.join(tmp, "bad2"), transposed_scales),
                 [t + ".weight_scale_inv", "shape", "block"], "transposed scale grid")
    expect_error(hlx, edited(good, os.path.join(tmp, "bad3"), nan_scale), [t + ".weight_scale_inv", "not finite"],
                 "NaN scale")
    expect_error(hlx, edited(good, os.path.join(tmp, "bad4"), nan_code), [t + ".weight", "NaN"], "NaN weight code")
    expect_error(hlx, edited(good, os.path.join(tmp, "bad5"), e5m2), [t + ".weight", "F8_E5M2", "unsupported"],
                 "F8_E5M2 tensor")

    def not_convert(q):
        q["modules_to_not_convert"] = ["lm_head", "mlp.up_proj"]
    expect_error(hlx, edited(good, os.path.join(tmp, "bad6"), edit_config=not_convert),
                 ["model.layers.0.mlp.up_proj.weight", "modules_to_not_convert", "mlp.up_proj"],
                 "fp8 weight of an unconverted module")
    for key, value, needle in [("fmt", "e5m2", "fmt 'e5m2'"), ("weight_block_size", [64, 64], "[64, 64]"),
                               ("activation_scheme", "static", "activation_scheme 'static'")]:
        def edit(q, key=key, value=value):
            q[key] = value
        expect_error(hlx, edited(good, os.path.join(tmp, f"bad-{key}"), edit_config=edit), [needle, "unsupported"],
                     f"{key} {value}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hlx_fp8_") as tmp:
        for family in FAMILIES:
            test_family(args.hlx, tmp, family)
        test_bad_inputs(args.hlx, tmp)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("fp8 checkpoints match the numpy dequantized reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
