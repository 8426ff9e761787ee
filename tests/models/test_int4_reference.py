"""`--weights int4` end to end against the numpy reference (reference.py) with every matmul weight
(q/k/v/o, gate/up/down, lm_head; not the embedding gather) quantized as the format defines it
(src/runtime/kernels/matmul.h, matmul_int4.h), written here from that text: per output channel n
and group of 128 consecutive k, lo = min, s = (max - lo) / 15 in f32, q = rint((w - lo) / s)
clipped to [0, 15] (q = 0 where s = 0); the decoded weight is s * q + lo. The products take bf16
activations (round to nearest even) and are exact up to f32 accumulation, so the reference
multiplies bf16(x) by the decoded weights in f64.

f32 fixtures: prefill logits of every row within LOGIT_REL_TOL x the reference logits' std, the
unquantized reference more than 10x farther (else nothing was quantized), and 32 greedy tokens equal
or diverging only where the reference's top-2 gap is below twice the measured logit error. Why a
relative tolerance: the engine's and numpy's f32 activations differ by ~1e-6 relative (norm and
softmax orders); where that straddles a bf16 rounding midpoint the two round an activation 2^-8
apart, and a few such flips move the tiny fixtures' logits by ~1-3% of their spread (the same as
test_quantized_checkpoints.py measures). A bf16 fixture: greedy tokens as above.

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
LOGIT_REL_TOL = 0.04


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
    """reference.Model whose weight matmuls are bf16(x) times the int4-decoded weights."""

    def __init__(self, model_dir):
        super().__init__(model_dir)
        self._q = {}

    def linear(self, x, w, b=None):
        key = id(w)
        if key not in self._q:
            self._q[key] = (w, quantize4(w))  # keep w alive so its id stays unique
        wd = self._q[key][1]
        x = np.asarray(x, dtype=np.float32)
        x = reference.bf16_round(x).astype(np.float64)
        y = x @ wd.T
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
    want, steps = reference.greedy_model(qm, prompt, N_NEW, stop_at_eos=True)
    out = os.path.join(tmp, family + "-bf16-int4.npy")
    run([hlx, "logits", "-m", model_dir, "--tokens", ",".join(map(str, prompt)), "--all", "--kv-dtype", "f32",
         "--weights", "int4", "-o", out])
    ref = qm.forward(prompt)
    err = float(np.abs(np.load(out) - ref).max())
    check(err <= LOGIT_REL_TOL * float(ref.std()), f"{family} bf16 int4: logits max abs error {err:.3g}")
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
