#!/usr/bin/env python3
"""Qwen3-VL end to end below the batch engine (`hlx qwen3vl-probe`): the tiny
`hlx fixture --family qwen3-vl` checkpoint, one image and then two images of different sizes in one
prompt, against eager numpy references written from upstream (no hlx output is reused):

  image_processing_qwen2_vl.py  -> tests/multimodal/test_qwen3_vl_preprocess.py (PIL + numpy)
  Qwen3VLVisionModel            -> tests/models/test_qwen3_vl_vision.py (Tower)
  get_rope_index, expansion     -> tests/multimodal/test_qwen3_vl_preprocess.py
  Qwen3VLTextModel (M-RoPE, DeepStack after layers 0..K-1) -> tests/models/test_qwen3_vl_text.py

Checked: patches, expanded ids, [3, L] positions, tower features and each DeepStack feature (hlx
ran them in padded patch buckets), logits of every prompt row (row r from a prefill call that
ends at r + 1, over tiny buckets so calls are chunked and cross the image), the one-call logits,
16 greedy tokens and each decode step's logits (decode rotates at cache length + rope_delta).
Ablations run in hlx and must move its output away from the reference: DeepStack dropped
(prompt logits), delta ignored at decode (decode logits).
"""
import argparse
import json
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "multimodal"))
import reference  # noqa: E402
import test_qwen3_vl_preprocess as pp  # noqa: E402
import test_qwen3_vl_text as tx  # noqa: E402
import test_qwen3_vl_vision as vi  # noqa: E402

TOL = 1e-4
NEW = 16


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}...: {r.stderr.strip()}")
    return r.stdout


