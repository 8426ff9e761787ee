"""hlx's vision_encode entry (CLIP / SigLIP tower + LLaVA projector) against the independent numpy
reference in reference.py (VisionTower, written from transformers' modeling_clip/siglip/llava):

- `hlx fixture --family llava-clip|llava-siglip` (f32), `hlx encode --pixels` on random pixels:
  features within 1e-4;
- the same module run on its composites' plain-StableHLO decompositions (`hlx exec
  --no-native-composites`): within 1e-4;
- `hlx encode --image` on a PNG, the reference preprocessing with PIL here (resize bicubic, center
  crop, rescale, normalise as CLIPImageProcessor / SiglipImageProcessor do): within 1e-4;
- a bf16 llava-clip fixture, reference with bf16-rounded matmul inputs: within 1e-3;
- the erf approximation hlx emits for GELU (Abramowitz & Stegun 7.1.26) within 1.5e-7 of math.erf;
- ablations: each feature the fixtures claim to exercise (feature layer, class-token drop, quick-GELU,
  erf vs tanh GELU, pre_layrnorm, patch bias, post_layernorm not applied) moves the reference's
  features by more than the tolerance, so an encoder that got it wrong would fail above.

Run: /usr/bin/python3 test_vision_reference.py --hlx path/to/hlx
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

TOL = 1e-4
BF16_TOL = 1e-3
FAILURES = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILURES.append(what)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def encode(hlx, model, tmp, pixels=None, image=None, extra=()):
    out = os.path.join(tmp, "features.npy")
    cmd = [hlx, "encode", "-m", model, "--out", out, "--threads", "1"] + list(extra)
    if pixels is not None:
        path = os.path.join(tmp, "pixels.npy")
        np.save(path, pixels)
        cmd += ["--pixels", path]
    else:
        cmd += ["--image", image]
    print("   ", run(cmd).strip().replace("\n", " | "))
    return np.load(out)


# --- PIL preprocessing, as transformers' image processors do it --------------------------------

def pil_preprocess(path, cfg):
    from PIL import Image
    img = Image.open(path).convert("RGB")
    size = cfg["size"]
    if "shortest_edge" in size:  # get_resize_output_image_size(default_to_square=False)
        w, h = img.size
        short, long = (w, h) if w <= h else (h, w)
        new_short = size["shortest_edge"]
        new_long = int(new_short * long / short)
        new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    else:
        new_w, new_h = size["width"], size["height"]
    img = img.resize((new_w, new_h), resample=Image.BICUBIC)  # resample 3
    a = np.asarray(img, dtype=np.uint8)
    if cfg.get("do_center_crop"):
        ch, cw = cfg["crop_size"]["height"], cfg["crop_size"]["width"]
        top, left = (a.shape[0] - ch) // 2, (a.shape[1] - cw) // 2
        a = a[top:top + ch, left:left + cw]
    x = (a.astype(np.float64) * cfg["rescale_factor"]).astype(np.float32)
    mean = np.array(cfg["image_mean"], dtype=np.float32)
    std = np.array(cfg["image_std"], dtype=np.float32)
    x = (x - mean) / std
    return x.transpose(2, 0, 1)[None].astype(np.float32)


def write_image(path, w, h, seed):
    from PIL import Image
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 // max(w - 1, 1), yy * 255 // max(h - 1, 1), (xx + yy) * 127 // max(w + h - 2, 1)], -1)
    noise = rng.randint(-40, 41, size=(h, w, 3))
    Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8), "RGB").save(path)


# --- erf ----------------------------------------------------------------------------------------

def erf_as26(x):
    """The approximation vision_encoder.cc emits (A&S 7.1.26), in f64 to check the formula's bound."""
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(x) * (1.0 - poly * np.exp(-z * z))


def test_erf():
    x = np.linspace(-8, 8, 200001)
    err = np.abs(erf_as26(x) - reference._ERF(x)).max()
    check(err <= 1.5e-7, f"erf approximation (A&S 7.1.26) max error {err:.3g} <= 1.5e-7 on [-8, 8]")


# --- ablations ----------------------------------------------------------------------------------

def ablations(tower):
    a = {
        "feature layer off by one": lambda t: setattr(t, "feature_layer", t.feature_layer + 1 if t.feature_layer < -1 else -2),
        "quick_gelu / tanh swapped in the tower": lambda t: setattr(
            t, "hidden_act", "gelu_pytorch_tanh" if t.hidden_act == "quick_gelu" else "quick_gelu"),
        "projector GELU tanh instead of erf": lambda t: setattr(t, "projector_act", "gelu_pytorch_tanh"),
        "no projector biases": lambda t: setattr(t, "projector_bias", False),
    }
    if tower.clip:
        # Same row count: keep the class token, drop the last patch instead.
        a["class token kept, last patch dropped"] = lambda t: (setattr(t, "strategy", "full"), setattr(
            t, "features", (lambda orig: lambda px: orig(px)[:-1])(t.features)))
        a["pre_layrnorm skipped"] = lambda t: t.w.update({t.vp + "pre_layrnorm.weight": np.ones(t.hidden, np.float32),
                                                           t.vp + "pre_layrnorm.bias": np.zeros(t.hidden, np.float32)})
    else:
        a["patch bias dropped"] = lambda t: t.w.update(
            {t.vp + "embeddings.patch_embedding.bias": np.zeros(t.hidden, np.float32)})

        def post_ln(t):
            orig = t.hidden_states

            def hs(px):
                s = orig(px)
                s[-1] = reference.layer_norm(s[-1], t.v("post_layernorm.weight"), t.v("post_layernorm.bias"), t.eps)
                return s
            t.hidden_states = hs
        a["post_layernorm applied to the last layer"] = post_ln
    return a


