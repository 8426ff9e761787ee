#!/usr/bin/python3
"""Trains a tiny Qwen3-architecture chat model that adds numbers, and writes it as a Hugging Face
checkpoint (config.json, model.safetensors, tokenizer.json, tokenizer_config.json with a chat
template, generation_config.json).

The model code below is written from the upstream definition (transformers' modeling_qwen3.py):
RMSNorm in f32 times weight, q_norm/k_norm over head_dim before RoPE (rotate-half, default
inverse frequencies), GQA, scale head_dim^-0.5, SiLU-gated MLP, pre-norm residual blocks, a final
norm and an untied lm_head. tests/models/test_trained_qwen3.py imports it as the independent
reference hlx's answers are compared with, token for token.

Tasks (each a user message; the assistant answers with a number and <|end|>):
  "A+B="                          -> A+B
  "What is A plus B?"             -> A+B
  "Which is larger, A or B?"      -> max(A, B)
  "What comes after A?"           -> A+1
with 1- or 2-digit operands for the sums, 1 to 3 digits for the others. A problem is held out (never trained on) when crc32 of its question
is 0 mod 16; `held_out_problems` draws test problems from that set only.

Run under Debian's /usr/bin/python3 (python3-torch). One run of the defaults took 15 minutes on
2 busy shared cores; the committed checkpoint took three stages (--init), listed with their
figures in assets/models/README.md. Exits 1 when the held-out accuracy is below 98 %.
"""
import argparse
import json
import math
import os
import random
import struct
import sys
import time
import zlib

import torch
from torch import nn
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------------
# Tokenizer: byte-level characters, no merges (a GPT-2 style ByteLevel alphabet of 256 symbols),
# plus three special tokens for the ChatML-style template.

# One special token per role keeps sequences short (a ChatML "<|im_start|>user\n" costs six
# character tokens): training time on 2 shared cores is mostly sequence length.
SPECIALS = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|assistant|>' }}{%- endif %}")