def text_reference_dir(vl, dst):
    """The decoder of the Qwen3-VL checkpoint as a plain qwen3 checkpoint for reference.Model."""
    os.makedirs(dst, exist_ok=True)
    root = json.load(open(os.path.join(vl, "config.json")))
    cfg = dict(root["text_config"], model_type="qwen3")
    cfg.pop("rope_scaling", None)  # M-RoPE is applied by MropeModel
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"))
    w, _ = reference.read_checkpoint(vl)
    out = {}
    for name, a in w.items():
        if name.startswith("model.language_model."):
            out["model." + name[len("model.language_model."):]] = a
        elif name == "lm_head.weight":
            out[name] = a
    tx.write_safetensors(os.path.join(dst, "model.safetensors"), out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    failures = []

    def check(ok, msg):
        print(("ok   " if ok else "FAIL ") + msg)
        if not ok:
            failures.append(msg)

    rng = np.random.default_rng(23)
    with tempfile.TemporaryDirectory(prefix="hlx_qwen3vl_e2e_") as tmp:
        vl = os.path.join(tmp, "vl")
        run([args.hlx, "fixture", "--family", "qwen3-vl", "--out", vl, "--no-tokenizer"])
        root = json.load(open(os.path.join(vl, "config.json")))
        pcfg = json.load(open(os.path.join(vl, "preprocessor_config.json")))
        image_id, merge = root["image_token_id"], pcfg["merge_size"]
        pp.IMAGE_TOKEN = image_id  # the references look the image token up at call time
        qd = os.path.join(tmp, "q3")
        text_reference_dir(vl, qd)
        lm = tx.MropeModel(qd)
        m = lm.m
        tower = vi.Tower(vl)

        images = []
        for k, (w, h) in enumerate(((37, 29), (20, 52))):
            p = os.path.join(tmp, f"im{k}.png")
            rgb = pp.content(rng, w, h)
            Image.fromarray(rgb, "RGB").save(p)
            images.append((p, rgb))

        for n_img in (1, 2):
            # text, image, text (, image, text): ids below the fixture's special ids.
            ids = [11, 42, 7] + [image_id] + [99, 5]
            if n_img == 2:
                ids += [image_id, 64, 3, 18]
            out = os.path.join(tmp, f"out{n_img}")
            os.makedirs(out)
            base = [args.hlx, "qwen3vl-probe", "-m", vl, "--tokens", ",".join(map(str, ids)), "--out-dir", out,
                    "--buckets", "4,16,128", "--capacity", "128", "--max-new", str(NEW)]
            for p, _ in images[:n_img]:
                base += ["--image", p]
            log = run(base + ["--row-logits"])
            tag = f"{n_img} image(s)"

            # ---- host side and tower.
            grids, feats, deeps = [], [], []
            for k in range(n_img):
                _, want_px, grid = pp.ref_preprocess(images[k][1], pcfg)
                got_px = np.load(os.path.join(out, f"patches_{k}.npy"))
                check(got_px.shape == want_px.shape and np.array_equal(got_px, want_px),
                      f"{tag}: image {k} patches equal the PIL reference (grid {grid})")
                f, d = tower.forward(want_px, grid[1], grid[2])
                gf, gd = np.load(os.path.join(out, f"features_{k}.npy")), np.load(os.path.join(out, f"deepstack_{k}.npy"))
                check(gf.shape == f.shape and float(np.abs(gf - f).max()) <= TOL,
                      f"{tag}: image {k} features max err {float(np.abs(gf - f).max()):.3g}")
                for j in range(d.shape[0]):
                    e = float(np.abs(gd[j] - d[j]).max())
                    check(e <= TOL, f"{tag}: image {k} DeepStack feature {j} max err {e:.3g}")
                grids.append(grid)
                feats.append(f)
                deeps.append(d)
            buckets = [int(line.split()[-1]) for line in log.splitlines() if line.startswith("grid ")]
            print(f"     patch buckets used: {buckets}")

            exp = pp.ref_expand(ids, grids, merge)
            got_ids = np.load(os.path.join(out, "ids.npy"))
            check(got_ids.tolist() == exp, f"{tag}: expanded ids ({len(exp)} rows)")
            pos, delta = pp.ref_rope_index(exp, grids, merge)
            got_pos = np.load(os.path.join(out, "positions.npy"))
            check(np.array_equal(got_pos, pos), f"{tag}: [3, L] positions")
            got_delta = int(log.split("rope_delta")[1].split()[0])
            check(got_delta == delta and delta != 0, f"{tag}: rope_delta {got_delta} == {delta}")

            # ---- merged embeddings, prefill, decode.
            L = len(exp)
            visual = np.array([i for i, t in enumerate(exp) if t == image_id])
            h = m.embed[np.array(exp)].astype(np.float32).copy()
            h[visual] = np.concatenate(feats)
            ds = np.concatenate(deeps, axis=1)  # [K, Nv, hidden] in prompt order
            want_rows = lm.forward(h, pos, visual, ds)
            got_rows = np.load(os.path.join(out, "row_logits.npy"))
            e = float(np.abs(got_rows - want_rows).max())
            check(e <= TOL, f"{tag}: logits of all {L} rows max err {e:.3g} <= {TOL:g}")
            got_one = np.load(os.path.join(out, "logits.npy"))
            e = float(np.abs(got_one - want_rows[-1]).max())
            check(e <= TOL, f"{tag}: one-call logits max err {e:.3g}")

            toks = np.load(os.path.join(out, "tokens.npy"))
            dec = np.load(os.path.join(out, "decode_logits.npy"))
            # The reference runs prompt + generated tokens at once; generated rows (s, s, s) with
            # s = row + delta.
            seq_pos = np.concatenate([pos, np.broadcast_to(np.arange(L, L + NEW - 1) + delta, (3, NEW - 1))], axis=1)
            seq_h = np.concatenate([h, m.embed[toks[:-1]].astype(np.float32)])
            want_seq = lm.forward(seq_h, seq_pos, visual, ds)
            want_toks = [int(np.argmax(want_seq[L - 1 + i])) for i in range(NEW)]
            check(toks.tolist() == want_toks, f"{tag}: {NEW} greedy tokens {toks.tolist()} == reference")
            e = float(np.abs(dec[:NEW - 1] - want_seq[L:]).max())
            check(e <= TOL, f"{tag}: decode logits of {NEW - 1} steps max err {e:.3g}")

            # ---- ablations in hlx: each must move its output well past the tolerance.
            for flag, what, name in (("--no-deepstack", "logits.npy", "DeepStack dropped"),
                                     ("--ignore-delta", "decode_logits.npy", "delta ignored at decode")):
                ao = out + flag
                os.makedirs(ao)
                cmd = [c if c != out else ao for c in base] + [flag]
                run(cmd)
                got = np.load(os.path.join(ao, what))
                want = want_rows[-1] if what == "logits.npy" else want_seq[L:]
                e = float(np.abs(got[:len(want)] - want).max())
                check(e > 100 * TOL, f"{tag}: ablation {name}: hlx moves from the reference by {e:.3g}")

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
