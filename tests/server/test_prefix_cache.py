"""Prefix reuse through the server: usage.prompt_tokens_details.cached_tokens and /metrics.

Two servers on the same tiny qwen3 fixture (with its real tokenizer and chat template), one with
`--prefix-cache on` (the default) and one with `--prefix-cache off`. A 4-turn greedy chat over
/v1/chat/completions (each turn resends the history plus the previous reply):
  - with the cache on, turn 1 reports 0 cached tokens and every later turn more than the one
    before, at least the previous turn's whole prompt minus nothing it changed; off reports 0;
  - both servers answer every turn with the same text (reuse is exact);
  - /v1/completions with token ids sent twice reports prompt_len - 1 cached the second time;
  - two clients with one long system prompt, the second sent while the first decodes: the second
    reuses the system prompt's rows, and both texts equal the cache-off server's;
  - /metrics: hlx_prompt_tokens_cached_total and _computed_total add up to what usage reported.

Run: /usr/bin/python3 tests/server/test_prefix_cache.py --hlx build/bin/hlx
"""
import http.client
import json
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import hlxtest  # noqa: E402
from hlxtest import check, metric, post, run  # noqa: E402


def chat(port, turns):
    """Returns [(text, usage)] of a greedy chat over `turns` user messages."""
    messages = [{"role": "system", "content": "You are a terse assistant. Answer in one short line."}]
    out = []
    for user in turns:
        messages.append({"role": "user", "content": user})
        status, body = post(port, "/v1/chat/completions",
                            {"messages": messages, "max_tokens": 8, "temperature": 0})
        if status != 200:
            raise SystemExit(f"chat turn failed: {status} {body}")
        text = body["choices"][0]["message"]["content"]
        out.append((text, body["usage"]))
        messages.append({"role": "assistant", "content": text})
    return out


def shared_system_prompt(port, system, users, max_tokens):
    """Two clients with one system prompt: the second is sent once the first has its first token
    (its prompt rows are in its slot, and it is still decoding). Returns [(text, usage)]."""
    results = [None, None]
    first_token = threading.Event()

    def messages(user):
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def streamed():
        body = {"messages": messages(users[0]), "max_tokens": max_tokens, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        text, usage = "", None
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            usage = ev.get("usage") or usage
            for ch in ev.get("choices", []):
                piece = ch.get("delta", {}).get("content", "")
                text += piece
                if piece:  # not the opening role chunk: the prompt is in the slot now
                    first_token.set()
        c.close()
        first_token.set()
        results[0] = (text, usage)

    t = threading.Thread(target=streamed)
    t.start()
    first_token.wait(120)
    status, body = post(port, "/v1/chat/completions", {"messages": messages(users[1]), "max_tokens": 8,
                                                      "temperature": 0})
    t.join()
    results[1] = (body["choices"][0]["message"]["content"], body["usage"])
    return results


def main():
    hlx = hlxtest.hlx_from_args(hlxtest.QWEN_TOKENIZER)
    turns = ["Name a colour of the sky at noon, with a long explanation of why it looks that way.",
             "And at sunset? Please explain the scattering again, briefly.",
             "Which planet is known as the red one?",
             "Thank you. Summarise everything we said so far in one sentence."]
    with tempfile.TemporaryDirectory(prefix="hlx_prefix_") as tmp:
        model = os.path.join(tmp, "qwen3")
        run([hlx, "fixture", "--family", "qwen3", "--dtype", "f32", "--out", model, "--seed", "5"])
        flags = ["--slots", "2", "--capacity", "512"]
        with hlxtest.Server(hlx, model, *flags, log=os.path.join(tmp, "on.log")) as on, \
                hlxtest.Server(hlx, model, *flags, "--prefix-cache", "off", log=os.path.join(tmp, "off.log")) as off:
            on_port, off_port = on.port, off.port
            with_cache = chat(on_port, turns)
            without = chat(off_port, turns)
            cached = [u["prompt_tokens_details"]["cached_tokens"] for _, u in with_cache]
            prompts = [u["prompt_tokens"] for _, u in with_cache]
            print("prompt tokens", prompts, "cached", cached)
            check(cached[0] == 0, f"turn 1 reuses nothing (cached {cached[0]})")
            check(all(cached[i] > cached[i - 1] for i in range(1, 4)), f"cached_tokens grow each turn: {cached}")
            # The rendered history up to the previous turn's generation prompt is unchanged, so at
            # least the previous prompt minus its last rows (the template's assistant header) is reused.
            check(all(cached[i] >= prompts[i - 1] - 4 and cached[i] < prompts[i] for i in range(1, 4)),
                  f"each turn reuses about the previous prompt: cached {cached}, prompts {prompts}")
            check(all(u["prompt_tokens_details"]["cached_tokens"] == 0 for _, u in without),
                  "--prefix-cache off reports 0 cached tokens")
            check([u["prompt_tokens"] for _, u in without] == prompts, "both servers count the same prompts")
            for i, ((a, _), (b, _)) in enumerate(zip(with_cache, without)):
                check(a == b, f"turn {i + 1}: the same text with and without the cache ({a!r} vs {b!r})")
            # /v1/completions with token ids: the same prompt twice.
            ids = list(range(100, 140))
            first = post(on_port, "/v1/completions", {"prompt": ids, "max_tokens": 2, "temperature": 0})[1]
            second = post(on_port, "/v1/completions", {"prompt": ids, "max_tokens": 2, "temperature": 0})[1]
            c1 = first["usage"]["prompt_tokens_details"]["cached_tokens"]
            c2 = second["usage"]["prompt_tokens_details"]["cached_tokens"]
            print("completions cached", c1, c2)
            check(c2 == len(ids) - 1 and c1 < c2, f"/v1/completions: repeated prompt reuses {c2} of {len(ids)} rows")
            check(first["choices"][0]["text"] == second["choices"][0]["text"], "/v1/completions: the same text")
            total_cached = sum(cached) + c1 + c2
            total_prompt = sum(prompts) + 2 * len(ids)
            # Concurrent clients sharing a system prompt: the second gets its rows (copied from the
            # first one's slot while that one decodes, or left in a free slot).
            system = "You are the assistant of a library. " * 12
            both = shared_system_prompt(on_port, system, ["Where are the maps?", "When do you open?"], 24)
            ref = shared_system_prompt(off_port, system, ["Where are the maps?", "When do you open?"], 24)
            c_shared = both[1][1]["prompt_tokens_details"]["cached_tokens"]
            check(c_shared >= 100, f"shared system prompt: the second client reuses {c_shared} rows (>= 100)")
            check([t for t, _ in both] == [t for t, _ in ref], "shared system prompt: the same texts as without the cache")
            total_cached += sum(u["prompt_tokens_details"]["cached_tokens"] for _, u in both)
            total_prompt += sum(u["prompt_tokens"] for _, u in both)
            # The engine thread counts a request after the step that finished it: poll briefly.
            for _ in range(100):
                got_cached = metric(on_port, "hlx_prompt_tokens_cached_total")
                got_computed = metric(on_port, "hlx_prompt_tokens_computed_total")
                if got_cached + got_computed == total_prompt:
                    break
                time.sleep(0.05)
            check(got_cached == total_cached, f"/metrics cached total {got_cached} == {total_cached}")
            check(got_computed == total_prompt - total_cached,
                  f"/metrics computed total {got_computed} == {total_prompt - total_cached}")
            check(metric(off_port, "hlx_prompt_tokens_cached_total") == 0, "/metrics off: nothing cached")
    return hlxtest.finish()


if __name__ == "__main__":
    sys.exit(main())
