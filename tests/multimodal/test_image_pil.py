#!/usr/bin/env python3
"""Image input parity with PIL (the reference HF image processors use).

Generates varied images with PIL in a temp dir (modes L, LA, P, P+tRNS, 1-bit, 2/4-bit gray,
RGB, RGBA, 16-bit gray / gray+alpha / RGB / RGBA PNG, gray / RGB / CMYK / progressive JPEG,
EXIF orientations 2..8; sizes incl. 1xN, odd sizes, large aspect ratios), runs
`hlx preprocess` and checks against PIL + numpy re-implementing the slow HF processor pipeline
(transformers load_image -> exif_transpose -> convert("RGB"); PIL resize on u8; center_crop;
rescale in f64 -> f32; (x - mean) / std in f32):
  - decoded RGB pixels: exact;
  - resized + cropped u8 pixels: max difference <= 1 (1/255) (in practice 0);
  - normalised f32 tensor: exactly equal to the reference computed from hlx's own u8 pixels.
Also checks that corrupt / truncated / oversized inputs fail with an error, not a crash.
"""
import argparse
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

try:
    import numpy as np
    from PIL import Image, ImageOps
except ImportError as e:  # the reference is not installed
    print("skip:", e)
    sys.exit(77)

CLIP = {"do_resize": True, "size": {"shortest_edge": 224}, "resample": 3, "do_center_crop": True,
        "crop_size": {"height": 224, "width": 224}, "do_rescale": True, "rescale_factor": 0.00392156862745098,
        "do_normalize": True, "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711], "do_convert_rgb": True}
CLIP_SMALL = dict(CLIP, size={"shortest_edge": 30}, crop_size={"height": 30, "width": 26})
SIGLIP = {"do_resize": True, "size": {"height": 384, "width": 384}, "resample": 3, "do_rescale": True,
          "rescale_factor": 0.00392156862745098, "do_normalize": True, "image_mean": [0.5, 0.5, 0.5],
          "image_std": [0.5, 0.5, 0.5]}
SIGLIP_BILINEAR = dict(SIGLIP, size={"height": 27, "width": 45}, resample=2)
LANCZOS = dict(SIGLIP, size={"height": 19, "width": 64}, resample=1)
NEAREST = dict(SIGLIP, size={"height": 23, "width": 70}, resample=0)
NEAREST_UP = dict(SIGLIP, size={"height": 300, "width": 7}, resample=0)
CROP_PAD = dict(CLIP, size={"shortest_edge": 8}, crop_size={"height": 13, "width": 10})  # HF pads
# Gemma3ImageProcessor (gemma-3-4b-it's preprocessor_config.json, smaller): a bilinear resize to a
# fixed size without keeping the aspect, pan-and-scan off (null).
GEMMA3 = {"do_convert_rgb": None, "do_normalize": True, "do_pan_and_scan": None, "do_rescale": True, "do_resize": True,
          "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "Gemma3ImageProcessor", "image_seq_length": 256,
          "image_std": [0.5, 0.5, 0.5], "resample": 2, "rescale_factor": 0.00392156862745098,
          "size": {"height": 56, "width": 56}}
CONFIGS = {"clip": CLIP, "clip_small": CLIP_SMALL, "siglip": SIGLIP, "siglip_bilinear": SIGLIP_BILINEAR,
           "lanczos": LANCZOS, "nearest": NEAREST, "nearest_up": NEAREST_UP, "crop_pad": CROP_PAD, "gemma3": GEMMA3}


def content(rng, w, h, channels):
    """Smooth gradients plus noise and hard edges: overshoot and clipping in bicubic matter."""
    y, x = np.mgrid[0:h, 0:w]
    out = []
    for c in range(channels):
        g = (x * (37 + 11 * c) + y * (13 + 29 * c)) % 256
        noise = rng.integers(0, 256, size=(h, w))
        mask = rng.random((h, w)) < 0.3
        out.append(np.where(mask, noise, g))
    a = np.stack(out, axis=-1).astype(np.uint8)
    return a[..., 0] if channels == 1 else a


def adam7_rows(a):
    """Scanlines of an Adam7-interlaced 8-bit image (libpng de-interlaces; PIL cannot write these)."""
    out = []
    for xs, ys, dx, dy in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
                           (0, 1, 1, 2)):
        sub = a[ys::dy, xs::dx]
        if sub.shape[0] and sub.shape[1]:
            out.extend(sub[r].tobytes() for r in range(sub.shape[0]))
    return out


def write_png_raw(path, w, h, depth, color, rows, interlace=0):
    """A PNG with a bit depth / colour type PIL cannot write (16-bit RGB(A), 2/4-bit gray)."""
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + r for r in rows)
    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, interlace))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    with open(path, "wb") as f:
        f.write(data)


