// hlx.attention: argument validation (everything is checked before any output is written), then
// the shared body in attention_impl.h built for the baseline ISA here and for AVX-512 in
// attention_avx512.cc.
#define HLX_ATTENTION_NS hlx::kernels::attention_baseline
#include "runtime/kernels/attention_impl.h"

#include "runtime/kernels/cpu.h"

namespace hlx::kernels {

namespace attention_prefill {  // attention_prefill_avx512.cc: q_len > 1, query rows in zmm lanes
void run(const AttentionDesc& d, const void* q, const void* k_cache, const void* v_cache, const int32_t* slot,
         const int32_t* q_pos, const int32_t* kv_len, const float* bias, float* out);
}

namespace attention_decode {  // attention_decode_avx512.cc: q_len 1 over a bf16 cache, f32 FMAs
void run(const AttentionDesc& d, const void* q, const void* k_cache, const void* v_cache, const int32_t* slot,
         const int32_t* q_pos, const int32_t* kv_len, const float* bias, float* out);
}

namespace attention_avx512 {
void run(const AttentionDesc& d, const void* q, const void* k_cache, const void* v_cache, const int32_t* slot,
         const int32_t* q_pos, const int32_t* kv_len, const float* bias, float* out);
}

// More than one query token (prefill, vision): the query-rows-in-lanes kernel of
// attention_prefill_avx512.cc (head_dim % 8 == 0, so SigLIP's 72 too, but see bf16_dims); over a
// bf16 cache Q.K^T and P.V are bf16 dot products (one per pair for the bf16 Q the emitters give
// it, hi + lo for an f32 Q; P rounded to bf16, f32 softmax), over an f32 cache f32 FMAs. Decode (q_len 1) over a bf16
// cache: attention_decode_avx512.cc, f32 arithmetic with each K/V row loaded and widened once per pair of query heads
// (over an i8 cache integer products, so only with AVX512-VNNI); other shapes keep attention_impl.h (one horizontal sum
// per score: at the gemma-3 tower's 4096 x 4096 per head several times slower than the prefill kernel). The choice
// depends only on the entry's shapes, never on the batch or the data.
AttentionPath attention_path(const AttentionDesc& d) {
  const CpuFeatures& c = cpu_features();
  if (d.q_len == 1 && (d.kv_type == DType::kBF16 || (d.kv_type == DType::kI8 && c.avx512vnni)) &&
      d.head_dim % 16 == 0 && c.avx512bw && c.avx512vl)
    return AttentionPath::kDecode;
  // An i8 cache at q_len > 1: integer products with AVX512-VNNI (head_dim % 16 == 0), else the f32
  // path, each key block dequantized to f32 before its packing (attention_prefill_avx512.cc).
  if (d.q_len > 1 && d.head_dim % 8 == 0 && d.kv_type == DType::kI8 && c.avx512f) return AttentionPath::kPrefill;
  // bf16 at head_dim % 16 == 8 only for a bf16 Q (every emitted attention over a bf16 cache: the
  // towers, and the text entries since Q is rounded for a bf16 cache); an f32 Q there keeps the
  // generic kernel's f32 products.
  const bool bf16_dims = d.head_dim % 16 == 0 || (d.head_dim % 8 == 0 && d.q_type == DType::kBF16);
  if (d.q_len > 1 && d.head_dim % 8 == 0 &&
      ((d.kv_type == DType::kBF16 && bf16_dims && c.avx512bf16) || (d.kv_type == DType::kF32 && c.avx512f)))
    return AttentionPath::kPrefill;
  return c.avx512f ? AttentionPath::kGeneric : AttentionPath::kBaseline;
}

Status attention(const AttentionDesc& d, const void* q, const void* k_cache, const void* v_cache, const int32_t* slot,
                 const int32_t* q_pos, const int32_t* kv_len, const float* bias, float* out) {
  if (d.batch < 0 || d.q_len < 0 || d.q_heads <= 0 || d.kv_heads <= 0 || d.head_dim <= 0 || d.num_slots <= 0 ||
      d.capacity < 0)
    return make_error(ErrorKind::kInvalidArgument, "attention: batch=", d.batch, " q_len=", d.q_len,
                      " q_heads=", d.q_heads, " kv_heads=", d.kv_heads, " head_dim=", d.head_dim,
                      " num_slots=", d.num_slots, " capacity=", d.capacity);
  if (d.q_heads % d.kv_heads != 0)
    return make_error(ErrorKind::kInvalidArgument, "attention: q_heads=", d.q_heads,
                      " is not a multiple of kv_heads=", d.kv_heads);
  if (d.q_type != DType::kF32 && d.q_type != DType::kBF16)
    return make_error(ErrorKind::kUnsupported, "attention: q type ", dtype_name(d.q_type), " (expected f32 or bf16)");
  if (d.kv_type != DType::kF32 && d.kv_type != DType::kBF16 && d.kv_type != DType::kI8)
    return make_error(ErrorKind::kUnsupported, "attention: kv type ", dtype_name(d.kv_type),
                      " (expected f32, bf16 or i8)");
  if ((d.kv_type == DType::kI8) != (d.k_scale != nullptr && d.v_scale != nullptr) ||
      (d.kv_type != DType::kI8 && (d.k_scale || d.v_scale)))
    return make_error(ErrorKind::kInvalidArgument, "attention: kv type ", dtype_name(d.kv_type), " with k_scale ",
                      d.k_scale ? "set" : "null", " and v_scale ", d.v_scale ? "set" : "null",
                      " (both are needed for i8 and only for i8)");
  if (d.sliding_window < 0)
    return make_error(ErrorKind::kInvalidArgument, "attention: sliding_window=", d.sliding_window, " < 0");
  if (!(d.logit_softcap >= 0.f))
    return make_error(ErrorKind::kInvalidArgument, "attention: logit_softcap=", d.logit_softcap, " < 0");
  if (d.has_bias != (bias != nullptr))
    return make_error(ErrorKind::kInvalidArgument, "attention: has_bias=", d.has_bias, " but bias pointer is ",
                      bias ? "set" : "null");
  for (int64_t b = 0; b < d.batch; ++b) {
    if (slot[b] < 0 || slot[b] >= d.num_slots)
      return make_error(ErrorKind::kOutOfRange, "attention: slot[", b, "]=", slot[b], " outside [0, ", d.num_slots,
                        ")");
    if (kv_len[b] < 0 || kv_len[b] > d.capacity)
      return make_error(ErrorKind::kOutOfRange, "attention: kv_len[", b, "]=", kv_len[b], " outside [0, ", d.capacity,
                        "]");
  }
  if (d.batch == 0 || d.q_len == 0) return ok_status();
  switch (attention_path(d)) {
    case AttentionPath::kDecode:
      attention_decode::run(d, q, k_cache, v_cache, slot, q_pos, kv_len, bias, out);
      break;
    case AttentionPath::kPrefill:
      attention_prefill::run(d, q, k_cache, v_cache, slot, q_pos, kv_len, bias, out);
      break;
    case AttentionPath::kGeneric:
      attention_avx512::run(d, q, k_cache, v_cache, slot, q_pos, kv_len, bias, out);
      break;
    case AttentionPath::kBaseline:
      attention_baseline::run(d, q, k_cache, v_cache, slot, q_pos, kv_len, bias, out);
      break;
  }
  return ok_status();
}

}  // namespace hlx::kernels
