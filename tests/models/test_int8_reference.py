"""`--weights int8` end to end, per text family, against the numpy reference (reference.py) with
every matmul weight (q/k/v/o, gate/up/down, lm_head; not the embedding gather) quantized the way
the format is defined (src/runtime/kernels/matmul_int8.h): per output channel n, s_w = max_k |w[n, k]| / 127
(f32), q = round-half-even(w / s_w) clipped to [-127, 127]; per activation row m, s_a = max_k |x[m, k]| / 32767
(f32), q_a = round-half-even(x / s_a) clipped to [-32767, 32767]; exact integer sums over chunks of 256 k,
each rounded to f32 and added in order in f32, y = (sum * s_a) * s_w in f32. So the reference's matmuls
give the engine's bits; the rest of the model (norms, attention) still differs by f32 rounding.

f32 fixtures: prefill logits of every row within the tolerance below of the quantized reference and
32 greedy tokens identical to it. The distance to the unquantized reference is printed, and must be
well above the tolerance (otherwise the run was not quantized and the check above proves nothing).

Tolerance: int16 activations make each matmul's input quantization a step function, so the f32
rounding differences the engine and numpy keep elsewhere (norm and softmax sum orders, exp) move
an occasional q_a by one step of max|a| / 32767, and the fixtures amplify that to ~1e-3 in the
logits (with f32 activations the same differences gave ~1e-5, and the tolerance was 1e-4). The
tolerance is therefore measured per fixture: LOGIT_TOL_FACTOR times how far the reference's own
logits move when every matmul input is perturbed by 1e-7 relative (two seeded draws), and at
least 1e-4. Prompts are chosen so every greedy step's top-2 gap exceeds twice that tolerance.
A bf16 fixture: greedy tokens equal to the quantized reference with bf16 activations, or diverging
only on a near-tie, as in test_text_families.py. Asking for a weight type the checkpoint does not
store (`--weights f32` on bf16) is an error.

Run: /usr/bin/python3 test_int8_reference.py --hlx path/to/hlx
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

FAMILIES = ["llama", "qwen2", "qwen3", "gemma3_text", "gemma3"]
N_NEW = 32
LOGIT_TOL = 1e-4         # the least tolerance (see above)
LOGIT_TOL_FACTOR = 3.0   # times the reference's sensitivity to 1e-7 relative input noise
NOISE = 1e-7
BF16_TIE_GAP = 1e-2


FLT_MIN = np.finfo(np.float32).tiny
CHUNK = 256  # k values per exact integer chunk (128 k-pairs)


def quantize_act(x):
    """x [T, K] -> (q_a [T, K] f64 integers, s_a [T] f32): per row, |x| < FLT_MIN read as 0 (the
    kernels run with denormals-are-zero), a NaN/Inf row gets s_a = NaN, a row whose s_a is below
    FLT_MIN (flush to zero) is a zero row."""
    x = np.asarray(x, dtype=np.float32)
    x = np.where(np.abs(x) < FLT_MIN, np.float32(0), x)
    finite = np.isfinite(x).all(axis=1)
    mx = np.where(finite[:, None], np.abs(x), np.float32(0)).max(axis=1)
    s = (mx / np.float32(32767)).astype(np.float32)
    s = np.where(s < FLT_MIN, np.float32(0), s)
    safe = np.where(s > 0, s, np.float32(1))
    q = np.where(s[:, None] > 0, np.rint(np.where(finite[:, None], x, 0) / safe[:, None]), 0)  # f32 division
    s = np.where(finite, s, np.float32(np.nan)).astype(np.float32)
    return np.clip(q, -32767, 32767).astype(np.float64), s


def int8_matmul(x, q, scale):
    """The int8 product of x [T, K] with quantized weights (q [N, K], scale [N]) as [T, N] f32."""
    qa, sa = quantize_act(x)
    total = np.zeros((qa.shape[0], q.shape[0]), dtype=np.float32)
    for k0 in range(0, q.shape[1], CHUNK):
        # |chunk sum| < 2^31: exact in f64; each chunk's sum is rounded to f32, then added in f32.
        total = total + (qa[:, k0:k0 + CHUNK] @ q[:, k0:k0 + CHUNK].T).astype(np.float32)
    return (total * sa[:, None]) * scale[None, :]


def quantize(w):
    """w [N, K] (Hugging Face Linear layout) -> (q [N, K] f64 integers, scale [N] f32)."""
    w = np.asarray(w, dtype=np.float32)
    scale = np.abs(w).max(axis=1).astype(np.float32) / np.float32(127)
    safe = np.where(scale > 0, scale, np.float32(1))
    q = np.where(scale[:, None] > 0, np.rint(w / safe[:, None]), 0)  # rint: half to even
    return np.clip(q, -127, 127).astype(np.float64), scale


class Int8Model(reference.Model):
    """reference.Model whose weight matmuls are the int8 products (int8_matmul)."""

    def __init__(self, model_dir, noise_seed=None):
        super().__init__(model_dir)
        self._q = {}
        self._noise = None if noise_seed is None else np.random.default_rng(noise_seed)

    def linear(self, x, w, b=None):
        key = id(w)
        if key not in self._q:
            self._q[key] = (w, quantize(w))  # keep w alive so its id stays unique
        q, scale = self._q[key][1]
        if self.bf16_matmul:
            x = reference.bf16_round(x)
        x = np.asarray(x, dtype=np.float32)
        if self._noise is not None:  # for the sensitivity measurement only
            x = x * (np.float32(1) + np.float32(NOISE) * self._noise.standard_normal(x.shape).astype(np.float32))
        y = int8_matmul(x.reshape(-1, x.shape[-1]), q, scale).reshape(x.shape[:-1] + (q.shape[0],))
        if b is not None:
            y = y + b
        return y.astype(np.float32)


def hlx_generate(hlx, model, prompt, kv):
    out = run([hlx, "generate", "-m", model, "--tokens", ",".join(map(str, prompt)), "-n", str(N_NEW),
               "--kv-dtype", kv, "--weights", "int8"]).stdout.strip()
    return [int(t) for t in out.split(",")] if out else []


def sensitivity(model_dir, prompt):
    """Max abs move of the quantized reference's logits under 1e-7 relative noise on matmul inputs."""
    base = Int8Model(model_dir).forward(prompt)
    return max(float(np.abs(Int8Model(model_dir, seed).forward(prompt) - base).max()) for seed in (1, 2))


