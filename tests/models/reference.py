"""Independent numpy reference for hlx's text decoders (llama, qwen2, qwen3, gemma3_text, gemma3).

Written from Hugging Face transformers' modeling code (models/{llama,qwen2,qwen3,gemma3}/
modeling_*.py, modeling_rope_utils.py, masking_utils.py), not from hlx's emitter. It reads a
checkpoint directory itself (config.json, generation_config.json, model.safetensors or a sharded
index) and recomputes the full forward pass for every call: slow, simple, obviously right.

Numerics: weights are widened to f32 (bf16 checkpoints: exactly, by a 16-bit shift) and
activations are f32. The one place where upstream rounds to the weight dtype on purpose is kept:
Gemma's embedding scale sqrt(hidden) is cast to the embedding's dtype before the multiply
(55.4256 -> 55.5 in bf16). For bf16 checkpoints two optional roundings model a bf16 engine's dtype
policy (not model math): bf16_matmul rounds each weight matmul's activation operand to bf16 (bf16
GEMM, f32 accumulation) and bf16_kv rounds K/V as a bf16 cache stores them and Q (after rotary,
before the softmax scale) as attention over a bf16 cache takes it; kv_int8 instead
quantizes K/V as an int8 cache stores them (quantize_kv_int8, the format of docs/COMPOSITES.md). The vision tower's
bf16_matmul also rounds its attention's Q/K/V and softmax weights (tower_attention).

API:
    logits(model_dir, tokens) -> np.ndarray [T, vocab] (f32, every row)
    greedy(model_dir, tokens, n, stop_at_eos=False) -> list of n generated ids
    load(model_dir) -> Model (cached per directory)
"""
import json
import math
import os

import numpy as np

# --- safetensors --------------------------------------------------------------------------------

_NP_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32,
              "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
              "F8_E4M3": np.uint8}  # raw float8_e4m3fn bytes: the FP8 test decodes them itself


# Prompts of 7+ tokens (longer than Gemma's window of 4) the decoder tests draw from: each takes the
# first whose reference generation suits it (no eos, no near-tie), so a mismatch means a wrong
# engine, not an ambiguous argmax.
CANDIDATE_PROMPTS = [
    [5, 17, 42, 99, 3, 250, 7],
    [300, 12, 77, 140, 9, 64, 201, 33],
    [1, 2, 3, 4, 5, 6, 7, 8, 9],
    [9, 9, 9, 9, 9, 9, 100, 200],
    [311, 47, 180, 26, 95, 160, 4],
    [44, 128, 19, 276, 63, 88, 150, 12, 230],
]


def read_safetensors(path):
    """-> (dict name -> f32/int ndarray, dict name -> safetensors dtype string)."""
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    tensors, dtypes = {}, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[base + begin:base + end]
        shape = tuple(info["shape"])
        dt = info["dtype"]
        if dt == "BF16":
            # bf16 is the top half of an f32: widen exactly by shifting into the high 16 bits.
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32).reshape(shape)
        elif dt in ("F16", "F32", "F64"):
            arr = np.frombuffer(raw, dtype=np.dtype(_NP_DTYPES[dt]).newbyteorder("<")).astype(np.float32).reshape(shape)
        else:
            arr = np.frombuffer(raw, dtype=np.dtype(_NP_DTYPES[dt]).newbyteorder("<")).reshape(shape)
        tensors[name] = arr
        dtypes[name] = dt
    return tensors, dtypes


