"""End to end, per text family: `hlx fixture` -> `hlx logits` / `hlx generate` against the
independent numpy reference (tests/models/reference.py).

f32 fixtures: prefill logits of every row within 1e-4 (max abs), and 32 greedy tokens identical.
The Gemma3 fixtures use a sliding window of 4, so both the prompt and the decode steps cross it.
bf16 fixtures (bf16 and f32 KV cache): greedy tokens identical to the reference run with bf16
GEMM operands (and bf16 Q/K/V when the cache is bf16), or diverging only at a step where the
reference's top-2 logits are within 2e-2.

Run: /usr/bin/python3 test_text_families.py --hlx path/to/hlx
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
# hlx's rounding that the reference does not model (softmax weights in bf16 in prefill attention,
# activations rounding the other way after f32 sums in another order) moves the reference's top-2
# difference by a median 0.008-0.027 and a 90th percentile 0.017-0.06 per family (teacher-forced
# prefill rows of the 3 prompts, kv=bf16; llama, qwen2, gemma3_text alike before and after Q became
# bf16): a tie closer than 2e-2 is not a verdict on the engine.
BF16_TIE_GAP = 2e-2

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)
    return cond


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr}")
    return p.stdout


def hlx_generate(hlx, model, tokens, kv):
    out = run([hlx, "generate", "-m", model, "--tokens", ",".join(map(str, tokens)), "-n", str(N_NEW),
               "--kv-dtype", kv]).strip()
    return [int(t) for t in out.split(",")] if out else []


def top2_gap(row):
    s = np.sort(row)
    return float(s[-1] - s[-2])


def pick_prompt(model):
    for p in reference.CANDIDATE_PROMPTS:
        toks, steps = reference.greedy(model, p, N_NEW, stop_at_eos=True, return_logits=True)
        if len(toks) == N_NEW and min(top2_gap(r) for r in steps) >= 1e-3:
            return p, toks
    return None, None


def test_f32(hlx, tmp, family):
    model = os.path.join(tmp, family + "-f32")
    run([hlx, "fixture", "--family", family, "--out", model, "--dtype", "f32", "--seed", "0", "--no-tokenizer"])
    prompt, want = pick_prompt(model)
    if not check(prompt is not None, f"{family} f32: no candidate prompt gives 32 unambiguous reference tokens"):
        return
    ref = reference.logits(model, prompt)
    out = os.path.join(tmp, family + "-all.npy")
    run([hlx, "logits", "-m", model, "--tokens", ",".join(map(str, prompt)), "--all", "--kv-dtype", "f32", "-o", out])
    got = np.load(out)
    if check(got.shape == ref.shape, f"{family} f32: --all logits shape {got.shape}, want {ref.shape}"):
        err = float(np.abs(got - ref).max())
        check(err <= LOGIT_TOL, f"{family} f32: all-row logits max abs error {err:.3g} > {LOGIT_TOL}")
        print(f"{family} f32: all-row logits max abs error {err:.3g} (logit std {ref.std():.2f})")
    run([hlx, "logits", "-m", model, "--tokens", ",".join(map(str, prompt)), "--kv-dtype", "f32", "-o", out])
    last = np.load(out)
    if check(last.shape == (ref.shape[1],), f"{family} f32: last-row logits shape {last.shape}"):
        err = float(np.abs(last - ref[-1]).max())
        check(err <= LOGIT_TOL, f"{family} f32: last-row logits max abs error {err:.3g} > {LOGIT_TOL}")
    got_tokens = hlx_generate(hlx, model, prompt, "f32")
    check(got_tokens == want, f"{family} f32: generate {got_tokens} != reference {want}")
    print(f"{family} f32: prompt {prompt} -> {len(got_tokens)} tokens, {len(set(want))} distinct, "
          f"{'match' if got_tokens == want else 'MISMATCH'}")


def test_bf16(hlx, tmp, family):
    model = os.path.join(tmp, family + "-bf16")
    run([hlx, "fixture", "--family", family, "--out", model, "--dtype", "bf16", "--seed", "1", "--no-tokenizer"])
    compared = 0
    for prompt in reference.CANDIDATE_PROMPTS[:3]:
        for kv in ("bf16", "f32"):
            want, steps = reference.greedy(model, prompt, N_NEW, stop_at_eos=True, return_logits=True,
                                           bf16_matmul=True, bf16_kv=(kv == "bf16"))
            got = hlx_generate(hlx, model, prompt, kv)
            div = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), None)
            if div is None:
                check(got == want, f"{family} bf16 kv={kv} {prompt}: {got} is a prefix/extension of reference {want}")
                compared += len(want)
                continue
            gap = top2_gap(steps[div])
            check(gap < BF16_TIE_GAP,
                  f"{family} bf16 kv={kv} {prompt}: diverges at step {div} ({got[div]} vs reference {want[div]}) "
                  f"where the reference's top-2 gap is {gap:.4f} >= {BF16_TIE_GAP}")
            print(f"{family} bf16 kv={kv}: diverges at step {div} on a near-tie (gap {gap:.4f})")
            compared += div
    print(f"{family} bf16: {compared} tokens compared over 6 runs")
    check(compared >= N_NEW, f"{family} bf16: only {compared} tokens compared")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    ap.add_argument("--family", action="append", help="restrict to these families")
    args = ap.parse_args()
    families = args.family or FAMILIES
    with tempfile.TemporaryDirectory(prefix="hlx_text_families_") as tmp:
        for family in families:
            test_f32(args.hlx, tmp, family)
            test_bf16(args.hlx, tmp, family)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("all text families match the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
