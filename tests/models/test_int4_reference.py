"""`--weights int4` end to end against the numpy reference (reference.py) with every matmul weight
(q/k/v/o, gate/up/down, lm_head; not the embedding gather) quantized as the format defines it
(src/runtime/kernels/matmul.h, matmul_int4.h), written here from that text: per output channel n
and group of 128 consecutive k, lo = min, s = (max - lo) / 15 in f32, q = rint((w - lo) / s)
clipped to [0, 15] (q = 0 where s = 0); the decoded weight is s * q + lo. The products quantize
their activations per row and weight group to int16 (quantize_act_groups: s_a = max |x| / 32767 in
f32, q_a = rint(x / s_a)) and are exact up to f32 accumulation, so the reference multiplies s_a * q_a
by the decoded weights in f64. A bf16 fixture's activations are bf16 before that (bf16_matmul).

f32 fixtures: prefill logits of every row within LOGIT_REL_TOL x the reference logits' std, the
unquantized reference more than 10x farther (else nothing was quantized), and 32 greedy tokens equal
or diverging only where the reference's top-2 gap is below twice the measured logit error. Why a
tolerance at all: the engine's and numpy's f32 activations differ by ~1e-6 relative (norm and
softmax orders); where that straddles a rounding midpoint of the int16 quantization the two take
activations one step (max |x| / 32767 of the group) apart, and the fixtures amplify a few such steps
to at most 4.6e-4 of the logits' std (measured over these fixtures, test_quantized_checkpoints.py's
and test_fp8_checkpoint.py's int4 runs: 0.0007-0.0023 at std 3.1-7.0); LOGIT_REL_TOL leaves 6x
that (it was 0.04 while activations were rounded to bf16, 2^-8 apart). A bf16 fixture: logits and
greedy tokens as above.

Run: /usr/bin/python3 test_int4_reference.py --hlx path/to/hlx
"""
import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
from hlxtest import check, failures, run  # noqa: E402

FAMILIES = ["llama", "qwen3", "gemma3_text"]
GROUP = 128
N_NEW = 32
LOGIT_REL_TOL = 0.003


FLT_MIN = np.finfo(np.float32).tiny


def quantize_act_groups(x, gidx):
    """x [..., K] f32 -> the activations the int4 products multiply (matmul_int4.h), in f64: per row
    and weight group g (the k with gidx[k] == g), |x| < FLT_MIN read as 0 (denormals-are-zero),
    s_a = max |x| / 32767 in f32 (0 when below FLT_MIN), q_a = rint(x / s_a) (f32 division, half to
    even) clipped to [-32767, 32767]; returns s_a * q_a. (Finite x: the tests' activations are.)"""
    shape = np.shape(x)
    x = np.asarray(x, dtype=np.float32).reshape(-1, shape[-1])
    x = np.where(np.abs(x) < FLT_MIN, np.float32(0), x)
    out = np.zeros(x.shape, dtype=np.float64)
    for g in np.unique(gidx):
        cols = gidx == g
        xg = x[:, cols]
        s = (np.abs(xg).max(axis=1) / np.float32(32767)).astype(np.float32)
        s = np.where(s < FLT_MIN, np.float32(0), s)
        safe = np.where(s > 0, s, np.float32(1))
        q = np.where(s[:, None] > 0, np.clip(np.rint(xg / safe[:, None]), -32767, 32767), 0)
        out[:, cols] = q * s[:, None].astype(np.float64)
    return out.reshape(shape)


def quantize4(w):
    """w [N, K] (Linear layout) -> the decoded weight [N, K] in f64."""
    w = np.asarray(w, dtype=np.float32)
    out = np.zeros(w.shape, dtype=np.float64)
    for g0 in range(0, w.shape[1], GROUP):
        blk = w[:, g0:g0 + GROUP]
        lo = blk.min(axis=1)
        s = ((blk.max(axis=1) - lo) / np.float32(15)).astype(np.float32)
        safe = np.where(s > 0, s, np.float32(1))
        q = np.where(s[:, None] > 0, np.clip(np.rint((blk - lo[:, None]) / safe[:, None]), 0, 15), 0)
        out[:, g0:g0 + GROUP] = s[:, None].astype(np.float64) * q + lo[:, None].astype(np.float64)
    return out