def read_checkpoint(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors, dtypes = {}, {}
    for fn in files:
        t, d = read_safetensors(os.path.join(model_dir, fn))
        tensors.update(t)
        dtypes.update(d)
    return tensors, dtypes


# --- config -------------------------------------------------------------------------------------

def quantize_kv_int8(x):
    """An int8 KV cache's view of x [..., head_dim] (f32): per vector over head_dim (one token, one kv
    head), scale = max|x| / 127 in f32, code = round-half-even(x / scale) clipped to [-127, 127],
    0 for an all-zero vector (scale 0); returns code * scale in f32."""
    x = np.asarray(x, dtype=np.float32)
    scale = (np.abs(x).max(axis=-1, keepdims=True) / np.float32(127)).astype(np.float32)
    safe = np.where(scale > 0, scale, np.float32(1))
    code = np.clip(np.rint(x / safe), -127, 127)  # f32 division; rint rounds half to even
    return (code * scale).astype(np.float32)


def bf16_round(x):
    """Round f32 values to bf16 (nearest, ties to even) and widen back to f32 (finite inputs)."""
    a = np.ascontiguousarray(x, dtype=np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    u = ((u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)) << np.uint64(16)
    return u.astype(np.uint32).view(np.float32).reshape(a.shape)


def _default_inv_freq(base, dim):
    # torch: 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)), in f32.
    exponent = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    return (np.float32(1.0) / np.power(np.float32(base), exponent, dtype=np.float32)).astype(np.float32)


def rope_inv_freq(base, dim, scaling):
    """modeling_rope_utils: default, linear and llama3 (attention_factor is 1 for all three)."""
    inv = _default_inv_freq(base, dim)
    if not scaling:
        return inv
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv
    if kind == "linear":
        return (inv / np.float32(scaling["factor"])).astype(np.float32)
    if kind == "llama3":
        factor = scaling["factor"]
        low = scaling["low_freq_factor"]
        high = scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        low_wavelen = old / low
        high_wavelen = old / high
        wavelen = (2 * math.pi / inv).astype(np.float32)
        inv_llama = np.where(wavelen > low_wavelen, inv / np.float32(factor), inv).astype(np.float32)
        smooth = ((old / wavelen - low) / (high - low)).astype(np.float32)
        smoothed = ((1 - smooth) * inv_llama / np.float32(factor) + smooth * inv_llama).astype(np.float32)
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return np.where(medium, smoothed, inv_llama).astype(np.float32)
    raise NotImplementedError(f"reference: rope type {kind!r}")


class Model:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            root = json.load(f)
        self.root = root
        self.model_type = root["model_type"]
        # LlavaForConditionalGeneration: the decoder is a llama/qwen2 text_config model under
        # language_model.model (legacy names) or model.language_model (transformers >= 4.52).
        self.llava = self.model_type == "llava"
        if self.llava:
            self.model_type = root["text_config"]["model_type"]
        gen_path = os.path.join(model_dir, "generation_config.json")
        self.generation = {}
        if os.path.exists(gen_path):
            with open(gen_path) as f:
                self.generation = json.load(f)
        if self.model_type == "gemma3":
            cfg = dict(root["text_config"])
        elif self.model_type in ("llama", "qwen2", "qwen3", "gemma3_text"):
            cfg = dict(root["text_config"]) if self.llava else root
        else:
            raise NotImplementedError(f"reference: model_type {self.model_type!r}")
        self.cfg = cfg
        self.gemma = self.model_type in ("gemma3", "gemma3_text")
        self.w, self.dtypes = read_checkpoint(model_dir)
        self.bf16_matmul = self.bf16_kv = self.kv_int8 = False

        c = cfg
        self.hidden = c["hidden_size"]
        self.n_heads = c["num_attention_heads"]
        self.n_kv = c.get("num_key_value_heads") or self.n_heads
        # LlamaAttention: getattr(config, "head_dim", hidden // heads); Qwen2 has no head_dim field.
        self.head_dim = c.get("head_dim") or self.hidden // self.n_heads
        self.n_layers = c["num_hidden_layers"]
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.vocab = c["vocab_size"]

        # Tensor name prefix of the decoder: plain CausalLM checkpoints use "model."; Gemma3's
        # multimodal wrapper uses "model.language_model." (transformers >= 4.52) or
        # "language_model.model." (the layout of the released checkpoints).
        if self.model_type == "gemma3" or self.llava:
            if "model.language_model.embed_tokens.weight" in self.w:
                self.prefix, head = "model.language_model.", "lm_head.weight"
            else:
                self.prefix, head = "language_model.model.", "language_model.lm_head.weight"
        else:
            self.prefix, head = "model.", "lm_head.weight"
        # tie_word_embeddings defaults to True for Gemma3, False for Llama/Qwen.
        tie = c.get("tie_word_embeddings", root.get("tie_word_embeddings", self.gemma))
        self.embed = self.w[self.prefix + "embed_tokens.weight"]
        self.lm_head = self.embed if tie else self.w[head]

        # Attention and MLP options per family, as each modeling file constructs its Linear layers.
        mt = "gemma3_text" if self.gemma else self.model_type
        attention_bias = c.get("attention_bias", False)
        if mt == "qwen2":
            self.qkv_bias, self.o_bias = True, False   # Qwen2Attention: bias=True on q/k/v only
        else:
            self.qkv_bias = self.o_bias = attention_bias  # Llama, Qwen3, Gemma3: all four or none
        self.mlp_bias = mt == "llama" and c.get("mlp_bias", False)
        self.qk_norm = mt in ("qwen3", "gemma3_text")
        act = c.get("hidden_activation" if self.gemma else "hidden_act", "silu")
        if self.gemma and act is None:
            act = "gelu_pytorch_tanh"
        if act not in ("silu", "gelu_pytorch_tanh"):
            raise NotImplementedError(f"reference: activation {act!r}")
        self.act = act

        if self.gemma:
            self.scaling = float(c.get("query_pre_attn_scalar", 256)) ** -0.5
            self.final_softcap = c.get("final_logit_softcapping")
            # Gemma3Attention does not pass attn_logit_softcapping to the attention function.
            self.sliding_window = c.get("sliding_window")
            types = c.get("layer_types")
            if types is None:
                pattern = c.get("sliding_window_pattern", 6)
                types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(self.n_layers)]
            self.layer_types = types
            if "rope_parameters" in c:
                raise NotImplementedError("reference: Gemma3 rope_parameters format")
            self.inv_freq_global = rope_inv_freq(c.get("rope_theta", 1e6), self.head_dim, c.get("rope_scaling"))
            self.inv_freq_local = rope_inv_freq(c.get("rope_local_base_freq", 1e4), self.head_dim, None)
            # Gemma3TextScaledWordEmbedding: embed_scale (f32 tensor) .to(weight.dtype).
            scale = np.float32(self.hidden ** 0.5)
            if self.dtypes[self.prefix + "embed_tokens.weight"] == "BF16":
                scale = bf16_round(scale)
            elif self.dtypes[self.prefix + "embed_tokens.weight"] == "F16":
                scale = np.float32(np.float16(scale))
            self.embed_scale = np.float32(scale)
        else:
            self.scaling = self.head_dim ** -0.5
            self.final_softcap = None
            if c.get("use_sliding_window", False):
                raise NotImplementedError("reference: Qwen sliding-window layers")
            self.sliding_window = None
            self.layer_types = ["full_attention"] * self.n_layers
            self.inv_freq_global = rope_inv_freq(c.get("rope_theta", 10000.0), self.head_dim, c.get("rope_scaling"))
            self.inv_freq_local = None
            self.embed_scale = None

    # --- building blocks ---

    def p(self, layer, name):
        return self.w[f"{self.prefix}layers.{layer}.{name}"]

    def rms_norm(self, x, weight):
        # LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) in f32, then weight * x.
        # Gemma3RMSNorm: the same normalisation, then x * (1 + weight).
        x = x.astype(np.float32)
        var = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
        y = x / np.sqrt(var + np.float32(self.eps))
        if self.gemma:
            return (y * (np.float32(1.0) + weight)).astype(np.float32)
        return (weight * y).astype(np.float32)

    def linear(self, x, w, b=None):
        if self.bf16_matmul:
            x = bf16_round(x)  # a bf16 GEMM's activation operand; accumulation stays f32
        y = x @ w.T
        if b is not None:
            y = y + b
        return y.astype(np.float32)

    def act_fn(self, x):
        if self.act == "silu":
            return x / (np.float32(1.0) + np.exp(-x))
        # gelu_pytorch_tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        return (0.5 * x * (1.0 + np.tanh(np.float32(math.sqrt(2.0 / math.pi)) * (x + 0.044715 * x ** 3)))).astype(np.float32)

    @staticmethod
    def rotate_half(x):
        half = x.shape[-1] // 2
        return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)

    def repeat_kv(self, x):
        # repeat_kv: query head h uses kv head h // (heads / kv_heads).
        return np.repeat(x, self.n_heads // self.n_kv, axis=0)

    def rope(self, x, positions, inv_freq):
        # x: [heads, T, head_dim]; emb = cat(freqs, freqs); x*cos + rotate_half(x)*sin.
        freqs = positions.astype(np.float32)[:, None] * inv_freq[None, :]
        emb = np.concatenate([freqs, freqs], axis=-1)
        cos, sin = np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)
        return (x * cos[None] + self.rotate_half(x) * sin[None]).astype(np.float32)

    def attention(self, layer, x, positions):
        T = x.shape[0]
        bias = (lambda n: self.p(layer, f"self_attn.{n}_proj.bias")) if self.qkv_bias else (lambda n: None)
        q = self.linear(x, self.p(layer, "self_attn.q_proj.weight"), bias("q"))
        k = self.linear(x, self.p(layer, "self_attn.k_proj.weight"), bias("k"))
        v = self.linear(x, self.p(layer, "self_attn.v_proj.weight"), bias("v"))
        q = q.reshape(T, self.n_heads, self.head_dim).transpose(1, 0, 2)
        k = k.reshape(T, self.n_kv, self.head_dim).transpose(1, 0, 2)
        v = v.reshape(T, self.n_kv, self.head_dim).transpose(1, 0, 2)
        if self.qk_norm:
            # Qwen3/Gemma3: per-head RMSNorm over head_dim, before rotary.
            q = self.rms_norm(q, self.p(layer, "self_attn.q_norm.weight"))
            k = self.rms_norm(k, self.p(layer, "self_attn.k_norm.weight"))
        sliding = self.layer_types[layer] == "sliding_attention"
        inv_freq = self.inv_freq_local if (self.gemma and sliding) else self.inv_freq_global
        q = self.rope(q, positions, inv_freq)
        k = self.rope(k, positions, inv_freq)
        if self.bf16_kv:
            k, v = bf16_round(k), bf16_round(v)  # K/V as stored in a bf16 cache
            q = bf16_round(q)  # and Q as attention over it takes it (before the scale)
        if self.kv_int8:
            k, v = quantize_kv_int8(k), quantize_kv_int8(v)  # K/V as an int8 cache stores them
        k, v = self.repeat_kv(k), self.repeat_kv(v)
        scores = (q @ k.transpose(0, 2, 1)) * np.float32(self.scaling)
        # Causal mask; sliding layers also need q - kv < window (masking_utils.sliding_window_overlay).
        qp = positions[:, None]
        kp = positions[None, :]
        allowed = kp <= qp
        if sliding and self.sliding_window:
            allowed &= (qp - kp) < self.sliding_window
        scores = np.where(allowed[None], scores, -np.inf).astype(np.float32)
        scores = scores - scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs = probs / probs.sum(axis=-1, keepdims=True)
        out = (probs @ v).astype(np.float32)  # [heads, T, head_dim]
        out = out.transpose(1, 0, 2).reshape(T, self.n_heads * self.head_dim)
        o_bias = self.p(layer, "self_attn.o_proj.bias") if self.o_bias else None
        return self.linear(out, self.p(layer, "self_attn.o_proj.weight"), o_bias)

    def mlp(self, layer, x):
        b = (lambda n: self.p(layer, f"mlp.{n}_proj.bias")) if self.mlp_bias else (lambda n: None)
        gate = self.linear(x, self.p(layer, "mlp.gate_proj.weight"), b("gate"))
        up = self.linear(x, self.p(layer, "mlp.up_proj.weight"), b("up"))
        return self.linear(self.act_fn(gate) * up, self.p(layer, "mlp.down_proj.weight"), b("down"))

    def embeddings(self, tokens):
        h = self.embed[np.asarray(tokens, dtype=np.int64)].astype(np.float32)
        if self.embed_scale is not None:
            h = (h * self.embed_scale).astype(np.float32)
        return h

    def forward_embeddings(self, h):
        """Decoder on post-embedding-scale inputs [T, hidden] -> logits [T, vocab]."""
        positions = np.arange(h.shape[0], dtype=np.int64)
        for i in range(self.n_layers):
            if self.gemma:
                # Gemma3DecoderLayer: sandwich norms around attention and MLP.
                r = h
                a = self.attention(i, self.rms_norm(h, self.p(i, "input_layernorm.weight")), positions)
                h = r + self.rms_norm(a, self.p(i, "post_attention_layernorm.weight"))
                r = h
                m = self.mlp(i, self.rms_norm(h, self.p(i, "pre_feedforward_layernorm.weight")))
                h = r + self.rms_norm(m, self.p(i, "post_feedforward_layernorm.weight"))
            else:
                h = h + self.attention(i, self.rms_norm(h, self.p(i, "input_layernorm.weight")), positions)
                h = h + self.mlp(i, self.rms_norm(h, self.p(i, "post_attention_layernorm.weight")))
        h = self.rms_norm(h, self.w[self.prefix + "norm.weight"])
        out = self.linear(h, self.lm_head)
        if self.final_softcap:
            c = np.float32(self.final_softcap)
            out = (np.tanh(out / c) * c).astype(np.float32)
        return out

    def forward(self, tokens, bf16_matmul=False, bf16_kv=False, kv_int8=False):
        self.bf16_matmul, self.bf16_kv, self.kv_int8 = bf16_matmul, bf16_kv, kv_int8
        return self.forward_embeddings(self.embeddings(tokens))

    def eos_ids(self):
        eos = self.generation.get("eos_token_id", self.root.get("eos_token_id"))
        if eos is None:
            return set()
        return set(eos) if isinstance(eos, list) else {eos}


