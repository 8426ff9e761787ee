#!/usr/bin/env python3
"""Qwen3-VL text side: interleaved M-RoPE and DeepStack injection against an eager numpy
reference written from transformers' Qwen3VLTextModel (Qwen3VLTextRotaryEmbedding with
apply_interleaved_mrope, _deepstack_process after decoder layers 0..K-1).

The checkpoint is the tiny qwen3 fixture re-wrapped as a Qwen3VLForConditionalGeneration
(config.json with text_config / vision_config, tensors under model.language_model.*), mrope_section
[6, 3, 3] (head_dim 24: the bound i < 3 * section excludes frequencies 10 and 11 from H/W) and
three DeepStack taps, so the targets are decoder layers 0, 1 and 2 = first, middle and last.

Checks (each module emitted with `hlx emit`, run with `hlx exec`):
  - prefill_embeddings_mrope with all three axes equal gives logits bit-identical to
    prefill_embeddings (plain 1D rotary) on the same checkpoint;
  - prefill_embeddings_mrope with image-like [3, L] positions: logits within 1e-4 of the reference;
  - prefill_embeddings_deepstack (padded Nv with garbage in the unused entries) within 1e-4;
  - the same run with --no-native-composites (decompositions only);
  - ablations the tolerance can see: DeepStack dropped, shifted by one layer, 1D positions.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError as e:
    print("skip:", e)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

SECTION = [6, 3, 3]
TAPS = [5, 9, 13]  # vision blocks; the text targets are layers 0..2 whatever these are
TOL = 1e-4
CAP = 24


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype=np.float32)
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def make_qwen3_vl(src, dst):
    os.makedirs(dst, exist_ok=True)
    cfg = json.load(open(os.path.join(src, "config.json")))
    text = dict(cfg, model_type="qwen3_vl_text",
                rope_scaling={"rope_type": "default", "mrope_section": SECTION, "mrope_interleaved": True})
    root = {"model_type": "qwen3_vl", "architectures": ["Qwen3VLForConditionalGeneration"], "text_config": text,
            "vision_config": {"deepstack_visual_indexes": TAPS, "depth": 16},
            "tie_word_embeddings": cfg.get("tie_word_embeddings", False), "image_token_id": 151655}
    json.dump(root, open(os.path.join(dst, "config.json"), "w"))
    w, _ = reference.read_checkpoint(src)
    out = {}
    for name, a in w.items():
        out[name.replace("model.", "model.language_model.", 1) if name.startswith("model.") else name] = a
    write_safetensors(os.path.join(dst, "model.safetensors"), out)


class MropeModel:
    """Qwen3VLTextModel on inputs_embeds, eager, f32."""

    def __init__(self, qwen3_dir):
        self.m = reference.Model(qwen3_dir)

    def cos_sin(self, pos3):
        inv = self.m.inv_freq_global
        freqs = pos3.astype(np.float32)[:, :, None] * inv[None, None, :]  # [3, T, half]
        f = freqs[0].copy()
        for dim, offset in ((1, 1), (2, 2)):  # apply_interleaved_mrope
            f[:, offset:SECTION[dim] * 3:3] = freqs[dim][:, offset:SECTION[dim] * 3:3]
        emb = np.concatenate([f, f], axis=-1)
        return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)

    def forward(self, h, pos3, visual_rows=None, features=None, targets=(0, 1, 2)):
        m = self.m
        cos, sin = self.cos_sin(pos3)
        m.rope = lambda x, p, f: (x * cos[None] + m.rotate_half(x) * sin[None]).astype(np.float32)
        causal = np.arange(h.shape[0])  # the mask follows cache positions, not the M-RoPE ids
        for i in range(m.n_layers):
            h = h + m.attention(i, m.rms_norm(h, m.p(i, "input_layernorm.weight")), causal)
            h = h + m.mlp(i, m.rms_norm(h, m.p(i, "post_attention_layernorm.weight")))
            if features is not None and i in targets:
                h = h.copy()
                h[visual_rows] = h[visual_rows] + features[list(targets).index(i)]
        h = m.rms_norm(h, m.w[m.prefix + "norm.weight"])
        return m.linear(h, m.lm_head)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}...: {r.stderr.strip()}")
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

    rng = np.random.default_rng(3)
    with tempfile.TemporaryDirectory(prefix="hlx_qwen3vl_text_") as tmp:
        q3 = os.path.join(tmp, "qwen3")
        run([args.hlx, "fixture", "--family", "qwen3", "--out", q3, "--no-tokenizer"])
        vl = os.path.join(tmp, "qwen3_vl")
        make_qwen3_vl(q3, vl)
        ref = MropeModel(q3)
        m = ref.m
        layers, kv, dh, hidden = m.n_layers, m.n_kv, m.head_dim, m.hidden
        assert layers == 3 and dh == 24, (layers, dh)

        rows, length = 16, 13
        h = (rng.standard_normal((rows, hidden)) * 0.5).astype(np.float32)
        # Image-like positions: 3 text rows, a 2x4 merged grid at s = 3, then text from 3 + 4 = 7.
        pos = np.zeros((3, rows), np.int32)
        pos[:, :3] = np.arange(3)
        for r in range(2):
            for c in range(4):
                pos[:, 3 + r * 4 + c] = (3, 3 + r, 3 + c)
        pos[:, 11:] = np.arange(7, 7 + rows - 11)
        visual = np.arange(3, 11)

        def save(name, a):
            p = os.path.join(tmp, name + ".npy")
            np.save(p, a)
            return p

        def execute(entry, inputs, extra_emit=(), native=True, model=vl):
            mlir = os.path.join(tmp, entry + ".mlir")
            run([args.hlx, "emit", "-m", model, "--entry", entry, "--capacity", str(CAP), "--rows", str(rows),
                 "--kv-dtype", "f32", "-o", mlir, *extra_emit])
            cache = save("cache", np.zeros((1, CAP, kv, dh), np.float32))
            cmd = [args.hlx, "exec", mlir, "--entry", entry, "--weights-from", model,
                   "--output-dir", os.path.join(tmp, "out")]
            for p in inputs + [save("length", np.int32(length)), save("start", np.int32(0)),
                               save("slot", np.int32(0))] + [cache] * (2 * layers):
                cmd += ["--input", p]
            if not native:
                cmd.append("--no-native-composites")
            run(cmd)
            return np.load(os.path.join(tmp, "out", "out_0.npy"))

        emb = save("emb", h)
        # 1. Equal axes: bit-identical to the plain entry.
        lin = np.broadcast_to(np.arange(rows, dtype=np.int32), (3, rows)).copy()
        plain = execute("prefill_embeddings", [emb])
        mrope_eq = execute("prefill_embeddings_mrope", [emb, save("lin", lin)])
        check(plain.shape == (m.vocab,) and np.array_equal(plain, mrope_eq),
              f"M-RoPE with equal axes == 1D rotary bit for bit (max diff {float(np.abs(plain - mrope_eq).max()):.3g})")
        want_plain = ref.forward(h[:length], lin[:, :length])[-1]
        check(float(np.abs(plain - want_plain).max()) <= TOL,
              f"equal axes vs reference: {float(np.abs(plain - want_plain).max()):.3g}")

        # 2. Image-like positions.
        got = execute("prefill_embeddings_mrope", [emb, save("pos", pos)])
        want = ref.forward(h[:length], pos[:, :length])[-1]
        err = float(np.abs(got - want).max())
        check(err <= TOL, f"prefill_embeddings_mrope vs reference: max abs err {err:.3g} <= {TOL:g}")

        # 3. DeepStack: 8 visual rows in a static Nv of 10; the two unused entries hold a duplicate
        # and an out-of-range row that must be ignored.
        nv = 10
        feats = (rng.standard_normal((3, nv, hidden)) * 0.5).astype(np.float32)
        vpos = np.concatenate([visual, [5, 99]]).astype(np.int32)
        ds_inputs = [emb, save("pos", pos), save("vpos", vpos), save("feats", feats), save("count", np.int32(8))]
        got = execute("prefill_embeddings_deepstack", ds_inputs, ("--visual-rows", str(nv)))
        want_ds = ref.forward(h[:length], pos[:, :length], visual, feats[:, :8])[-1]
        err = float(np.abs(got - want_ds).max())
        check(err <= TOL, f"prefill_embeddings_deepstack vs reference: max abs err {err:.3g} <= {TOL:g}")
        got_d = execute("prefill_embeddings_deepstack", ds_inputs, ("--visual-rows", str(nv)), native=False)
        err = float(np.abs(got_d - want_ds).max())
        check(err <= TOL, f"deepstack, decompositions only: max abs err {err:.3g} <= {TOL:g}")

        # 4. Ablations: each must move the logits well beyond the tolerance.
        for name, alt in (
                ("DeepStack dropped", lambda: ref.forward(h[:length], pos[:, :length])[-1]),
                ("DeepStack shifted by one layer",
                 lambda: ref.forward(h[:length], pos[:, :length], visual, feats[:2, :8], targets=(1, 2))[-1]),
                ("1D positions instead of M-RoPE",
                 lambda: ref.forward(h[:length], lin[:, :length], visual, feats[:, :8])[-1])):
            effect = float(np.abs(alt() - want_ds).max())
            check(effect > 100 * TOL, f"ablation {name}: logits move by {effect:.3g}")

        # 5. Typed refusals: the plain qwen3 checkpoint has no M-RoPE / DeepStack.
        for entry in ("prefill_embeddings_mrope", "prefill_embeddings_deepstack"):
            r = subprocess.run([args.hlx, "emit", "-m", q3, "--entry", entry, "--capacity", str(CAP), "-o",
                                os.path.join(tmp, "x.mlir")], capture_output=True, text=True)
            check(r.returncode == 1 and "invalid argument" in r.stderr, f"{entry} on plain qwen3 refused: {r.stderr.strip()}")

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