class Int4Model(reference.Model):
    """reference.Model whose weight matmuls are the int16-quantized x times the int4-decoded weights."""

    def __init__(self, model_dir):
        super().__init__(model_dir)
        self._q = {}

    def linear(self, x, w, b=None):
        key = id(w)
        if key not in self._q:
            self._q[key] = (w, quantize4(w))  # keep w alive so its id stays unique
        wd = self._q[key][1]
        if self.bf16_matmul:
            x = reference.bf16_round(x)
        y = quantize_act_groups(x, np.arange(wd.shape[1]) // GROUP) @ wd.T
        if b is not None:
            y = y + b
        return y.astype(np.float32)


def hlx_generate(hlx, model, prompt, kv):
    out = run([hlx, "generate", "-m", model, "--tokens", ",".join(map(str, prompt)), "-n", str(N_NEW),
               "--kv-dtype", kv, "--weights", "int4"]).stdout.strip()
    return [int(t) for t in out.split(",")] if out else []


def test_f32(hlx, tmp, family):
    model_dir = os.path.join(tmp, family + "-f32")
    # hidden 256 / intermediate 384: two or more groups of 128 per row.
    run([hlx, "fixture", "--family", family, "--out", model_dir, "--dtype", "f32", "--seed", "0", "--no-tokenizer"])
    qm = Int4Model(model_dir)
    prompt = reference.CANDIDATE_PROMPTS[0]
    want, steps = reference.greedy_model(qm, prompt, N_NEW, stop_at_eos=True)
    ref_q = qm.forward(prompt)
    ref_f = reference.logits(model_dir, prompt)
    tol = LOGIT_REL_TOL * float(ref_q.std())
    out = os.path.join(tmp, family + "-int4.npy")
    run([hlx, "logits", "-m", model_dir, "--tokens", ",".join(map(str, prompt)), "--all", "--kv-dtype", "f32",
         "--weights", "int4", "-o", out])
    got = np.load(out)
    err = float("inf")
    if check(got.shape == ref_q.shape, f"{family} f32: logits shape {got.shape}, want {ref_q.shape}"):
        err = float(np.abs(got - ref_q).max())
        far = float(np.abs(got - ref_f).max())
        check(err <= tol, f"{family} f32 int4: logits max abs error {err:.3g} > {tol:.3g} vs the quantized reference")
        check(far > 10 * err, f"{family} f32 int4: only {far:.3g} from the unquantized reference: not quantized?")
        print(f"{family} f32 int4: logits max abs error {err:.3g} vs quantized reference (tolerance {tol:.3g}); "
              f"{far:.3g} vs unquantized (logit std {ref_f.std():.2f})")
    got_tokens = hlx_generate(hlx, model_dir, prompt, "f32")
    compare_tokens(f"{family} f32 int4", got_tokens, want, steps, err)


def compare_tokens(what, got, want, steps, err):
    div = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), None)
    if div is None:
        check(got == want, f"{what}: {got} is a prefix/extension of {want}")
        print(f"{what}: {len(got)} greedy tokens match")
        return len(want)
    gap = reference.top2_gap(steps[div])
    check(gap < 2 * err, f"{what}: diverges at step {div} where the reference's top-2 gap {gap:.4f} >= 2 x {err:.4f}")
    print(f"{what}: greedy tokens equal for {div} steps, then a near-tie (gap {gap:.4f})")
    return div


def test_bf16(hlx, tmp, family):
    model_dir = os.path.join(tmp, family + "-bf16")
    run([hlx, "fixture", "--family", family, "--out", model_dir, "--dtype", "bf16", "--seed", "1", "--no-tokenizer"])
    qm = Int4Model(model_dir)
    prompt = reference.CANDIDATE_PROMPTS[1]
    want, steps = reference.greedy_model(qm, prompt, N_NEW, stop_at_eos=True, bf16_matmul=True)
    out = os.path.join(tmp, family + "-bf16-int4.npy")
    run([hlx, "logits", "-m", model_dir, "--tokens", ",".join(map(str, prompt)), "--all", "--kv-dtype", "f32",
         "--weights", "int4", "-o", out])
    ref = qm.forward(prompt, bf16_matmul=True)
    err = float(np.abs(np.load(out) - ref).max())
    check(err <= LOGIT_REL_TOL * float(ref.std()), f"{family} bf16 int4: logits max abs error {err:.3g}")
    print(f"{family} bf16 int4: logits max abs error {err:.3g} (tolerance {LOGIT_REL_TOL * float(ref.std()):.3g})")
    compare_tokens(f"{family} bf16 int4", hlx_generate(hlx, model_dir, prompt, "f32"), want, steps, err)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    ap.add_argument("--family", action="append", help="restrict to these families")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hlx_int4_") as tmp:
        for family in args.family or FAMILIES:
            test_f32(args.hlx, tmp, family)
        test_bf16(args.hlx, tmp, "qwen3")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("int4 weights match the quantized reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
