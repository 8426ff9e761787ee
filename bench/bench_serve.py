#!/usr/bin/python3
"""Load figures for a running `hlx serve` (issue 20): N concurrent streaming clients over loopback.

For each concurrency level (default 1, 4, 16, 64) the clients share a bounded number of requests
(--requests, default 2 per client, at least 4) and a time bound (--max-seconds per level). Each
client keeps one persistent HTTP/1.1 connection (http.client) and sends streamed completions with
`ignore_eos` so every request generates exactly --max-tokens tokens. Reported per level:
throughput (completion tokens / wall time), requests/s, time to first token p50/p99, inter-token
latency p50/p99 (gaps between consecutive content events of one stream), errors. Python stdlib
only; run with /usr/bin/python3 or any python3. Not part of `make test` (test_http11.py runs a
2-client, 2-request smoke of it).

  build/bin/hlx serve -m /tmp/q06 --slots 8 --capacity 512 --port 8090 &
  python3 bench/bench_serve.py --url http://127.0.0.1:8090 --json serve.json
"""
import argparse
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse


def percentile(values, p):
    """Nearest-rank percentile (p in 0..100) of a list; None when empty."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[k]


def one_request(conn, path, body, headers):
    """Sends one streamed request on `conn`; returns (ttft_s, gaps_s list, completion_tokens, error)."""
    t0 = time.perf_counter()
    conn.request("POST", path, body=body, headers=headers)
    r = conn.getresponse()
    if r.status != 200:
        return None, [], 0, f"HTTP {r.status}: {r.read()[:200]!r}"
    first, last, gaps, tokens, done, error = None, None, [], None, False, None
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        payload = line[len(b"data: "):]
        if payload == b"[DONE]":
            done = True
            continue
        ev = json.loads(payload)
        if "error" in ev:
            error = f"error event: {ev['error'].get('code')}"
            continue
        if ev.get("usage"):
            tokens = ev["usage"]["completion_tokens"]
        for ch in ev.get("choices", []):
            piece = ch.get("text") if "text" in ch else ch.get("delta", {}).get("content")
            if piece:
                now = time.perf_counter()
                if first is None:
                    first = now - t0
                else:
                    gaps.append(now - last)
                last = now
    r.read()
    if error is None and not done:
        error = "stream ended without [DONE]"
    if error is None and tokens is None:
        error = "no usage chunk"
    return first, gaps, tokens or 0, error


def run_level(args, url, clients):
    total = max(4, args.requests_per_client * clients) if args.requests is None else args.requests
    lock = threading.Lock()
    state = {"next": 0, "ttft": [], "gaps": [], "tokens": 0, "done": 0, "errors": [], "reconnects": 0}
    deadline = time.perf_counter() + args.max_seconds
    path = "/v1/completions"
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = f"Bearer {args.api_key}"

    def client(i):
        conn = None
        while True:
            with lock:
                if state["next"] >= total or time.perf_counter() >= deadline:
                    break
                n = state["next"]
                state["next"] += 1
            body = json.dumps({"prompt": f"{args.prompt} (request {n})", "max_tokens": args.max_tokens,
                               "temperature": 0, "ignore_eos": True, "stream": True,
                               "stream_options": {"include_usage": True}}).encode()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=args.timeout)
                ttft, gaps, tokens, err = one_request(conn, path, body, headers)
            except (OSError, http.client.HTTPException, ValueError) as e:
                ttft, gaps, tokens, err = None, [], 0, f"{type(e).__name__}: {e}"
            with lock:
                if err:
                    state["errors"].append(err)
                else:
                    state["done"] += 1
                    state["tokens"] += tokens
                    if ttft is not None:
                        state["ttft"].append(ttft)
                    state["gaps"].extend(gaps)
            if err and conn is not None:  # the connection's state is unknown: start a new one
                conn.close()
                conn = None
                with lock:
                    state["reconnects"] += 1
        if conn is not None:
            conn.close()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ms = lambda v: None if v is None else round(v * 1000, 1)
    return {
        "clients": clients, "requests": state["done"], "errors": len(state["errors"]),
        "error_samples": state["errors"][:3], "wall_s": round(wall, 2),
        "tokens_per_s": round(state["tokens"] / wall, 1) if wall > 0 else None,
        "requests_per_s": round(state["done"] / wall, 2) if wall > 0 else None,
        "completion_tokens": state["tokens"],
        "ttft_ms_p50": ms(percentile(state["ttft"], 50)), "ttft_ms_p99": ms(percentile(state["ttft"], 99)),
        "itl_ms_p50": ms(percentile(state["gaps"], 50)), "itl_ms_p99": ms(percentile(state["gaps"], 99)),
        "unfinished": max(0, total - state["done"] - len(state["errors"])),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--clients", default="1,4,16,64", help="comma-separated concurrency levels")
    ap.add_argument("--requests", type=int, default=None, help="requests per level (default: 2 per client, >= 4)")
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--max-seconds", type=float, default=120, help="time bound per level")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompt", default="Write a short story about a lighthouse keeper")
    ap.add_argument("--api-key", default=os.environ.get("HLX_API_KEY", ""))
    ap.add_argument("--timeout", type=float, default=300, help="socket timeout per request (s)")
    ap.add_argument("--warmup", type=int, default=1, help="requests sent first and not counted (plan compile, caches)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    url = urllib.parse.urlparse(args.url)
    levels = [int(x) for x in args.clients.split(",") if x]
    if args.warmup > 0:
        w = argparse.Namespace(**vars(args))
        w.requests, w.max_tokens = args.warmup, min(args.max_tokens, 8)
        r = run_level(w, url, 1)
        if r["errors"]:
            print(f"warm-up failed: {r['error_samples']}", file=sys.stderr)
            return 1
    results = []
    print(f"{'clients':>7} {'reqs':>5} {'err':>4} {'wall s':>7} {'tok/s':>7} {'req/s':>6} "
          f"{'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8}  (ms)", flush=True)
    for n in levels:
        r = run_level(args, url, n)
        results.append(r)
        print(f"{r['clients']:>7} {r['requests']:>5} {r['errors']:>4} {r['wall_s']:>7} {r['tokens_per_s']!s:>7} "
              f"{r['requests_per_s']!s:>6} {r['ttft_ms_p50']!s:>9} {r['ttft_ms_p99']!s:>9} {r['itl_ms_p50']!s:>8} "
              f"{r['itl_ms_p99']!s:>8}", flush=True)
        for e in r["error_samples"]:
            print(f"        error: {e}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"url": args.url, "max_tokens": args.max_tokens, "levels": results}, f, indent=1)
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
