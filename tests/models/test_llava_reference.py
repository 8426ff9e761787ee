"""Whole LLaVA models end to end against the independent numpy reference (reference.py: the text
decoder, the CLIP/SigLIP tower and the projector, written from transformers' modeling files).

For the llava-clip (llama text, CLIP tower, layer -2, "default") and llava-siglip (qwen2 text,
SigLIP tower, layer -1, "full") f32 fixtures, with PNG images preprocessed by PIL here as the HF
processors do: the prompt's image tokens are expanded to tokens_per_image rows, the projected
features replace those rows in order (LlavaModel: masked_scatter of image_features), and
- `hlx logits --image` (last prompt row) is within 1e-4 of the reference, for one image and for two;
- `hlx generate --tokens --image` gives the reference's 32 greedy tokens.
Sensitivity: the reference with an image's features shifted by one row, or with the two images
swapped, moves those logits by far more than the tolerance, so a merge that got the order or the
placement wrong would fail above.

Run: /usr/bin/python3 test_llava_reference.py --hlx path/to/hlx
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

try:
    from test_vision_reference import pil_preprocess, write_image  # PIL processors (CLIP / SigLIP)
except ImportError as e:  # PIL missing
    print("skip:", e)
    sys.exit(77)

LOGIT_TOL = 1e-4
MIN_EFFECT = 1e-2
N_NEW = 32
FAILURES = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILURES.append(what)
    return ok


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout, r.stderr


class LlavaReference:
    """LlavaForConditionalGeneration.forward for one sequence: token embeddings, image rows
    replaced by projected features, then the decoder (full recomputation per call)."""

    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            root = json.load(f)
        with open(os.path.join(model_dir, "preprocessor_config.json")) as f:
            self.processor = json.load(f)
        self.image_token = root.get("image_token_index", root.get("image_token_id"))
        self.text = reference.Model(model_dir)
        self.tower = reference.VisionTower(model_dir)

    def features(self, image_paths):
        return [self.tower.features(pil_preprocess(p, self.processor)) for p in image_paths]

    def expand(self, ids, n_per_image):
        out = []
        for t in ids:
            out.extend([t] * n_per_image if t == self.image_token else [t])
        return out

    def embeddings(self, ids, feats, shift=0):
        """ids with one image token per image; feats in image order. shift moves every image's
        rows (an ablation)."""
        T = feats[0].shape[0]
        seq = self.expand(ids, T)
        h = self.text.embeddings([0 if t == self.image_token else t for t in seq])
        rows = [i for i, t in enumerate(seq) if t == self.image_token]
        assert len(rows) == T * len(feats), (len(rows), T, len(feats))
        allf = np.concatenate(feats, axis=0)
        idx = np.clip(np.array(rows) + shift, 0, len(seq) - 1)
        h[idx] = allf
        return h

    def logits(self, ids, feats, shift=0):
        return self.text.forward_embeddings(self.embeddings(ids, feats, shift))

    def greedy(self, ids, feats, n):
        h = self.embeddings(ids, feats)
        out, steps = [], []
        eos = self.text.eos_ids()
        for _ in range(n):
            row = self.text.forward_embeddings(h)[-1]
            t = int(np.argmax(row))
            out.append(t)
            steps.append(row)
            if t in eos:
                break
            h = np.concatenate([h, self.text.embeddings([t])], axis=0)
        return out, steps


def top2_gap(row):
    s = np.sort(row)
    return float(s[-1] - s[-2])


def hlx_logits(hlx, model, ids, images, tmp):
    out = os.path.join(tmp, "logits.npy")
    cmd = [hlx, "logits", "-m", model, "--tokens", ",".join(map(str, ids)), "--kv-dtype", "f32", "-o", out,
           "--threads", "1"]
    for p in images:
        cmd += ["--image", p]
    run(cmd)
    return np.load(out)


def hlx_generate(hlx, model, ids, images):
    cmd = [hlx, "generate", "-m", model, "--tokens", ",".join(map(str, ids)), "-n", str(N_NEW), "--kv-dtype", "f32",
           "--threads", "1"]
    for p in images:
        cmd += ["--image", p]
    out, err = run(cmd)
    print("    " + err.strip().splitlines()[-1])
    out = out.strip()
    return [int(t) for t in out.split(",")] if out else []


def test_family(hlx, tmp, family):
    model = os.path.join(tmp, family)
    run([hlx, "fixture", "--family", family, "--out", model, "--dtype", "f32", "--seed", "3", "--no-tokenizer"])
    ref = LlavaReference(model)
    img = ref.image_token
    paths = []
    for k, (w, h) in enumerate([(45, 30), (37, 52), (30, 30)]):
        paths.append(os.path.join(tmp, f"{family}-{k}.png"))
        write_image(paths[-1], w, h, seed=10 + k)
    feats = ref.features(paths)

    # Prompts: one image after a text prefix; two images at different places. The first candidate
    # whose reference greedy run is 32 tokens without eos or near-ties is used for generation.
    cases = [
        ("1 image", [5, img, 17, 42, 99, 3, 250, 7], [paths[0]], [feats[0]]),
        ("2 images", [11, 23, img, 57, 8, 91, img, 140, 6, 77], [paths[1], paths[2]], [feats[1], feats[2]]),
        ("1 image first", [img, 64, 201, 33, 9, 180, 26], [paths[2]], [feats[2]]),
    ]
    generated = False
    for name, ids, imgs, fs in cases:
        want = ref.logits(ids, fs)[-1]
        got = hlx_logits(hlx, model, ids, imgs, tmp)
        if check(got.shape == want.shape, f"{family} {name}: logits shape {got.shape}, want {want.shape}"):
            err = float(np.abs(got - want).max())
            check(err <= LOGIT_TOL, f"{family} {name}: last-row logits max abs error {err:.3g} <= {LOGIT_TOL} "
                                    f"(logit std {want.std():.2f})")
        # The tolerance sees the merge: shifted rows / swapped images change the logits a lot.
        eff = float(np.abs(ref.logits(ids, fs, shift=1)[-1] - want).max())
        check(eff > MIN_EFFECT, f"{family} {name}: image rows shifted by one move the logits by {eff:.3g} > {MIN_EFFECT}")
        if len(fs) == 2:
            eff = float(np.abs(ref.logits(ids, fs[::-1])[-1] - want).max())
            check(eff > MIN_EFFECT, f"{family} {name}: images swapped move the logits by {eff:.3g} > {MIN_EFFECT}")
        if generated:
            continue
        toks, steps = ref.greedy(ids, fs, N_NEW)
        if len(toks) < N_NEW or min(top2_gap(r) for r in steps) < 1e-3:
            print(f"     {family} {name}: reference generation ends early or has a near-tie; next prompt")
            continue
        got_toks = hlx_generate(hlx, model, ids, imgs)
        check(got_toks == toks, f"{family} {name}: {N_NEW} greedy tokens identical to the reference "
                                f"({len(set(toks))} distinct){'' if got_toks == toks else f': {got_toks} != {toks}'}")
        generated = True
    check(generated, f"{family}: some prompt gives {N_NEW} unambiguous reference tokens")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    ap.add_argument("--family", action="append", help="llava-clip and/or llava-siglip (default both)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hlx_llava_reference_") as tmp:
        for family in args.family or ["llava-clip", "llava-siglip"]:
            test_family(args.hlx, tmp, family)
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        return 1
    print("llava models match the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
