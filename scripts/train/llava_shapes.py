#!/usr/bin/python3
"""Trains a tiny LLaVA-architecture VLM that answers questions about coloured shapes, and writes it
as a Hugging Face checkpoint (config.json, model.safetensors, tokenizer.json, tokenizer_config.json
with a chat template that has an image part, generation_config.json, preprocessor_config.json).

Architecture (LlavaForConditionalGeneration, written from transformers' modeling_llava.py and
modeling_clip.py): a CLIP vision tower (stride-P patch convolution without bias, a class
embedding, learned positions, pre_layrnorm, pre-norm encoder layers with biased q/k/v/out
projections and a quick_gelu MLP) whose hidden_states[vision_feature_layer] minus the class token
("default" strategy) goes through a two-layer GELU projector (linear_1, linear_2) into the rows of
the prompt that hold the image token; the text model is scripts/train/qwen3_add.py's Qwen3 (the
same code, imported), run on those embeddings. Parameter names are upstream's legacy layout:
vision_tower.vision_model.*, multi_modal_projector.*, language_model.model.*,
language_model.lm_head.weight.

Images are what CLIPImageProcessor makes of a PIL image (the processor hlx implements): resize
so the shortest edge is IMAGE (PIL bicubic, long side int(IMAGE * long / short)), center crop
IMAGE x IMAGE, rescale 1/255, normalise with CLIP's mean and std, CHW f32.

Here IMAGE is 32 and the patch 8: 16 image tokens per picture.

Scenes: 1 to 3 shapes of one kind and one colour on a plain dark background; the picture is
28 to 96 pixels a side (any aspect), the shapes lie in distinct quarters of its central square
(what the crop keeps). Questions: "What colour?" (red, green, blue, yellow, white), "What
shape?" (circle, square, triangle), "How many?" (1, 2, 3). A scene is held out (never trained
on) when crc32 of its parameters is 0 mod 16; `held_out_items` draws test items from that set.

tests/models/test_trained_llava.py imports this file as the reference hlx's answers are compared
with, token for token. Run under Debian's /usr/bin/python3 (python3-torch, python3-pil). The
defaults made assets/models/llava-shapes in 267 s on 2 shared cores (see its README). Exits 1
when the held-out accuracy is below 95 %.
"""
import argparse
import json
import math
import os
import random
import sys
import time
import zlib

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F
from PIL import Image, ImageDraw

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3_add as text  # noqa: E402  (the Qwen3 text model, tokenizer alphabet, safetensors I/O)


def _linear(self, x):
    """nn.Linear as x @ W^T + b: on Debian's PyTorch 1.13, F.linear on [4224, 64] x [192, 64]^T
    measured 107 ms against 14 ms for the matmul (same result; training time is mostly this)."""
    y = x @ self.weight.t()
    return y if self.bias is None else y + self.bias


nn.Linear.forward = _linear

# ---------------------------------------------------------------------------------------------
# Tokenizer: qwen3_add's byte-level characters and role tokens, plus the image token.

IMAGE_TOKEN = "<|image|>"
SPECIALS = text.SPECIALS + [IMAGE_TOKEN]
# A user message's content is a string or a list of parts; an image part renders as the image
# token (the processor then repeats it once per image row). Works with jinja2 and hlx's engine.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|' + message['role'] + '|>' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}{{- '" + IMAGE_TOKEN + "' }}"
    "{%- elif part['type'] == 'text' %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|end|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|assistant|>' }}{%- endif %}")


class Tokenizer(text.Tokenizer):
    def __init__(self):
        super().__init__()
        self.special = {s: 256 + i for i, s in enumerate(SPECIALS)}
        self.id_to.update({i: s for s, i in self.special.items()})
        self.vocab_size = 256 + len(SPECIALS)
        self.image = self.special[IMAGE_TOKEN]

    def encode(self, s):
        """Special tokens matched first (as HF added tokens are), the rest byte by byte."""
        ids, i = [], 0
        while i < len(s):
            hit = next((t for t in self.special if s.startswith(t, i)), None)
            if hit:
                ids.append(self.special[hit])
                i += len(hit)
                continue
            j = min([s.find(t, i) for t in self.special if s.find(t, i) >= 0] or [len(s)])
            ids += [self.vocab[self.byte_char[b]] for b in s[i:j].encode()]
            i = j
        return ids

    def chat_prompt(self, question):
        """The template's rendering of one user message [image, text], generation prompt added."""
        return f"<|user|>{IMAGE_TOKEN}{question}<|end|><|assistant|>"

    def prompt_ids(self, question, image_tokens):
        """The prompt as the processor tokenizes it: the image token repeated once per image row."""
        ids = self.encode(self.chat_prompt(question))
        k = ids.index(self.image)
        return ids[:k] + [self.image] * image_tokens + ids[k + 1:]


