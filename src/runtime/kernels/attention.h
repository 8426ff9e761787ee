// Native kernel of the `hlx.attention` composite (semantics: docs/COMPOSITES.md).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace hlx::kernels {

struct AttentionDesc {
  int64_t batch = 1, q_len = 1, q_heads = 1, kv_heads = 1, head_dim = 0;
  int64_t num_slots = 1, capacity = 0;
  DType q_type = DType::kF32, kv_type = DType::kBF16;
  float scale = 1.f;
  bool causal = true;
  int64_t sliding_window = 0;  // 0 = none
  float logit_softcap = 0.f;   // 0 = none
  bool has_bias = false;
  // kv_type i8 (docs/COMPOSITES.md "int8 KV"): f32 [N,S,Hkv] scales, one per cache row and kv head;
  // element = code * scale. Set per call by the caller; null for f32/bf16 caches.
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
};

// Which kernel attention() runs for these shapes on this CPU (attention.cc says why).
enum class AttentionPath { kPrefill, kDecode, kGeneric, kBaseline };
AttentionPath attention_path(const AttentionDesc& desc);

// q [B,T,Hq,Dh] (q_type), caches [N,S,Hkv,Dh] (kv_type; i8 with desc.k_scale/v_scale), slot [B], q_pos [B,T], kv_len
// [B] (i32), bias [B,T,S] f32 or null, out [B,T,Hq,Dh] f32. Out-of-range slot/kv_len: kOutOfRange, nothing written.
Status attention(const AttentionDesc& desc, const void* q, const void* k_cache, const void* v_cache,
                 const int32_t* slot, const int32_t* q_pos, const int32_t* kv_len, const float* bias, float* out);

}  // namespace hlx::kernels
