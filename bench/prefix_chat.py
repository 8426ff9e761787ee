"""TTFT of a multi-turn chat over HTTP with the prefix cache on and off (docs/PERFORMANCE.md).

Starts two `hlx serve` processes on the same checkpoint (--prefix-cache on / off, one slot each)
and runs the same greedy chat on both, turn by turn alternating between them so both see the same
machine load. Each turn resends the history (system prompt, a long first message, every reply);
TTFT is measured to the first streamed content chunk. Prints one line per turn and a JSON summary.

Run: /usr/bin/python3 bench/prefix_chat.py --hlx build/bin/hlx -m /tmp/q06 [--history-words 1100]
(the checkpoint: `hlx fixture --family qwen3 --preset qwen3-0.6b --dtype bf16 --out /tmp/q06`).
`hlx bench --prefix-chat` gives the text figure in-process; this script's use is the image case:
--image X.png attaches the image to the first message (a VLM checkpoint, e.g. `hlx fixture --family
gemma3-vlm --preset gemma-3-4b`), so turn 1 runs the tower on both servers and later turns either
reuse the rows through the image (prefix cache on) or only its encoded features (off: the image
cache still holds them).
"""
import argparse
import base64
import http.client
import json
import os
import socket
import subprocess
import sys
import time


def start(hlx, model, extra, threads, capacity):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([hlx, "serve", "-m", model, "--port", str(port), "--slots", "1", "--quiet",
                             "--threads", str(threads), "--capacity", str(capacity)] + extra,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(3000):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not come up")


def turn(port, messages, max_tokens):
    """(ttft seconds, text, usage) of one streamed chat completion."""
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    ttft, text, usage = None, "", None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices", []):
            piece = ch.get("delta", {}).get("content", "")
            if piece:
                if ttft is None:
                    ttft = time.monotonic() - t0
                text += piece
    c.close()
    return ttft, text, usage


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--history-words", type=int, default=1100)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--capacity", type=int, default=2048)
    ap.add_argument("--image", help="PNG/JPEG attached to the first user message")
    a = ap.parse_args()
    words = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches "
             "and pack my box with five dozen liquor jugs ").split()
    long_text = " ".join(words[i % len(words)] for i in range(a.history_words))
    servers = {"on": start(a.hlx, a.model, [], a.threads, a.capacity),
               "off": start(a.hlx, a.model, ["--prefix-cache", "off"], a.threads, a.capacity)}
    history = {k: [{"role": "system", "content": "You are a careful assistant."}] for k in servers}
    rows = []
    try:
        for t in range(a.turns):
            user = ("Summarise this text:\n" + long_text) if t == 0 else f"Now say it again, version {t + 1}."
            if t == 0 and a.image:
                url = "data:image/png;base64," + base64.b64encode(open(a.image, "rb").read()).decode()
                user = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": user}]
            row = {"turn": t + 1}
            for k, (_, port) in servers.items():
                history[k].append({"role": "user", "content": user})
                ttft, text, usage = turn(port, history[k], a.max_tokens)
                history[k].append({"role": "assistant", "content": text})
                row[k] = {"ttft_ms": round(ttft * 1000, 1), "prompt_tokens": usage["prompt_tokens"],
                          "cached_tokens": usage["prompt_tokens_details"]["cached_tokens"]}
                row[k + "_text"] = text
            row["same_text"] = row["on_text"] == row["off_text"]
            del row["on_text"], row["off_text"]
            rows.append(row)
            print(f"turn {t + 1}: prompt {row['on']['prompt_tokens']} tokens; on: {row['on']['ttft_ms']} ms "
                  f"({row['on']['cached_tokens']} cached), off: {row['off']['ttft_ms']} ms; "
                  f"ratio {row['on']['ttft_ms'] / row['off']['ttft_ms']:.3f}; same text: {row['same_text']}",
                  flush=True)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=60)
    print(json.dumps(rows))
    return 0 if all(r["same_text"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
