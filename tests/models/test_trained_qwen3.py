"""End to end on a trained checkpoint: assets/models/qwen3-add answers held-out additions through hlx.

The checkpoint is a tiny Qwen3 trained in PyTorch by scripts/train/qwen3_add.py. Its model code
(written from transformers' modeling_qwen3.py) is the independent reference here, run live in f32:
  - 200 held-out problems (never trained on) through `hlx generate --chat`: hlx's greedy ids equal
    PyTorch's greedy ids token for token, and >= 98 % of the answers are exactly right;
  - the prompt the reference feeds PyTorch is what jinja2 renders from tokenizer_config.json's chat
    template, and its ids are what HF's Rust tokenizers (node) make of it with tokenizer.json, so
    hlx's template engine and tokenizer are both on the path being checked;
  - a handful through `hlx serve` (/v1/chat/completions, concurrent, greedy) give the same answers.
Skips (77) when Debian's python3-torch is not installed.
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(REPO, "assets", "models", "qwen3-add")
SEED = 7  # test problems: a different draw from the training script's dev and final sets
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)
    return cond


def hlx_generate(hlx, model, q):
    """(text, ids) of hlx's greedy chat answer to one question."""
    p = subprocess.run([hlx, "generate", "-m", model, "--chat", "-p", q, "-n", "8", "--print-ids",
                        "--capacity", "64", "--prefill-buckets", "32", "--threads", "1"],
                       capture_output=True, timeout=120)
    if p.returncode != 0:
        return None, f"exit {p.returncode}: {p.stderr.decode(errors='replace')[-300:]}"
    m = re.search(r"^ids: ([0-9,]*)$", p.stderr.decode(), re.M)
    ids = [int(t) for t in m.group(1).split(",") if t] if m else None
    return p.stdout.decode().rstrip("\n"), ids


def serve_answers(hlx, model, questions):
    proc = subprocess.Popen([hlx, "serve", "-m", model, "--port", "0", "--threads", "1", "--slots", "4",
                             "--capacity", "64", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = proc.stdout.readline().decode()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if not m:
            raise SystemExit(f"server did not start: {line!r} {proc.stderr.read().decode()[-1000:]}")
        port = int(m.group(1))

        def ask(q):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            body = {"model": "qwen3-add", "messages": [{"role": "user", "content": q}],
                    "max_tokens": 8, "temperature": 0}
            conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            out = json.loads(r.read())
            conn.close()
            if r.status != 200:
                return f"HTTP {r.status}: {out}", None
            ch = out["choices"][0]
            return ch["message"]["content"], ch["finish_reason"]

        with concurrent.futures.ThreadPoolExecutor(4) as ex:  # several requests decode together
            return list(ex.map(ask, questions))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    ap.add_argument("--model", default=MODEL, help="checkpoint directory (default: the committed one)")
    ap.add_argument("-n", type=int, default=200, help="held-out problems through hlx generate")
    args = ap.parse_args()
    try:
        import torch
        import jinja2
    except ImportError as e:
        print(f"skip: {e} (make setup installs python3-torch and python3-jinja2)")
        return 77
    torch.set_num_threads(1)
    sys.path.insert(0, os.path.join(REPO, "scripts", "train"))
    import qwen3_add as ref

    tok = ref.Tokenizer()
    model = ref.load(args.model)
    problems = ref.held_out_problems(args.n, SEED)
    check(all(ref.is_held_out(q) for q, _ in problems), "a test problem is in the training split")

    # The reference prompt is what the checkpoint's own chat template renders (jinja2).
    cfg = json.load(open(os.path.join(args.model, "tokenizer_config.json")))
    tmpl = jinja2.Environment().from_string(cfg["chat_template"])
    for q, _ in problems[:20]:
        r = tmpl.render(messages=[{"role": "user", "content": q}], add_generation_prompt=True)
        check(r == tok.chat_prompt(q), f"jinja2 renders {r!r}, reference prompt {tok.chat_prompt(q)!r}")

    # HF's tokenizers encode those prompts to the ids the reference feeds PyTorch.
    reqs = "".join(json.dumps({"t": tok.chat_prompt(q), "a": False}) + "\n" for q, _ in problems)
    hf = subprocess.run(["node", os.path.join(REPO, "tests", "tokenizer", "hf_reference.js"),
                         os.path.join(args.model, "tokenizer.json")], input=reqs.encode(), cwd=REPO,
                        capture_output=True, timeout=300)
    check(hf.returncode == 0, f"hf_reference.js failed: {hf.stderr.decode(errors='replace')[-500:]}")
    hf_ids = [json.loads(line).get("ids") for line in hf.stdout.decode().splitlines()]
    bad = [q for (q, _), ids in zip(problems, hf_ids) if ids != tok.encode(tok.chat_prompt(q))]
    check(len(hf_ids) == len(problems) and not bad, f"HF tokenizers disagree with the reference on {bad[:3]}")

    # PyTorch greedy (f32, full recompute per step), then hlx, two processes at a time.
    want = [ref.greedy(model, tok.encode(tok.chat_prompt(q)), 8, tok.eos) for q, _ in problems]
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        got = list(ex.map(lambda p: hlx_generate(args.hlx, args.model, p[0]), problems))

    same = right = ref_right = 0
    for (q, a), w, (text, ids) in zip(problems, want, got):
        w_text = tok.decode([t for t in w if t != tok.eos])
        ref_right += w_text == a and w[-1] == tok.eos
        if ids is None or text is None:
            check(False, f"{q!r}: hlx gave no ids ({text!r}, {ids!r})")
            continue
        # hlx prints the ids it generated, the stop token included.
        if ids == w:
            same += 1
        elif len(failures) < 10:
            check(False, f"{q!r}: hlx ids {ids} != PyTorch ids {w} ({text!r} vs {w_text!r})")
        right += text == a
    n = len(problems)
    print(f"held-out: hlx == PyTorch token for token on {same}/{n}; hlx exact answers {right}/{n}; "
          f"PyTorch exact answers {ref_right}/{n}")
    check(same == n, f"hlx and PyTorch greedy ids differ on {n - same} of {n} problems")
    check(right >= 0.98 * n, f"hlx answered {right}/{n} exactly (< 98 %)")

    # Through the server with the chat template: several requests batched together.
    sample = problems[:8]
    served = serve_answers(args.hlx, args.model, [q for q, _ in sample])
    for (q, a), (content, finish) in zip(sample, served):
        check(content == a and finish == "stop", f"serve: {q!r} -> {content!r} ({finish}), want {a!r}")
    print(f"serve: {sum(c == a for (_, a), (c, _) in zip(sample, served))}/{len(sample)} exact")

    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
