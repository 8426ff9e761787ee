"""End to end on a trained VLM: assets/models/llava-shapes answers questions about held-out images through hlx.

The checkpoint is a tiny LLaVA (CLIP tower + projector + Qwen3 text model) trained in PyTorch by
scripts/train/llava_shapes.py. Its model code (written from transformers' modeling_llava.py and
modeling_clip.py) and its CLIPImageProcessor on PIL are the independent reference here, run live
in f32:
  - held-out scenes (never trained on), rendered by the training script and written as PNG, JPEG
    and EXIF-rotated JPEG files of varied sizes, through `hlx generate --image F --chat`: hlx's
    greedy ids equal PyTorch's greedy ids token for token, and >= 95 % of the answers are right.
    The reference decodes each file with PIL (ImageOps.exif_transpose), so hlx's decoders, EXIF
    handling, resize, crop, normalisation, tower, projector and the merge of the image rows into
    the prompt are all on the path being checked;
  - `hlx preprocess` gives the training script's processor tensors for 10 of those files (exactly,
    so a failure below is localised to the image path or to the model);
  - the reference prompt is what jinja2 renders from tokenizer_config.json's chat template (a
    user message [image, text]) with the image token repeated once per image row, and its ids are
    what HF's Rust tokenizers (node) make of it;
  - a handful through `hlx serve` (/v1/chat/completions, images as data: URLs, concurrent) and
    three more through the official OpenAI SDK (node; plain and streamed) give the same answers.
--hlx-model runs hlx on another checkpoint against the same reference: a copy whose patch
embedding reads the colour channels swapped (what a BGR image path would do) fails this test.
Skips (77) when Debian's python3-torch, python3-pil or python3-jinja2 is not installed.
"""
import argparse
import base64
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import hlxtest  # noqa: E402
from hlxtest import check  # noqa: E402

REPO = hlxtest.REPO
MODEL = os.path.join(REPO, "assets", "models", "llava-shapes")
SEED = 7  # test scenes: a different draw from the training script's dev and final sets


def write_image(img, path, kind):
    """PNG, JPEG, or a JPEG stored rotated with the EXIF orientation that undoes it."""
    from PIL import Image
    if kind == "png":
        img.save(path, "PNG")
    elif kind == "jpeg":
        img.save(path, "JPEG", quality=95)
    else:  # orientation 6: the viewer rotates 90 degrees clockwise to show it upright
        exif = Image.Exif()
        exif[0x0112] = 6
        img.transpose(Image.ROTATE_90).save(path, "JPEG", quality=95, exif=exif.tobytes())


def chat_body(image, q):
    """A greedy /v1/chat/completions body asking q about an image file sent as a data: URL."""
    mime = "image/png" if image.endswith(".png") else "image/jpeg"
    url = f"data:{mime};base64," + base64.b64encode(open(image, "rb").read()).decode()
    msg = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                        {"type": "text", "text": q}]}]
    return {"model": "llava-shapes", "messages": msg, "max_tokens": 10, "temperature": 0}


