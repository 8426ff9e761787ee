"""`--kv-dtype int8` end to end, per text family, against the numpy reference (reference.py) with
K and V quantized the documented way before attention (reference.quantize_kv_int8: per token and
kv head, scale = max|x| / 127 over head_dim in f32, code = round-half-even(x / scale) clipped to
[-127, 127]). The reference is written from that definition, not from the emitter.

f32 fixtures: prefill logits of every row within LOGIT_TOL of the quantized reference, and 32
greedy tokens (prefill + 31 decode steps through the int8 cache) identical to it. The distance to
the unquantized reference is printed and must be well above the tolerance (otherwise the run was
not quantized and the check above proves nothing).

Tolerance: the codes are a step function of K/V, so the f32 rounding differences between engine
and numpy (norm and softmax sum orders, exp) could move a code by one step where x / scale sits
on a half; at ~1e-7 relative that is rare. With AVX512-VNNI and head_dim % 16 == 0 the attention
kernels also take integer products over the codes: Q rounded to int16 on its row's largest
(relative 2^-16) and the softmax weights to int16 per key block (docs/COMPOSITES.md), which moved
these fixtures' logits by 2-4e-4 (an f32 path, head_dim 24: ~5e-6, as with an f32 cache).
LOGIT_TOL = 1e-3 leaves room and stays 1/80 of the distance to the unquantized reference. A
perturbation that moves one int8 code by a step moves the logits by ~1e-2 (seen with another
prompt of gemma3_text): the prompts below show none, and the test is deterministic on a CPU
(integer products: the same bits on any AVX512-VNNI CPU). Prompts are chosen so that every greedy
step's top-2 gap of the quantized reference exceeds MIN_GAP.

Also printed, for docs/COMPOSITES.md: the engine's logits with an int8 cache vs a bf16 cache on
the same fixture and prompt (max abs difference, and relative to the logits' std). An unknown
`--kv-dtype` is a typed error that names the value.

Run: /usr/bin/python3 test_kv_int8_reference.py --hlx path/to/hlx
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
LOGIT_TOL = 1e-3
MIN_GAP = 2e-4


def hlx_logits(hlx, model, prompt, kv, out):
    run([hlx, "logits", "-m", model, "--tokens", ",".join(map(str, prompt)), "--all", "--kv-dtype", kv, "-o", out])
    return np.load(out)


def test_family(hlx, tmp, family):
    model_dir = os.path.join(tmp, family + "-f32")
    run([hlx, "fixture", "--family", family, "--out", model_dir, "--dtype", "f32", "--seed", "0", "--no-tokenizer"])
    model = reference.load(model_dir)
    prompt, want = None, None
    for p in reference.CANDIDATE_PROMPTS:
        toks, steps = reference.greedy_model(model, p, N_NEW, stop_at_eos=True, kv_int8=True)
        if len(toks) == N_NEW and min(reference.top2_gap(r) for r in steps) >= MIN_GAP:
            prompt, want = p, toks
            break
    if not check(prompt is not None, f"{family}: no prompt gives 32 unambiguous quantized-reference tokens"):
        return
    ref_q = model.forward(prompt, kv_int8=True)
    ref_f = model.forward(prompt)
    got = hlx_logits(hlx, model_dir, prompt, "int8", os.path.join(tmp, family + "-kvint8.npy"))
    if check(got.shape == ref_q.shape, f"{family}: logits shape {got.shape}, want {ref_q.shape}"):
        err = float(np.abs(got - ref_q).max())
        far = float(np.abs(got - ref_f).max())
        check(err <= LOGIT_TOL, f"{family} kv int8: logits max abs error {err:.3g} > {LOGIT_TOL} vs the quantized "
                                f"reference")
        check(far > 10 * LOGIT_TOL, f"{family} kv int8: only {far:.3g} from the unquantized reference: not quantized?")
        bf16 = hlx_logits(hlx, model_dir, prompt, "bf16", os.path.join(tmp, family + "-kvbf16.npy"))
        d16 = float(np.abs(got - bf16).max())
        d16f = float(np.abs(bf16 - ref_f).max())
        std = float(ref_f.std())
        print(f"{family} kv int8: logits max abs error {err:.3g} vs quantized reference (tolerance {LOGIT_TOL}); "
              f"{far:.3g} vs unquantized; int8 vs bf16 KV max |delta| {d16:.3g} = {d16 / std:.2%} of the logit std "
              f"{std:.3f} (bf16 KV vs unquantized: {d16f:.3g})")
    out = run([hlx, "generate", "-m", model_dir, "--tokens", ",".join(map(str, prompt)), "-n", str(N_NEW),
               "--kv-dtype", "int8"]).stdout.strip()
    got_tokens = [int(t) for t in out.split(",")] if out else []
    check(got_tokens == want, f"{family} kv int8: generate {got_tokens} != quantized reference {want}")
    plain = reference.greedy(model_dir, prompt, N_NEW, stop_at_eos=True)
    agree = next((i for i in range(min(len(plain), len(want))) if plain[i] != want[i]), min(len(plain), len(want)))
    print(f"{family} kv int8: {len(got_tokens)} tokens {'match' if got_tokens == want else 'MISMATCH'}; "
          f"the unquantized reference agrees for the first {agree} of them")


def test_unknown_kv_dtype(hlx, tmp):
    model_dir = os.path.join(tmp, "qwen3-f32")
    p = run([hlx, "generate", "-m", model_dir, "--tokens", "1,2,3", "-n", "1", "--kv-dtype", "int4"], ok=False)
    check(p.returncode != 0 and "int4" in p.stderr and "int8" in p.stderr and "invalid argument" in p.stderr,
          f"--kv-dtype int4: exit {p.returncode}, {p.stderr!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    ap.add_argument("--family", action="append", help="restrict to these families")
    args = ap.parse_args()
    families = args.family or FAMILIES
    with tempfile.TemporaryDirectory(prefix="hlx_kv_int8_") as tmp:
        for family in families:
            test_family(args.hlx, tmp, family)
        if "qwen3" in families:
            test_unknown_kv_dtype(args.hlx, tmp)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("int8 KV matches the quantized reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
