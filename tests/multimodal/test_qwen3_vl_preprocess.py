#!/usr/bin/env python3
"""Qwen3-VL host side against independent references (transformers' Qwen2VLImageProcessor slow
path and Qwen3VLModel.get_rope_index, transcribed here to numpy + PIL):

  - smart_resize sizes (incl. a side that needs Python's half-to-even round, one image that hits
    max_pixels, one below min_pixels) and the aspect-ratio > 200 refusal;
  - resized u8 pixels exactly equal to PIL's bicubic resize;
  - flattened patches (t, block row, block col, row, col) x (c, t, y, x) exactly equal;
  - `size` {shortest_edge, longest_edge} and the older min_pixels / max_pixels keys;
  - placeholder expansion and [3, L] M-RoPE positions + rope_delta for text-only prompts, one and
    two images of different grids, images at the start / end and back to back.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from PIL import Image
except ImportError as e:
    print("skip:", e)
    sys.exit(77)

IMAGE_TOKEN, VISION_START, VISION_END = 151655, 151652, 151653

QWEN3 = {"image_processor_type": "Qwen2VLImageProcessorFast", "patch_size": 16, "temporal_patch_size": 2,
         "merge_size": 2, "size": {"shortest_edge": 32 * 32, "longest_edge": 32 * 32 * 30},
         "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "do_rescale": True,
         "rescale_factor": 1 / 255, "do_normalize": True, "resample": 3}
# Qwen2-VL style keys: min_pixels / max_pixels (and CLIP mean/std by default).
QWEN2 = {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 14, "temporal_patch_size": 2,
         "merge_size": 2, "min_pixels": 56 * 56, "max_pixels": 28 * 28 * 20}
# Both present: min_pixels / max_pixels win over size (upstream __init__).
BOTH = dict(QWEN3, min_pixels=32 * 32 * 4, max_pixels=32 * 32 * 12)
CONFIGS = {"qwen3": QWEN3, "qwen2": QWEN2, "both": BOTH}
CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]


def ref_config(cfg):
    mn, mx = 56 * 56, 28 * 28 * 1280
    if "size" in cfg:
        mn, mx = cfg["size"]["shortest_edge"], cfg["size"]["longest_edge"]
    mn = cfg.get("min_pixels", mn)
    mx = cfg.get("max_pixels", mx)
    return dict(patch=cfg.get("patch_size", 14), tps=cfg.get("temporal_patch_size", 2),
                merge=cfg.get("merge_size", 2), min_pixels=mn, max_pixels=mx,
                mean=cfg.get("image_mean", CLIP_MEAN), std=cfg.get("image_std", CLIP_STD),
                scale=cfg.get("rescale_factor", 1 / 255))


def smart_resize(height, width, factor, min_pixels, max_pixels):
    """transformers.models.qwen2_vl.image_processing_qwen2_vl.smart_resize."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError("aspect")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def ref_preprocess(rgb, cfg):
    """Qwen2VLImageProcessor._preprocess on one still image (PIL resize, f64 rescale -> f32,
    (x - mean) / std in f32, repeat to temporal_patch_size frames, block-order flatten)."""
    c = ref_config(cfg)
    h, w = rgb.shape[:2]
    factor = c["patch"] * c["merge"]
    rh, rw = smart_resize(h, w, factor, c["min_pixels"], c["max_pixels"])
    u8 = np.asarray(Image.fromarray(rgb, "RGB").resize((rw, rh), Image.BICUBIC))
    x = (u8.astype(np.float64) * c["scale"]).astype(np.float32)
    x = (x - np.array(c["mean"], dtype=np.float32)) / np.array(c["std"], dtype=np.float32)
    x = x.transpose(2, 0, 1)[None]  # [1, C, H, W]
    x = np.repeat(x, c["tps"], axis=0)  # a still image becomes temporal_patch_size frames
    P, M, T = c["patch"], c["merge"], c["tps"]
    gt, gh, gw = x.shape[0] // T, rh // P, rw // P
    flat = (x.reshape(gt, T, 3, gh // M, M, P, gw // M, M, P).transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
            .reshape(gt * gh * gw, 3 * T * P * P))
    return u8, flat, (gt, gh, gw)


def ref_rope_index(ids, grids, merge):
    """Qwen3VLModel.get_rope_index for one unpadded prompt (images only)."""
    tokens = list(ids)
    parts, st = [], 0
    for t, h, w in grids:
        ed = tokens.index(IMAGE_TOKEN, st)
        gt, gh, gw = t, h // merge, w // merge
        text_len = ed - st
        st_idx = parts[-1].max() + 1 if parts else 0
        parts.append(np.broadcast_to(np.arange(text_len)[None], (3, text_len)) + st_idx)
        t_i = np.repeat(np.arange(gt), gh * gw)
        h_i = np.tile(np.repeat(np.arange(gh), gw), gt)
        w_i = np.tile(np.arange(gw), gt * gh)
        parts.append(np.stack([t_i, h_i, w_i]) + text_len + st_idx)
        st = ed + gt * gh * gw
    if st < len(tokens):
        st_idx = parts[-1].max() + 1 if parts else 0
        text_len = len(tokens) - st
        parts.append(np.broadcast_to(np.arange(text_len)[None], (3, text_len)) + st_idx)
    pos = np.concatenate(parts, axis=1) if parts else np.zeros((3, 0), np.int64)
    delta = (pos.max() + 1 - len(tokens)) if len(tokens) else 0
    return pos, int(delta)


def ref_expand(ids, grids, merge):
    out, k = [], 0
    for i in ids:
        if i == IMAGE_TOKEN:
            t, h, w = grids[k]
            k += 1
            out += [IMAGE_TOKEN] * (t * (h // merge) * (w // merge))
        else:
            out.append(i)
    return out


def content(rng, w, h):
    y, x = np.mgrid[0:h, 0:w]
    g = np.stack([(x * (37 + 11 * c) + y * (13 + 29 * c)) % 256 for c in range(3)], -1)
    noise = rng.integers(0, 256, size=(h, w, 3))
    return np.where(rng.random((h, w, 1)) < 0.3, noise, g).astype(np.uint8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    failures, checked = [], 0
    # (w, h): 98x70 rounds 3.5 -> 4 and 2.5 -> 2 at factor 28 (half-to-even; half-up gives 3);
    # 500x333 hits max_pixels; 20x30 is below min_pixels; 48x80 rounds 1.5 -> 2, 2.5 -> 2 at 32;
    # 1x150 is a long thin strip (ratio 150).
    sizes = [(98, 70), (500, 333), (20, 30), (48, 80), (224, 224), (150, 1), (160, 112), (33, 700)]
    with tempfile.TemporaryDirectory() as d:
        cfg_paths = {}
        for name, cfg in CONFIGS.items():
            cfg_paths[name] = os.path.join(d, name + ".json")
            json.dump(cfg, open(cfg_paths[name], "w"))
        notes = set()
        for (w, h) in sizes:
            rgb = content(rng, w, h)
            img = os.path.join(d, f"img_{w}x{h}.png")
            Image.fromarray(rgb, "RGB").save(img)
            for name, cfg in CONFIGS.items():
                tag = f"{w}x{h} [{name}]"
                c = ref_config(cfg)
                f = c["patch"] * c["merge"]
                rh, rw = smart_resize(h, w, f, c["min_pixels"], c["max_pixels"])
                if round(h / f) != math.floor(h / f + 0.5) or round(w / f) != math.floor(w / f + 0.5):
                    notes.add("half-to-even")
                if round(h / f) * round(w / f) * f * f > c["max_pixels"]:
                    notes.add("max_pixels")
                if round(h / f) * round(w / f) * f * f < c["min_pixels"]:
                    notes.add("min_pixels")
                out, u8o = os.path.join(d, "p.npy"), os.path.join(d, "u8.npy")
                r = subprocess.run([args.hlx, "preprocess", "--image", img, "--preprocessor-config", cfg_paths[name],
                                    "-o", out, "--u8-out", u8o], capture_output=True, text=True)
                if r.returncode != 0:
                    failures.append(f"{tag}: hlx failed: {r.stderr.strip()}")
                    continue
                ref_u8, ref_flat, ref_grid = ref_preprocess(rgb, cfg)
                got_u8, got = np.load(u8o), np.load(out)
                grid = tuple(int(v) for v in r.stdout.split("grid_thw")[1].split()[:3])
                if got_u8.shape != (rh, rw, 3) or not np.array_equal(got_u8, ref_u8):
                    failures.append(f"{tag}: resized u8 {got_u8.shape} differs from PIL {ref_u8.shape}")
                    continue
                if grid != ref_grid:
                    failures.append(f"{tag}: grid {grid} vs reference {ref_grid}")
                if got.dtype != np.float32 or got.shape != ref_flat.shape or not np.array_equal(got, ref_flat):
                    failures.append(f"{tag}: patches not exact ({got.dtype} {got.shape} vs {ref_flat.shape})")
                checked += 1
        for needed in ("half-to-even", "max_pixels", "min_pixels"):
            if needed not in notes:
                failures.append(f"no test image exercises {needed}")

        # Aspect ratio above 200 is refused with a typed error.
        strip = os.path.join(d, "strip.png")
        Image.fromarray(content(rng, 201, 1), "RGB").save(strip)
        r = subprocess.run([args.hlx, "preprocess", "--image", strip, "--preprocessor-config", cfg_paths["qwen3"],
                            "-o", os.path.join(d, "x.npy")], capture_output=True, text=True)
        if r.returncode != 1 or "aspect ratio" not in r.stderr or "invalid" not in r.stderr.lower():
            failures.append(f"aspect ratio 201: rc={r.returncode} stderr={r.stderr!r}")

        # M-RoPE positions and placeholder expansion.
        S, E = VISION_START, VISION_END
        cases = [
            ("text only", [5, 6, 7, 8], []),
            ("one image", [1, 2, S, IMAGE_TOKEN, E, 3, 4], [(1, 6, 8)]),
            ("two images", [1, S, IMAGE_TOKEN, E, 9, 9, S, IMAGE_TOKEN, E, 7], [(1, 4, 10), (1, 12, 2)]),
            ("image first", [IMAGE_TOKEN, 4, 5], [(1, 8, 8)]),
            ("image last", [4, 5, S, IMAGE_TOKEN], [(1, 2, 6)]),
            ("back to back", [4, IMAGE_TOKEN, IMAGE_TOKEN, 5], [(1, 4, 4), (1, 6, 2)]),
            ("temporal", [4, IMAGE_TOKEN, 5], [(2, 4, 4)]),
        ]
        for name, ids, grids in cases:
            exp = ref_expand(ids, grids, 2)
            pos_ref, delta_ref = ref_rope_index(exp, grids, 2)
            out = os.path.join(d, "pos.npy")
            cmd = [args.hlx, "mrope-positions", "--tokens", ",".join(map(str, ids)), "--expand", "-o", out]
            for g in grids:
                cmd += ["--grid", ",".join(map(str, g))]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                failures.append(f"mrope {name}: hlx failed: {r.stderr.strip()}")
                continue
            lines = dict(line.split(" ", 1) for line in r.stdout.strip().splitlines())
            got_ids = [int(v) for v in lines["ids"].split(",")]
            pos = np.load(out)
            if got_ids != exp:
                failures.append(f"mrope {name}: expanded ids differ")
            if pos.dtype != np.int32 or pos.shape != pos_ref.shape or not np.array_equal(pos, pos_ref):
                failures.append(f"mrope {name}: positions differ\n{pos}\nvs\n{pos_ref}")
            if int(lines["rope_delta"]) != delta_ref:
                failures.append(f"mrope {name}: rope_delta {lines['rope_delta']} vs {delta_ref}")
            checked += 1
        # Mismatched counts are typed errors.
        for ids, grids in (([1, IMAGE_TOKEN, 2], []), ([1, 2], [(1, 2, 2)]), ([IMAGE_TOKEN] * 3, [(1, 4, 4)])):
            cmd = [args.hlx, "mrope-positions", "--tokens", ",".join(map(str, ids)), "-o", os.path.join(d, "x.npy")]
            for g in grids:
                cmd += ["--grid", ",".join(map(str, g))]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 1 or "invalid" not in r.stderr.lower():
                failures.append(f"mrope {ids} {grids}: expected a typed error, rc={r.returncode} {r.stderr!r}")

    for f in failures:
        print("FAIL", f)
    print(f"{checked} checks, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
