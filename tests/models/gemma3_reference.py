"""Independent numpy reference for Gemma3 vision-language models (Gemma3ForConditionalGeneration).

Written from Hugging Face transformers' models/gemma3/modeling_gemma3.py (Gemma3Model.forward,
get_image_features, Gemma3MultiModalProjector, token_type_ids_mask_function,
create_causal_mask_mapping), models/siglip/modeling_siglip.py (SiglipVisionEmbeddings,
SiglipAttention, SiglipMLP, SiglipEncoderLayer, SiglipVisionTransformer with post_layernorm) and
masking_utils.py (causal / sliding-window masks composed with an `or` mask), not from hlx's
emitter. The text decoder's building blocks (norms, projections, rotary, MLP) come from
reference.Model; the attention here takes an explicit visibility matrix per layer.

Numerics: f32 activations; bf16 checkpoints widen exactly. With bf16=True, every weight matmul's
activation operand is rounded to bf16 (a bf16 GEMM with f32 accumulation), K/V are rounded as a
bf16 cache stores them and Q as attention over it takes it (bf16_kv), and the tower's attention rounds as reference.tower_attention
says - the engine's dtype policy, not model math.

Ablations (keyword flags, each a plausible implementation mistake) let tests show that their
tolerances see every feature: see Gemma3Vlm.features() and Gemma3Vlm.visibility().
"""
import json
import math
import os

import numpy as np

import reference
from reference import act, bf16_round, layer_norm, read_checkpoint, tower_attention

NEG = np.float32(-3.4028234663852886e38)  # torch.finfo(torch.float32).min: a blocked mask cell


class SiglipTower:
    """SiglipVisionTransformer(pixel_values).last_hidden_state for one image [1, 3, H, W]."""

    def __init__(self, weights, prefix, vc, bf16=False):
        self.w, self.p, self.bf16 = weights, prefix, bf16
        # SiglipVisionConfig defaults.
        self.hidden = vc.get("hidden_size", 768)
        self.heads = vc.get("num_attention_heads", 12)
        self.layers = vc.get("num_hidden_layers", 12)
        self.patch = vc.get("patch_size", 16)
        self.image = vc.get("image_size", 224)
        self.eps = vc.get("layer_norm_eps", 1e-6)
        self.act = vc.get("hidden_act", "gelu_pytorch_tanh")

    def v(self, name):
        return self.w[self.p + name]

    def linear(self, x, w, b=None):
        if self.bf16:
            x = bf16_round(x)
        y = x.astype(np.float32) @ w.T
        return (y + b if b is not None else y).astype(np.float32)

    def embeddings(self, pixels):
        # Conv2d(3, D, P, stride P, padding "valid") as a sum over kernel offsets, then
        # flatten(2).transpose(1, 2), + position_embedding(arange(num_patches)).
        P = self.patch
        x = pixels[0].astype(np.float32)
        if self.bf16:
            x = bf16_round(x)
        W = self.v("embeddings.patch_embedding.weight")
        g = x.shape[1] // P
        out = np.zeros((W.shape[0], g, g), dtype=np.float64)
        for i in range(P):
            for j in range(P):
                out += np.einsum("dc,cyx->dyx", W[:, :, i, j].astype(np.float64),
                                 x[:, i::P, j::P][:, :g, :g].astype(np.float64))
        patches = out.reshape(W.shape[0], g * g).T.astype(np.float32) + self.v("embeddings.patch_embedding.bias")
        return (patches + self.v("embeddings.position_embedding.weight")).astype(np.float32)

    def layer(self, i, x):
        p = lambda n: self.v(f"encoder.layers.{i}.{n}")
        T, D, H = x.shape[0], self.hidden, self.heads
        dh = D // H
        h = layer_norm(x, p("layer_norm1.weight"), p("layer_norm1.bias"), self.eps)
        q, k, v = (self.linear(h, p(f"self_attn.{n}_proj.weight"), p(f"self_attn.{n}_proj.bias"))
                   .reshape(T, H, dh).transpose(1, 0, 2) for n in ("q", "k", "v"))
        a = tower_attention(q, k, v, dh ** -0.5, self.bf16)  # no mask
        x = x + self.linear(a, p("self_attn.out_proj.weight"), p("self_attn.out_proj.bias"))
        h = layer_norm(x, p("layer_norm2.weight"), p("layer_norm2.bias"), self.eps)
        h = act(self.act, self.linear(h, p("mlp.fc1.weight"), p("mlp.fc1.bias")))
        return (x + self.linear(h, p("mlp.fc2.weight"), p("mlp.fc2.bias"))).astype(np.float32)

    def last_hidden_state(self, pixels):
        x = self.embeddings(pixels)
        for i in range(self.layers):
            x = self.layer(i, x)
        return layer_norm(x, self.v("post_layernorm.weight"), self.v("post_layernorm.bias"), self.eps)


