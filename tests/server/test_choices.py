"""OpenAI's `n`: several choices of one prompt, through `hlx serve` (docs/SERVER.md).

On a tiny f32 qwen3 fixture with its real tokenizer, sampled at temperature 0.9 with a seed:
  - /v1/completions with n = 3 and seed s: choice i equals a separate n = 1 request with seed s + i
    (the reference: each request alone), the three are not all equal, and a repeat gives the same;
  - the prompt is prefilled once: on a fresh server, /metrics counts 2 x (prompt - 1) cached rows
    after that request (choices 1 and 2 copy choice 0's rows), and usage reports the prompt once
    and the sum of the completions;
  - streamed chat with n = 2: chunks carry index 0 and 1 (a role chunk and a finish chunk each), and
    each index's text equals the non-streamed n = 2 response's choice;
  - the official OpenAI SDK (npm `openai`, when installed) reads n = 2 as two choices;
  - n = 0, 17, 1.5, "2" -> 400 naming `n`; the server keeps serving.

Run: /usr/bin/python3 tests/server/test_choices.py --hlx build/bin/hlx
"""
import http.client
import json
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import hlxtest  # noqa: E402
from hlxtest import REPO, check, run  # noqa: E402

PROMPT = [9707, 1879, 11, 419, 374, 264, 1273, 315, 279, 8584, 13, 576]


def stream(port, path, body):
    """Texts per choice index, and the list of (index, kind) chunks, of a streamed request."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", path, json.dumps(dict(body, stream=True)), {"Content-Type": "application/json"})
    r = c.getresponse()
    texts, chunks = {}, []
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for ch in json.loads(line[6:]).get("choices", []):
            i = ch["index"]
            delta = ch.get("delta", {})
            kind = "finish" if ch.get("finish_reason") else ("role" if "role" in delta else "text")
            chunks.append((i, kind))
            texts[i] = texts.get(i, "") + delta.get("content", "")
    c.close()
    return texts, chunks


def metric(srv, name):
    m = re.search(r"^" + name + r" (\d+)$", srv.request("GET", "/metrics")[1].decode(), re.M)
    return int(m.group(1)) if m else None


def main():
    hlx = hlxtest.hlx_from_args(hlxtest.QWEN_TOKENIZER)
    with tempfile.TemporaryDirectory(prefix="hlx_choices_") as tmp:
        model = os.path.join(tmp, "qwen3")
        run([hlx, "fixture", "--family", "qwen3", "--dtype", "f32", "--out", model, "--seed", "9"])
        with hlxtest.Server(hlx, model, "--slots", "4", "--capacity", "256", log=os.path.join(tmp, "serve.log")) as srv:
            body = {"prompt": PROMPT, "max_tokens": 10, "temperature": 0.9, "seed": 7}
            status, three = srv.post("/v1/completions", dict(body, n=3))
            check(status == 200 and len(three.get("choices", [])) == 3, f"n = 3 -> 3 choices ({status})")
            texts = [c["text"] for c in three["choices"]]
            check([c["index"] for c in three["choices"]] == [0, 1, 2], "choices are indexed 0, 1, 2")
            # Prefilled once: choices 1 and 2 reuse choice 0's rows (all but the last row).
            for _ in range(200):  # the engine thread counts a request after the step that finished it
                cached = metric(srv, "hlx_prompt_tokens_cached_total")
                if cached == 2 * (len(PROMPT) - 1):
                    break
                time.sleep(0.05)
            check(cached == 2 * (len(PROMPT) - 1),
                  f"the prompt is prefilled once: {cached} rows cached (want {2 * (len(PROMPT) - 1)})")
            u = three["usage"]
            check(u["prompt_tokens"] == len(PROMPT), f"usage counts the prompt once ({u['prompt_tokens']})")
            singles, single_bodies = [], []
            for i in range(3):
                st, one = srv.post("/v1/completions", dict(body, seed=7 + i))
                singles.append(one["choices"][0]["text"] if st == 200 else None)
                single_bodies.append(one)
            check(texts == singles, f"choice i == the n = 1 request with seed 7 + i: {texts} vs {singles}")
            check(len(set(texts)) > 1, f"the choices differ: {texts}")
            check(3 <= u["completion_tokens"] <= 30 and u["completion_tokens"] == sum(
                s["usage"]["completion_tokens"] for s in single_bodies),
                  f"usage.completion_tokens sums the choices ({u['completion_tokens']})")
            st, again = srv.post("/v1/completions", dict(body, n=3))
            check([c["text"] for c in again["choices"]] == texts, "the same seed gives the same three choices")

            chat = {"messages": [{"role": "user", "content": "Name two colours."}], "max_tokens": 8,
                    "temperature": 0.9, "seed": 3, "n": 2}
            st, plain = srv.post("/v1/chat/completions", chat)
            want = {c["index"]: c["message"]["content"] for c in plain["choices"]}
            got, chunks = stream(srv.port, "/v1/chat/completions", chat)
            check(got == want, f"streamed n = 2 chat equals the non-streamed choices ({got} vs {want})")
            for i in (0, 1):
                kinds = [k for j, k in chunks if j == i]
                check(kinds[:1] == ["role"] and kinds[-1:] == ["finish"],
                      f"choice {i} streams a role chunk first and a finish chunk last ({kinds[:2]}...{kinds[-1:]})")

            if os.path.isdir(os.path.join(REPO, "node_modules", "openai")):
                script = os.path.join(tmp, "sdk.js")
                open(script, "w").write(SDK_SCRIPT)
                r = run(["node", script, str(srv.port), json.dumps(chat)], cwd=REPO,
                        env=dict(os.environ, NODE_PATH=os.path.join(REPO, "node_modules")))
                check(json.loads(r.stdout) == [want[0], want[1]], f"the openai SDK reads two choices: {r.stdout.strip()}")
            else:
                print("skip: node_modules/openai is not installed (npm ci): the SDK check did not run")

            for bad in ({"n": 0}, {"n": 17}, {"n": 1.5}, {"n": "2"}):
                st, out = srv.post("/v1/completions", dict({"prompt": PROMPT, "max_tokens": 2}, **bad))
                err = out.get("error", {})
                check(st == 400 and err.get("param") == "n",
                      f"{json.dumps(bad)} -> {st} {err.get('param')}: {err.get('message', '')[:80]}")
            st, _ = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "n": 2})
            check(st == 200, "the server still serves")
    return hlxtest.finish()


SDK_SCRIPT = r"""
const OpenAI = require("openai").default || require("openai").OpenAI;
const [port, body] = [process.argv[2], JSON.parse(process.argv[3])];
(async () => {
  const client = new OpenAI({ apiKey: "none", baseURL: `http://127.0.0.1:${port}/v1` });
  const r = await client.chat.completions.create({ model: "qwen3", ...body });
  console.log(JSON.stringify(r.choices.map((c) => c.message.content)));
})().catch((e) => { console.error(e); process.exit(1); });
"""

if __name__ == "__main__":
    sys.exit(main())
