"""`hlx exec` end to end against numpy: a module mixing dot_general, gather, a composite (unknown
to the runtime, so its decomposition runs), reduce and a dynamic_update_slice on a donated cache.

Run: /usr/bin/python3 test_exec_numpy.py --hlx path/to/hlx
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

MODULE = r"""
module @exec_test {
  func.func public @main(%cache: tensor<8x4xf32> {tf.aliasing_output = 1 : i32}, %x: tensor<3x5xf32>,
                         %w: tensor<5x4xf32>, %table: tensor<10x4xf32>, %ids: tensor<3xi32>,
                         %pos: tensor<i32>) -> (tensor<3xf32>, tensor<8x4xf32>) {
    %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<3x5xf32>, tensor<5x4xf32>) -> tensor<3x4xf32>
    %1 = "stablehlo.gather"(%table, %ids) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 4>}> : (tensor<10x4xf32>, tensor<3xi32>) -> tensor<3x4xf32>
    %2 = stablehlo.add %0, %1 : tensor<3x4xf32>
    %3 = stablehlo.composite "test.scale_shift" %2 {composite_attributes = {scale = 2.0 : f32}, decomposition = @scale_shift} : (tensor<3x4xf32>) -> tensor<3x4xf32>
    %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %4 = stablehlo.reduce(%3 init: %cst) applies stablehlo.maximum across dimensions = [1] : (tensor<3x4xf32>, tensor<f32>) -> tensor<3xf32>
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %5 = stablehlo.dynamic_update_slice %cache, %3, %pos, %c0 : (tensor<8x4xf32>, tensor<3x4xf32>, tensor<i32>, tensor<i32>) -> tensor<8x4xf32>
    return %4, %5 : tensor<3xf32>, tensor<8x4xf32>
  }
  func.func private @scale_shift(%arg0: tensor<3x4xf32>) -> tensor<3x4xf32> {
    %two = stablehlo.constant dense<2.000000e+00> : tensor<3x4xf32>
    %half = stablehlo.constant dense<5.000000e-01> : tensor<3x4xf32>
    %0 = stablehlo.multiply %arg0, %two : tensor<3x4xf32>
    %1 = stablehlo.subtract %0, %half : tensor<3x4xf32>
    return %1 : tensor<3x4xf32>
  }
}
"""


def reference(cache, x, w, table, ids, pos):
    y = x.astype(np.float64) @ w.astype(np.float64) + table[np.clip(ids, 0, table.shape[0] - 1)]
    y = (y * 2.0 - 0.5).astype(np.float32)
    out_cache = cache.copy()
    p = int(np.clip(pos, 0, cache.shape[0] - y.shape[0]))
    out_cache[p:p + y.shape[0]] = y
    return y.max(axis=1), out_cache


def run(hlx, tmp, inputs, extra=()):
    paths = []
    for i, a in enumerate(inputs):
        p = os.path.join(tmp, f"in_{i}.npy")
        np.save(p, a)
        paths.append(p)
    mod = os.path.join(tmp, "m.mlir")
    with open(mod, "w") as f:
        f.write(MODULE)
    out_dir = os.path.join(tmp, "out")
    cmd = [hlx, "exec", mod, "--entry", "main", "--output-dir", out_dir]
    for p in paths:
        cmd += ["--input", p]
    return subprocess.run(cmd + list(extra), capture_output=True, text=True), out_dir


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for trial, pos in enumerate([0, 3, 7, -2]):  # 7 and -2 clamp
            cache = rng.standard_normal((8, 4)).astype(np.float32)
            x = rng.standard_normal((3, 5)).astype(np.float32)
            w = rng.standard_normal((5, 4)).astype(np.float32)
            table = rng.standard_normal((10, 4)).astype(np.float32)
            ids = np.array([9, 0, 4 + trial], dtype=np.int32)
            p = np.array(pos, dtype=np.int32)
            r, out_dir = run(args.hlx, tmp, [cache, x, w, table, ids, p])
            if r.returncode != 0:
                print(f"trial {trial}: hlx exec failed:\n{r.stderr}")
                failures += 1
                continue
            want_max, want_cache = reference(cache, x, w, table, ids, pos)
            got_max = np.load(os.path.join(out_dir, "out_0.npy"))
            got_cache = np.load(os.path.join(out_dir, "out_1.npy"))
            for name, got, want in [("max", got_max, want_max), ("cache", got_cache, want_cache)]:
                if got.shape != want.shape or got.dtype != want.dtype or not np.allclose(got, want, rtol=1e-5, atol=1e-5):
                    print(f"trial {trial} ({name}): got {got}, want {want}")
                    failures += 1

        # Bad inputs: wrong count, wrong shape, wrong dtype, malformed file -> non-zero exit, clear message.
        good = [np.zeros((8, 4), np.float32), np.zeros((3, 5), np.float32), np.zeros((5, 4), np.float32),
                np.zeros((10, 4), np.float32), np.zeros(3, np.int32), np.array(0, np.int32)]
        cases = {
            "count": (good[:5], "takes 6 inputs"),
            "shape": (good[:1] + [np.zeros((5, 3), np.float32)] + good[2:], "expected f32[3x5]"),
            "dtype": (good[:4] + [np.zeros(3, np.int64)] + good[5:], "expected i32[3]"),
        }
        for name, (inputs, needle) in cases.items():
            r, _ = run(args.hlx, tmp, inputs)
            if r.returncode == 0 or needle not in r.stderr:
                print(f"bad-input case {name}: rc={r.returncode} stderr={r.stderr!r} (wanted {needle!r})")
                failures += 1
        r, _ = run(args.hlx, tmp, good)
        bad_file = os.path.join(tmp, "in_0.npy")
        with open(bad_file, "wb") as f:
            f.write(b"\x93NUMPY garbage")
        mod = os.path.join(tmp, "m.mlir")
        cmd = [args.hlx, "exec", mod, "--output-dir", os.path.join(tmp, "o2")]
        for i in range(6):
            cmd += ["--input", os.path.join(tmp, f"in_{i}.npy")]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode == 0 or "input #0" not in r.stderr:
            print(f"malformed npy accepted: rc={r.returncode} stderr={r.stderr!r}")
            failures += 1
    if failures:
        print(f"{failures} failure(s)")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
