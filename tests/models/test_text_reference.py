"""The fixtures and the 1e-4 logits tolerance can see every feature of the text families: for each
feature, a reference with that feature broken (off-by-one window, wrong attention scale, missing
bias, ...) changes the f32 fixture's logits by far more than the tolerance. If this fails, a
fixture or the reference has stopped exercising the feature, and test_text_families.py could pass
with an engine that gets it wrong.

Run: /usr/bin/python3 test_text_reference.py --hlx path/to/hlx
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

PROMPT = [5, 17, 42, 99, 3, 250, 7, 140, 9, 64, 201, 33]  # 12 tokens: 3x Gemma's window
MIN_EFFECT = 1e-2  # 100x the f32 logits tolerance of test_text_families.py


def interleaved_rotate(x):
    # GPT-J style pairs (x0, x1), (x2, x3), ... instead of HF's halves.
    out = np.empty_like(x)
    out[..., 0::2] = -x[..., 1::2]
    out[..., 1::2] = x[..., 0::2]
    return out


def shifted_norm(m):
    orig = m.rms_norm
    return lambda x, w: orig(x, w - 1.0)  # w instead of (1 + w)


def ablations(family):
    a = {
        "rotate_half -> interleaved pairs": lambda m: setattr(m, "rotate_half", interleaved_rotate),
        "GQA: kv head h % kv_heads": lambda m: setattr(m, "repeat_kv", lambda x: np.tile(x, (m.n_heads // m.n_kv, 1, 1))),
        "no rotary": lambda m: setattr(m, "rope", lambda x, p, f: x),
    }
    if family == "llama":
        a["llama3 rope scaling ignored"] = lambda m: setattr(
            m, "inv_freq_global", reference.rope_inv_freq(m.cfg["rope_theta"], m.head_dim, None))
    if family == "qwen2":
        a["q/k/v biases dropped"] = lambda m: setattr(m, "qkv_bias", False)
    if family in ("qwen3", "gemma3_text", "gemma3"):
        a["q/k norm skipped"] = lambda m: setattr(m, "qk_norm", False)
    if family in ("gemma3_text", "gemma3"):
        a.update({
            "sliding window ignored": lambda m: setattr(m, "sliding_window", None),
            "sliding window + 1": lambda m: setattr(m, "sliding_window", m.sliding_window + 1),
            "sliding window - 1": lambda m: setattr(m, "sliding_window", m.sliding_window - 1),
            "attention scale 1/sqrt(head_dim)": lambda m: setattr(m, "scaling", m.head_dim ** -0.5),
            "local rope base = global": lambda m: setattr(m, "inv_freq_local", m.inv_freq_global),
            "global rope without linear scaling": lambda m: setattr(
                m, "inv_freq_global", reference.rope_inv_freq(m.cfg["rope_theta"], m.head_dim, None)),
            "no final softcap": lambda m: setattr(m, "final_softcap", None),
            "no embedding scale": lambda m: setattr(m, "embed_scale", None),
            "norm w instead of 1 + w": lambda m: setattr(m, "rms_norm", shifted_norm(m)),
        })
    return a


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory(prefix="hlx_text_reference_") as tmp:
        for family in ["llama", "qwen2", "qwen3", "gemma3_text", "gemma3"]:
            model = os.path.join(tmp, family)
            subprocess.run([args.hlx, "fixture", "--family", family, "--out", model, "--no-tokenizer"], check=True,
                           capture_output=True)
            base = reference.Model(model).forward(PROMPT)
            for name, breakit in ablations(family).items():
                m = reference.Model(model)
                breakit(m)
                effect = float(np.abs(m.forward(PROMPT) - base).max())
                ok = effect > MIN_EFFECT
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {family}: {name}: max logit change {effect:.3g}")
            if family == "gemma3_text":
                # bf16: the embedding scale is rounded to bf16 (sqrt(96) = 9.798 -> 9.8125) upstream.
                bmodel = os.path.join(tmp, family + "-bf16")
                subprocess.run([args.hlx, "fixture", "--family", family, "--out", bmodel, "--dtype", "bf16", "--no-tokenizer"],
                               check=True, capture_output=True)
                m = reference.Model(bmodel)
                check_scale = float(m.embed_scale)
                ok = check_scale == 9.8125
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} gemma3_text bf16: embedding scale {check_scale} (want 9.8125)")
                b = m.forward(PROMPT)
                m.embed_scale = np.float32(math.sqrt(96))
                effect = float(np.abs(m.forward(PROMPT) - b).max())
                print(f"     gemma3_text bf16: unrounded embedding scale changes logits by {effect:.3g}")
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