def test_f32(hlx, tmp, family):
    model_dir = os.path.join(tmp, family + "-f32")
    run([hlx, "fixture", "--family", family, "--out", model_dir, "--dtype", "f32", "--seed", "0", "--no-tokenizer"])
    qm = Int8Model(model_dir)
    sens = sensitivity(model_dir, reference.CANDIDATE_PROMPTS[0])
    tol = max(LOGIT_TOL, LOGIT_TOL_FACTOR * sens)
    prompt, want = None, None
    for p in reference.CANDIDATE_PROMPTS:
        toks, steps = reference.greedy_model(qm, p, N_NEW, stop_at_eos=True)
        if len(toks) == N_NEW and min(reference.top2_gap(r) for r in steps) >= 2 * tol:
            prompt, want = p, toks
            break
    if not check(prompt is not None, f"{family} f32: no prompt gives 32 unambiguous quantized-reference tokens"):
        return
    ref_q = qm.forward(prompt)
    ref_f = reference.logits(model_dir, prompt)
    out = os.path.join(tmp, family + "-int8.npy")
    run([hlx, "logits", "-m", model_dir, "--tokens", ",".join(map(str, prompt)), "--all", "--kv-dtype", "f32",
         "--weights", "int8", "-o", out])
    got = np.load(out)
    if check(got.shape == ref_q.shape, f"{family} f32: logits shape {got.shape}, want {ref_q.shape}"):
        err = float(np.abs(got - ref_q).max())
        far = float(np.abs(got - ref_f).max())
        qeffect = float(np.abs(ref_q - ref_f).max())
        check(err <= tol, f"{family} f32 int8: logits max abs error {err:.3g} > {tol:.3g} vs the quantized reference")
        check(far > 10 * tol, f"{family} f32 int8: only {far:.3g} from the unquantized reference: not quantized?")
        same = float(np.mean(np.argmax(got, axis=1) == np.argmax(ref_f, axis=1)))
        print(f"{family} f32 int8: logits max abs error {err:.3g} vs quantized reference (tolerance {tol:.3g}: the "
              f"reference moves {sens:.3g} under 1e-7 input noise); {far:.3g} vs unquantized "
              f"(quantization alone moves them {qeffect:.3g}, logit std {ref_f.std():.2f}); "
              f"argmax agrees with unquantized on {same:.0%} of rows")
    got_tokens = hlx_generate(hlx, model_dir, prompt, "f32")
    check(got_tokens == want, f"{family} f32 int8: generate {got_tokens} != quantized reference {want}")
    plain = reference.greedy(model_dir, prompt, N_NEW, stop_at_eos=True)
    agree = next((i for i in range(min(len(plain), len(want))) if plain[i] != want[i]), min(len(plain), len(want)))
    print(f"{family} f32 int8: {len(got_tokens)} tokens {'match' if got_tokens == want else 'MISMATCH'}; "
          f"the unquantized reference agrees for the first {agree} of them")


def test_bf16(hlx, tmp, family):
    model_dir = os.path.join(tmp, family + "-bf16")
    run([hlx, "fixture", "--family", family, "--out", model_dir, "--dtype", "bf16", "--seed", "1", "--no-tokenizer"])
    qm = Int8Model(model_dir)
    compared = 0
    for prompt in reference.CANDIDATE_PROMPTS[:2]:
        want, steps = reference.greedy_model(qm, prompt, N_NEW, stop_at_eos=True, bf16_matmul=True)
        got = hlx_generate(hlx, model_dir, prompt, "f32")
        div = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), None)
        if div is None:
            check(got == want, f"{family} bf16 int8 {prompt}: {got} is a prefix/extension of {want}")
            compared += len(want)
            continue
        gap = reference.top2_gap(steps[div])
        check(gap < BF16_TIE_GAP, f"{family} bf16 int8 {prompt}: diverges at step {div} where the quantized "
                                  f"reference's top-2 gap is {gap:.4f} >= {BF16_TIE_GAP}")
        compared += div
    print(f"{family} bf16 int8: {compared} tokens equal to the quantized reference over 2 prompts")
    check(compared >= N_NEW, f"{family} bf16 int8: only {compared} tokens compared")
    p = run([hlx, "generate", "-m", model_dir, "--tokens", "1,2,3", "-n", "1", "--weights", "f32"], ok=False)
    check(p.returncode != 0 and "bf16" in p.stderr, f"--weights f32 on a bf16 checkpoint: exit {p.returncode}, {p.stderr!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    ap.add_argument("--family", action="append", help="restrict to these families")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hlx_int8_") as tmp:
        for family in args.family or FAMILIES:
            test_f32(args.hlx, tmp, family)
        test_bf16(args.hlx, tmp, "qwen3")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("int8 weights match the quantized reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
