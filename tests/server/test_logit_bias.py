"""logit_bias through the server and the CLI, against numpy on the model's own logits.

Reference: `hlx logits` writes the prompt's last-row logits (the row the first token is chosen
from); numpy adds the biases and takes the argmax. On a tiny f32 qwen3 fixture, greedy, first token:
  - a bias that lifts the 5th-ranked token 0.25 above the top logit makes it the first token, one
    0.25 short does not (the bias is added to the logit, as OpenAI defines it), through
    /v1/completions (prompt as token ids) and `hlx generate -p --logit-bias ID=B`;
  - -100 on the top token makes the runner-up the first token;
  - typed 400s: a key that is not a token id, a bias outside [-100, 100], an id past the
    vocabulary, a non-object; the server keeps serving.

Run: /usr/bin/python3 tests/server/test_logit_bias.py --hlx build/bin/hlx
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import hlxtest  # noqa: E402
from hlxtest import check, run  # noqa: E402

try:
    import numpy as np
except ImportError as e:
    print("skip:", e)
    sys.exit(77)

PROMPT = [9707, 1879, 11, 419, 374, 264]


def main():
    hlx = hlxtest.hlx_from_args(hlxtest.QWEN_TOKENIZER)
    with tempfile.TemporaryDirectory(prefix="hlx_logit_bias_") as tmp:
        model = os.path.join(tmp, "qwen3")
        run([hlx, "fixture", "--family", "qwen3", "--dtype", "f32", "--out", model, "--seed", "11"])
        out = os.path.join(tmp, "last.npy")
        run([hlx, "logits", "-m", model, "--tokens", ",".join(map(str, PROMPT)), "-o", out, "--threads", "1"])
        logits = np.load(out).astype(np.float64)
        order = np.argsort(-logits, kind="stable")
        top, second, fifth = int(order[0]), int(order[1]), int(order[4])
        gap = float(logits[top] - logits[fifth])
        assert 0.5 < gap < 99, gap

        def expect(bias):  # numpy's greedy choice under `bias` {id: b}
            row = logits.copy()
            for t, b in bias.items():
                row[t] += b
            return int(np.argmax(row))

        cases = [({fifth: round(gap + 0.25, 3)}, "lifts the 5th token 0.25 above the top"),
                 ({fifth: round(gap - 0.25, 3)}, "leaves the 5th token 0.25 short"),
                 ({top: -100.0}, "-100 on the top token")]
        with hlxtest.Server(hlx, model, "--slots", "2", log=os.path.join(tmp, "serve.log")) as srv:
            for bias, what in cases:
                want = expect(bias)
                status, body = srv.post("/v1/completions", {
                    "prompt": PROMPT, "max_tokens": 1, "temperature": 0,
                    "logit_bias": {str(t): b for t, b in bias.items()}})
                # The completion's text is the decoded token; compare ids through the CLI below and
                # the text of the expected id here.
                want_text = run([hlx, "detokenize", "-m", model, "--ids", str(want)]).stdout.rstrip("\n")
                got = body["choices"][0]["text"] if status == 200 else None
                check(status == 200 and got == want_text,
                      f"server: {what}: token {want} ({want_text!r}), got {status} {got!r}")
            check(expect({top: -100.0}) == second, "numpy: -100 on the top token leaves the runner-up")
            r = run([hlx, "generate", "-m", model, "--tokens", ",".join(map(str, PROMPT)), "-n", "1"])
            plain = int(r.stdout.strip().split(",")[0])
            check(plain == top, f"without a bias the first token is numpy's argmax {top} (got {plain})")
            for bad, param in [({"logit_bias": {"abc": 1}}, "logit_bias.abc"),
                               ({"logit_bias": {"5": 150}}, "logit_bias.5"),
                               ({"logit_bias": {str(len(logits)): 1}}, "logit_bias"),
                               ({"logit_bias": [1, 2]}, "logit_bias")]:
                status, body = srv.post("/v1/completions", dict(prompt=PROMPT, max_tokens=1, **bad))
                err = body.get("error", {})
                check(status == 400 and err.get("param") == param,
                      f"server: {json.dumps(bad)} -> {status} {err.get('param')}: {err.get('message', '')[:100]}")
            status, _ = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 1})
            check(status == 200, "server still serves after the refusals")
        # The CLI's --logit-bias with a text prompt: the bias forces the first generated token.
        text_ids = run([hlx, "tokenize", "-m", model, "-p", "Hello"]).stdout
        r = run([hlx, "generate", "-m", model, "-p", "Hello", "-n", "1", "--print-ids", "--logit-bias",
                 f"{fifth}=100"])
        ids = [int(t) for t in re.search(r"^ids: ([0-9,]+)$", r.stderr, re.M).group(1).split(",")]
        check(ids == [fifth], f"cli --logit-bias {fifth}=100: first token {ids} (prompt ids {text_ids.strip()[:60]})")
        r = subprocess.run([hlx, "generate", "-m", model, "-p", "Hi", "-n", "1", "--logit-bias", "x=1"],
                           capture_output=True, text=True)
        check(r.returncode != 0 and "--logit-bias 'x=1'" in r.stderr, f"cli: a malformed --logit-bias is refused")
    return hlxtest.finish()


if __name__ == "__main__":
    sys.exit(main())