# --- vision towers and the LLaVA projector ------------------------------------------------------
# Written from transformers' models/clip/modeling_clip.py (CLIPVisionEmbeddings, CLIPAttention,
# CLIPMLP, CLIPEncoderLayer, CLIPVisionTransformer), models/siglip/modeling_siglip.py (the Siglip
# counterparts) and models/llava/modeling_llava.py (get_image_features, LlavaMultiModalProjector).

def layer_norm(x, w, b, eps):
    """nn.LayerNorm over the last axis in f32 (biased variance)."""
    x = x.astype(np.float32)
    mean = np.mean(x, axis=-1, keepdims=True, dtype=np.float32)
    xc = x - mean
    var = np.mean(xc * xc, axis=-1, keepdims=True, dtype=np.float32)
    return (xc / np.sqrt(var + np.float32(eps)) * w + b).astype(np.float32)


_ERF = np.vectorize(math.erf, otypes=[np.float64])


def _cpu_has_avx512_bf16():
    try:
        with open("/proc/cpuinfo") as f:
            return " avx512_bf16" in f.read()
    except OSError:
        return False


CPU_AVX512_BF16 = _cpu_has_avx512_bf16()


def tower_attention(q, k, v, scale, bf16=False):
    """Bidirectional softmax(q k^T * scale) v for q, k, v [H, T, dh] -> [T, H * dh] f32.

    bf16 models the engine's dtype policy for a bf16 tower: q, k and v are bf16 (as upstream's bf16
    tower holds them). Where hlx's kernel takes bf16 dot products (a bf16 Q at head_dim % 8 == 0 on a
    CPU with AVX512-BF16, runtime/kernels/attention.cc) it also rounds the softmax weights to bf16 for P.V
    after subtracting the row max, normalising by the sum of the rounded weights: modelled here
    exactly for rows that see at most 128 keys (one key block), to within f32 rounding beyond."""
    if bf16:
        q, k, v = bf16_round(q), bf16_round(k), bf16_round(v)
    s = (q @ k.transpose(0, 2, 1)) * np.float32(scale)
    p = np.exp(s - s.max(axis=-1, keepdims=True)).astype(np.float32)
    if bf16 and q.shape[-1] % 8 == 0 and CPU_AVX512_BF16:
        p = bf16_round(p)
    a = (p @ v) / p.sum(axis=-1, keepdims=True)  # [H, T, dh]
    return a.transpose(1, 0, 2).reshape(q.shape[1], -1).astype(np.float32)


