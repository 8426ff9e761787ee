// Emitters for hlx's composites (contracts in docs/COMPOSITES.md). Each call emits one
// `stablehlo.composite` op and, the first time a given signature + attribute set is used, its
// decomposition function in plain StableHLO, so compilers that do not know the composite still
// compute the same result. The runtime swaps known composites for native kernels.
#pragma once

#include <optional>
#include <utility>

#include "stablehlo/builder.h"

namespace hlx::shlo {

// y = x * rsqrt(mean(x², last axis) + epsilon) * (weight + weight_offset), in f32; type of x.
Value rms_norm(FunctionBuilder& f, const Value& x, const Value& weight, float epsilon, float weight_offset = 0.f);

// y = (x - mean) * rsqrt(var + epsilon) * weight + bias over the last axis, in f32; type of x.
Value layer_norm(FunctionBuilder& f, const Value& x, const Value& weight, const Value& bias, float epsilon);

// Rotate-half rotary embedding of x [T, H, Dh] at positions [T] (i32) with inv_freq [R/2] (f32).
Value rotary(FunctionBuilder& f, const Value& x, const Value& positions, const Value& inv_freq);

struct AttentionOptions {
  float scale = 1.f;
  bool causal = true;
  int64_t sliding_window = 0;  // 0 = none
  float logit_softcap = 0.f;   // 0 = none
};

// Grouped-query attention over slot caches: q [B,T,Hq,Dh], caches [N,S,Hkv,Dh], slot [B],
// q_pos [B,T], kv_len [B] (i32), optional additive bias [B,T,S] (f32). Result [B,T,Hq,Dh] f32.
// i8 caches (int8 KV) need `scales` = {k_scale, v_scale}, f32 [N,S,Hkv]: element = code * scale;
// they are the last two operands.
Value attention(FunctionBuilder& f, const Value& q, const Value& k_cache, const Value& v_cache, const Value& slot,
                const Value& q_pos, const Value& kv_len, const std::optional<Value>& bias,
                const AttentionOptions& options, const std::optional<std::pair<Value, Value>>& scales = std::nullopt);

}  // namespace hlx::shlo
