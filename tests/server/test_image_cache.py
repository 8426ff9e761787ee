"""The image-feature cache through the server (`--image-cache-mib`, docs/VISION.md).

A tiny LLaVA (CLIP) fixture, greedy chat requests with one image each, sent as PNG data URLs:
  1. image A, PNG at compression level 0;
  2. the same pixels, PNG at level 9 with a text chunk (other bytes): a cache hit, the same text;
  3. A with one pixel changed: a miss;
  4. on a server with --image-cache-mib 0, request 2 again: the same text as with the cache.
/metrics: hlx_image_cache_hits_total 1 and _misses_total 2 on the first server, 0 hits on the other.

Run: /usr/bin/python3 tests/server/test_image_cache.py --hlx build/bin/hlx
"""
import base64
import io
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import hlxtest  # noqa: E402
from hlxtest import check, metric, request, run, wait_metric  # noqa: E402

try:
    from PIL import Image, PngImagePlugin
except ImportError as e:
    print("skip:", e)
    sys.exit(77)

def picture(w, h):
    return Image.frombytes("RGB", (w, h), bytes((x * 9 + y * 5 + c * 70) % 256 for y in range(h) for x in range(w)
                                                for c in range(3)))


def png(im, level, note=None):
    buf = io.BytesIO()
    info = None
    if note:
        info = PngImagePlugin.PngInfo()
        info.add_text("note", note)
    im.save(buf, format="PNG", compress_level=level, pnginfo=info)
    return buf.getvalue()


def chat(port, data):
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                      {"type": "text", "text": "Describe."}]}],
            "max_tokens": 6, "temperature": 0}
    status, out = request(port, "POST", "/v1/chat/completions", body)
    out = json.loads(out)
    if status != 200:
        raise SystemExit(f"request failed: {status} {out}")
    return out["choices"][0]["message"]["content"]


def main():
    hlx = hlxtest.hlx_from_args(hlxtest.QWEN_TOKENIZER)
    a = picture(37, 29)
    changed = a.copy()
    r, g, b = changed.getpixel((11, 7))
    changed.putpixel((11, 7), (r, g ^ 0x40, b))
    a0, a9 = png(a, 0), png(a, 9, "other bytes")
    assert a0 != a9
    with tempfile.TemporaryDirectory(prefix="hlx_image_cache_") as tmp:
        model = os.path.join(tmp, "llava")
        run([hlx, "fixture", "--family", "llava-clip", "--out", model, "--dtype", "f32", "--seed", "3"])
        # Prefix reuse off: a repeated prompt would reuse its image rows and never look the image up.
        flags = ["--slots", "1", "--prefix-cache", "off"]
        with hlxtest.Server(hlx, model, *flags, log=os.path.join(tmp, "on.log")) as on, \
                hlxtest.Server(hlx, model, *flags, "--image-cache-mib", "0", log=os.path.join(tmp, "off.log")) as off:
            on_port, off_port = on.port, off.port
            t1 = chat(on_port, a0)
            t2 = chat(on_port, a9)
            check(wait_metric(on_port, "hlx_image_cache_hits_total", 1) == 1,
                  "the same pixels in other PNG bytes hit the cache")
            check(t1 == t2, f"and give the same text ({t1!r} vs {t2!r})")
            chat(on_port, png(changed, 6))
            check(wait_metric(on_port, "hlx_image_cache_misses_total", 2) == 2, "one changed pixel misses")
            check(metric(on_port, "hlx_image_cache_hits_total") == 1, "hits stay 1")
            t_off = chat(off_port, a9)
            check(t_off == t2, f"--image-cache-mib 0 gives the same text ({t_off!r})")
            check(wait_metric(off_port, "hlx_image_cache_misses_total", 1) == 1 and
                  metric(off_port, "hlx_image_cache_hits_total") == 0, "--image-cache-mib 0: no hits")
    return hlxtest.finish()


if __name__ == "__main__":
    sys.exit(main())
