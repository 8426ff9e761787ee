"""`--weights int8` end to end, per text family, against the numpy reference (reference.py) with
every matmul weight (q/k/v/o, gate/up/down, lm_head; not the embedding gather) quantized the way
the format is defined: per output channel n, scale = max_k |w[n, k]| / 127 (f32),
q = round-half-even(w / scale) clipped to [-127, 127], y = scale * (x @ q.T) with f32 activations.

f32 fixtures: prefill logits of every row within 1e-4 (max abs) of the quantized reference and 32
greedy tokens identical to it. The distance to the unquantized reference is printed, and must be
well above the tolerance (otherwise the run was not quantized and the check above proves nothing).
A bf16 fixture: greedy tokens equal to the quantized reference with bf16 activations, or diverging
only on a near-tie, as in test_text_families.py. Asking for a weight type the checkpoint does not
store (`--weights f32` on bf16) is an error.

Run: /usr/bin/python3 test_int8_reference.py --hlx path/to/hlx
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

FAMILIES = ["llama", "qwen2", "qwen3", "gemma3_text", "gemma3"]
N_NEW = 32
LOGIT_TOL = 1e-4
TIE_GAP = 1e-3      # f32: prompts whose quantized-reference greedy run has a closer top-2 are skipped
BF16_TIE_GAP = 1e-2
CANDIDATE_PROMPTS = [
    [5, 17, 42, 99, 3, 250, 7],
    [300, 12, 77, 140, 9, 64, 201, 33],
    [1, 2, 3, 4, 5, 6, 7, 8, 9],
    [9, 9, 9, 9, 9, 9, 100, 200],
    [311, 47, 180, 26, 95, 160, 4],
    [44, 128, 19, 276, 63, 88, 150, 12, 230],
]

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)
    return cond


def run(cmd, ok=True):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if ok and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr}")
    return p


def quantize(w):
    """w [N, K] (Hugging Face Linear layout) -> (q [N, K] f64 integers, scale [N] f32)."""
    w = np.asarray(w, dtype=np.float32)
    scale = np.abs(w).max(axis=1).astype(np.float32) / np.float32(127)
    safe = np.where(scale > 0, scale, np.float32(1))
    q = np.where(scale[:, None] > 0, np.rint(w / safe[:, None]), 0)  # rint: half to even
    return np.clip(q, -127, 127).astype(np.float64), scale


class Int8Model(reference.Model):
    """reference.Model whose weight matmuls use quantized weights (computed in f64, stored f32)."""

    def __init__(self, model_dir):
        super().__init__(model_dir)
        self._q = {}

    def linear(self, x, w, b=None):
        key = id(w)
        if key not in self._q:
            self._q[key] = (w, quantize(w))  # keep w alive so its id stays unique
        q, scale = self._q[key][1]
        if self.bf16_matmul:
            x = reference.bf16_round(x)
        y = (np.asarray(x, dtype=np.float64) @ q.T) * scale.astype(np.float64)
        if b is not None:
            y = y + b
        return y.astype(np.float32)


def greedy(model, tokens, n, bf16_matmul=False):
    seq, out, steps = list(tokens), [], []
    eos = model.eos_ids()
    for _ in range(n):
        row = model.forward(seq, bf16_matmul=bf16_matmul)[-1]
        t = int(np.argmax(row))
        out.append(t)
        steps.append(row)
        seq.append(t)
        if t in eos:
            break
    return out, steps


def top2_gap(row):
    s = np.sort(row)
    return float(s[-1] - s[-2])


def hlx_generate(hlx, model, prompt, kv):
    out = run([hlx, "generate", "-m", model, "--tokens", ",".join(map(str, prompt)), "-n", str(N_NEW),
               "--kv-dtype", kv, "--weights", "int8"]).stdout.strip()
    return [int(t) for t in out.split(",")] if out else []


def test_f32(hlx, tmp, family):
    model_dir = os.path.join(tmp, family + "-f32")
    run([hlx, "fixture", "--family", family, "--out", model_dir, "--dtype", "f32", "--seed", "0", "--no-tokenizer"])
    qm = Int8Model(model_dir)
    prompt, want = None, None
    for p in CANDIDATE_PROMPTS:
        toks, steps = greedy(qm, p, N_NEW)
        if len(toks) == N_NEW and min(top2_gap(r) for r in steps) >= TIE_GAP:
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
        check(err <= LOGIT_TOL, f"{family} f32 int8: logits max abs error {err:.3g} > {LOGIT_TOL} vs the quantized reference")
        check(far > 10 * LOGIT_TOL, f"{family} f32 int8: only {far:.3g} from the unquantized reference: not quantized?")
        same = float(np.mean(np.argmax(got, axis=1) == np.argmax(ref_f, axis=1)))
        print(f"{family} f32 int8: logits max abs error {err:.3g} vs quantized reference; {far:.3g} vs unquantized "
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
    for prompt in CANDIDATE_PROMPTS[:2]:
        want, steps = greedy(qm, prompt, N_NEW, bf16_matmul=True)
        got = hlx_generate(hlx, model_dir, prompt, "f32")
        div = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), None)
        if div is None:
            check(got == want, f"{family} bf16 int8 {prompt}: {got} is a prefix/extension of {want}")
            compared += len(want)
            continue
        gap = top2_gap(steps[div])
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
