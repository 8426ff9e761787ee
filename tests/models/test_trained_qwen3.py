"""End to end on a trained checkpoint: assets/models/qwen3-add answers held-out additions through hlx.

The checkpoint is a tiny Qwen3 trained in PyTorch by scripts/train/qwen3_add.py. Its model code
(written from transformers' modeling_qwen3.py) is the independent reference here, run live in f32:
  - 200 held-out problems (never trained on) through `hlx generate --chat`: hlx's greedy ids equal
    PyTorch's greedy ids token for token, and >= 98 % of the answers are exactly right;
  - the prompt the reference feeds PyTorch is what jinja2 renders from tokenizer_config.json's chat
    template, and its ids are what HF's Rust tokenizers (node) make of it with tokenizer.json, so
    hlx's template engine and tokenizer are both on the path being checked;
  - a handful through `hlx serve` (/v1/chat/completions, concurrent, greedy) and three more through
    the official OpenAI SDK (node; plain and streamed) give PyTorch's answers.
Skips (77) when Debian's python3-torch is not installed.
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import hlxtest  # noqa: E402
from hlxtest import check  # noqa: E402

REPO = hlxtest.REPO
MODEL = os.path.join(REPO, "assets", "models", "qwen3-add")
SEED = 7  # test problems: a different draw from the training script's dev and final sets


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


def chat_body(q):
    """A greedy /v1/chat/completions body asking one question."""
    return {"model": "qwen3-add", "messages": [{"role": "user", "content": q}], "max_tokens": 8, "temperature": 0}


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
        return hlxtest.SKIP
    torch.set_num_threads(1)
    sys.path.insert(0, os.path.join(REPO, "scripts", "train"))
    import qwen3_add as ref

    tok = ref.Tokenizer()
    model = ref.load(args.model)
    problems = ref.held_out_problems(args.n, SEED)
    check(all(ref.is_held_out(q) for q, _ in problems), "every test problem is in the held-out split")

    # The reference prompt is what the checkpoint's own chat template renders (jinja2).
    cfg = json.load(open(os.path.join(args.model, "tokenizer_config.json")))
    tmpl = jinja2.Environment().from_string(cfg["chat_template"])
    rendered = [(q, tmpl.render(messages=[{"role": "user", "content": q}], add_generation_prompt=True))
                for q, _ in problems[:20]]
    bad = [(r, tok.chat_prompt(q)) for q, r in rendered if r != tok.chat_prompt(q)]
    check(not bad, f"jinja2 renders the reference prompt for 20 problems (first differences, rendered vs "
          f"reference: {bad[:2]})")

    # HF's tokenizers encode those prompts to the ids the reference feeds PyTorch.
    reqs = "".join(json.dumps({"t": tok.chat_prompt(q), "a": False}) + "\n" for q, _ in problems)
    hf = subprocess.run(["node", os.path.join(REPO, "tests", "tokenizer", "hf_reference.js"),
                         os.path.join(args.model, "tokenizer.json")], input=reqs.encode(), cwd=REPO,
                        capture_output=True, timeout=300)
    check(hf.returncode == 0, f"hf_reference.js ran ({hf.stderr.decode(errors='replace')[-500:]})")
    hf_ids = [json.loads(line).get("ids") for line in hf.stdout.decode().splitlines()]
    bad = [q for (q, _), ids in zip(problems, hf_ids) if ids != tok.encode(tok.chat_prompt(q))]
    check(len(hf_ids) == len(problems) and not bad,
          f"HF tokenizers give the reference's prompt ids for all {len(problems)} problems (not for {bad[:3]})")

    # PyTorch greedy (f32, full recompute per step), then hlx, two processes at a time.
    want = [ref.greedy(model, tok.encode(tok.chat_prompt(q)), 8, tok.eos) for q, _ in problems]
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        got = list(ex.map(lambda p: hlx_generate(args.hlx, args.model, p[0]), problems))

    same = right = ref_right = shown = 0
    for (q, a), w, (text, ids) in zip(problems, want, got):
        w_text = tok.decode([t for t in w if t != tok.eos])
        ref_right += w_text == a and w[-1] == tok.eos
        if ids is None or text is None:
            check(False, f"{q!r}: hlx gave no ids ({text!r}, {ids!r})")
            continue
        # hlx prints the ids it generated, the stop token included.
        if ids == w:
            same += 1
        elif shown < 8:
            shown += 1
            check(False, f"{q!r}: hlx ids {ids} != PyTorch ids {w} ({text!r} vs {w_text!r})")
        right += text == a
    n = len(problems)
    print(f"held-out: hlx == PyTorch token for token on {same}/{n}; hlx exact answers {right}/{n}; "
          f"PyTorch exact answers {ref_right}/{n}")
    check(same == n, f"hlx and PyTorch greedy ids agree on all {n} held-out problems ({same})")
    check(right >= 0.98 * n, f"hlx answers >= 98 % exactly ({right}/{n})")

    # Through the server with the chat template: several requests batched together, then the official
    # OpenAI SDK (node, pinned in package.json), plain and streamed, when installed.
    texts = [tok.decode([t for t in w if t != tok.eos]) for w in want]
    finish = ["stop" if w[-1] == tok.eos else "length" for w in want]
    sample, sdk_items = list(range(8)), [8, 9, 10]
    with hlxtest.Server(args.hlx, args.model, "--slots", "4", "--capacity", "64", "--quiet") as srv:
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            served = list(ex.map(lambda i: srv.post("/v1/chat/completions", chat_body(problems[i][0])), sample))
        sdk = hlxtest.openai_sdk_chat(srv.port, [chat_body(problems[i][0]) for i in sdk_items])
    for i, (status, body) in zip(sample, served):
        q, a = problems[i]
        if not check(status == 200, f"serve {q!r}: HTTP {status}"):
            print(body)
            continue
        ch = body["choices"][0]
        check(ch["message"]["content"] == texts[i] and ch["finish_reason"] == finish[i],
              f"serve {q!r} -> {ch['message']['content']!r} ({ch['finish_reason']}); PyTorch {texts[i]!r} "
              f"({finish[i]}), answer {a!r}")
    for i, got_sdk in zip(sdk_items, sdk["answers"] if sdk else []):
        q, a = problems[i]
        check(got_sdk == [texts[i], finish[i], texts[i]],
              f"openai SDK {sdk['version']} {q!r}: [plain, finish, streamed] {got_sdk}, PyTorch {texts[i]!r} "
              f"({finish[i]}), answer {a!r}")
    return hlxtest.finish()


if __name__ == "__main__":
    sys.exit(main())
