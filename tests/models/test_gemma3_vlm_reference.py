"""Gemma3 vision-language model side against the independent numpy reference (gemma3_reference.py,
written from transformers' modeling_gemma3.py / modeling_siglip.py / masking_utils.py).

For the tiny `hlx fixture --family gemma3-vlm` (SigLIP 32/8: 4 x 4 patches average-pooled to 2 x 2,
so 4 image rows per block = the text model's sliding window), f32 and bf16:
- `vision_encode` (hlx emit + hlx exec): the tower's last_hidden_state (post_layernorm), the pooled
  rows and the projected features, on random pixels; f32 also with composites decomposed;
- `prefill_embeddings_masked_all_logits`: the logits of every row of a one-image and a two-image
  prompt (merged embeddings: scaled text rows, unscaled image rows; additive mask with the
  image-block rule, padding blocked), with and without right padding, and in two chunks whose
  second sees the first through the cache (sliding windows crossing the boundary);
- a purely causal mask gives bit for bit the logits and K/V caches of `prefill_embeddings`;
- 32 greedy tokens (masked prefill, then the ordinary decode entry) equal the reference's.
Negative checks (the reference against itself with one upstream rule broken; each must move the
compared quantity by far more than its tolerance, and hlx's output must then fail the comparison):
causal mask instead of the image-block rule, a 0/1 multiplicative mask, double embedding scale,
scaled image rows, pooling skipped, RMSNorm without the 1 +.

Run: /usr/bin/python3 test_gemma3_vlm_reference.py --hlx path/to/hlx
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gemma3_reference as g3  # noqa: E402
from reference import bf16_round  # noqa: E402

TOL = {"f32": {"tower": 1e-4, "features": 1e-4, "logits": 1e-4},
       # bf16: a bf16 GEMM operand or a bf16 cache row that rounds the other way moves a logit by
       # ~1e-2, and the bf16-cache prefill kernel also rounds softmax weights to bf16 (measured
       # 0.002 / 0.084 with f32 / bf16 caches); the negative checks below move logits by >= 6.
       "bf16": {"tower": 2e-3, "features": 2e-3, "logits": 0.15}}
MIN_EFFECT = 5e-2
CAPACITY = 64
N_NEW = 32
FAILURES = []
RUNS = [0]  # exec output directories, numbered across every Hlx helper


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILURES.append(what)
    return ok


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout


class Hlx:
    def __init__(self, hlx, model, tmp, kv):
        self.hlx, self.model, self.tmp, self.kv = hlx, model, tmp, kv
        self.modules = {}

    def module(self, entry, rows=None, stage=None):
        key = (entry, rows, stage)
        if key not in self.modules:
            path = os.path.join(self.tmp, f"{entry}-{rows}-{stage}-{self.kv}.mlir")
            cmd = [self.hlx, "emit", "-m", self.model, "--entry", entry, "-o", path]
            if stage:
                cmd += ["--vision-stage", stage]
            else:
                cmd += ["--capacity", str(CAPACITY), "--kv-dtype", self.kv]
                if rows:
                    cmd += ["--rows", str(rows)]
            run(cmd)
            self.modules[key] = path
        return self.modules[key]

    def exec(self, module, entry, inputs, decomposed=False):
        RUNS[0] += 1
        d = os.path.join(self.tmp, f"run{RUNS[0]}")
        os.makedirs(d)
        paths = []
        for i, a in enumerate(inputs):
            p = os.path.join(d, f"in{i}.npy")
            np.save(p, a)
            paths.append(p)
        cmd = [self.hlx, "exec", module, "--entry", entry, "--weights-from", self.model, "--output-dir", d]
        for p in paths:
            cmd += ["--input", p]
        if decomposed:
            cmd.append("--no-native-composites")
        run(cmd)
        outs = sorted(glob.glob(os.path.join(d, "out_*.npy")), key=lambda p: int(p.rsplit("_", 1)[1][:-4]))
        return [np.load(p) for p in outs]

    def vision(self, pixels, stage="features", decomposed=False):
        return self.exec(self.module("vision_encode", stage=stage), "vision_encode", [pixels], decomposed)[0]

    def caches(self, ref):
        t = ref.text
        shape = (1, CAPACITY, t.n_kv, t.head_dim)
        z = np.zeros(shape, np.float32) if self.kv == "f32" else np.zeros(shape, np.dtype("<u2"))
        return [z.copy() for _ in range(2 * t.n_layers)]

    def prefill(self, entry, rows, emb, mask, length, start, caches):
        e = np.zeros((rows, emb.shape[1]), np.float32)
        e[:emb.shape[0]] = emb
        ins = [e] + ([mask] if mask is not None else []) + [np.array(length, np.int32), np.array(start, np.int32),
                                                             np.array(0, np.int32)] + caches
        out = self.exec(self.module(entry, rows), entry, ins)
        return out[0], out[1:]

    def decode(self, token, pos, caches):
        out = self.exec(self.module("decode", 1), "decode",
                        [np.array([token], np.int32), np.array([pos], np.int32), np.array([0], np.int32)] + caches)
        return out[0][0], out[1:]


def maxerr(a, b):
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def test_dtype(hlx_bin, tmp, dtype):
    model = os.path.join(tmp, f"gemma3-vlm-{dtype}")
    run([hlx_bin, "fixture", "--family", "gemma3-vlm", "--out", model, "--dtype", dtype, "--seed", "3",
         "--no-tokenizer"])
    bf16 = dtype == "bf16"
    ref = g3.Gemma3Vlm(model, bf16=bf16)
    tol = TOL[dtype]
    kvs = ["f32", "bf16"] if bf16 else ["f32"]
    rng = np.random.RandomState(7)
    size = ref.tower.image
    pixels = [rng.uniform(-1, 1, size=(1, 3, size, size)).astype(np.float32) for _ in range(2)]

    # ---- vision_encode: tower rows, pooled rows, projected features.
    h = Hlx(hlx_bin, model, tmp, "f32")
    feats = []
    for k, px in enumerate(pixels):
        for stage in ("tower", "pooled", "features"):
            want = ref.features(px, stage=stage)
            got = h.vision(px, stage)
            if check(got.shape == want.shape, f"{dtype} image {k} {stage}: shape {got.shape}, want {want.shape}"):
                err = maxerr(got, want)
                t = tol["tower"] if stage != "features" else tol["features"]
                check(err <= t, f"{dtype} image {k} {stage}: max abs error {err:.3g} <= {t} (std {want.std():.2f})")
            if stage == "features":
                feats.append(got)
        if not bf16 and k == 0:
            got = h.vision(px, "features", decomposed=True)
            err = maxerr(got, ref.features(px))
            check(err <= tol["features"], f"{dtype} image 0 features, composites decomposed: error {err:.3g}")
    # Ablations of the projector, seen at the features the prompt receives.
    px = pixels[0]
    want = ref.features(px)
    for name, kw in (("pooling skipped", {"skip_pooling": True}), ("RMSNorm without 1 +", {"norm_without_one": True})):
        eff = maxerr(ref.features(px, **kw), want)
        check(eff > MIN_EFFECT, f"{dtype} negative: {name} moves the features by {eff:.3g} > {MIN_EFFECT}")
        err = maxerr(feats[0], ref.features(px, **kw))
        check(err > tol["features"], f"{dtype} negative: hlx vs reference with {name}: error {err:.3g} > tolerance")

    # ---- prompts: expanded layout (text, boi, image rows, eoi, text).
    blk = ref.image_block()
    prompts = [
        ("1 image", [2, 5, 17, 9] + blk + [42, 99, 7], [feats[0]], [pixels[0]]),
        ("2 images", [2, 11] + blk + [57, 8, 91] + blk + [140, 6, 77], [feats[0], feats[1]], pixels),
    ]
    for kv in kvs:
        h = Hlx(hlx_bin, model, tmp, kv)
        ref.text.bf16_kv = kv == "bf16"
        ltol = tol["logits"]
        for name, ids, fs, pxs in prompts:
            L = len(ids)
            ref_feats = [ref.features(p) for p in pxs]
            # What hlx's host merge gives the entry: text rows embed * scale, image rows hlx's features.
            emb = ref.embeddings(ids, fs)
            # f32: the reference's own features end to end; bf16: the same rows as hlx (a feature
            # 1e-7 off can round a bf16 operand the other way, which says nothing about the decoder).
            want = ref.forward(ids, emb if bf16 else ref.embeddings(ids, ref_feats))
            for rows in (32, L):  # right padding, none
                mask = ref.mask(ids, rows)
                logits, _ = h.prefill("prefill_embeddings_masked_all_logits", rows, emb, mask, L, 0, h.caches(ref))
                err = maxerr(logits[:L], want)
                check(err <= ltol, f"{dtype} kv={kv} {name} rows={rows}: every row's logits, max abs error "
                                   f"{err:.3g} <= {ltol} (logit std {want.std():.2f})")
            # Two chunks: the second sees the first through the cache (split on text rows).
            s1 = ids.index(ref.eoi) + 1
            _, caches = h.prefill("prefill_embeddings_masked_all_logits", 32, emb[:s1],
                                  ref.mask(ids[:s1], 32), s1, 0, h.caches(ref))
            m2 = np.full((1, 1, 32, 32), g3.NEG, np.float32)
            m2[0, 0, :L - s1, :L - s1] = ref.mask(ids, L)[0, 0, s1:, s1:]
            logits2, _ = h.prefill("prefill_embeddings_masked_all_logits", 32, emb[s1:], m2, L - s1, s1, caches)
            err = maxerr(logits2[:L - s1], want[s1:])
            check(err <= ltol, f"{dtype} kv={kv} {name}: chunks [0,{s1}) + [{s1},{L}): rows of chunk 2, error {err:.3g}")

            # A purely causal mask: prefill_embeddings' bits, logits and every cache row.
            causal = ref.mask(ids, 32, causal_only=True)
            lm, cm = h.prefill("prefill_embeddings_masked", 32, emb, causal, L, 0, h.caches(ref))
            lp, cp = h.prefill("prefill_embeddings", 32, emb, None, L, 0, h.caches(ref))
            same = lm.tobytes() == lp.tobytes() and all(a.tobytes() == b.tobytes() for a, b in zip(cm, cp))
            check(same, f"{dtype} kv={kv} {name}: causal mask = prefill_embeddings bit for bit (logits, {len(cm)} caches)")

            # Negative checks on the prompt side.
            if kv == kvs[0]:
                for what, kw, hw in (
                        ("causal mask instead of the image-block rule", {"causal_only": True}, {}),
                        ("0/1 multiplicative mask", {"multiplicative": True}, {}),
                        ("double embedding scale", {}, {"double_text_scale": True}),
                        ("scaled image rows", {}, {"scale_image_rows": True})):
                    ab = ref.forward(ids, ref.embeddings(ids, ref_feats, **hw), **kw)
                    eff = maxerr(ab, want)
                    check(eff > MIN_EFFECT, f"{dtype} negative {name}: {what} moves the logits by {eff:.3g}")
                    got, _ = h.prefill("prefill_embeddings_masked_all_logits", L, emb, ref.mask(ids, L), L, 0, h.caches(ref))
                    check(maxerr(got[:L], ab) > ltol, f"{dtype} negative {name}: hlx fails against the {what} reference")

        # ---- greedy: masked prefill, then ordinary decode steps.
        name, ids, fs, pxs = prompts[1]
        L = len(ids)
        toks, steps = ref.greedy(ids, [ref.features(p) for p in pxs], N_NEW)
        logits, caches = h.prefill("prefill_embeddings_masked", 32, ref.embeddings(ids, fs), ref.mask(ids, 32), L, 0,
                                   h.caches(ref))
        got = []
        row = logits
        for i in range(N_NEW):
            t = int(np.argmax(row))
            got.append(t)
            if i + 1 < N_NEW:
                row, caches = h.decode(t, L + i, caches)
        if got == toks:
            check(True, f"{dtype} kv={kv} {name}: {N_NEW} greedy tokens identical ({len(set(toks))} distinct)")
        else:
            div = next(i for i, (a, b) in enumerate(zip(got, toks)) if a != b)
            gap = float(np.sort(steps[div])[-1] - np.sort(steps[div])[-2])
            check(bf16 and gap < 5e-2, f"{dtype} kv={kv} {name}: greedy diverges at step {div} "
                                      f"({got[div]} vs {toks[div]}, reference top-2 gap {gap:.4f})")
    ref.text.bf16_kv = False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    ap.add_argument("--dtype", action="append", help="f32 and/or bf16 (default both)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hlx_gemma3_vlm_") as tmp:
        for dtype in args.dtype or ["f32", "bf16"]:
            test_dtype(args.hlx, tmp, dtype)
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        return 1
    print("gemma3 vlm model side matches the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