def hlx_generate(hlx, model, image, q):
    """(text, ids) of hlx's greedy chat answer to one question about one image file."""
    p = subprocess.run([hlx, "generate", "-m", model, "--image", image, "--chat", "-p", q, "-n", "10",
                        "--print-ids", "--capacity", "64", "--threads", "1"], capture_output=True, timeout=120)
    if p.returncode != 0:
        return None, f"exit {p.returncode}: {p.stderr.decode(errors='replace')[-300:]}"
    m = re.search(r"^ids: ([0-9,]*)$", p.stderr.decode(), re.M)
    ids = [int(t) for t in m.group(1).split(",") if t] if m else None
    return p.stdout.decode().rstrip("\n"), ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    ap.add_argument("--model", default=MODEL, help="checkpoint directory (default: the committed one)")
    ap.add_argument("--hlx-model", help="the checkpoint hlx runs (default: --model; the reference runs --model)")
    ap.add_argument("-n", type=int, default=200, help="held-out items through hlx generate")
    args = ap.parse_args()
    try:
        import torch
        import jinja2
        from PIL import Image, ImageOps
    except ImportError as e:
        print(f"skip: {e} (make setup installs python3-torch, python3-pil and python3-jinja2)")
        return hlxtest.SKIP
    torch.set_num_threads(1)
    sys.path.insert(0, os.path.join(REPO, "scripts", "train"))
    import llava_shapes as ref

    hlx_model = args.hlx_model or args.model
    tok = ref.Tokenizer()
    model = ref.load(args.model)
    side, k = model.c["vision_config"]["image_size"], ref.image_tokens(model.c)
    items = ref.held_out_items(args.n, SEED)
    check(all(ref.is_held_out(s) for s, _ in items), "every test scene is in the held-out split")

    # The reference prompt is what the checkpoint's own chat template renders (jinja2).
    cfg = json.load(open(os.path.join(args.model, "tokenizer_config.json")))
    tmpl = jinja2.Environment().from_string(cfg["chat_template"])
    questions = sorted(set(ref.QUESTIONS.values()))
    for q in questions:
        r = tmpl.render(messages=[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": q}]}],
                        add_generation_prompt=True)
        check(r == tok.chat_prompt(q), f"jinja2 renders {r!r}, the reference prompt is {tok.chat_prompt(q)!r}")

    # HF's tokenizers encode the expanded prompts (one image token per image row) to the ids the
    # reference feeds PyTorch.
    expanded = [tok.chat_prompt(q).replace(ref.IMAGE_TOKEN, ref.IMAGE_TOKEN * k) for q in questions]
    reqs = "".join(json.dumps({"t": t, "a": False}) + "\n" for t in expanded)
    hf = subprocess.run(["node", os.path.join(REPO, "tests", "tokenizer", "hf_reference.js"),
                         os.path.join(args.model, "tokenizer.json")], input=reqs.encode(), cwd=REPO,
                        capture_output=True, timeout=300)
    check(hf.returncode == 0, f"hf_reference.js ran ({hf.stderr.decode(errors='replace')[-300:]})")
    hf_ids = [json.loads(line).get("ids") for line in hf.stdout.decode().splitlines()]
    check(hf_ids == [tok.prompt_ids(q, k) for q in questions],
          f"HF tokenizers give the reference's prompt ids for {questions}")

    with tempfile.TemporaryDirectory(prefix="hlx_trained_llava_") as tmp:
        # Images of varied sizes: 4 in 5 PNG, then JPEG, then EXIF-rotated JPEG, in turn.
        kinds = ["png", "jpeg", "png", "exif", "png"]
        paths = []
        for i, (s, _) in enumerate(items):
            kind = kinds[i % len(kinds)]
            paths.append(os.path.join(tmp, f"{i}.{'png' if kind == 'png' else 'jpg'}"))
            write_image(ref.render(s), paths[-1], kind)
        pixels = [ref.preprocess(ImageOps.exif_transpose(Image.open(p)).convert("RGB"), side) for p in paths]
        qs = [ref.QUESTIONS[f] for _, f in items]
        want = ref.greedy_items(model, tok, [(q, None) for q in qs], pixels)

        # The training script's processor (PIL) and hlx's give the same tensors (localises a failure
        # below to the image path or to the model).
        import numpy as np
        worst = 0.0
        for i in range(min(10, len(paths))):
            out = os.path.join(tmp, f"{i}.npy")
            hlxtest.run([args.hlx, "preprocess", "--image", paths[i], "--preprocessor-config", hlx_model, "-o", out])
            got_px = np.load(out)
            if got_px.shape != tuple(pixels[i].shape):
                check(False, f"hlx preprocess {os.path.basename(paths[i])}: shape {got_px.shape}")
                continue
            worst = max(worst, float(np.abs(got_px - pixels[i].numpy()).max()))
        check(worst <= 1e-5, f"hlx preprocess equals the training script's CLIP processor on 10 files "
              f"(PNG, JPEG, EXIF): max |diff| {worst:.2e}")

        with concurrent.futures.ThreadPoolExecutor(2) as ex:  # two hlx processes at a time
            got = list(ex.map(lambda a: hlx_generate(args.hlx, hlx_model, *a), zip(paths, qs)))

        same = right = ref_right = shown = 0
        per = {}
        for (s, f), p, w, (text, ids) in zip(items, paths, want, got):
            a = ref.answer(s, f)
            w_text = tok.decode([t for t in w if t != tok.eos])
            ref_right += w_text == a and w[-1] == tok.eos
            if ids is None or text is None:
                check(False, f"{os.path.basename(p)} {ref.QUESTIONS[f]!r}: hlx gave no ids ({text!r}, {ids!r})")
                continue
            if ids == w:  # hlx prints the ids it generated, the stop token included
                same += 1
            elif shown < 8:
                shown += 1
                check(False, f"{os.path.basename(p)} {ref.QUESTIONS[f]!r}: hlx ids {ids} != PyTorch ids {w} "
                      f"({text!r} vs {w_text!r})")
            ok = text == a
            right += ok
            n, c = per.get(f, (0, 0))
            per[f] = (n + 1, c + ok)
        n = len(items)
        print(f"held-out: hlx == PyTorch token for token on {same}/{n}; hlx exact answers {right}/{n} "
              f"({' '.join(f'{f} {c}/{m}' for f, (m, c) in sorted(per.items()))}); PyTorch exact answers "
              f"{ref_right}/{n}")
        check(same == n, f"hlx and PyTorch greedy ids agree on all {n} held-out items ({same})")
        check(right >= 0.95 * n, f"hlx answers >= 95 % exactly ({right}/{n})")

        # Through the server: images as data: URLs (PNG and JPEG), several requests batched.
        sample = list(range(6))
        with hlxtest.Server(args.hlx, hlx_model, "--slots", "3", "--capacity", "64", "--quiet") as srv:
            def ask(i):
                return srv.post("/v1/chat/completions", chat_body(paths[i], qs[i]))

            with concurrent.futures.ThreadPoolExecutor(3) as ex:
                served = list(ex.map(ask, sample))

            # The official OpenAI SDK (node, pinned in package.json), plain and streamed, when installed.
            sdk_items = [6, 7, 8]
            sdk = hlxtest.openai_sdk_chat(srv.port, [chat_body(paths[i], qs[i]) for i in sdk_items])
            for i, got_sdk in zip(sdk_items, sdk["answers"] if sdk else []):
                w_text = tok.decode([t for t in want[i] if t != tok.eos])
                check(got_sdk == [w_text, "stop", w_text],
                      f"openai SDK {sdk['version']} {os.path.basename(paths[i])} {qs[i]!r}: "
                      f"[plain, finish, streamed] {got_sdk}, PyTorch {w_text!r}")
        for i, (status, body) in zip(sample, served):
            s, f = items[i]
            if not check(status == 200, f"serve {os.path.basename(paths[i])}: HTTP {status}"):
                print(body)
                continue
            ch = body["choices"][0]
            w_text = tok.decode([t for t in want[i] if t != tok.eos])
            check(ch["message"]["content"] == w_text and ch["finish_reason"] == "stop",
                  f"serve {os.path.basename(paths[i])} {qs[i]!r} -> {ch['message']['content']!r} "
                  f"({ch['finish_reason']}); PyTorch {w_text!r}, answer {ref.answer(s, f)!r}")
    return hlxtest.finish()


if __name__ == "__main__":
    sys.exit(main())
