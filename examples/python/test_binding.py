"""The ctypes example against the hlx CLI: on a tiny Qwen3 fixture the stream equals
`hlx generate` (greedy, token ids and text), a cancelled request stops with FINISH_CANCELLED, errors
raise hlx.Error with the C status, and example.py runs end to end.

    /usr/bin/python3 examples/python/test_binding.py --lib build/lib/libhlx.so --hlx build/bin/hlx
"""
import argparse
import contextlib
import io
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import example  # noqa: E402
import hlx  # noqa: E402

failures = 0


def check(cond, what):
    global failures
    print(("ok: " if cond else "FAIL: ") + what)
    failures += not cond


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    hlx.load_library(args.lib)
    cli_version = subprocess.run([args.hlx, "version"], capture_output=True, text=True, check=True).stdout
    check(cli_version.strip() == f"hlx {hlx.version()}", f"version {hlx.version()} ({cli_version.strip()})")

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = os.path.join(tmp, "qwen3")
        subprocess.run([args.hlx, "fixture", "--family", "qwen3", "--dtype", "f32", "--out", model_dir],
                       check=True, stdout=subprocess.DEVNULL)

        def cli(*extra):
            return subprocess.run([args.hlx, "generate", "-m", model_dir, "--capacity", "128", *extra],
                                  capture_output=True, text=True, check=True).stdout

        with hlx.Model(model_dir, context_capacity=128, slots=2) as m:
            check(m.info == {"context_capacity": 128, "slots": 2, "vocab_size": m.info["vocab_size"],
                             "has_tokenizer": True}, f"info {m.info}")

            # token ids: the streamed ids equal the CLI's greedy ids
            prompt = [3, 14, 15, 92, 65, 35]
            want = [int(t) for t in cli("--tokens", ",".join(map(str, prompt)), "-n", "10").split(",")]
            events = list(m.stream(prompt, max_new_tokens=10))
            streamed = [e.token for e in events if e.kind == hlx.EVENT_TOKEN]
            check(streamed == want, f"streamed ids {streamed} == hlx generate {want}")
            check(events[-1].kind == hlx.EVENT_FINISHED and events[-1].finish in (hlx.FINISH_LENGTH, hlx.FINISH_STOP),
                  "the stream ends with one FINISHED event")
            check(m.result(events[-1].id).tokens == want, "result() has the streamed ids")

            # text: the streamed text equals the CLI's text
            want_text = cli("-p", "Hello there", "-n", "12").rstrip("\n")
            rid = m.submit("Hello there", max_new_tokens=12)
            text = "".join(e.text for e in m.stream(request_id=rid))
            r = m.result(rid)
            check(text == want_text == r.text, f"streamed text {text!r} == hlx generate {want_text!r}")
            check(m.detokenize(r.tokens, skip_special_tokens=True).startswith(r.text), "detokenize(result ids)")
            check(m.tokenize("Hello there") == [int(t) for t in subprocess.run(
                [args.hlx, "tokenize", "-m", model_dir, "-p", "Hello there"], capture_output=True, text=True,
                check=True).stdout.split()], "tokenize equals hlx tokenize")

            # cancel after the third token: the request stops early with FINISH_CANCELLED
            tokens, finish = 0, None
            for e in m.stream(prompt, max_new_tokens=40, stop_at_eos=False):
                if e.kind == hlx.EVENT_TOKEN:
                    tokens += 1
                    if tokens == 3:
                        m.cancel(e.id)
                else:
                    finish = e.finish
                    cancelled_id = e.id
            check(finish == hlx.FINISH_CANCELLED and 3 <= tokens < 40, f"cancelled after {tokens} tokens")
            check(m.result(cancelled_id).finish == hlx.FINISH_CANCELLED, "result() says cancelled")
            try:
                m.cancel(cancelled_id)
                check(False, "a second cancel raises")
            except hlx.Error as e:
                check(e.status == hlx.NOT_FOUND and e.name == "not_found", f"a second cancel: {e}")

            # errors: typed, with the numbers, nothing queued
            try:
                m.submit(prompt, max_new_tokens=200)
                check(False, "capacity exceeded raises")
            except hlx.Error as e:
                check(e.status == hlx.CAPACITY_EXCEEDED and "128" in e.message and "200" in e.message,
                      f"capacity exceeded: {e}")
            check(m.step(), "nothing was queued by the refused submit")

            # logit_bias: +100 forces a token, bad entries are typed errors
            forced = 1234 if want[0] != 1234 else 4321
            r = m.generate(prompt, max_new_tokens=3, logit_bias={forced: 100.0})
            check(r.tokens[0] == forced != want[0], f"logit_bias +100 forces {forced}: {r.tokens}")
            for bad, words in (({5: 100.5}, "logit_bias_values[0] = 100.5"), ({-1: 1.0}, "logit_bias_ids[0] = -1"),
                               ({m.info["vocab_size"]: 1.0}, "vocabulary")):
                try:
                    m.submit(prompt, logit_bias=bad)
                    check(False, f"logit_bias {bad} raises")
                except hlx.Error as e:
                    check(e.status == hlx.INVALID_ARGUMENT and words in e.message, f"logit_bias {bad}: {e}")

            # prefix reuse: a repeated prompt reuses its rows, same ids
            again = m.generate(prompt, max_new_tokens=10)
            check(again.tokens == want and again.cached_tokens == len(prompt) - 1,
                  f"prefix reuse: cached_tokens {again.cached_tokens}, same ids")
        with hlx.Model(model_dir, context_capacity=128, prefix_cache=False, image_cache_mib=0) as m:
            first, second = m.generate(prompt, max_new_tokens=10), m.generate(prompt, max_new_tokens=10)
            check(first.tokens == second.tokens == want and first.cached_tokens == second.cached_tokens == 0,
                  "prefix_cache=False: nothing reused, same ids")
        try:
            hlx.Model(os.path.join(tmp, "missing"))
            check(False, "loading a missing directory raises")
        except hlx.Error as e:
            check("missing" in e.message, f"missing checkpoint: {e}")

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = example.main([model_dir, "-n", "8"])
        check(rc == 0 and "cancelled after 3 tokens: finish = cancelled" in out.getvalue()
              and "refused: capacity_exceeded" in out.getvalue(), "example.py runs:\n" + out.getvalue())
    print(f"{'FAILED' if failures else 'passed'}: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
