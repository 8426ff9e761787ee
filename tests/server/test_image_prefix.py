"""Prefix reuse through an image over the server (docs/PERFORMANCE.md, prefix reuse).

A tiny LLaVA (CLIP) fixture on two servers, `--prefix-cache on` (the default) and `off`. A 3-turn
greedy chat whose first user message carries an image (a PNG data URL), each turn resending the
history and the previous reply:
  - with the cache on, turn 1 reports 0 cached tokens, turns 2 and 3 more cached tokens than the
    image's rows (the reused prefix runs through the image) and at least the previous prompt
    minus the template's assistant header; off reports 0;
  - both servers answer every turn with the same text (reuse is exact);
  - the image is encoded once: /metrics on the cache-on server counts no image-cache hit and one
    miss (turns 2 and 3 neither encode nor look it up), the cache-off server three misses.

Run: /usr/bin/python3 tests/server/test_image_prefix.py --hlx build/bin/hlx
"""
import base64
import io
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import hlxtest  # noqa: E402
from hlxtest import check, metric, post, run, wait_metric  # noqa: E402

try:
    from PIL import Image
except ImportError as e:
    print("skip:", e)
    sys.exit(77)


def png_url(w, h):
    im = Image.frombytes("RGB", (w, h), bytes((x * 7 + y * 11 + c * 50) % 256 for y in range(h) for x in range(w)
                                              for c in range(3)))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def chat(port, first_content, turns):
    """Returns [(text, usage)] of a greedy chat: `first_content` then the `turns` user texts."""
    messages = [{"role": "user", "content": first_content}]
    out = []
    for i in range(len(turns) + 1):
        if i:
            messages.append({"role": "user", "content": turns[i - 1]})
        status, body = post(port, "/v1/chat/completions", {"messages": messages, "max_tokens": 6, "temperature": 0})
        if status != 200:
            raise SystemExit(f"chat turn {i + 1} failed: {status} {body}")
        text = body["choices"][0]["message"]["content"]
        out.append((text, body["usage"]))
        messages.append({"role": "assistant", "content": text})
    return out


def main():
    hlx = hlxtest.hlx_from_args(hlxtest.QWEN_TOKENIZER)
    image = {"type": "image_url", "image_url": {"url": png_url(41, 27)}}
    question = {"type": "text", "text": "Describe the picture in a few words."}
    turns = ["And which colours are in it?", "Thank you. Anything else?"]
    with tempfile.TemporaryDirectory(prefix="hlx_image_prefix_") as tmp:
        model = os.path.join(tmp, "llava")
        run([hlx, "fixture", "--family", "llava-clip", "--out", model, "--dtype", "f32", "--seed", "4"])
        flags = ["--slots", "1"]
        with hlxtest.Server(hlx, model, *flags, log=os.path.join(tmp, "on.log")) as on, \
                hlxtest.Server(hlx, model, *flags, "--prefix-cache", "off", log=os.path.join(tmp, "off.log")) as off:
            with_cache = chat(on.port, [image, question], turns)
            without = chat(off.port, [image, question], turns)
            # The image's rows: the first prompt with and without the image.
            text_only = post(on.port, "/v1/chat/completions",
                             {"messages": [{"role": "user", "content": [question]}], "max_tokens": 1,
                              "temperature": 0})[1]["usage"]["prompt_tokens"]
            prompts = [u["prompt_tokens"] for _, u in with_cache]
            cached = [u["prompt_tokens_details"]["cached_tokens"] for _, u in with_cache]
            span = prompts[0] - text_only
            print("prompt tokens", prompts, "cached", cached, "image rows about", span)
            check(span > 8, f"the image takes rows ({span})")
            check(cached[0] == 0, f"turn 1 reuses nothing (cached {cached[0]})")
            for i in (1, 2):
                check(cached[i] > span and cached[i] >= prompts[i - 1] - 4 and cached[i] < prompts[i],
                      f"turn {i + 1} reuses through the image: cached {cached[i]}, prompts {prompts}")
            check(all(u["prompt_tokens_details"]["cached_tokens"] == 0 for _, u in without),
                  "--prefix-cache off reports 0 cached tokens")
            check([u["prompt_tokens"] for _, u in without] == prompts, "both servers count the same prompts")
            for i, ((a, _), (b, _)) in enumerate(zip(with_cache, without)):
                check(a == b, f"turn {i + 1}: the same text with and without reuse ({a!r} vs {b!r})")
            check(wait_metric(on.port, "hlx_image_cache_misses_total", 1) == 1 and
                  metric(on.port, "hlx_image_cache_hits_total") == 0,
                  "reuse on: the image is encoded once and never looked up again")
            check(wait_metric(off.port, "hlx_image_cache_misses_total", 1) == 1 and
                  wait_metric(off.port, "hlx_image_cache_hits_total", 2) == 2,
                  "reuse off: encoded once, then two image-cache hits")
    return hlxtest.finish()


if __name__ == "__main__":
    sys.exit(main())
