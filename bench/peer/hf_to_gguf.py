#!/usr/bin/python3
"""Write a Hugging Face Qwen3 checkpoint (config.json + *.safetensors) as a GGUF v3 file for llama.cpp.

Only for the peer benchmark (make bench-peer): architecture `qwen3`, driven by token ids, no real
tokenizer. node-llama-cpp round-trips a test string through the tokenizer after loading, which
aborts (GGML_ASSERT) on llama.cpp's vocab type NONE (`tokenizer.ggml.model = "none"`), so the file
carries a stand-in SentencePiece vocab of vocab_size tokens: <unk>, <s>, </s>, the 256 byte tokens
<0x00>..<0xFF> and "<tN>" for the rest, scores 0; it only names the ids. Weights:

  --type q4_0   every 2-D matmul weight as Q4_0 (blocks of 32: f16 scale d, 16 bytes of nibbles,
                x = (q - 8) * d), 4.5 bits a weight. --embd-type picks token_embd (which is also the
                output matrix of a tied checkpoint): q4_0 (default, what `llama-quantize --pure`
                writes: every matmul 4-bit, the same bits a weight as hlx --weights int4) or q6_k
                (what `llama-quantize ... Q4_0` writes for a tied embedding without --pure).
  --type bf16   the checkpoint's bf16 values as stored (a same-run reference), or --type f16.

1-D tensors (the RMSNorm weights) stay f32. Usage:
  hf_to_gguf.py CHECKPOINT_DIR OUT.gguf --type q4_0|bf16|f16 [--embd-type q4_0|q6_k]
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

# GGUF metadata value types and ggml tensor types (ggml.h's enum ggml_type).
GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 5, 6, 7, 8, 9
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q6_K, GGML_BF16 = 0, 1, 2, 14, 30
# llama.cpp's llama_ftype: the dominant weight type, informational.
FTYPE = {"q4_0": 2, "f16": 1, "bf16": 32}
ALIGN = 32


def read_safetensors(paths):
    """name -> (dtype string, shape, memmap'd raw bytes) for every tensor of the given files."""
    out = {}
    for path in paths:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        raw = np.memmap(path, dtype=np.uint8, mode="r")
        base = 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            b, e = info["data_offsets"]
            out[name] = (info["dtype"], info["shape"], raw[base + b : base + e])
    return out


def to_f32(dtype, shape, raw):
    if dtype == "BF16":
        u = raw.view("<u2").astype(np.uint32) << 16
        return u.view(np.float32).reshape(shape)
    if dtype == "F16":
        return raw.view("<f2").astype(np.float32).reshape(shape)
    if dtype == "F32":
        return raw.view("<f4").reshape(shape).copy()
    sys.exit(f"unsupported safetensors dtype {dtype}")


def f32_to_bf16_bytes(x):
    """Round to nearest even (x is finite)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2").tobytes()


def quant_q4_0(w):
    """[rows, k] f32 -> Q4_0 bytes, row-major blocks of 32 along k.

    Per block: m = the element of largest magnitude (with its sign), d = m / -8, and
    q = min(15, floor(x / d + 8.5)), so m maps to code 0 and the codes cover [-8, 7] * d. The 16
    bytes hold element j in the low nibble of byte j and element j + 16 in the high nibble."""
    rows, k = w.shape
    assert k % 32 == 0
    x = w.reshape(-1, 32)
    idx = np.abs(x).argmax(axis=1)
    m = x[np.arange(x.shape[0]), idx]
    d = m / np.float32(-8.0)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    q = np.floor(x * inv[:, None] + np.float32(8.5))
    q = np.clip(q, 0, 15).astype(np.uint8)
    packed = q[:, :16] | (q[:, 16:] << 4)
    blocks = np.empty((x.shape[0], 18), dtype=np.uint8)
    blocks[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    blocks[:, 2:] = packed
    return blocks.tobytes()


def quant_q6_k(w):
    """[rows, k] f32 -> Q6_K bytes (super-blocks of 256 along k: ql[128], qh[64], int8 scales[16],
    f16 d; element e of a super-block is (q - 32) * d * scales[e // 16], q 6 bits).

    Plain rounding (sub-block scale from its largest magnitude, int8 scales from the largest sub-block
    scale), not llama-quantize's error search: the same format and so the same kernel speed."""
    rows, k = w.shape
    assert k % 256 == 0
    x = w.reshape(-1, 256)
    nb = x.shape[0]
    sub = x.reshape(nb, 16, 16)
    idx = np.abs(sub).argmax(axis=2)
    m = np.take_along_axis(sub, idx[:, :, None], axis=2)[:, :, 0]
    s = m / np.float32(-32.0)  # sub-block scale: its largest magnitude maps to q = -32
    j = np.abs(s).argmax(axis=1)
    smax = s[np.arange(nb), j]
    d = (smax / np.float32(-128.0)).astype(np.float16)
    df = d.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df[:, None] != 0, np.rint(s / df[:, None]), 0)
    sc = np.clip(sc, -128, 127).astype(np.int8)
    step = df[:, None] * sc.astype(np.float32)  # [nb, 16]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(step[:, :, None] != 0, np.rint(sub / step[:, :, None]), 0)
    q = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(nb, 2, 4, 32)  # half, quarter, l
    lo, hi = q & 0xF, q >> 4
    ql = np.empty((nb, 2, 64), dtype=np.uint8)
    ql[:, :, :32] = lo[:, :, 0] | (lo[:, :, 2] << 4)
    ql[:, :, 32:] = lo[:, :, 1] | (lo[:, :, 3] << 4)
    qh = hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)
    blocks = np.empty((nb, 210), dtype=np.uint8)
    blocks[:, :128] = ql.reshape(nb, 128)
    blocks[:, 128:192] = qh.reshape(nb, 64)
    blocks[:, 192:208] = sc.view(np.uint8)
    blocks[:, 208:] = d.astype("<f2").view(np.uint8).reshape(nb, 2)
    return blocks.tobytes()


def encode_tensor(w, kind):
    """(ggml type, bytes) of an f32 array for a weight type name."""
    if kind == "f32":
        return GGML_F32, np.ascontiguousarray(w, dtype="<f4").tobytes()
    if kind == "f16":
        return GGML_F16, np.ascontiguousarray(w).astype("<f2").tobytes()
    if kind == "bf16":
        return GGML_BF16, f32_to_bf16_bytes(w)
    if kind == "q4_0":
        return GGML_Q4_0, quant_q4_0(w)
    if kind == "q6_k":
        return GGML_Q6_K, quant_q6_k(w)
    raise ValueError(kind)


LAYER_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")
    if parts[:2] == ["model", "layers"] and parts[-1] == "weight":
        mid = ".".join(parts[3:-1])
        if mid in LAYER_NAMES:
            return f"blk.{parts[2]}.{LAYER_NAMES[mid]}.weight"
    sys.exit(f"no GGUF name for tensor {hf}")


class Writer:
    def __init__(self):
        self.kv = []

    def s(self, v):
        b = v.encode()
        return struct.pack("<Q", len(b)) + b

    def add(self, key, vtype, value):
        body = self.s(key) + struct.pack("<I", vtype)
        if vtype == GGUF_STRING:
            body += self.s(value)
        elif vtype == GGUF_U32:
            body += struct.pack("<I", value)
        elif vtype == GGUF_F32:
            body += struct.pack("<f", value)
        elif vtype == GGUF_BOOL:
            body += struct.pack("<?", value)
        elif vtype == GGUF_ARRAY:
            etype, items = value
            body += struct.pack("<IQ", etype, len(items))
            if etype == GGUF_STRING:
                body += b"".join(self.s(v) for v in items)
            elif etype == GGUF_F32:
                body += np.asarray(items, dtype="<f4").tobytes()
            elif etype == GGUF_I32:
                body += np.asarray(items, dtype="<i4").tobytes()
            else:
                raise ValueError(etype)
        else:
            raise ValueError(vtype)
        self.kv.append(body)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", help="directory with config.json and *.safetensors")
    ap.add_argument("out", help="output .gguf")
    ap.add_argument("--type", choices=["q4_0", "bf16", "f16"], required=True, help="matmul weight type")
    ap.add_argument("--embd-type", choices=["q4_0", "q6_k"], default="q4_0",
                    help="token_embd type with --type q4_0 (default q4_0: llama-quantize --pure)")
    a = ap.parse_args()

    with open(os.path.join(a.checkpoint, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "qwen3":
        sys.exit(f"model_type {cfg.get('model_type')!r}: only qwen3 is supported")
    files = sorted(os.path.join(a.checkpoint, n) for n in os.listdir(a.checkpoint) if n.endswith(".safetensors"))
    tensors = read_safetensors(files)
    tied = cfg.get("tie_word_embeddings", False)
    if tied:
        tensors.pop("lm_head.weight", None)
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]

    w = Writer()
    arch = "qwen3"
    w.add("general.architecture", GGUF_STRING, arch)
    w.add("general.name", GGUF_STRING, os.path.basename(os.path.abspath(a.checkpoint)))
    w.add("general.file_type", GGUF_U32, FTYPE[a.type])
    w.add("general.alignment", GGUF_U32, ALIGN)
    w.add(f"{arch}.vocab_size", GGUF_U32, cfg["vocab_size"])  # read by the .mjs scripts
    w.add(f"{arch}.context_length", GGUF_U32, cfg["max_position_embeddings"])
    w.add(f"{arch}.embedding_length", GGUF_U32, cfg["hidden_size"])
    w.add(f"{arch}.block_count", GGUF_U32, cfg["num_hidden_layers"])
    w.add(f"{arch}.feed_forward_length", GGUF_U32, cfg["intermediate_size"])
    w.add(f"{arch}.attention.head_count", GGUF_U32, cfg["num_attention_heads"])
    w.add(f"{arch}.attention.head_count_kv", GGUF_U32, cfg["num_key_value_heads"])
    w.add(f"{arch}.attention.key_length", GGUF_U32, head_dim)
    w.add(f"{arch}.attention.value_length", GGUF_U32, head_dim)
    w.add(f"{arch}.attention.layer_norm_rms_epsilon", GGUF_F32, cfg["rms_norm_eps"])
    w.add(f"{arch}.rope.freq_base", GGUF_F32, cfg.get("rope_theta", 10000.0))
    w.add(f"{arch}.rope.dimension_count", GGUF_U32, head_dim)
    n_vocab = cfg["vocab_size"]
    # llama.cpp token types: 1 normal, 2 unknown, 3 control, 6 byte.
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    tokens += [f"<t{i}>" for i in range(len(tokens), n_vocab)]
    types += [1] * (n_vocab - len(types))
    w.add("tokenizer.ggml.model", GGUF_STRING, "llama")
    w.add("tokenizer.ggml.tokens", GGUF_ARRAY, (GGUF_STRING, tokens))
    w.add("tokenizer.ggml.scores", GGUF_ARRAY, (GGUF_F32, np.zeros(n_vocab)))
    w.add("tokenizer.ggml.token_type", GGUF_ARRAY, (GGUF_I32, types))
    w.add("tokenizer.ggml.bos_token_id", GGUF_U32, 1)
    w.add("tokenizer.ggml.eos_token_id", GGUF_U32, 2)
    w.add("tokenizer.ggml.unknown_token_id", GGUF_U32, 0)
    w.add("tokenizer.ggml.add_bos_token", GGUF_BOOL, False)

    infos, blobs, offset = [], [], 0
    for hf in sorted(tensors, key=lambda n: (n.count("layers"), n)):
        dtype, shape, raw = tensors[hf]
        name = gguf_name(hf)
        x = to_f32(dtype, shape, raw)
        if x.ndim == 1:
            kind = "f32"
        elif a.type == "q4_0":
            kind = a.embd_type if name in ("token_embd.weight", "output.weight") else "q4_0"
        else:
            kind = a.type
        if kind == "bf16" and dtype == "BF16":
            ggml_type, data = GGML_BF16, bytes(raw)
        else:
            ggml_type, data = encode_tensor(x, kind)
        dims = list(reversed(shape))  # ggml's ne[0] is the contiguous (input) dimension
        infos.append(w.s(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
                     + struct.pack("<IQ", ggml_type, offset))
        blobs.append(data)
        offset += len(data)
        pad = (-offset) % ALIGN
        if pad:
            blobs.append(b"\0" * pad)
            offset += pad

    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    tmp = a.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(w.kv)))
        for kv in w.kv:
            f.write(kv)
        for info in infos:
            f.write(info)
        f.write(b"\0" * ((-f.tell()) % ALIGN))
        for b in blobs:
            f.write(b)
    os.replace(tmp, a.out)
    print(f"{a.out}: {len(infos)} tensors, {offset / 1e6:.1f} MB of data, type {a.type}"
          + (f" (token_embd {a.embd_type})" if a.type == "q4_0" else ""))


if __name__ == "__main__":
    main()