# ---------------------------------------------------------------------------------------------
# Scenes and questions

COLOURS = {"red": (220, 40, 40), "green": (40, 190, 60), "blue": (50, 90, 235), "yellow": (235, 215, 50),
           "white": (240, 240, 240)}
SHAPES = ["circle", "square", "triangle"]
FORMS = ["colour", "shape", "count"]
# Short questions: training time on 2 shared cores is mostly sequence length.
QUESTIONS = {"colour": "What colour?", "shape": "What shape?", "count": "How many?"}


def scene_key(s):
    return json.dumps(s, sort_keys=True, separators=(",", ":"))


def is_held_out(scene):
    return zlib.crc32(scene_key(scene).encode()) % 16 == 0


def sample_scene(rng, held_out):
    """Scene parameters (all integers and names, so the held-out test is exact). The central
    square is split in 2 x 2 cells (each 2 x 2 patches once the processor has made it 32 x 32);
    each shape sits near the middle of its own cell."""
    while True:
        w, h = rng.randint(28, 96), rng.randint(28, 96)
        side = min(w, h)
        x0, y0 = (w - side) // 2, (h - side) // 2
        n = rng.randint(1, 3)
        size = int(side * rng.uniform(0.30, 0.40))
        jit = max(1, side // 32)
        boxes = []
        for cell in sorted(rng.sample(range(4), n)):
            cx = x0 + (cell % 2) * side // 2 + side // 4
            cy = y0 + (cell // 2) * side // 2 + side // 4
            boxes.append((cx - size // 2 + rng.randint(-jit, jit), cy - size // 2 + rng.randint(-jit, jit)))
        scene = {"w": w, "h": h, "bg": [rng.randint(0, 90) for _ in range(3)],
                 "colour": rng.choice(sorted(COLOURS)), "shape": rng.choice(SHAPES),
                 "jitter": [rng.randint(-15, 15) for _ in range(3)], "size": size, "boxes": boxes}
        scene = json.loads(scene_key(scene))  # tuples -> lists, as the key sees them
        if is_held_out(scene) == held_out:
            return scene


def render(scene):
    img = Image.new("RGB", (scene["w"], scene["h"]), tuple(scene["bg"]))
    d = ImageDraw.Draw(img)
    col = tuple(max(0, min(255, c + j)) for c, j in zip(COLOURS[scene["colour"]], scene["jitter"]))
    s = scene["size"]
    for x, y in scene["boxes"]:
        if scene["shape"] == "circle":
            d.ellipse([x, y, x + s - 1, y + s - 1], fill=col)
        elif scene["shape"] == "square":
            d.rectangle([x, y, x + s - 1, y + s - 1], fill=col)
        else:
            d.polygon([(x + (s - 1) / 2, y), (x, y + s - 1), (x + s - 1, y + s - 1)], fill=col)
    return img


def answer(scene, form):
    return {"colour": scene["colour"], "shape": scene["shape"], "count": str(len(scene["boxes"]))}[form]


def held_out_items(n, seed):
    """n (scene, form) test items from held-out scenes, the forms in turn."""
    rng = random.Random(seed)
    seen, out = set(), []
    while len(out) < n:
        s = sample_scene(rng, True)
        if scene_key(s) not in seen:
            seen.add(scene_key(s))
            out.append((s, FORMS[len(out) % 3]))
    return out


# ---------------------------------------------------------------------------------------------
# CLIPImageProcessor (resize shortest edge, center crop, rescale, normalise), on PIL

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def preprocess(img, side):
    """PIL RGB image -> f32 [3, side, side], as transformers' CLIPImageProcessor computes it."""
    w, h = img.size
    short, long = min(w, h), max(w, h)
    new_long = int(side * long / short)
    nw, nh = (new_long, side) if h <= w else (side, new_long)
    img = img.resize((nw, nh), Image.BICUBIC)
    top, left = (nh - side) // 2, (nw - side) // 2
    a = np.asarray(img, dtype=np.uint8)[top:top + side, left:left + side]
    a = (a.astype(np.float64) * (1 / 255)).astype(np.float32)
    a = (a - np.array(CLIP_MEAN, np.float32)) / np.array(CLIP_STD, np.float32)
    return torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1), dtype=np.float32))


# ---------------------------------------------------------------------------------------------
# Model: CLIP vision tower + projector + Qwen3 (from the upstream definitions)

def quick_gelu(x):
    return x * torch.sigmoid(1.702 * x)


class ClipAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = (p(x).view(B, T, self.heads, self.hd).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        w = torch.softmax((q * self.hd ** -0.5) @ k.transpose(2, 3), dim=-1)
        return self.out_proj((w @ v).transpose(1, 2).reshape(B, T, D))


class ClipMLP(nn.Module):
    def __init__(self, d, inter):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, inter), nn.Linear(inter, d)

    def forward(self, x):
        return self.fc2(quick_gelu(self.fc1(x)))


class ClipLayer(nn.Module):
    def __init__(self, v):
        super().__init__()
        d, eps = v["hidden_size"], v["layer_norm_eps"]
        self.self_attn = ClipAttention(d, v["num_attention_heads"])
        self.layer_norm1 = nn.LayerNorm(d, eps=eps)
        self.mlp = ClipMLP(d, v["intermediate_size"])
        self.layer_norm2 = nn.LayerNorm(d, eps=eps)

    def forward(self, x):
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class ClipEmbeddings(nn.Module):
    def __init__(self, v):
        super().__init__()
        d, p = v["hidden_size"], v["patch_size"]
        self.class_embedding = nn.Parameter(torch.randn(d))
        self.patch_embedding = nn.Conv2d(3, d, kernel_size=p, stride=p, bias=False)
        self.position_embedding = nn.Embedding((v["image_size"] // p) ** 2 + 1, d)

    def forward(self, pixels):
        patches = self.patch_embedding(pixels).flatten(2).transpose(1, 2)  # [B, grid*grid, D], row-major
        cls = self.class_embedding.expand(pixels.shape[0], 1, -1)
        return torch.cat([cls, patches], dim=1) + self.position_embedding.weight[None]


class ClipEncoder(nn.Module):
    def __init__(self, v):
        super().__init__()
        self.layers = nn.ModuleList(ClipLayer(v) for _ in range(v["num_hidden_layers"]))


class ClipVisionTransformer(nn.Module):
    def __init__(self, v):
        super().__init__()
        d = v["hidden_size"]
        self.embeddings = ClipEmbeddings(v)
        self.pre_layrnorm = nn.LayerNorm(d, eps=v["layer_norm_eps"])  # sic: upstream's spelling
        self.encoder = ClipEncoder(v)
        self.post_layernorm = nn.LayerNorm(d, eps=v["layer_norm_eps"])  # pooled output only: unused by LLaVA

    def hidden_states(self, pixels, upto):
        """hidden_states[upto] of upstream's output_hidden_states=True (0 = after pre_layrnorm)."""
        x = self.pre_layrnorm(self.embeddings(pixels))
        for layer in self.encoder.layers[:upto]:
            x = layer(x)
        return x


class ClipVisionModel(nn.Module):
    def __init__(self, v):
        super().__init__()
        self.vision_model = ClipVisionTransformer(v)


class Projector(nn.Module):
    def __init__(self, vd, td):
        super().__init__()
        self.linear_1, self.linear_2 = nn.Linear(vd, td), nn.Linear(td, td)

    def forward(self, x):
        return self.linear_2(F.gelu(self.linear_1(x)))  # projector_hidden_act "gelu" (erf)


class LlavaForConditionalGeneration(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        v = c["vision_config"]
        self.vision_tower = ClipVisionModel(v)
        self.multi_modal_projector = Projector(v["hidden_size"], c["text_config"]["hidden_size"])
        self.language_model = text.Qwen3ForCausalLM(c["text_config"])
        layers = v["num_hidden_layers"]
        fl = c["vision_feature_layer"]
        self.feature_layer = fl + layers + 1 if fl < 0 else fl  # python indexing of L + 1 states

    def image_features(self, pixels):
        h = self.vision_tower.vision_model.hidden_states(pixels, self.feature_layer)
        if self.c["vision_feature_select_strategy"] == "default":
            h = h[:, 1:]  # drop the class token
        return self.multi_modal_projector(h)

    def forward(self, ids, pixels, rows=None):
        """Logits [B, T, V]; each row of ids holds one image's worth of image tokens, in order.
        With a boolean mask `rows` [B, T]: the logits of those positions only, [N, V]."""
        lm = self.language_model
        x = lm.model.embed_tokens(ids)
        mask = ids == self.c["image_token_index"]
        feats = self.image_features(pixels)
        x = x.masked_scatter(mask[..., None], feats.to(x.dtype))
        T = ids.shape[1]
        freqs = torch.outer(torch.arange(T, dtype=torch.float32), lm.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        causal = torch.full((T, T), float("-inf")).triu(1)[None, None]
        for layer in lm.model.layers:
            x = layer(x, cos, sin, causal)
        if rows is not None:
            x = x[rows]
        return lm.lm_head(lm.model.norm(x))


def config(tok):
    t = text.config(tok)
    t.update({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 256})
    v = {"model_type": "clip_vision_model", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "image_size": 32, "patch_size": 8, "num_channels": 3, "hidden_act": "quick_gelu",
         "layer_norm_eps": 1e-5, "projection_dim": 64}
    tokens = (v["image_size"] // v["patch_size"]) ** 2
    return {
        "architectures": ["LlavaForConditionalGeneration"],
        "model_type": "llava",
        "image_token_index": tok.image,
        "image_seq_length": tokens,
        "projector_hidden_act": "gelu",
        "multimodal_projector_bias": True,
        "vision_feature_layer": -1,
        "vision_feature_select_strategy": "default",
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "text_config": t,
        "vision_config": v,
    }


def image_tokens(c):
    v = c["vision_config"]
    return (v["image_size"] // v["patch_size"]) ** 2


@torch.no_grad()
def greedy_batch(model, tok, questions, pixels, max_new=10):
    """Greedy answers (ids, stop token included) for prompts of one length (full recompute each
    step: slow, simple, independent). Rows go on after their stop token; the tail is cut off."""
    n = image_tokens(model.c)
    seqs = torch.tensor([tok.prompt_ids(q, n) for q in questions])
    out = [[] for _ in questions]
    done = [False] * len(questions)
    for _ in range(max_new):
        nxt = model(seqs, pixels)[:, -1].argmax(-1)
        for i, t in enumerate(nxt.tolist()):
            if not done[i]:
                out[i].append(t)
                done[i] = t == tok.eos
        if all(done):
            break
        seqs = torch.cat([seqs, nxt[:, None]], dim=1)
    return out


def greedy_items(model, tok, items, pixels):
    """Greedy ids for (question, pixel) items, batched by question (prompts of equal length)."""
    out = [None] * len(items)
    for q in sorted(set(q for q, _ in items)):
        idx = [i for i, (qq, _) in enumerate(items) if qq == q]
        for k in range(0, len(idx), 64):
            part = idx[k:k + 64]
            got = greedy_batch(model, tok, [q] * len(part), torch.stack([pixels[i] for i in part]))
            for i, g in zip(part, got):
                out[i] = g
    return out


# ---------------------------------------------------------------------------------------------
# Checkpoint I/O

def preprocessor_config(side):
    return {"crop_size": {"height": side, "width": side}, "do_center_crop": True, "do_convert_rgb": True,
            "do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": CLIP_MEAN,
            "image_processor_type": "CLIPImageProcessor", "image_std": CLIP_STD, "processor_class": "LlavaProcessor",
            "resample": 3, "rescale_factor": 1 / 255, "size": {"shortest_edge": side}}


def load(model_dir):
    c = json.load(open(os.path.join(model_dir, "config.json")))
    model = LlavaForConditionalGeneration(c)
    model.load_state_dict(text.load_safetensors(os.path.join(model_dir, "model.safetensors")), strict=True)
    return model.eval()


def save(model, tok, out):
    os.makedirs(out, exist_ok=True)
    text.save_safetensors(os.path.join(out, "model.safetensors"), model.state_dict())
    json.dump(model.c, open(os.path.join(out, "config.json"), "w"), indent=2)
    json.dump(preprocessor_config(model.c["vision_config"]["image_size"]),
              open(os.path.join(out, "preprocessor_config.json"), "w"), indent=2)
    json.dump(tok.tokenizer_json(), open(os.path.join(out, "tokenizer.json"), "w"), ensure_ascii=False)
    json.dump({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 256,
        "bos_token": None,
        "eos_token": "<|end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "image_token": IMAGE_TOKEN,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }, open(os.path.join(out, "tokenizer_config.json"), "w"), indent=2)
    json.dump({"bos_token_id": tok.pad, "eos_token_id": [tok.eos, tok.pad], "pad_token_id": tok.pad,
               "do_sample": False}, open(os.path.join(out, "generation_config.json"), "w"), indent=2)


# ---------------------------------------------------------------------------------------------
# Training

def batch(model, tok, rng, n):
    """Right-padded chat sequences and their images; the loss covers the answer and <|end|> only."""
    side, k = model.c["vision_config"]["image_size"], image_tokens(model.c)
    seqs, starts, pix = [], [], []
    for _ in range(n):
        s = sample_scene(rng, False)
        form = rng.choice(FORMS)
        p = tok.prompt_ids(QUESTIONS[form], k)
        seqs.append(p + tok.encode(answer(s, form)) + [tok.eos])
        starts.append(len(p))
        pix.append(preprocess(render(s), side))
    T = max(map(len, seqs))
    x = torch.full((n, T), tok.pad)
    y = torch.full((n, T), -100)
    for i, (s, st) in enumerate(zip(seqs, starts)):
        x[i, :len(s)] = torch.tensor(s)
        y[i, st - 1:len(s) - 1] = torch.tensor(s[st:])
    return x, y, torch.stack(pix)


def accuracy(model, tok, items):
    """Exact-answer rate overall, and per form."""
    side = model.c["vision_config"]["image_size"]
    pix = [preprocess(render(s), side) for s, _ in items]
    got = greedy_items(model, tok, [(QUESTIONS[f], None) for _, f in items], pix)
    good, per = 0, {}
    for (s, f), ids in zip(items, got):
        ok = ids[-1] == tok.eos and tok.decode(ids[:-1]) == answer(s, f)
        good += ok
        n, k = per.get(f, (0, 0))
        per[f] = (n + 1, k + ok)
    return good / len(items), " ".join(f"{f} {k}/{n}" for f, (n, k) in sorted(per.items()))


def init_weights(model):
    for name, p in model.named_parameters():
        if p.dim() >= 2 and "position_embedding" not in name:
            fan_in = p[0].numel()
            std = 0.02 if "embed_tokens" in name or "lm_head" in name else 1 / math.sqrt(fan_in)
            nn.init.normal_(p, std=std)
        elif "position_embedding" in name or "class_embedding" in name:
            nn.init.normal_(p, std=0.02)


def main():
    # As in qwen3_add.py: keep freed tensors in the heap (elementwise ops measured 10x slower).
    tun = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824"
    if os.environ.get("GLIBC_TUNABLES") != tun:
        os.environ["GLIBC_TUNABLES"] = tun
        os.execv(sys.executable, [sys.executable] + sys.argv)
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    # One thread: on 2 cores shared with compilers, two measured 3-7x slower per step.
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--init", help="start from this checkpoint instead of random weights")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    tok = Tokenizer()
    model = LlavaForConditionalGeneration(config(tok))
    if args.init:  # a second stage: continue from a checkpoint this script wrote
        model = load(args.init).train()
    else:
        init_weights(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = 50
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps))))
    dev = held_out_items(60, args.seed + 1)
    t0 = time.time()
    for step in range(1, args.steps + 1):
        x, y, pix = batch(model, tok, rng, args.batch)
        rows = y != -100  # the head runs on the answer positions only
        loss = F.cross_entropy(model(x, pix, rows), y[rows])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == args.steps:
            model.eval()
            acc, per = accuracy(model, tok, dev)
            model.train()
            print(f"step {step} loss {loss.item():.4f} dev acc {acc:.3f} ({per}; {time.time() - t0:.0f} s)",
                  flush=True)
        elif step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f} ({time.time() - t0:.0f} s)", flush=True)
    model.eval()
    test = held_out_items(300, args.seed + 2)
    acc, per = accuracy(model, tok, test)
    print(f"final: held-out exact-answer accuracy {acc:.4f} on {len(test)} items ({per}), "
          f"{sum(p.numel() for p in model.parameters())} parameters, {time.time() - t0:.0f} s")
    save(model, tok, args.out)
    return 0 if acc >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