class Gemma3Vlm:
    def __init__(self, model_dir, bf16=False):
        with open(os.path.join(model_dir, "config.json")) as f:
            root = json.load(f)
        assert root["model_type"] == "gemma3", root["model_type"]
        self.root = root
        self.text = reference.Model(model_dir)  # reads language_model.model.* or model.language_model.*
        self.text.bf16_matmul = self.text.bf16_kv = bf16
        self.bf16 = bf16
        w = self.text.w
        new = any(k.startswith("model.vision_tower.") for k in w)
        self.pp = "model.multi_modal_projector." if new else "multi_modal_projector."
        vc = dict(root.get("vision_config") or {})
        self.tower = SiglipTower(w, "model.vision_tower.vision_model." if new else "vision_tower.vision_model.", vc, bf16)
        # Gemma3Config defaults.
        self.mm_tokens = root.get("mm_tokens_per_image", 256)
        self.boi = root.get("boi_token_index", 255999)
        self.eoi = root.get("eoi_token_index", 256000)
        self.image_token = root.get("image_token_index", 262144)
        self.vision_eps = self.tower.eps

    # --- image features ---------------------------------------------------------------------

    def features(self, pixels, stage="features", skip_pooling=False, norm_without_one=False):
        """get_image_features for one image -> [mm_tokens, text_hidden] (or the 'tower' rows
        [N, vision_hidden], or the 'pooled' rows [mm_tokens, vision_hidden]).
        Ablations: skip_pooling takes the top-left patch of each window instead of the average;
        norm_without_one multiplies by w instead of (1 + w)."""
        x = self.tower.last_hidden_state(np.asarray(pixels, dtype=np.float32))  # [N, D]
        if stage == "tower":
            return x
        n, d = x.shape
        g = self.tower.image // self.tower.patch             # patches_per_image
        side = int(self.mm_tokens ** 0.5)                     # tokens_per_side
        k = g // side                                         # kernel_size
        # transpose(1, 2).reshape(b, D, g, g) -> AvgPool2d(k, stride=k) -> flatten(2).transpose(1, 2)
        grid = x.T.reshape(d, g, g)
        if skip_pooling:
            pooled = grid[:, ::k, ::k]
        else:
            pooled = grid.reshape(d, side, k, side, k).astype(np.float64).mean(axis=(2, 4)).astype(np.float32)
        pooled = pooled.reshape(d, side * side).T.astype(np.float32)
        if stage == "pooled":
            return pooled
        # Gemma3RMSNorm(vision_hidden, eps=vision_config.layer_norm_eps): x * rsqrt(mean x^2 + eps) * (1 + w)
        wn = self.text.w[self.pp + "mm_soft_emb_norm.weight"]
        y = pooled / np.sqrt(np.mean(pooled * pooled, axis=-1, keepdims=True, dtype=np.float32) + np.float32(self.vision_eps))
        y = (y * (wn if norm_without_one else (np.float32(1.0) + wn))).astype(np.float32)
        if self.bf16:
            y = bf16_round(y)
        return (y @ self.text.w[self.pp + "mm_input_projection_weight"]).astype(np.float32)  # x . W, W [D, H]

    # --- prompt ------------------------------------------------------------------------------

    def image_block(self):
        """The ids one image occupies in the expanded prompt (without the surrounding newlines,
        which are text): boi, mm_tokens x image token, eoi."""
        return [self.boi] + [self.image_token] * self.mm_tokens + [self.eoi]

    def embeddings(self, ids, feats, double_text_scale=False, scale_image_rows=False):
        """inputs_embeds after the merge: ids >= vocab are looked up as 0, text rows scaled by
        embed_scale (Gemma3TextScaledWordEmbedding), image-token rows replaced in order by the
        features (masked_scatter). Ablations: double_text_scale, scale_image_rows."""
        ids = list(ids)
        vocab = self.text.vocab
        looked = [0 if (t == self.image_token and t >= vocab) else t for t in ids]
        h = self.text.embeddings(looked)
        if double_text_scale:
            h = (h * self.text.embed_scale).astype(np.float32)
        rows = [i for i, t in enumerate(ids) if t == self.image_token]
        allf = np.concatenate(feats, axis=0) if feats else np.zeros((0, h.shape[1]), np.float32)
        assert len(rows) == allf.shape[0], (len(rows), allf.shape)
        if scale_image_rows:
            allf = (allf * self.text.embed_scale).astype(np.float32)
        h[rows] = allf
        return h

    def token_type_ids(self, ids):
        return np.array([1 if t == self.image_token else 0 for t in ids], dtype=np.int64)

    def visibility(self, ids, layer, causal_only=False, bidirectional=False):
        """[T, T] bool: may row q see row kv in `layer` (upstream semantics)? causal, or both rows
        image tokens of the same image group; sliding layers: (causal and q - kv < window) or the
        image rule (masking_utils: or_masks(sliding_window_causal, token_type_ids_mask)).
        Ablations: causal_only (the image rule dropped), bidirectional (every pair visible)."""
        T = len(ids)
        q = np.arange(T)[:, None]
        kv = np.arange(T)[None, :]
        causal = kv <= q
        if self.text.layer_types[layer] == "sliding_attention" and self.text.sliding_window:
            causal = causal & ((q - kv) < self.text.sliding_window)
        if causal_only:
            return causal
        if bidirectional:
            return np.ones((T, T), dtype=bool)
        tti = self.token_type_ids(ids)
        is_image = tti == 1
        prev = np.concatenate([[False], is_image[:-1]])
        group = np.cumsum(is_image & ~prev) - 1
        group = np.where(is_image, group, -1)
        block = is_image[:, None] & is_image[None, :] & (group[:, None] == group[None, :])
        return causal | block

    def mask(self, ids, rows, layer_kind="full", **ablation):
        """The additive mask hlx's prefill_embeddings_masked takes for this prompt in `rows` rows
        (right padding blocked): [1, 1, rows, rows] f32, 0 allowed, finfo.min blocked. The rule of
        a full-attention layer (the entry applies each sliding layer's window itself)."""
        layer = self.text.layer_types.index("full_attention") if layer_kind == "full" else 0
        vis = self.visibility(ids, layer, **ablation)
        m = np.full((rows, rows), NEG, dtype=np.float32)
        m[:len(ids), :len(ids)] = np.where(vis, np.float32(0), NEG)
        return m[None, None]

    # --- decoder -----------------------------------------------------------------------------

    def attention(self, layer, x, positions, visible, multiplicative=False):
        t = self.text
        T = x.shape[0]
        q = t.linear(x, t.p(layer, "self_attn.q_proj.weight"))
        k = t.linear(x, t.p(layer, "self_attn.k_proj.weight"))
        v = t.linear(x, t.p(layer, "self_attn.v_proj.weight"))
        q = q.reshape(T, t.n_heads, t.head_dim).transpose(1, 0, 2)
        k = k.reshape(T, t.n_kv, t.head_dim).transpose(1, 0, 2)
        v = v.reshape(T, t.n_kv, t.head_dim).transpose(1, 0, 2)
        q = t.rms_norm(q, t.p(layer, "self_attn.q_norm.weight"))
        k = t.rms_norm(k, t.p(layer, "self_attn.k_norm.weight"))
        sliding = t.layer_types[layer] == "sliding_attention"
        inv = t.inv_freq_local if sliding else t.inv_freq_global
        q, k = t.rope(q, positions, inv), t.rope(k, positions, inv)
        if t.bf16_kv:
            q, k, v = bf16_round(q), bf16_round(k), bf16_round(v)  # bf16 cache: bf16 Q too, before the scale
        k, v = t.repeat_kv(k), t.repeat_kv(v)
        s = (q @ k.transpose(0, 2, 1)) * np.float32(t.scaling)
        if multiplicative:  # ablation: a 0/1 mask multiplied into the scores
            s = (s * visible[None].astype(np.float32)).astype(np.float32)
        else:  # additive finfo.min: exp underflows to exactly 0
            s = np.where(visible[None], s, -np.inf).astype(np.float32)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        out = ((s / s.sum(axis=-1, keepdims=True)) @ v).astype(np.float32)
        out = out.transpose(1, 0, 2).reshape(T, t.n_heads * t.head_dim)
        return t.linear(out, t.p(layer, "self_attn.o_proj.weight"))

    def forward(self, ids, h, multiplicative=False, last_only=False, **ablation):
        """Logits [T, vocab] of every row for the merged embeddings h of `ids` (last_only: [1, vocab]
        of the last row, the same numbers; the lm_head over every row dominates greedy loops)."""
        t = self.text
        positions = np.arange(h.shape[0], dtype=np.int64)
        for i in range(t.n_layers):
            vis = self.visibility(ids, i, **ablation)
            r = h
            a = self.attention(i, t.rms_norm(h, t.p(i, "input_layernorm.weight")), positions, vis, multiplicative)
            h = r + t.rms_norm(a, t.p(i, "post_attention_layernorm.weight"))
            r = h
            m = t.mlp(i, t.rms_norm(h, t.p(i, "pre_feedforward_layernorm.weight")))
            h = r + t.rms_norm(m, t.p(i, "post_feedforward_layernorm.weight"))
        if last_only:
            h = h[-1:]
        h = t.rms_norm(h, t.w[t.prefix + "norm.weight"])
        out = t.linear(h, t.lm_head)
        if t.final_softcap:
            c = np.float32(t.final_softcap)
            out = (np.tanh(out / c) * c).astype(np.float32)
        return out

    def greedy(self, ids, feats, n):
        """n greedy tokens by full recomputation (generated rows are text: token type 0)."""
        seq = list(ids)
        h = self.embeddings(seq, feats)
        out, steps = [], []
        for _ in range(n):
            row = self.forward(seq, h)[-1]
            tok = int(np.argmax(row))
            out.append(tok)
            steps.append(row)
            seq.append(tok)
            h = np.concatenate([h, self.text.embeddings([tok])], axis=0)
        return out, steps
