// Shared building blocks of the text-decoder graphs (llama.cc, gemma3.cc): the per-entry context
// (weights by checkpoint name, positions, slot-cache addressing) and the pieces every family uses
// (linear layers on stored-dtype weights, norms, self-attention over the slot caches, gated MLPs).
// Activations are f32 throughout; weights stay in their stored dtype.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "models/text_entries.h"
#include "stablehlo/builder.h"
#include "stablehlo/composites.h"

namespace hlx::models {

// Everything a layer needs to know about the entry being emitted. Row layout: T token rows
// ([T, hidden] activations); attention sees them as B requests of Tq tokens each (prefill: B = 1,
// Tq = T; decode: B = T rows of one token).
struct DecoderContext {
  shlo::FunctionBuilder& f;
  const TextModelSpec& spec;
  const EngineShape& shape;

  std::map<std::string, shlo::Value> weights;  // by checkpoint name
  int64_t rows = 0;                            // T
  int64_t batch = 1, q_len = 0;                // B, Tq with B * Tq = T
  shlo::Value positions;                       // [T] i32, rotary positions of every row
  shlo::Value cache_index;                     // [T, 2] i32 (slot, position) written per row; out of range = dropped
  shlo::Value attn_slot;                       // [B] i32
  shlo::Value attn_q_pos;                      // [B, Tq] i32
  shlo::Value attn_kv_len;                     // [B] i32
  shlo::Value attn_bias;  // [B, Tq, S] f32 additive (masked entries; then no causal rule), or invalid
  shlo::Value inv_freq_global, inv_freq_local;  // [Dh/2] f32 constants
  // M-RoPE entries: positions [3, T] i32 and per axis the inverse frequencies of that axis (zero
  // elsewhere). Rotary then runs once per axis; a zero angle is an exact identity (cos 0 = 1,
  // sin 0 = 0), so with equal axes the result is bit-identical to one 1D rotary.
  shlo::Value mrope_positions;
  std::vector<shlo::Value> inv_freq_mrope;
  shlo::Value rotary_positions;     // decode_mrope: [T] i32 rotary positions (cache rows stay `positions`)
  std::vector<shlo::Value> caches;  // text_cache_names() per layer (replaced by the updated caches)
  Status status;                    // first missing weight

  DecoderContext(shlo::FunctionBuilder& fb, const TextModelSpec& s, const EngineShape& sh)
      : f(fb), spec(s), shape(sh) {}

  // The argument bound to checkpoint tensor `name` (prefix added by the caller); records an
  // error naming it when the layout has no such tensor.
  shlo::Value weight(const std::string& name);
  // "<weight_prefix>layers.<layer>.<suffix>"
  shlo::Value layer_weight(int64_t layer, const std::string& suffix);
};

// x [M, K] (f32, or already matmul_input) times a Hugging Face Linear weight [N, K] (stored
// dtype) -> [M, N] f32, plus an optional bias [N]. A 16-bit weight meets the activation rounded to its dtype: the
// runtime's matmul computes 16-bit products anyway, and [M,K]·[N,K]ᵀ with equal 16-bit operands is its packed fast
// path.
shlo::Value linear(DecoderContext& c, const shlo::Value& x, const shlo::Value& w, const shlo::Value* bias = nullptr);

// x converted to the weight dtype when that is 16-bit (shared by several linears on the same input).
shlo::Value matmul_input(DecoderContext& c, const shlo::Value& x);

// hlx.rms_norm with the spec's epsilon and weight offset (x of any rank, normalised on its last axis).
shlo::Value norm(DecoderContext& c, const shlo::Value& x, const shlo::Value& w);

// Self-attention of one layer on normalised rows h [T, hidden] f32: q/k/v projections (+biases),
// per-head q/k norms when the spec has them, rotary (local or global frequencies), K/V written
// into the layer's slot caches with scatter, attention over the caches, o_proj. Returns [T, hidden].
shlo::Value self_attention(DecoderContext& c, int64_t layer, const shlo::Value& h, bool sliding);

// down(act(gate(h)) * up(h)) with the spec's activation. h [T, hidden] -> [T, hidden].
shlo::Value gated_mlp(DecoderContext& c, int64_t layer, const shlo::Value& h);

// One decoder layer of a family (its TextFamily::layer): x [T, hidden] f32 residual stream in,
// the same out.
shlo::Value llama_layer(DecoderContext& c, int64_t layer, const shlo::Value& x);   // llama.cc
shlo::Value gemma3_layer(DecoderContext& c, int64_t layer, const shlo::Value& x);  // gemma3.cc

}  // namespace hlx::models
