#!/usr/bin/env python3
"""Qwen3-VL vision tower (`vision_encode`) of the tiny `hlx fixture --family qwen3-vl` checkpoint
against a numpy reference written from transformers' Qwen3VLVisionModel: Conv3d patch embed
(bias), the learned position table bilinearly interpolated (fast_pos_embed_interpolate) in
merge-block order, 2D rotary (rot_pos_emb), LayerNorm blocks with fused qkv, tanh-GELU MLP,
bidirectional attention, the main merger and each DeepStack merger. f32 and bf16 checkpoints: with
bf16, each weight matmul's activation operand and the attention's operands round to bf16 as hlx's
dtype policy says (reference.tower_attention).

Images go through `hlx preprocess` (whose patches are checked against PIL + numpy in
tests/multimodal/test_qwen3_vl_preprocess.py); two grid sizes; the module also runs on its
composites' decompositions only. Ablations show the tolerance sees each feature.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

TOL = 1e-4
BF16_TOL = 2e-3  # a bf16 operand rounding the other way moves an output by ~1e-3 (gemma3's tower: the same)
_erf = np.frompyfunc(math.erf, 1, 1)


def gelu_erf(x):
    return (0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))).astype(np.float32)


def gelu_tanh(x):
    return (0.5 * x * (1.0 + np.tanh(np.float32(math.sqrt(2.0 / math.pi)) * (x + 0.044715 * x ** 3)))).astype(np.float32)


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


class Tower:
    def __init__(self, model_dir, bf16=False):
        self.bf16 = bf16
        root = json.load(open(os.path.join(model_dir, "config.json")))
        self.vc = root["vision_config"]
        self.w, _ = reference.read_checkpoint(model_dir)
        v = self.vc
        self.d, self.heads, self.depth = v["hidden_size"], v["num_heads"], v["depth"]
        self.m, self.p = v["spatial_merge_size"], v["patch_size"]
        self.taps = list(v["deepstack_visual_indexes"])
        self.side = int(v["num_position_embeddings"] ** 0.5)
        self.act = gelu_tanh if v.get("hidden_act", "gelu_pytorch_tanh") == "gelu_pytorch_tanh" else gelu_erf
        self.merger_act = gelu_erf  # nn.GELU()
        self.use_pos, self.use_rotary, self.block_order = True, True, True

    def W(self, n):
        return self.w["model.visual." + n]

    def lin(self, x, n):
        if self.bf16:
            x = reference.bf16_round(x)  # a bf16 GEMM's activation operand
        return (x @ self.W(n + ".weight").T + self.W(n + ".bias")).astype(np.float32)

    def ln(self, x, n):
        return reference.layer_norm(x, self.W(n + ".weight"), self.W(n + ".bias"), 1e-6)

    def block_perm(self, h, w):
        """Raster index of each patch in merge-block order."""
        m = self.m
        idx = np.arange(h * w).reshape(h // m, m, w // m, m).transpose(0, 2, 1, 3).reshape(-1)
        return idx if self.block_order else np.arange(h * w)

    def pos_embed(self, h, w):
        s = self.side
        hs = np.linspace(0, s - 1, h).astype(np.float32)
        ws = np.linspace(0, s - 1, w).astype(np.float32)
        hf, wf = hs.astype(np.int64), ws.astype(np.int64)
        hc, wc = np.minimum(hf + 1, s - 1), np.minimum(wf + 1, s - 1)
        dh, dw = (hs - hf).astype(np.float32), (ws - wf).astype(np.float32)
        idx = [(hf[:, None] * s + wf[None]).ravel(), (hf[:, None] * s + wc[None]).ravel(),
               (hc[:, None] * s + wf[None]).ravel(), (hc[:, None] * s + wc[None]).ravel()]
        wts = [((1 - dh)[:, None] * (1 - dw)[None]).ravel(), ((1 - dh)[:, None] * dw[None]).ravel(),
               (dh[:, None] * (1 - dw)[None]).ravel(), (dh[:, None] * dw[None]).ravel()]
        table = self.W("pos_embed.weight")
        out = table[idx[0]] * wts[0][:, None]
        for k in range(1, 4):
            out = out + table[idx[k]] * wts[k][:, None]
        return out.astype(np.float32)[self.block_perm(h, w)]

    def rotary(self, h, w):
        hd = self.d // self.heads
        dim = hd // 2
        inv = (1.0 / (10000.0 ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))).astype(np.float32)
        perm = self.block_perm(h, w)
        rows, cols = perm // w, perm % w
        half = np.concatenate([rows[:, None] * inv[None], cols[:, None] * inv[None]], axis=1).astype(np.float32)
        emb = np.concatenate([half, half], axis=1)
        return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)

    def block(self, i, x, cos, sin):
        n, hd = x.shape[0], self.d // self.heads
        p = f"blocks.{i}."
        qkv = self.lin(self.ln(x, p + "norm1"), p + "attn.qkv").reshape(n, 3, self.heads, hd)
        q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
        if self.use_rotary:
            q = (q * cos[:, None] + rotate_half(q) * sin[:, None]).astype(np.float32)
            k = (k * cos[:, None] + rotate_half(k) * sin[:, None]).astype(np.float32)
        q, k, v = (t.transpose(1, 0, 2) for t in (q, k, v))
        a = reference.tower_attention(q, k, v, hd ** -0.5, self.bf16)
        x = x + self.lin(a, p + "attn.proj")
        return x + self.lin(self.act(self.lin(self.ln(x, p + "norm2"), p + "mlp.linear_fc1")), p + "mlp.linear_fc2")

    def merger(self, x, name, post):
        u = self.m * self.m * self.d
        h = self.ln(x.reshape(-1, u), name + ".norm") if post else self.ln(x, name + ".norm").reshape(-1, u)
        return self.lin(self.merger_act(self.lin(h, name + ".linear_fc1")), name + ".linear_fc2")

    def forward(self, patches, h, w):
        pw = self.W("patch_embed.proj.weight")
        if self.bf16:
            patches = reference.bf16_round(patches)
        x = (patches @ pw.reshape(pw.shape[0], -1).T + self.W("patch_embed.proj.bias")).astype(np.float32)
        if self.use_pos:
            x = x + self.pos_embed(h, w)
        cos, sin = self.rotary(h, w)
        deep = []
        for i in range(self.depth):
            x = self.block(i, x, cos, sin)
            if i in self.taps:
                deep.append(self.merger(x, f"deepstack_merger_list.{self.taps.index(i)}", True))
        return self.merger(x, "merger", False), np.stack(deep)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}: {r.stderr.strip()}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    failures = []

    def check(ok, msg):
        print(("ok   " if ok else "FAIL ") + msg)
        if not ok:
            failures.append(msg)

    rng = np.random.default_rng(11)
    with tempfile.TemporaryDirectory(prefix="hlx_qwen3vl_vision_") as tmp:
        model = os.path.join(tmp, "fx")
        run([args.hlx, "fixture", "--family", "qwen3-vl", "--out", model, "--no-tokenizer"])
        tower = Tower(model)
        check(len(tower.taps) >= 3, f"fixture has {len(tower.taps)} DeepStack taps")
        for (w, h) in ((37, 29), (20, 52)):
            img = os.path.join(tmp, f"im{w}x{h}.png")
            Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8), "RGB").save(img)
            px = os.path.join(tmp, "px.npy")
            out = run([args.hlx, "preprocess", "--image", img, "--preprocessor-config", model, "-o", px])
            gt, gh, gw = (int(v) for v in out.split("grid_thw")[1].split()[:3])
            patches = np.load(px)
            mlir = os.path.join(tmp, "v.mlir")
            run([args.hlx, "emit", "-m", model, "--entry", "vision_encode", "--grid", f"{gh},{gw}", "-o", mlir])
            want_f, want_d = tower.forward(patches, gh, gw)
            for native in (True, False):
                od = os.path.join(tmp, "out")
                cmd = [args.hlx, "exec", mlir, "--entry", "vision_encode", "--input", px, "--weights-from", model,
                       "--output-dir", od]
                run(cmd + ([] if native else ["--no-native-composites"]))
                got_f, got_d = np.load(os.path.join(od, "out_0.npy")), np.load(os.path.join(od, "out_1.npy"))
                tag = f"{w}x{h} (grid {gh}x{gw}){'' if native else ' decompositions only'}"
                check(got_f.shape == want_f.shape, f"{tag}: features shape {got_f.shape} == {want_f.shape}")
                check(got_d.shape == want_d.shape, f"{tag}: deepstack shape {got_d.shape} == {want_d.shape}")
                if got_f.shape == want_f.shape:
                    err = float(np.abs(got_f - want_f).max())
                    check(err <= TOL, f"{tag}: features max abs err {err:.3g} <= {TOL:g}")
                if got_d.shape == want_d.shape:
                    for k in range(want_d.shape[0]):
                        err = float(np.abs(got_d[k] - want_d[k]).max())
                        check(err <= TOL, f"{tag}: DeepStack feature {k} max abs err {err:.3g} <= {TOL:g}")

            # Ablations on the reference: each must move the outputs well beyond the tolerance.
            def effect(fn):
                t = Tower(model)
                fn(t)
                f, d = t.forward(patches, gh, gw)
                k = min(len(d), len(want_d))  # a tap shifted past the last block disappears
                return max(float(np.abs(f - want_f).max()), float(np.abs(d[:k] - want_d[:k]).max()))
            # erf vs tanh GELU differ by at most ~1e-3 per activation, so that ablation only has to
            # clear the tolerance (measured errors are ~2e-6); the others move outputs by O(1).
            for name, fn, need in (("no position embedding", lambda t: setattr(t, "use_pos", False), 100 * TOL),
                                   ("no 2D rotary", lambda t: setattr(t, "use_rotary", False), 100 * TOL),
                                   ("raster instead of block order (positions)",
                                    lambda t: setattr(t, "block_order", False), 100 * TOL),
                                   ("taps one block later", lambda t: setattr(t, "taps", [i + 1 for i in t.taps]),
                                    100 * TOL),
                                   ("tanh GELU in the mergers", lambda t: setattr(t, "merger_act", gelu_tanh), 2 * TOL)):
                e = effect(fn)
                check(e > need, f"{w}x{h}: ablation {name}: outputs move by {e:.3g} (> {need:g})")
            # Patches in raster order instead of block order (the processor's job): features move.
            raster = patches.reshape(gh // 2, gw // 2, 2, 2, -1).transpose(0, 2, 1, 3, 4).reshape(gh * gw, -1)
            f, _ = tower.forward(raster, gh, gw)
            e = float(np.abs(f - want_f).max())
            check(e > 100 * TOL, f"{w}x{h}: patches in raster order move features by {e:.3g}")

        # bf16 checkpoint: the same images against the reference with hlx's bf16 roundings.
        model16 = os.path.join(tmp, "fx16")
        run([args.hlx, "fixture", "--family", "qwen3-vl", "--dtype", "bf16", "--out", model16, "--no-tokenizer"])
        tower16 = Tower(model16, bf16=True)
        for (w, h) in ((37, 29), (20, 52)):
            px = os.path.join(tmp, "px16.npy")
            out = run([args.hlx, "preprocess", "--image", os.path.join(tmp, f"im{w}x{h}.png"), "--preprocessor-config",
                       model16, "-o", px])
            gt, gh, gw = (int(v) for v in out.split("grid_thw")[1].split()[:3])
            mlir = os.path.join(tmp, "v16.mlir")
            run([args.hlx, "emit", "-m", model16, "--entry", "vision_encode", "--grid", f"{gh},{gw}", "-o", mlir])
            od = os.path.join(tmp, "out16")
            run([args.hlx, "exec", mlir, "--entry", "vision_encode", "--input", px, "--weights-from", model16,
                 "--output-dir", od])
            want = tower16.forward(np.load(px), gh, gw)
            for name, got, ref in zip(("features", "DeepStack features"),
                                      (np.load(os.path.join(od, f"out_{i}.npy")) for i in (0, 1)), want):
                ok = got.shape == ref.shape
                err = float(np.abs(got - ref).max()) if ok else float("inf")
                check(ok and err <= BF16_TOL, f"bf16 {w}x{h} (grid {gh}x{gw}): {name} max abs err {err:.3g} <= "
                      f"{BF16_TOL:g} (std {float(ref.std()):.2f})")

        # Video grids are refused, odd grids are invalid.
        for grid, kind in (("3,4", "invalid argument"),):
            r = subprocess.run([args.hlx, "emit", "-m", model, "--entry", "vision_encode", "--grid", grid, "-o",
                                os.path.join(tmp, "x.mlir")], capture_output=True, text=True)
            check(r.returncode == 1 and kind in r.stderr, f"grid {grid}: {r.stderr.strip()}")

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