def make_images(d, rng):
    imgs = []

    def save(name, im, **kw):
        p = os.path.join(d, name)
        im.save(p, **kw)
        imgs.append(p)

    sizes = [(1, 37), (37, 1), (1, 1), (17, 9), (224, 224), (333, 500), (640, 41), (23, 700), (2, 3)]
    for i, (w, h) in enumerate(sizes):
        save(f"rgb_{w}x{h}.png", Image.fromarray(content(rng, w, h, 3), "RGB"))
    save("l.png", Image.fromarray(content(rng, 61, 40, 1), "L"))
    save("la.png", Image.fromarray(content(rng, 33, 50, 2), "LA"))
    save("rgba.png", Image.fromarray(content(rng, 47, 29, 4), "RGBA"))
    pal = Image.fromarray(content(rng, 45, 31, 3), "RGB").quantize(colors=50)
    save("p.png", pal)
    save("p_trns.png", pal, transparency=3)
    save("one_bit.png", Image.fromarray(content(rng, 29, 19, 1) > 127))
    g16 = (rng.integers(0, 65536, size=(21, 30)) // np.array([1, 257, 300])[rng.integers(0, 3, size=(21, 30))])
    save("gray16.png", Image.fromarray(g16.astype(np.uint16)))
    # 16-bit RGB / RGBA / gray+alpha and 2/4-bit gray through a raw writer.
    for color, ch, name in ((2, 3, "rgb16"), (6, 4, "rgba16"), (4, 2, "la16")):
        w, h = 19, 14
        a = rng.integers(0, 65536, size=(h, w * ch)).astype(">u2")
        p = os.path.join(d, name + ".png")
        write_png_raw(p, w, h, 16, color, [a[r].tobytes() for r in range(h)])
        imgs.append(p)
    for w, h in ((13, 11), (3, 2), (1, 9)):
        a = content(rng, w, h, 3)
        p = os.path.join(d, f"interlaced_{w}x{h}.png")
        write_png_raw(p, w, h, 8, 2, adam7_rows(a), interlace=1)
        imgs.append(p)
    for depth in (2, 4):
        w, h = 13, 7
        vals = rng.integers(0, 1 << depth, size=(h, w))
        per = 8 // depth
        rows = []
        for r in range(h):
            bits = list(vals[r]) + [0] * (-w % per)
            rows.append(bytes(sum(int(bits[i + k]) << (8 - depth * (k + 1)) for k in range(per))
                              for i in range(0, len(bits), per)))
        p = os.path.join(d, f"gray{depth}.png")
        write_png_raw(p, w, h, depth, 0, rows)
        imgs.append(p)
    # JPEG
    save("rgb.jpg", Image.fromarray(content(rng, 123, 77, 3), "RGB"), quality=90)
    save("rgb444.jpg", Image.fromarray(content(rng, 31, 65, 3), "RGB"), quality=95, subsampling=0)
    save("prog.jpg", Image.fromarray(content(rng, 90, 60, 3), "RGB"), quality=80, progressive=True)
    save("l.jpg", Image.fromarray(content(rng, 50, 33, 1), "L"))
    save("cmyk.jpg", Image.fromarray(content(rng, 41, 27, 4), "CMYK"), quality=92)
    save("odd_1xN.jpg", Image.fromarray(content(rng, 1, 55, 3), "RGB"))
    for o in range(1, 9):
        ex = Image.Exif()
        ex[0x0112] = o
        save(f"exif{o}.jpg", Image.fromarray(content(rng, 40, 25, 3), "RGB"), exif=ex.tobytes())
        if o in (3, 6, 7):
            save(f"exif{o}.png", Image.fromarray(content(rng, 21, 34, 3), "RGB"), exif=ex.tobytes())
    return imgs


def reference_decode(path):
    # transformers.image_utils.load_image
    im = Image.open(path)
    im = ImageOps.exif_transpose(im)
    return np.array(im.convert("RGB"))


def reference_u8(arr, cfg):
    h, w = arr.shape[:2]
    size = cfg["size"]
    if "shortest_edge" in size:
        s = size["shortest_edge"]
        short, long = (h, w) if h <= w else (w, h)
        new_short, new_long = s, int(s * long / short)
        nh, nw = (new_short, new_long) if h <= w else (new_long, new_short)
    else:
        nh, nw = size["height"], size["width"]
    # transformers.image_transforms.resize: PIL on u8, reducing_gap=None
    arr = np.array(Image.fromarray(arr).resize((nw, nh), resample=cfg["resample"], reducing_gap=None))
    if cfg.get("do_center_crop"):
        ch, cw = cfg["crop_size"]["height"], cfg["crop_size"]["width"]
        oh, ow = arr.shape[:2]
        top, left = (oh - ch) // 2, (ow - cw) // 2
        bottom, right = top + ch, left + cw
        if top >= 0 and bottom <= oh and left >= 0 and right <= ow:
            arr = arr[top:bottom, left:right]
        else:  # transformers.image_transforms.center_crop padding path
            nh2, nw2 = max(ch, oh), max(cw, ow)
            canvas = np.zeros((nh2, nw2, 3), dtype=arr.dtype)
            tp, lp = -(-(nh2 - oh) // 2), -(-(nw2 - ow) // 2)
            canvas[tp:tp + oh, lp:lp + ow] = arr
            top, bottom, left, right = top + tp, bottom + tp, left + lp, right + lp
            arr = canvas[max(0, top):min(nh2, bottom), max(0, left):min(nw2, right)]
    return arr


def reference_normalize(u8, cfg):
    x = (u8.astype(np.float64) * cfg["rescale_factor"]).astype(np.float32)
    mean = np.array(cfg["image_mean"], dtype=np.float32)
    std = np.array(cfg["image_std"], dtype=np.float32)
    x = (x - mean) / std
    return x.transpose(2, 0, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(1234)
    failures = []
    checked = 0
    with tempfile.TemporaryDirectory() as d:
        cfg_paths = {}
        for name, cfg in CONFIGS.items():
            p = os.path.join(d, f"{name}_preprocessor_config.json")
            with open(p, "w") as f:
                json.dump(cfg, f)
            cfg_paths[name] = p
        images = make_images(d, rng)
        for img in images:
            ref_rgb = reference_decode(img)
            names = list(CONFIGS) if os.path.basename(img).startswith(("rgb_", "p_trns", "cmyk", "exif6", "exif7.png")) \
                else ["clip_small", "siglip_bilinear", "crop_pad", "gemma3"]
            for name in names:
                cfg = CONFIGS[name]
                out, u8o, deco = (os.path.join(d, f"o_{k}.npy") for k in ("f32", "u8", "dec"))
                r = subprocess.run([args.hlx, "preprocess", "--image", img, "--preprocessor-config", cfg_paths[name],
                                    "-o", out, "--u8-out", u8o, "--decoded-out", deco], capture_output=True, text=True)
                tag = f"{os.path.basename(img)} [{name}]"
                if r.returncode != 0:
                    failures.append(f"{tag}: hlx failed: {r.stderr.strip()}")
                    continue
                dec = np.load(deco)
                if dec.shape != ref_rgb.shape or not np.array_equal(dec, ref_rgb):
                    diff = "shape " + str(dec.shape) + " vs " + str(ref_rgb.shape) if dec.shape != ref_rgb.shape \
                        else f"max diff {np.abs(dec.astype(int) - ref_rgb.astype(int)).max()}"
                    failures.append(f"{tag}: decoded pixels differ from PIL: {diff}")
                    continue
                ref_u8 = reference_u8(ref_rgb, cfg)
                got_u8 = np.load(u8o)
                if got_u8.shape != ref_u8.shape:
                    failures.append(f"{tag}: u8 shape {got_u8.shape} vs reference {ref_u8.shape}")
                    continue
                md = int(np.abs(got_u8.astype(int) - ref_u8.astype(int)).max()) if got_u8.size else 0
                if md > 1:
                    failures.append(f"{tag}: resized pixels differ by {md}/255")
                got = np.load(out)
                want = reference_normalize(got_u8, cfg)
                if got.dtype != np.float32 or got.shape != want.shape or not np.array_equal(got, want):
                    failures.append(f"{tag}: normalised tensor not exact ({got.dtype} {got.shape} vs {want.shape})")
                checked += 1
                if md:
                    print(f"note: {tag}: resized max diff {md}")

        # Bad inputs: typed error (exit 1 with a message), never a crash.
        good = open(os.path.join(d, "rgb.jpg"), "rb").read()
        goodpng = open(images[4], "rb").read()
        bad = {"truncated.jpg": good[: len(good) // 2], "truncated.png": goodpng[: len(goodpng) // 2],
               "random.bin": bytes(rng.integers(0, 256, size=3000, dtype=np.uint8)),
               "empty.png": b"", "text.png": b"hello world\n"}
        for name, data in bad.items():
            p = os.path.join(d, name)
            with open(p, "wb") as f:
                f.write(data)
            r = subprocess.run([args.hlx, "preprocess", "--image", p, "--preprocessor-config", cfg_paths["clip"],
                                "-o", os.path.join(d, "bad.npy")], capture_output=True, text=True)
            if r.returncode != 1 or "hlx:" not in r.stderr:
                failures.append(f"{name}: expected a typed error, got rc={r.returncode} stderr={r.stderr!r}")
        r = subprocess.run([args.hlx, "preprocess", "--image", images[5], "--preprocessor-config", cfg_paths["clip"],
                            "-o", os.path.join(d, "bad.npy"), "--max-pixels", "1000"], capture_output=True, text=True)
        if r.returncode != 1 or "limit" not in r.stderr:
            failures.append(f"pixel limit: rc={r.returncode} stderr={r.stderr!r}")

    for f in failures:
        print("FAIL", f)
    print(f"{checked} image/config pairs checked, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