def test_ablations(model, pixels, name):
    base = reference.VisionTower(model).features(pixels)
    for what, fn in ablations(reference.VisionTower(model)).items():
        t = reference.VisionTower(model)
        fn(t)
        f = t.features(pixels)
        effect = float(np.abs(f - base).max()) if f.shape == base.shape else float("inf")
        # 10x the tolerance, except the erf/tanh GELU gap (at most ~5e-4 per element by nature): 3x.
        need = (3 if "erf" in what else 10) * TOL
        check(effect > need, f"{name}: ablation '{what}' moves features by {effect:.3g} > {need:g}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    try:
        import PIL  # noqa: F401
    except ImportError:
        print("skip: PIL not available")
        return 77
    test_erf()
    with tempfile.TemporaryDirectory() as tmp:
        img = os.path.join(tmp, "image.png")
        write_image(img, 45, 37, seed=3)  # landscape, odd sizes: resize and crop both matter
        img2 = os.path.join(tmp, "tall.png")
        write_image(img2, 20, 51, seed=4)  # portrait, upscaled
        for family in ("llava-clip", "llava-siglip"):
            model = os.path.join(tmp, family)
            run([args.hlx, "fixture", "--family", family, "--out", model, "--no-tokenizer", "--seed", "7"])
            with open(os.path.join(model, "config.json")) as f:
                side = json.load(f)["vision_config"]["image_size"]
            with open(os.path.join(model, "preprocessor_config.json")) as f:
                pre = json.load(f)
            rng = np.random.RandomState(11)
            for k in range(2):
                px = rng.randn(1, 3, side, side).astype(np.float32) * 1.5
                got = encode(args.hlx, model, tmp, pixels=px)
                want = reference.image_features(model, px)
                err = float(np.abs(got - want).max())
                check(got.shape == want.shape and err <= TOL,
                      f"{family} f32 random pixels #{k}: shape {got.shape} vs {want.shape}, max abs err {err:.3g} <= {TOL:g}")
            for path in (img, img2):
                got = encode(args.hlx, model, tmp, image=path)
                want = reference.image_features(model, pil_preprocess(path, pre))
                err = float(np.abs(got - want).max())
                check(got.shape == want.shape and err <= TOL,
                      f"{family} f32 image {os.path.basename(path)} (PIL preprocessing): max abs err {err:.3g} <= {TOL:g}")
            # The portable path: the emitted module run with every composite's plain-StableHLO
            # decomposition (hlx exec --no-native-composites) also matches the reference.
            px = rng.randn(1, 3, side, side).astype(np.float32)
            mlir = os.path.join(tmp, "vision.mlir")
            encode(args.hlx, model, tmp, pixels=px, extra=["--emit-module", mlir])
            np.save(os.path.join(tmp, "px.npy"), px)
            outdir = os.path.join(tmp, "exec")
            run([args.hlx, "exec", mlir, "--entry", "vision_encode", "--input", os.path.join(tmp, "px.npy"),
                 "--weights-from", model, "--output-dir", outdir, "--no-native-composites"])
            got = np.load(os.path.join(outdir, "out_0.npy"))
            err = float(np.abs(got - reference.image_features(model, px)).max())
            check(err <= TOL, f"{family} f32 decompositions only (hlx exec --no-native-composites): max abs err {err:.3g} <= {TOL:g}")
            test_ablations(model, rng.randn(1, 3, side, side).astype(np.float32), family)

        model = os.path.join(tmp, "clip-bf16")
        run([args.hlx, "fixture", "--family", "llava-clip", "--dtype", "bf16", "--out", model, "--no-tokenizer"])
        px = np.random.RandomState(5).randn(1, 3, 28, 28).astype(np.float32)
        got = encode(args.hlx, model, tmp, pixels=px)
        want = reference.image_features(model, px, bf16_matmul=True)
        err = float(np.abs(got - want).max())
        check(err <= BF16_TOL, f"llava-clip bf16 random pixels: max abs err {err:.3g} <= {BF16_TOL:g} (features absmax "
                               f"{float(np.abs(want).max()):.3g})")
        # CLI errors: typed, naming the offending value, exit 1.
        def fails(cmd, needle):
            r = subprocess.run(cmd, capture_output=True, text=True)
            check(r.returncode == 1 and needle in r.stderr, f"error for {' '.join(cmd[1:3])}...: {r.stderr.strip()!r} has {needle!r}")
        clip = os.path.join(tmp, "llava-clip")
        bad = os.path.join(tmp, "bad.npy")
        np.save(bad, np.zeros((1, 3, 30, 28), np.float32))
        fails([args.hlx, "encode", "-m", clip, "--pixels", bad], "1x3x30x28")
        np.save(bad, np.zeros((1, 3, 28, 28), np.int32))
        fails([args.hlx, "encode", "-m", clip, "--pixels", bad], "dtype i32")
        fails([args.hlx, "encode", "-m", clip], "exactly one of --image and --pixels")
        text = os.path.join(tmp, "qwen3")
        run([args.hlx, "fixture", "--family", "qwen3", "--out", text, "--no-tokenizer"])
        fails([args.hlx, "encode", "-m", text, "--pixels", bad], "unsupported")
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print("all vision reference checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