def act(name, x):
    """transformers ACT2FN for the activations the vision path uses."""
    x = x.astype(np.float32)
    if name == "quick_gelu":  # QuickGELUActivation
        return (x / (1.0 + np.exp(-1.702 * x))).astype(np.float32)
    if name == "gelu":  # GELUActivation: exact, erf-based
        return (0.5 * x.astype(np.float64) * (1.0 + _ERF(x.astype(np.float64) / math.sqrt(2.0)))).astype(np.float32)
    if name in ("gelu_pytorch_tanh", "gelu_new"):
        return (0.5 * x * (1.0 + np.tanh(np.float32(math.sqrt(2.0 / math.pi)) * (x + 0.044715 * x ** 3)))).astype(np.float32)
    raise NotImplementedError(f"reference: activation {name!r}")


class VisionTower:
    """LlavaModel.get_image_features for one image: pixels [1, 3, H, W] f32 -> [T, text_hidden]."""

    def __init__(self, model_dir, bf16_matmul=False):
        with open(os.path.join(model_dir, "config.json")) as f:
            root = json.load(f)
        assert root["model_type"] == "llava", root["model_type"]
        self.w, _ = read_checkpoint(model_dir)
        vc = dict(root.get("vision_config") or {})
        self.kind = vc.get("model_type", "clip_vision_model")
        clip = self.kind == "clip_vision_model"
        # CLIPVisionConfig / SiglipVisionConfig defaults.
        self.hidden = vc.get("hidden_size", 768)
        self.heads = vc.get("num_attention_heads", 12)
        self.layers = vc.get("num_hidden_layers", 12)
        self.patch = vc.get("patch_size", 32 if clip else 16)
        self.image = vc.get("image_size", 224)
        self.eps = vc.get("layer_norm_eps", 1e-5 if clip else 1e-6)
        self.hidden_act = vc.get("hidden_act", "quick_gelu" if clip else "gelu_pytorch_tanh")
        self.feature_layer = root.get("vision_feature_layer", -2)
        self.strategy = root.get("vision_feature_select_strategy", "default")
        self.projector_act = root.get("projector_hidden_act", "gelu")
        self.projector_bias = root.get("multimodal_projector_bias", True)
        new = any(k.startswith("model.vision_tower.") for k in self.w)
        self.vp = "model.vision_tower.vision_model." if new else "vision_tower.vision_model."
        self.pp = "model.multi_modal_projector." if new else "multi_modal_projector."
        self.clip = clip
        self.bf16_matmul = bf16_matmul

    def linear(self, x, w, b=None):
        if self.bf16_matmul:
            x = bf16_round(x)
        y = x.astype(np.float32) @ w.T
        if b is not None:
            y = y + b
        return y.astype(np.float32)

    def v(self, name):
        return self.w[self.vp + name]

    def embeddings(self, pixels):
        # nn.Conv2d(3, D, kernel=P, stride=P) written as a sum over kernel offsets, then
        # flatten(2).transpose(1, 2): rows in (gy, gx) order.
        P = self.patch
        x = pixels[0].astype(np.float32)
        if self.bf16_matmul:
            x = bf16_round(x)
        W = self.v("embeddings.patch_embedding.weight")  # [D, C, P, P]
        g = x.shape[1] // P
        out = np.zeros((W.shape[0], g, g), dtype=np.float64)
        for i in range(P):
            for j in range(P):
                out += np.einsum("dc,cyx->dyx", W[:, :, i, j].astype(np.float64),
                                 x[:, i::P, j::P][:, :g, :g].astype(np.float64))
        patches = out.reshape(W.shape[0], g * g).T.astype(np.float32)
        if not self.clip:
            patches = patches + self.v("embeddings.patch_embedding.bias")
        if self.clip:
            patches = np.concatenate([self.v("embeddings.class_embedding")[None, :], patches], axis=0)
        return (patches + self.v("embeddings.position_embedding.weight")).astype(np.float32)

    def layer(self, i, x):
        p = lambda n: self.v(f"encoder.layers.{i}.{n}")
        T, D, H = x.shape[0], self.hidden, self.heads
        dh = D // H
        h = layer_norm(x, p("layer_norm1.weight"), p("layer_norm1.bias"), self.eps)
        q, k, v = (self.linear(h, p(f"self_attn.{n}_proj.weight"), p(f"self_attn.{n}_proj.bias")).reshape(T, H, dh).transpose(1, 0, 2)
                   for n in ("q", "k", "v"))
        a = tower_attention(q, k, v, dh ** -0.5, self.bf16_matmul)
        x = x + self.linear(a, p("self_attn.out_proj.weight"), p("self_attn.out_proj.bias"))
        h = layer_norm(x, p("layer_norm2.weight"), p("layer_norm2.bias"), self.eps)
        h = act(self.hidden_act, self.linear(h, p("mlp.fc1.weight"), p("mlp.fc1.bias")))
        return (x + self.linear(h, p("mlp.fc2.weight"), p("mlp.fc2.bias"))).astype(np.float32)

    def hidden_states(self, pixels):
        x = self.embeddings(pixels)
        if self.clip:
            x = layer_norm(x, self.v("pre_layrnorm.weight"), self.v("pre_layrnorm.bias"), self.eps)
        states = [x]  # encoder input first, then every layer's output (post_layernorm not applied)
        for i in range(self.layers):
            x = self.layer(i, x)
            states.append(x)
        return states

    def features(self, pixels):
        sel = self.hidden_states(pixels)[self.feature_layer]
        if self.strategy == "default":
            sel = sel[1:]
        b = (lambda n: self.w[self.pp + n]) if self.projector_bias else (lambda n: None)
        h = self.linear(sel, self.w[self.pp + "linear_1.weight"], b("linear_1.bias"))
        h = act(self.projector_act, h)
        return self.linear(h, self.w[self.pp + "linear_2.weight"], b("linear_2.bias"))


