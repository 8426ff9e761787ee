"""Refactoring guard: the SHA-256 of every module hlx emits for the fixture families.

Not a correctness test (the numpy oracle tests are): it proves that a change meant to be behaviour-
preserving (families as data, a decoder moved, a file split) emits byte-identical StableHLO for
every family, dtype, KV dtype (bf16, f32, int8) and entry, including which entries a family refuses. A change that
means to alter emitted programs updates the list in the same commit, with the reason in its
message:  /usr/bin/python3 tests/models/test_emitted_modules.py --hlx build/bin/hlx --update
"""
import argparse
import hashlib
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "emitted_modules.sha256")

FAMILIES = ["llama", "qwen2", "qwen3", "gemma3_text", "gemma3", "llava-clip", "llava-siglip", "gemma3-vlm",
            "qwen3-vl"]
ENTRIES = ["prefill", "prefill_embeddings", "prefill_all_logits", "decode", "prefill_embeddings_masked",
           "prefill_embeddings_masked_all_logits", "prefill_embeddings_mrope", "prefill_embeddings_deepstack",
           "decode_mrope", "vision_encode"]


def emit(hlx, model, family, entry, kv_dtype, out):
    cmd = [hlx, "emit", "-m", model, "--entry", entry, "-o", out]
    if entry == "vision_encode":
        if family == "qwen3-vl":
            cmd += ["--grid", "4,6"]
    else:
        cmd += ["--capacity", "64", "--slots", "2", "--rows", "16" if "prefill" in entry else "2",
                "--kv-dtype", kv_dtype]
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode != 0:
        return "refused"
    with open(out, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def current(hlx, tmp):
    lines = []
    for family in FAMILIES:
        for dtype in ("f32", "bf16"):
            model = os.path.join(tmp, f"{family}-{dtype}")
            subprocess.run([hlx, "fixture", "--family", family, "--dtype", dtype, "--out", model, "--no-tokenizer"],
                           check=True, capture_output=True)
            for kv in ("bf16", "f32", "int8"):
                for entry in ENTRIES:
                    if entry == "vision_encode" and kv != "bf16":
                        continue
                    digest = emit(hlx, model, family, entry, kv, os.path.join(tmp, "m.mlir"))
                    lines.append(f"{family} {dtype} kv={kv} {entry} {digest}")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    ap.add_argument("--update", action="store_true", help="rewrite the list from this build")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        got = current(os.path.abspath(args.hlx), tmp)
    if args.update:
        with open(GOLDEN, "w") as f:
            f.write("\n".join(got) + "\n")
        print(f"wrote {len(got)} module hashes to {GOLDEN}")
        return 0
    want = open(GOLDEN).read().split("\n")[:-1]
    emitted = sum(1 for line in got if not line.endswith("refused"))
    if emitted < 100:
        print(f"FAIL: only {emitted} modules emitted; the fixtures or the CLI changed")
        return 1
    diff = sorted(set(got) ^ set(want))
    for line in diff:
        print(("now:  " if line in got else "was:  ") + line)
    if diff:
        print(f"FAIL: {len(diff)} lines differ from tests/models/emitted_modules.sha256 (see the docstring)")
        return 1
    print(f"ok: {emitted} emitted modules and {len(got) - emitted} refusals as recorded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