def byte_alphabet():
    """GPT-2's byte -> printable character map (bytes that print stay themselves)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


class Tokenizer:
    def __init__(self):
        self.byte_char = byte_alphabet()
        self.vocab = {self.byte_char[b]: b for b in range(256)}
        self.special = {s: 256 + i for i, s in enumerate(SPECIALS)}
        self.id_to = {i: c for c, i in self.vocab.items()}
        self.id_to.update({i: s for s, i in self.special.items()})
        self.char_byte = {c: b for b, c in self.byte_char.items()}
        self.vocab_size = 256 + len(SPECIALS)
        self.eos = self.special["<|end|>"]
        self.pad = self.special["<|endoftext|>"]

    def encode(self, text):
        """Special tokens matched first (as HF added tokens are), the rest byte by byte."""
        ids, i = [], 0
        while i < len(text):
            for s, sid in self.special.items():
                if text.startswith(s, i):
                    ids.append(sid)
                    i += len(s)
                    break
            else:
                j = min([text.find(s, i) for s in SPECIALS if text.find(s, i) >= 0] or [len(text)])
                ids += [self.vocab[self.byte_char[b]] for b in text[i:j].encode()]
                i = j
        return ids

    def decode(self, ids):
        out = bytearray()
        for t in ids:
            s = self.id_to[t]
            out += s.encode() if t >= 256 else bytes([self.char_byte[s]])
        return out.decode("utf-8", errors="replace")

    def chat_prompt(self, question):
        return f"<|user|>{question}<|end|><|assistant|>"

    def tokenizer_json(self):
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True} for s, i in self.special.items()],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                              "use_regex": False},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                        "use_regex": False},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": self.vocab, "merges": []},
        }


# ---------------------------------------------------------------------------------------------
# Tasks

FORMS = ["sum", "plus", "larger", "after"]


def question(form, a, b):
    if form == "sum":
        return f"{a}+{b}="
    if form == "plus":
        return f"What is {a} plus {b}?"
    if form == "larger":
        return f"Which is larger, {a} or {b}?"
    return f"What comes after {a}?"


def answer(form, a, b):
    return str({"sum": a + b, "plus": a + b, "larger": max(a, b), "after": a + 1}[form])


def is_held_out(q):
    return zlib.crc32(q.encode()) % 16 == 0


def operand(rng, digits):
    d = rng.randint(1, digits)
    return rng.randrange(0 if d == 1 else 10 ** (d - 1), 10 ** d)


def sample(rng, held_out, weights=None):
    """A (question, answer) pair from the training split (held_out=False) or the held-out one."""
    while True:
        form = rng.choices(FORMS, weights)[0] if weights else rng.choice(FORMS)
        # Sums of two 3-digit numbers written most significant digit first did not reach 98 %
        # within the CPU budget (27 % after 750 steps); 2-digit operands do.
        digits = 2 if form in ("sum", "plus") else 3
        a, b = operand(rng, digits), operand(rng, digits)
        if form == "larger" and a == b:
            continue
        q = question(form, a, b)
        if is_held_out(q) == held_out:
            return q, answer(form, a, b)


def held_out_problems(n, seed):
    rng = random.Random(seed)
    seen, out = set(), []
    while len(out) < n:
        q, a = sample(rng, True)
        if q not in seen:
            seen.add(q)
            out.append((q, a))
    return out


# ---------------------------------------------------------------------------------------------
# Model (Qwen3, from the upstream definition)

class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads, self.hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        h = c["hidden_size"]
        self.q_proj = nn.Linear(h, self.heads * self.hd, bias=False)
        self.k_proj = nn.Linear(h, self.kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(h, self.kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(self.heads * self.hd, h, bias=False)
        self.q_norm = RMSNorm(self.hd, c["rms_norm_eps"])
        self.k_norm = RMSNorm(self.hd, c["rms_norm_eps"])

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.heads, self.hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, self.kv_heads, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        w = (q @ k.transpose(2, 3)) * self.hd ** -0.5 + mask
        w = torch.softmax(w.float(), dim=-1).to(q.dtype)
        return self.o_proj((w @ v).transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, i = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Qwen3ForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = Body(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        hd = c["head_dim"]
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, ids):
        T = ids.shape[1]
        freqs = torch.outer(torch.arange(T, dtype=torch.float32), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.model.norm(x))


def config(tok):
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": tok.vocab_size,
        "hidden_size": 64,
        "intermediate_size": 192,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "hidden_act": "silu",
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "sliding_window": None,
        "bos_token_id": tok.pad,
        "eos_token_id": tok.eos,
        "torch_dtype": "float32",
    }


@torch.no_grad()
def greedy(model, ids, max_new, eos):
    """Greedy continuation of `ids` (full recompute each step: slow, simple, independent)."""
    out = []
    seq = list(ids)
    for _ in range(max_new):
        nxt = int(model(torch.tensor([seq]))[0, -1].argmax())
        out.append(nxt)
        if nxt == eos:
            break
        seq.append(nxt)
    return out


# ---------------------------------------------------------------------------------------------
# Checkpoint I/O: safetensors written and read with json + struct (f32 only).

def save_safetensors(path, tensors):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().float()
        b = t.numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    import numpy as np
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, m in header.items():
        if name == "__metadata__":
            continue
        assert m["dtype"] == "F32", (name, m["dtype"])
        a, b = m["data_offsets"]
        arr = np.frombuffer(data[8 + n + a:8 + n + b], dtype="<f4").reshape(m["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


def load(model_dir):
    c = json.load(open(os.path.join(model_dir, "config.json")))
    model = Qwen3ForCausalLM(c)
    model.load_state_dict(load_safetensors(os.path.join(model_dir, "model.safetensors")), strict=True)
    return model.eval()


def save(model, tok, out):
    os.makedirs(out, exist_ok=True)
    save_safetensors(os.path.join(out, "model.safetensors"), model.state_dict())
    json.dump(model.c, open(os.path.join(out, "config.json"), "w"), indent=2)
    json.dump(tok.tokenizer_json(), open(os.path.join(out, "tokenizer.json"), "w"), ensure_ascii=False)
    json.dump({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 256,
        "bos_token": None,
        "eos_token": "<|end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }, open(os.path.join(out, "tokenizer_config.json"), "w"), indent=2)
    json.dump({"bos_token_id": tok.pad, "eos_token_id": [tok.eos, tok.pad], "pad_token_id": tok.pad,
               "do_sample": False}, open(os.path.join(out, "generation_config.json"), "w"), indent=2)


# ---------------------------------------------------------------------------------------------
# Training

def batch(tok, rng, n, weights=None):
    """Right-padded chat sequences; the loss covers the answer and its <|end|> only."""
    seqs, starts = [], []
    for _ in range(n):
        q, a = sample(rng, False, weights)
        p = tok.encode(tok.chat_prompt(q))
        seqs.append(p + tok.encode(a) + [tok.eos])
        starts.append(len(p))
    T = max(map(len, seqs))
    x = torch.full((n, T), tok.pad)
    y = torch.full((n, T), -100)
    for i, (s, st) in enumerate(zip(seqs, starts)):
        x[i, :len(s)] = torch.tensor(s)
        y[i, st - 1:len(s) - 1] = torch.tensor(s[st:])
    return x, y


def form_of(q):
    return ("sum" if q.endswith("=") else "plus" if " plus " in q else
            "larger" if q.startswith("Which") else "after")


def accuracy(model, tok, problems):
    """Exact-answer rate overall, and per form."""
    good, per = 0, {}
    for q, a in problems:
        ids = greedy(model, tok.encode(tok.chat_prompt(q)), 8, tok.eos)
        ok = tok.decode([t for t in ids if t != tok.eos]) == a and ids[-1] == tok.eos
        good += ok
        n, k = per.get(form_of(q), (0, 0))
        per[form_of(q)] = (n + 1, k + ok)
    return good / len(problems), " ".join(f"{f} {k}/{n}" for f, (n, k) in sorted(per.items()))


def main():
    # glibc returns every freed tensor above 128 KiB to the kernel and faults it back in on the
    # next allocation: elementwise ops measured 10x slower. Keep them in the heap instead.
    tun = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824"
    if os.environ.get("GLIBC_TUNABLES") != tun:
        os.environ["GLIBC_TUNABLES"] = tun
        os.execv(sys.executable, [sys.executable] + sys.argv)
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--init", help="start from this checkpoint instead of random weights")
    ap.add_argument("--form-weights", default="1,1,1,1",
                    help="sampling weights of the forms " + ",".join(FORMS) + " in training batches")
    # One thread: on 2 cores shared with compilers, two OpenMP threads measured 3x slower per step.
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    tok = Tokenizer()
    weights = [float(w) for w in args.form_weights.split(",")]
    if args.init:  # a second stage: continue from a checkpoint this script wrote
        model = load(args.init).train()
    else:
        model = Qwen3ForCausalLM(config(tok))
        for name, p in model.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02 if "embed" in name or "lm_head" in name else 1 / math.sqrt(p.shape[1]))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = 100
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps))))
    dev = held_out_problems(200, args.seed + 1)
    t0 = time.time()
    for step in range(1, args.steps + 1):
        x, y = batch(tok, rng, args.batch, weights)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 400 == 0 or step == args.steps:
            model.eval()
            acc, per = accuracy(model, tok, dev)
            model.train()
            print(f"step {step} loss {loss.item():.4f} dev acc {acc:.3f} ({per}; {time.time() - t0:.0f} s)",
                  flush=True)
            if acc == 1.0:  # deterministic for a seed: the dev set is fixed
                break
    model.eval()
    test = held_out_problems(400, args.seed + 2)
    acc, per = accuracy(model, tok, test)
    print(f"final: held-out exact-answer accuracy {acc:.4f} on {len(test)} problems ({per}), "
          f"{sum(p.numel() for p in model.parameters())} parameters, {time.time() - t0:.0f} s")
    save(model, tok, args.out)
    return 0 if acc >= 0.98 else 1


if __name__ == "__main__":
    sys.exit(main())