def image_features(model_dir, pixels, bf16_matmul=False):
    """Projected image features [T, text_hidden] f32 of a llava checkpoint for pixels [1, 3, H, W]."""
    return VisionTower(model_dir, bf16_matmul).features(np.asarray(pixels, dtype=np.float32))


_CACHE = {}


def load(model_dir):
    key = os.path.realpath(model_dir)
    if key not in _CACHE:
        _CACHE[key] = Model(model_dir)
    return _CACHE[key]


def logits(model_dir, tokens, bf16_matmul=False, bf16_kv=False, kv_int8=False):
    """Logits of every row, [T, vocab] f32. bf16_matmul rounds the activation operand of every
    weight matmul to bf16 (what a bf16 GEMM with f32 accumulation computes); bf16_kv rounds K and V
    as a bf16 KV cache stores them, and Q as attention over that cache takes it. Both off: f32
    activations throughout."""
    return load(model_dir).forward(list(tokens), bf16_matmul, bf16_kv, kv_int8)


def greedy_model(model, tokens, n, stop_at_eos=False, bf16_matmul=False, bf16_kv=False, kv_int8=False):
    """Greedy decoding of a loaded model (or a subclass that quantizes its matmuls) by full
    recomputation: (ids, last-row logits of every step). stop_at_eos stops after emitting an id of
    generation_config's eos."""
    seq = list(tokens)
    out, steps = [], []
    eos = model.eos_ids()
    for _ in range(n):
        row = model.forward(seq, bf16_matmul, bf16_kv, kv_int8)[-1]
        t = int(np.argmax(row))
        out.append(t)
        steps.append(row)
        seq.append(t)
        if stop_at_eos and t in eos:
            break
    return out, steps


def greedy(model_dir, tokens, n, stop_at_eos=False, return_logits=False, bf16_matmul=False, bf16_kv=False,
           kv_int8=False):
    """greedy_model on the checkpoint in model_dir; with return_logits also every step's logits
    (for tie analysis)."""
    out, steps = greedy_model(load(model_dir), tokens, n, stop_at_eos, bf16_matmul, bf16_kv, kv_int8)
    return (out, steps) if return_logits else out


def top2_gap(row):
    """Distance between the two largest logits of a row: how near a greedy choice is to a tie."""
    s = np.sort(row)
    return float(s[-1] - s[-2])

if __name__ == "__main__":
    import sys
    d = sys.argv[1]
    toks = [int(t) for t in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1, 2, 3, 4]
    lg = logits(d, toks)
    print("logits", lg.shape, "absmax", float(np.abs(lg).max()), "std", float(lg.std()))
    g, st = greedy(d, toks, 32, return_logits=True)
    gaps = [float(np.sort(r)[-1] - np.sort(r)[-2]) for r in st]
    print("greedy", g)
    print("min top-2 gap", min(gaps))
