// hlx.attention against a direct double-precision evaluation of docs/COMPOSITES.md written here:
// per query, the visible key set, scores, softcap, bias, softmax, weighted sum. bf16 cases round
// q/K/V to bf16 first and feed the reference the same values.
//
// f32 kernels (f32 caches, decode, CPUs without AVX512-BF16): only f32 arithmetic separates the
// two; outputs are convex combinations of values in [-1, 1], and the f32 dot products over
// head_dim <= 128 plus the softmax have errors ~1e-6; tolerance 2e-5 absolute.
//
// bf16 kernel (bf16 cache, q_len > 1, head_dim % 16 == 0 or % 8 == 0 with a bf16 Q, AVX512-BF16): f32 Q is carried as a
// sum of two bf16 (hi + lo, relative error <= 2^-16), and the softmax weights P are rounded to
// bf16 (unit roundoff u = 2^-8: 8 significant bits, round to nearest). Q's residue moves each score by at most
// D = 2^-16 * scale * sum_i |q_i k_i|, which moves the normalised weights by a factor within
// e^(+-2D), so the output by at most (e^(2D) - 1) max|v|; rounding P (and normalising by the sum
// of the rounded weights) moves them by a factor within (1 +- u) / (1 -+ u), i.e. the output by
// 2.01 u max|v|. The tolerance is that bound per query row, plus the f32 2e-5.
//
// i8 caches (int8 KV): the values are quantized per (slot, row, kv head) as docs/COMPOSITES.md
// says, and the reference reads code * scale. Without AVX512-VNNI (or at head_dim % 16 == 8)
// prefill dequantizes exactly the same codes in f32, so the f32 tolerance holds. Otherwise both
// kernels take integer Q.K^T: Q rounded to int16 on its row's scale (|dq_i| <= max|q| / (2 q_max))
// moves each score by at most D = scale * max|q| / (2 q_max) * sum_i |k_i|, so the output by
// (e^(2D) - 1) max|v| as above. The weights w_k = p_k * s_vk are rounded to int16 per chunk of keys
// (decode) or key block (prefill) on its largest (|dw| <= W / 65534), which moves the output by at
// most n * max_k(p_k * max_i |v_ki|) / 65534 (p normalised; |code| <= 127, 127 s_vk = max_i |v_ki|),
// taken with 1 % slack for the kernel's own p.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "runtime/kernels/attention.h"
#include "runtime/kernels/cpu.h"
#include "runtime/kernels/parallel.h"
#include "runtime/op_kernel.h"

namespace hlx {
namespace {

using kernels::AttentionDesc;

struct Inputs {
  std::vector<float> q, k, v;       // values (already rounded to the storage type)
  std::vector<uint8_t> qb, kb, vb;  // storage bytes
  std::vector<float> ks, vs;        // i8 caches: per (slot, row, kv head) scales
  std::vector<int32_t> slot, q_pos, kv_len;
  std::vector<float> bias;
};

std::vector<uint8_t> to_storage(DType t, std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::kF32) {
      std::memcpy(&out[i * 4], &v[i], 4);
    } else {
      bf16 h = f32_to_bf16(v[i]);
      if (!std::isnan(v[i])) v[i] = bf16_to_f32(h);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

// int8 KV as documented: per row of head_dim values, scale = max|x| / 127 (f32) and code =
// round-half-even(x / scale) clamped to [-127, 127] (0 for a zero row); v becomes code * scale. A
// row holding NaN (never written) gets codes 0 and a NaN scale, so reading it still poisons.
std::vector<uint8_t> quantize_rows(std::vector<float>& v, int64_t Dh, std::vector<float>* scales) {
  std::vector<uint8_t> out(v.size());
  scales->assign(v.size() / size_t(Dh), 0.f);
  for (size_t r = 0; r < scales->size(); ++r) {
    float* x = &v[r * size_t(Dh)];
    float mx = 0.f;
    bool nan = false;
    for (int64_t i = 0; i < Dh; ++i) {
      nan |= std::isnan(x[i]);
      mx = std::max(mx, std::fabs(x[i]));
    }
    const float sc = nan ? std::numeric_limits<float>::quiet_NaN() : mx / 127.f;
    (*scales)[r] = sc;
    for (int64_t i = 0; i < Dh; ++i) {
      const float c = nan || sc == 0.f ? 0.f : std::min(127.f, std::max(-127.f, std::nearbyint(x[i] / sc)));
      out[r * size_t(Dh) + size_t(i)] = uint8_t(int8_t(c));
      if (!nan) x[i] = float(double(c) * double(sc));  // the reference reads code * scale
    }
  }
  return out;
}

// Fills caches with random values in every valid row and NaN in every row past kv_len (and in
// unused slots): any read of such a row poisons the output, so the tests also prove the kernel's
// cost is bounded by kv_len.
Inputs make_inputs(const AttentionDesc& d, uint32_t seed, const std::vector<int32_t>& slot,
                   const std::vector<int32_t>& kv_len, const std::vector<int32_t>& q_pos) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Inputs in;
  in.q.resize(size_t(d.batch * d.q_len * d.q_heads * d.head_dim));
  for (auto& x : in.q) x = u(rng) * 2.f;
  const size_t cache = size_t(d.num_slots * d.capacity * d.kv_heads * d.head_dim);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  in.k.assign(cache, nan);
  in.v.assign(cache, nan);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t j = 0; j < kv_len[size_t(b)]; ++j)
      for (int64_t i = 0; i < d.kv_heads * d.head_dim; ++i) {
        size_t off = size_t((slot[size_t(b)] * d.capacity + j) * d.kv_heads * d.head_dim + i);
        in.k[off] = u(rng);
        in.v[off] = u(rng);
      }
  in.qb = to_storage(d.q_type, in.q);
  if (d.kv_type == DType::kI8) {
    in.kb = quantize_rows(in.k, d.head_dim, &in.ks);
    in.vb = quantize_rows(in.v, d.head_dim, &in.vs);
  } else {
    in.kb = to_storage(d.kv_type, in.k);
    in.vb = to_storage(d.kv_type, in.v);
  }
  in.slot = slot;
  in.kv_len = kv_len;
  in.q_pos = q_pos;
  if (d.has_bias) {
    in.bias.resize(size_t(d.batch * d.q_len * d.capacity));
    for (auto& x : in.bias) x = u(rng) * 3.f;
  }
  return in;
}

// Whether attention() takes a bf16 dot-product kernel (prefill or decode) for these shapes on this CPU.
bool bf16_kernel(const AttentionDesc& d) {
  return kernels::cpu_features().avx512bf16 && d.kv_type == DType::kBF16 && d.q_len > 1 &&
         (d.head_dim % 16 == 0 || (d.head_dim % 8 == 0 && d.q_type == DType::kBF16));
}

// Double-precision reference; tol receives each output element's allowed error (see the top).
std::vector<double> reference(const AttentionDesc& d, const Inputs& in, std::vector<double>* tol = nullptr) {
  const int64_t G = d.q_heads / d.kv_heads;
  const bool bf16_path = bf16_kernel(d);
  const bool i8_decode = d.kv_type == DType::kI8 && kernels::attention_path(d) == kernels::AttentionPath::kDecode;
  const kernels::CpuFeatures& cpu = kernels::cpu_features();
  const bool i8_prefill = d.kv_type == DType::kI8 && kernels::attention_path(d) == kernels::AttentionPath::kPrefill &&
                          cpu.avx512vnni && cpu.avx512bf16 && cpu.avx512bw && d.head_dim % 16 == 0;
  const double q_max = std::min<int64_t>(32767, std::numeric_limits<int32_t>::max() / (127 * d.head_dim));
  const double u = std::ldexp(1.0, -8);
  std::vector<double> out(size_t(d.batch * d.q_len * d.q_heads * d.head_dim), 0.0);
  if (tol) tol->assign(out.size(), 2e-5);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t t = 0; t < d.q_len; ++t)
      for (int64_t h = 0; h < d.q_heads; ++h) {
        const int64_t kvh = h / G, pos = in.q_pos[size_t(b * d.q_len + t)];
        std::vector<int64_t> keys;
        std::vector<double> s, key_vmax;  // scores; max_i |v_ki| per visible key (i8 decode)
        double dmax = 0, vmax = 0;        // max score shift from rounding q; max |v| over the visible keys
        double qmax = 0;                  // max |q_i| of the row
        const size_t q0 = size_t(((b * d.q_len + t) * d.q_heads + h) * d.head_dim);
        for (int64_t i = 0; i < d.head_dim; ++i) qmax = std::max(qmax, std::fabs(double(in.q[q0 + size_t(i)])));
        for (int64_t j = 0; j < in.kv_len[size_t(b)]; ++j) {
          if (d.causal && j > pos) continue;
          if (d.sliding_window > 0 && pos - j >= d.sliding_window) continue;
          double dot = 0, absdot = 0, absk = 0, rowv = 0;
          for (int64_t i = 0; i < d.head_dim; ++i) {
            const double qv = in.q[size_t(((b * d.q_len + t) * d.q_heads + h) * d.head_dim + i)];
            const size_t ko = size_t(((in.slot[size_t(b)] * d.capacity + j) * d.kv_heads + kvh) * d.head_dim + i);
            dot += qv * double(in.k[ko]);
            absdot += std::fabs(qv * double(in.k[ko]));
            absk += std::fabs(double(in.k[ko]));
            rowv = std::max(rowv, std::fabs(double(in.v[ko])));
          }
          vmax = std::max(vmax, rowv);
          double sc = d.scale * dot;
          if (d.logit_softcap > 0) sc = d.logit_softcap * std::tanh(sc / d.logit_softcap);
          if (d.has_bias) sc += in.bias[size_t((b * d.q_len + t) * d.capacity + j)];
          if (i8_decode || i8_prefill)
            dmax = std::max(dmax, std::fabs(d.scale) * qmax / (2 * q_max) * absk);
          else
            dmax =
                std::max(dmax, (d.q_type == DType::kBF16 ? 0.0 : std::ldexp(1.0, -16)) * std::fabs(d.scale) * absdot);
          key_vmax.push_back(rowv);
          keys.push_back(j);
          s.push_back(sc);
        }
        if (keys.empty()) continue;
        double mx = s[0];
        for (double x : s) mx = std::max(mx, x);
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - mx));
        const size_t o0 = size_t(((b * d.q_len + t) * d.q_heads + h) * d.head_dim);
        for (size_t n = 0; n < keys.size(); ++n)
          for (int64_t i = 0; i < d.head_dim; ++i)
            out[o0 + size_t(i)] +=
                s[n] / sum *
                in.v[size_t(((in.slot[size_t(b)] * d.capacity + keys[n]) * d.kv_heads + kvh) * d.head_dim + i)];
        if (tol && bf16_path)
          for (int64_t i = 0; i < d.head_dim; ++i)
            (*tol)[o0 + size_t(i)] = 2e-5 + (std::expm1(2 * dmax) + 2.01 * u) * vmax;
        if (tol && (i8_decode || i8_prefill)) {
          double wmax = 0;
          for (size_t n = 0; n < keys.size(); ++n) wmax = std::max(wmax, s[n] / sum * key_vmax[n]);
          for (int64_t i = 0; i < d.head_dim; ++i)
            (*tol)[o0 + size_t(i)] = 2e-5 + std::expm1(2 * dmax) * vmax + 1.01 * double(keys.size()) * wmax / 65534;
        }
      }
  return out;
}

// Largest |error| / tolerance seen by run_and_compare (printed by the tests for the record).
double g_worst_ratio = 0, g_worst_abs = 0;

// d with the i8 scale pointers of `in` (unchanged for other cache types).
AttentionDesc with_scales(AttentionDesc d, const Inputs& in) {
  if (d.kv_type == DType::kI8) {
    d.k_scale = in.ks.data();
    d.v_scale = in.vs.data();
  }
  return d;
}

// Decode rows are batch invariant: each row alone, its slot's cache rows (and i8 scales) copied
// to slot 4, which the batch leaves unused, gets the bits it got in the whole batch, on 1 and 2
// threads.
void expect_rows_batch_invariant(const AttentionDesc& d, const Inputs& in, const std::string& what) {
  const size_t row = size_t(d.q_heads * d.head_dim);
  std::vector<float> whole(size_t(d.batch) * row);
  ASSERT_TRUE(kernels::attention(with_scales(d, in), in.qb.data(), in.kb.data(), in.vb.data(), in.slot.data(),
                                 in.q_pos.data(), in.kv_len.data(), d.has_bias ? in.bias.data() : nullptr, whole.data())
                  .ok());
  const size_t slot_rows = size_t(d.capacity * d.kv_heads);
  const size_t slot_bytes = slot_rows * size_t(d.head_dim) * dtype_size(d.kv_type);
  for (int threads : {1, 2})
    for (int64_t b = 0; b < d.batch; ++b) {
      kernels::ThreadLimit limit(threads);
      const size_t from = size_t(in.slot[size_t(b)]);
      Inputs one_slot = in;
      std::memcpy(&one_slot.kb[4 * slot_bytes], &in.kb[from * slot_bytes], slot_bytes);
      std::memcpy(&one_slot.vb[4 * slot_bytes], &in.vb[from * slot_bytes], slot_bytes);
      if (!in.ks.empty()) {
        std::memcpy(&one_slot.ks[4 * slot_rows], &in.ks[from * slot_rows], slot_rows * 4);
        std::memcpy(&one_slot.vs[4 * slot_rows], &in.vs[from * slot_rows], slot_rows * 4);
      }
      AttentionDesc e = with_scales(d, one_slot);
      e.batch = 1;
      const int32_t s4 = 4;
      std::vector<float> one(row);
      ASSERT_TRUE(kernels::attention(e, in.qb.data() + size_t(b) * row * dtype_size(d.q_type), one_slot.kb.data(),
                                     one_slot.vb.data(), &s4, &in.q_pos[size_t(b)], &in.kv_len[size_t(b)],
                                     d.has_bias ? in.bias.data() + b * d.capacity : nullptr, one.data())
                      .ok());
      ASSERT_EQ(std::memcmp(one.data(), whole.data() + size_t(b) * row, row * 4), 0)
          << what << " threads=" << threads << " row " << b;
    }
}

void run_and_compare(const AttentionDesc& d0, const Inputs& in, const std::string& what) {
  const AttentionDesc d = with_scales(d0, in);
  std::vector<float> out(size_t(d.batch * d.q_len * d.q_heads * d.head_dim), 123.f);
  Status s = kernels::attention(d, in.qb.data(), in.kb.data(), in.vb.data(), in.slot.data(), in.q_pos.data(),
                                in.kv_len.data(), d.has_bias ? in.bias.data() : nullptr, out.data());
  ASSERT_TRUE(s.ok()) << what << ": " << s.to_string();
  std::vector<double> tol;
  auto want = reference(d, in, &tol);
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(out[i] - want[i]);
    if (err == err) {
      g_worst_ratio = std::max(g_worst_ratio, err / tol[i]);
      if (bf16_kernel(d)) g_worst_abs = std::max(g_worst_abs, err);
    }
    if (!(err <= tol[i]) && bad++ < 5)
      ADD_FAILURE() << what << " element " << i << ": got " << out[i] << " want " << want[i] << " tol " << tol[i];
  }
}

struct Config {
  bool causal;
  int64_t window;
  float softcap;
  bool bias;
};

TEST(Attention, DecodeAndPrefillAllMasksGqaTypes) {
  const Config configs[] = {{true, 0, 0.f, false},  {false, 0, 0.f, false}, {true, 5, 0.f, false},
                            {false, 7, 0.f, false}, {true, 0, 5.f, false},  {true, 0, 0.f, true},
                            {false, 0, 0.f, true},  {true, 9, 30.f, true}};
  uint32_t seed = 1;
  for (const Config& c : configs)
    for (int64_t gqa : {1, 2, 4})
      for (DType qt : {DType::kF32, DType::kBF16})
        for (DType kvt : {DType::kF32, DType::kBF16})
          for (int64_t T : {1, 3, 17, 33}) {
            AttentionDesc d;
            d.batch = 3;
            d.q_len = T;
            d.kv_heads = 2;
            d.q_heads = 2 * gqa;
            // 40, 72: masked column tails of the f32 kernel; 80: a half 32-column chunk of the bf16 one.
            d.head_dim = T == 17 ? 40 : T == 33 ? 80 : (gqa == 2 ? 72 : 128);
            d.num_slots = 4;
            d.capacity = 150;
            d.q_type = qt;
            d.kv_type = kvt;
            d.scale = 1.f / std::sqrt(float(d.head_dim));
            d.causal = c.causal;
            d.sliding_window = c.window;
            d.logit_softcap = c.softcap;
            d.has_bias = c.bias;
            // Rows: full capacity, a partial cache, an empty cache. Queries are the last T
            // positions of the cache (chunked prefill: q_pos = kv_len - T + t), or, for the empty
            // row, positions 0.. so causal still sees nothing.
            std::vector<int32_t> slot = {2, 0, 3}, kv_len = {150, 77, 0}, q_pos;
            for (int64_t b = 0; b < 3; ++b)
              for (int64_t t = 0; t < T; ++t) q_pos.push_back(int32_t(std::max<int64_t>(0, kv_len[size_t(b)] - T + t)));
            Inputs in = make_inputs(d, seed++, slot, kv_len, q_pos);
            run_and_compare(d, in,
                            str_cat("causal=", c.causal, " window=", c.window, " cap=", c.softcap, " bias=", c.bias,
                                    " gqa=", gqa, " q=", dtype_name(qt), " kv=", dtype_name(kvt), " T=", T));
          }
  std::printf("worst |error| / tolerance %.3f; worst |error| of the bf16 kernel %.3g\n", g_worst_ratio, g_worst_abs);
}

// Each query row's bits must not depend on the other rows of the call: the batch (B = 3 vs the
// row alone), the query chunk it arrives in (whole prompt vs chunks of 8 / 12 tokens, as chunked
// prefill), or the thread count. Both kernels (bf16 cache with a bf16 Q, as the models give it, and
// with an f32 Q: hi + lo; f32 cache), GQA 4, causal +- window.
// (A one-token call is decode, a different kernel: chunks here are >= 4; decode has its own test below.)
TEST(Attention, RowsIndependentOfBatchChunkAndThreads) {
  for (auto [qt, kvt] : {std::pair{DType::kBF16, DType::kBF16}, std::pair{DType::kF32, DType::kBF16},
                         std::pair{DType::kF32, DType::kF32}})
    for (int64_t window : {0, 21}) {
      AttentionDesc d;
      d.batch = 3;
      d.q_len = 40;
      d.q_heads = 8;
      d.kv_heads = 2;
      d.head_dim = 64;
      d.num_slots = 3;
      d.capacity = 200;
      d.q_type = qt;
      d.kv_type = kvt;
      d.scale = 0.125f;
      d.causal = true;
      d.sliding_window = window;
      std::vector<int32_t> slot = {1, 2, 0}, kv_len = {180, 100, 40}, q_pos;
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t t = 0; t < 40; ++t) q_pos.push_back(int32_t(kv_len[size_t(b)] - 40 + t));
      Inputs in = make_inputs(d, 77, slot, kv_len, q_pos);
      const size_t row = size_t(d.q_heads * d.head_dim);
      std::vector<float> whole(3 * 40 * row);
      ASSERT_TRUE(kernels::attention(d, in.qb.data(), in.kb.data(), in.vb.data(), in.slot.data(), in.q_pos.data(),
                                     in.kv_len.data(), nullptr, whole.data())
                      .ok());
      for (int threads : {1, 2})
        for (int64_t chunk : {40, 12, 8}) {
          kernels::ThreadLimit limit(threads);
          for (int64_t b = 0; b < 3; ++b)
            for (int64_t t0 = 0; t0 < 40; t0 += chunk) {
              AttentionDesc e = d;
              e.batch = 1;
              e.q_len = std::min<int64_t>(chunk, 40 - t0);
              std::vector<float> part(size_t(e.q_len) * row);
              const uint8_t* qp = in.qb.data() + size_t(b * 40 + t0) * row * dtype_size(qt);
              ASSERT_TRUE(kernels::attention(e, qp, in.kb.data(), in.vb.data(), &in.slot[size_t(b)],
                                             &in.q_pos[size_t(b * 40 + t0)], &in.kv_len[size_t(b)], nullptr,
                                             part.data())
                              .ok());
              ASSERT_EQ(std::memcmp(part.data(), whole.data() + (b * 40 + t0) * int64_t(row), part.size() * 4), 0)
                  << "q=" << dtype_name(qt) << " kv=" << dtype_name(kvt) << " window=" << window
                  << " threads=" << threads << " chunk=" << chunk << " row " << b << " tokens from " << t0;
            }
        }
    }
}

// Decode (q_len 1): every row of a batch against the reference (f32 tolerance), and each row's
// bits the same when it runs alone, from another cache slot, on 1 or 2 threads. Shapes reach the kernel's edges: odd
// query heads per kv head (a lone head after the pairs), key counts that are odd, below and above 16, empty; head_dim
// 16 (one half chunk), 96 and 176 (a 128-column pass plus 32 + a half chunk of 16), 256 (two
// passes, compile-time chunk count); window, softcap and bias.
TEST(Attention, DecodeRowsMatchReferenceAndIndependentOfBatchSlotThreads) {
  uint32_t seed = 900;
  for (int64_t dh : {16, 96, 176, 256})
    for (int64_t gqa : {1, 2, 3})
      for (const Config& c : {Config{true, 0, 0.f, false}, Config{true, 13, 0.f, false}, Config{true, 0, 20.f, true}})
        for (auto [qt, kvt] : {std::pair{DType::kBF16, DType::kBF16}, std::pair{DType::kF32, DType::kBF16},
                               std::pair{DType::kF32, DType::kF32}}) {
          AttentionDesc d;
          d.batch = 6;
          d.q_len = 1;
          d.kv_heads = 2;
          d.q_heads = 2 * gqa;
          d.head_dim = dh;
          d.num_slots = 7;
          d.capacity = 120;
          d.q_type = qt;
          d.kv_type = kvt;
          d.scale = 1.f / std::sqrt(float(dh));
          d.causal = c.causal;
          d.sliding_window = c.window;
          d.logit_softcap = c.softcap;
          d.has_bias = c.bias;
          std::vector<int32_t> slot = {3, 0, 5, 1, 6, 2}, kv_len = {1, 17, 120, 33, 0, 8}, q_pos;
          for (int32_t len : kv_len) q_pos.push_back(std::max(len - 1, 0));
          Inputs in = make_inputs(d, seed++, slot, kv_len, q_pos);
          const std::string what = str_cat("decode Dh=", dh, " gqa=", gqa, " window=", c.window, " cap=", c.softcap,
                                           " bias=", c.bias, " q=", dtype_name(qt), " kv=", dtype_name(kvt));
          run_and_compare(d, in, what);
          expect_rows_batch_invariant(d, in, what);
        }
}

// A causal decode descriptor (one query per row) over 2 kv heads and 2 * gqa query heads.
AttentionDesc decode_desc(int64_t batch, int64_t gqa, int64_t dh, int64_t slots, int64_t capacity, DType q_type) {
  AttentionDesc d;
  d.batch = batch;
  d.q_len = 1;
  d.kv_heads = 2;
  d.q_heads = 2 * gqa;
  d.head_dim = dh;
  d.num_slots = slots;
  d.capacity = capacity;
  d.q_type = q_type;
  d.kv_type = DType::kBF16;
  d.scale = 1.f / std::sqrt(float(dh));
  d.causal = true;
  return d;
}

// A bf16 Q over a bf16 cache takes vdpbf16ps scores in the decode kernel, an f32 Q holding the
// same values its FMAs; the FMAs add each lane's odd product first, as vdpbf16ps is defined to, so
// the two agree to the last bits on CPUs that follow the definition (Zen 5: equal). head_dim 80
// has a half last chunk, 128 and 256 take compile-time chunk counts; GQA 3 takes the one-row score
// path; 1100 keys are split.
TEST(Attention, DecodeBf16QueryDotsMatchFmaPath) {
  uint32_t seed = 5100;
  for (int64_t dh : {80, 128, 256})
    for (int64_t gqa : {1, 2, 3}) {
      const AttentionDesc d = decode_desc(3, gqa, dh, 3, 1100, DType::kBF16);
      std::vector<int32_t> slot = {2, 0, 1}, kv_len = {37, 1100, 300}, q_pos;
      for (int32_t len : kv_len) q_pos.push_back(len - 1);
      Inputs in = make_inputs(d, seed++, slot, kv_len, q_pos);
      std::vector<float> dots(in.q.size()), fmas(in.q.size());
      ASSERT_TRUE(kernels::attention(d, in.qb.data(), in.kb.data(), in.vb.data(), in.slot.data(), in.q_pos.data(),
                                     in.kv_len.data(), nullptr, dots.data())
                      .ok());
      AttentionDesc f = d;
      f.q_type = DType::kF32;  // in.q holds the bf16 values
      ASSERT_TRUE(kernels::attention(f, in.q.data(), in.kb.data(), in.vb.data(), in.slot.data(), in.q_pos.data(),
                                     in.kv_len.data(), nullptr, fmas.data())
                      .ok());
      for (size_t i = 0; i < dots.size(); ++i)
        ASSERT_NEAR(dots[i], fmas[i], 1e-6) << "Dh=" << dh << " gqa=" << gqa << " element " << i;
    }
}

// Split-K decode (attention_decode_avx512.cc cuts a row's keys at multiples of 512 when they span
// more than one such part and merges the parts' softmax sums): key counts around the cuts (one
// key past a cut, one short of it, several parts, a window whose first key is not on a cut), GQA
// 2 and 4, head_dim 64 and 128. Every row against the double reference (f32 tolerance) and against
// the unsplit f32-cache kernel on the same values; each row's bits the same alone (from another
// slot) as in the batch, on 1 and 2 threads.
TEST(Attention, DecodeSplitKeysMatchReferenceAndBatchInvariant) {
  uint32_t seed = 4000;
  for (int64_t dh : {64, 128})
    for (int64_t gqa : {2, 4})
      for (int64_t window : {0, 700}) {
        AttentionDesc d = decode_desc(6, gqa, dh, 7, 2100, DType::kF32);
        d.sliding_window = window;
        std::vector<int32_t> slot = {3, 0, 5, 1, 6, 2}, kv_len = {512, 513, 1023, 1537, 2100, 1025}, q_pos;
        for (int32_t len : kv_len) q_pos.push_back(len - 1);
        Inputs in = make_inputs(d, seed++, slot, kv_len, q_pos);
        const std::string what = str_cat("split decode Dh=", dh, " gqa=", gqa, " window=", window);
        run_and_compare(d, in, what);
        const size_t row = size_t(d.q_heads * d.head_dim);
        std::vector<float> whole(size_t(d.batch) * row), unsplit(whole.size());
        ASSERT_TRUE(kernels::attention(d, in.qb.data(), in.kb.data(), in.vb.data(), in.slot.data(), in.q_pos.data(),
                                       in.kv_len.data(), nullptr, whole.data())
                        .ok());
        // The same (bf16-exact) values in an f32 cache take the unsplit kernel of attention_impl.h.
        AttentionDesc f = d;
        f.kv_type = DType::kF32;
        std::vector<float> k32 = in.k, v32 = in.v;
        ASSERT_TRUE(kernels::attention(f, in.qb.data(), k32.data(), v32.data(), in.slot.data(), in.q_pos.data(),
                                       in.kv_len.data(), nullptr, unsplit.data())
                        .ok());
        for (size_t i = 0; i < whole.size(); ++i) ASSERT_NEAR(whole[i], unsplit[i], 2e-5) << what << " element " << i;
        const size_t slot_bytes = size_t(d.capacity * d.kv_heads * d.head_dim) * 2;
        for (int threads : {1, 2})
          for (int64_t b = 0; b < d.batch; ++b) {
            kernels::ThreadLimit limit(threads);
            std::vector<uint8_t> kc = in.kb, vc = in.vb;
            std::memcpy(&kc[4 * slot_bytes], &in.kb[size_t(slot[size_t(b)]) * slot_bytes], slot_bytes);
            std::memcpy(&vc[4 * slot_bytes], &in.vb[size_t(slot[size_t(b)]) * slot_bytes], slot_bytes);
            AttentionDesc e = d;
            e.batch = 1;
            const int32_t s4 = 4;
            std::vector<float> one(row);
            ASSERT_TRUE(kernels::attention(e, in.qb.data() + size_t(b) * row * 4, kc.data(), vc.data(), &s4,
                                           &q_pos[size_t(b)], &kv_len[size_t(b)], nullptr, one.data())
                            .ok());
            ASSERT_EQ(std::memcmp(one.data(), whole.data() + size_t(b) * row, row * 4), 0)
                << what << " threads=" << threads << " row " << b;
          }
      }
}

// int8 KV: decode (the register-widening kernel at head_dim % 16 == 0, attention_impl.h at 40),
// prefill (key blocks dequantized before the f32 packing) and split-K decode, all masks, GQA 1-3,
// against the double reference on the dequantized codes; decode rows bit-identical alone (from
// another slot, codes and scales copied) and in the batch, on 1 and 2 threads. Rows never written
// carry NaN scales, so a read past kv_len fails. A zero row (scale 0) attends as zeros.
TEST(Attention, Int8CacheMatchesDequantizedReference) {
  uint32_t seed = 7000;
  for (int64_t T : {1, 17})
    for (int64_t dh : {16, 40, 64, 128, 176, 256})
      for (int64_t gqa : {1, 3})
        for (const Config& c :
             {Config{true, 0, 0.f, false}, Config{true, 13, 0.f, false}, Config{false, 0, 20.f, true}})
          for (int64_t cap : {120, 1100}) {
            if (cap > 200 && (T > 1 || c.softcap > 0)) continue;  // long rows: split-K decode only
            AttentionDesc d;
            d.batch = 4;
            d.q_len = T;
            d.kv_heads = 2;
            d.q_heads = 2 * gqa;
            d.head_dim = dh;
            d.num_slots = 5;
            d.capacity = cap;
            d.q_type = DType::kF32;
            d.kv_type = DType::kI8;
            d.scale = 1.f / std::sqrt(float(dh));
            d.causal = c.causal;
            d.sliding_window = c.window;
            d.logit_softcap = c.softcap;
            d.has_bias = c.bias;
            std::vector<int32_t> slot = {3, 0, 2, 1}, q_pos;
            std::vector<int32_t> kv_len =
                cap > 200 ? std::vector<int32_t>{1100, 513, 1025, 0} : std::vector<int32_t>{120, 17, 33, 0};
            for (int32_t len : kv_len)
              for (int64_t t = 0; t < T; ++t) q_pos.push_back(int32_t(std::max<int64_t>(0, len - T + t)));
            Inputs in = make_inputs(d, seed++, slot, kv_len, q_pos);
            // One written row of slot 0 all zeros: scale 0, codes 0 (attended as a zero vector).
            for (int64_t i = 0; i < dh; ++i) in.kb[size_t(5 * 2 * dh + i)] = in.vb[size_t(5 * 2 * dh + i)] = 0;
            in.ks[5 * 2] = in.vs[5 * 2] = 0.f;
            for (int64_t i = 0; i < dh; ++i) in.k[size_t(5 * 2 * dh + i)] = in.v[size_t(5 * 2 * dh + i)] = 0.f;
            const std::string what = str_cat("int8 T=", T, " Dh=", dh, " gqa=", gqa, " window=", c.window,
                                             " cap=", c.softcap, " bias=", c.bias, " capacity=", cap);
            run_and_compare(d, in, what);
            if (T != 1) continue;
            expect_rows_batch_invariant(d, in, what);
          }
  // Scales are required exactly for i8 caches: a typed error, nothing written.
  AttentionDesc d;
  d.head_dim = 16;
  d.capacity = 4;
  d.kv_type = DType::kI8;
  std::vector<int8_t> cache(64, 0);
  std::vector<float> q(16, 1.f), out(16, 5.f);
  const int32_t zero = 0, one = 1;
  Status s = kernels::attention(d, q.data(), cache.data(), cache.data(), &zero, &zero, &one, nullptr, out.data());
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument) << s.to_string();
  EXPECT_EQ(out[0], 5.f);
}

// head_dim 256 (Gemma): four 64-column passes of the prefill kernel's P.V; 16 and 48: one
// partial pass; both cache types, causal with and without a window.
TEST(Attention, PrefillWideAndNarrowHeads) {
  uint32_t seed = 500;
  for (int64_t dh : {256, 48, 16})
    for (DType kvt : {DType::kF32, DType::kBF16})
      for (int64_t window : {0, 9}) {
        AttentionDesc d;
        d.batch = 2;
        d.q_len = 20;
        d.q_heads = 4;
        d.kv_heads = 2;
        d.head_dim = dh;
        d.num_slots = 2;
        d.capacity = 70;
        d.q_type = DType::kF32;
        d.kv_type = kvt;
        d.scale = 1.f / std::sqrt(float(dh));
        d.causal = true;
        d.sliding_window = window;
        std::vector<int32_t> slot = {1, 0}, kv_len = {70, 20}, q_pos;
        for (int64_t b = 0; b < 2; ++b)
          for (int64_t t = 0; t < 20; ++t) q_pos.push_back(int32_t(kv_len[size_t(b)] - 20 + t));
        Inputs in = make_inputs(d, seed++, slot, kv_len, q_pos);
        run_and_compare(d, in, str_cat("Dh=", dh, " kv=", dtype_name(kvt), " window=", window));
      }
}

// head_dim a multiple of 8 but not of 16 (SigLIP so400m's 72; 8, 24 and 136: a lone 8-column tail,
// a tail after one vector, a tail after a full 128-column pass) and 80, with f32 or bf16 Q, K and V
// (a bf16 checkpoint's tower): the vision towers' bidirectional attention (q_len = kv_len = T, no
// mask) takes the prefill kernel (with AVX-512F, or AVX512-BF16 for bf16), matches the reference
// within the kernel's tolerance, and
// each query row's bits do not depend on the thread count or the query chunk. Also causal + window
// at 72.
TEST(Attention, PrefillHeadDimMultipleOf8) {
  uint32_t seed = 700;
  for (DType kvt : {DType::kF32, DType::kBF16})
    for (int64_t dh : {72, 8, 24, 80, 136})
      for (int64_t gqa : {1, 2})
        for (bool causal : {false, true}) {
          if (causal && dh != 72) continue;
          AttentionDesc d;
          d.batch = 1;
          d.q_len = 70;
          d.kv_heads = 3;
          d.q_heads = 3 * gqa;
          d.head_dim = dh;
          d.num_slots = 1;
          d.capacity = 70;
          d.q_type = d.kv_type = kvt;
          d.scale = 1.f / std::sqrt(float(dh));
          d.causal = causal;
          d.sliding_window = causal ? 11 : 0;
          std::vector<int32_t> slot = {0}, kv_len = {70}, q_pos;
          for (int32_t t = 0; t < 70; ++t) q_pos.push_back(t);
          Inputs in = make_inputs(d, seed++, slot, kv_len, q_pos);
          const std::string what = str_cat(dtype_name(kvt), " Dh=", dh, " gqa=", gqa, " causal=", causal);
          if (kvt == DType::kF32 ? kernels::cpu_features().avx512f : kernels::cpu_features().avx512bf16) {
            EXPECT_EQ(kernels::attention_path(d), kernels::AttentionPath::kPrefill) << what;
          }
          run_and_compare(d, in, what);
          const size_t row = size_t(d.q_heads * d.head_dim);
          std::vector<float> whole(70 * row);
          ASSERT_TRUE(kernels::attention(d, in.qb.data(), in.kb.data(), in.vb.data(), in.slot.data(), in.q_pos.data(),
                                         in.kv_len.data(), nullptr, whole.data())
                          .ok());
          for (int threads : {1, 2})
            for (int64_t chunk : {70, 23}) {
              kernels::ThreadLimit limit(threads);
              for (int64_t t0 = 0; t0 < 70; t0 += chunk) {
                AttentionDesc e = d;
                e.q_len = std::min<int64_t>(chunk, 70 - t0);
                if (e.q_len < 2) continue;  // one token is decode, another kernel
                std::vector<float> part(size_t(e.q_len) * row);
                ASSERT_TRUE(kernels::attention(e, in.qb.data() + t0 * int64_t(row * dtype_size(kvt)), in.kb.data(),
                                               in.vb.data(), in.slot.data(), &in.q_pos[size_t(t0)], in.kv_len.data(),
                                               nullptr, part.data())
                                .ok());
                ASSERT_EQ(std::memcmp(part.data(), whole.data() + t0 * int64_t(row), part.size() * 4), 0)
                    << what << " threads=" << threads << " chunk=" << chunk << " tokens from " << t0;
              }
            }
        }
}

TEST(Attention, EmptyVisibleSetGivesZeros) {
  for (DType kvt : {DType::kF32, DType::kBF16}) {  // the f32 and the bf16 (q_len 2, Dh 16) kernels
    AttentionDesc d;
    d.batch = 1;
    d.q_len = 2;
    d.q_heads = 2;
    d.kv_heads = 1;
    d.head_dim = 16;
    d.num_slots = 1;
    d.capacity = 8;
    d.q_type = DType::kF32;
    d.kv_type = kvt;
    d.causal = true;
    // kv_len 5 but the queries sit at negative positions: nothing visible under causal.
    Inputs in = make_inputs(d, 3, {0}, {5}, {-1, -3});
    std::vector<float> out(size_t(2 * 2 * 16), 7.f);
    ASSERT_TRUE(kernels::attention(d, in.qb.data(), in.kb.data(), in.vb.data(), in.slot.data(), in.q_pos.data(),
                                   in.kv_len.data(), nullptr, out.data())
                    .ok());
    for (float x : out) EXPECT_EQ(x, 0.f) << dtype_name(kvt);
  }
}

// prefill_embeddings_masked turns blocked mask cells into a -inf bias: such a key must weigh
// exactly 0 in every kernel (no e^-87 floor), so a bias-built causal mask gives the bits of
// causal = true even when the blocked keys hold huge values (1e30: a tiny weight would show).
TEST(Attention, MinusInfBiasDropsKeysExactly) {
  for (DType kvt : {DType::kF32, DType::kBF16})
    for (int64_t q_len : {int64_t(1), int64_t(7)}) {
      AttentionDesc d;
      d.batch = 1;
      d.q_len = q_len;
      d.q_heads = 4;
      d.kv_heads = 2;
      d.head_dim = 16;
      d.num_slots = 1;
      d.capacity = 24;
      d.q_type = DType::kF32;
      d.kv_type = kvt;
      d.scale = 0.25f;
      d.causal = true;
      const int32_t len = 12, first = len - int32_t(q_len) - 3;  // queries at first.., keys past them blocked
      std::vector<int32_t> q_pos;
      for (int64_t t = 0; t < q_len; ++t) q_pos.push_back(first + int32_t(t));
      Inputs in = make_inputs(d, 77, {0}, {len}, q_pos);
      // Keys no query may see hold 1e30.
      const int32_t last_pos = q_pos.back();
      for (int32_t j = last_pos + 1; j < len; ++j)
        for (int64_t i = 0; i < d.kv_heads * d.head_dim; ++i) in.v[size_t(j * d.kv_heads * d.head_dim + i)] = 1e30f;
      in.vb = to_storage(kvt, in.v);
      std::vector<float> causal(size_t(q_len * 4 * 16)), masked(causal.size());
      ASSERT_TRUE(kernels::attention(d, in.qb.data(), in.kb.data(), in.vb.data(), in.slot.data(), in.q_pos.data(),
                                     in.kv_len.data(), nullptr, causal.data())
                      .ok());
      AttentionDesc m = d;
      m.causal = false;
      m.has_bias = true;
      std::vector<float> bias(size_t(q_len * d.capacity), 0.f);
      for (int64_t t = 0; t < q_len; ++t)
        for (int64_t j = 0; j < d.capacity; ++j)
          if (j > q_pos[size_t(t)]) bias[size_t(t * d.capacity + j)] = -std::numeric_limits<float>::infinity();
      ASSERT_TRUE(kernels::attention(m, in.qb.data(), in.kb.data(), in.vb.data(), in.slot.data(), in.q_pos.data(),
                                     in.kv_len.data(), bias.data(), masked.data())
                      .ok());
      EXPECT_EQ(std::memcmp(causal.data(), masked.data(), causal.size() * 4), 0)
          << "kv " << dtype_name(kvt) << " q_len " << q_len << ": first " << causal[0] << " vs " << masked[0];
      for (float x : masked) EXPECT_LT(std::fabs(x), 1e3f);
    }
}

TEST(Attention, OutOfRangeSlotOrKvLenWritesNothing) {
  AttentionDesc d;
  d.batch = 2;
  d.q_len = 1;
  d.q_heads = 4;
  d.kv_heads = 2;
  d.head_dim = 8;
  d.num_slots = 3;
  d.capacity = 10;
  d.q_type = DType::kF32;
  d.kv_type = DType::kBF16;
  Inputs in = make_inputs(d, 4, {0, 1}, {3, 4}, {2, 3});
  struct Bad {
    std::vector<int32_t> slot, kv_len;
  } bads[] = {{{0, 3}, {3, 4}}, {{-1, 1}, {3, 4}}, {{0, 1}, {3, 11}}, {{0, 1}, {-1, 4}}};
  for (const Bad& b : bads) {
    std::vector<float> out(size_t(2 * 4 * 8), 42.f);
    Status s = kernels::attention(d, in.qb.data(), in.kb.data(), in.vb.data(), b.slot.data(), in.q_pos.data(),
                                  b.kv_len.data(), nullptr, out.data());
    EXPECT_EQ(s.kind(), ErrorKind::kOutOfRange) << s.to_string();
    EXPECT_NE(s.message().find("outside"), std::string::npos) << s.message();
    for (float x : out) ASSERT_EQ(x, 42.f);
  }
  d.q_heads = 3;
  std::vector<float> out(32);
  EXPECT_EQ(kernels::attention(d, in.qb.data(), in.kb.data(), in.vb.data(), in.slot.data(), in.q_pos.data(),
                               in.kv_len.data(), nullptr, out.data())
                .kind(),
            ErrorKind::kInvalidArgument);
}

// ---- the composite through the runtime registry ----

shlo::Op attention_op(shlo::Function& fn, const AttentionDesc& d) {
  shlo::Op op;
  op.name = "stablehlo.composite";
  op.operands = {fn.new_value({d.q_type, {d.batch, d.q_len, d.q_heads, d.head_dim}}),
                 fn.new_value({d.kv_type, {d.num_slots, d.capacity, d.kv_heads, d.head_dim}}),
                 fn.new_value({d.kv_type, {d.num_slots, d.capacity, d.kv_heads, d.head_dim}}),
                 fn.new_value({DType::kI32, {d.batch}}),
                 fn.new_value({DType::kI32, {d.batch, d.q_len}}),
                 fn.new_value({DType::kI32, {d.batch}})};
  if (d.has_bias) op.operands.push_back(fn.new_value({DType::kF32, {d.batch, d.q_len, d.capacity}}));
  if (d.kv_type == DType::kI8)  // k_scale, v_scale
    for (int i = 0; i < 2; ++i)
      op.operands.push_back(fn.new_value({DType::kF32, {d.num_slots, d.capacity, d.kv_heads}}));
  op.results = {fn.new_value({DType::kF32, {d.batch, d.q_len, d.q_heads, d.head_dim}})};
  shlo::AttrDict ca;
  ca.push_back({"scale", shlo::Attr::floating(d.scale)});
  ca.push_back({"causal", shlo::Attr::boolean(d.causal)});
  ca.push_back({"sliding_window", shlo::Attr::integer(d.sliding_window)});
  ca.push_back({"logit_softcap", shlo::Attr::floating(d.logit_softcap)});
  ca.push_back({"has_bias", shlo::Attr::boolean(d.has_bias)});
  op.attrs.push_back({"name", shlo::Attr::string("hlx.attention")});
  op.attrs.push_back({"composite_attributes", shlo::Attr::dictionary(ca)});
  op.attrs.push_back({"decomposition", shlo::Attr::symbol("hlx_attention_impl")});
  op.attrs.push_back({"version", shlo::Attr::integer(0, DType::kI32)});
  return op;
}

Tensor bytes_tensor(DType t, Shape s, const void* data) {
  Tensor out = Tensor::empty(t, s);
  std::memcpy(out.raw(), data, out.nbytes());
  return out;
}

TEST(NativeAttention, CompositeRunsKernel) {
  AttentionDesc d;
  d.batch = 2;
  d.q_len = 3;
  d.q_heads = 4;
  d.kv_heads = 2;
  d.head_dim = 32;
  d.num_slots = 2;
  d.capacity = 20;
  d.q_type = DType::kBF16;
  d.kv_type = DType::kBF16;
  d.scale = 0.3f;
  d.causal = true;
  d.sliding_window = 6;
  d.logit_softcap = 20.f;
  d.has_bias = true;
  shlo::Function fn;
  shlo::Op op = attention_op(fn, d);
  auto kernel = rt::KernelRegistry::builtin().compile("composite:hlx.attention", op, fn);
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  Inputs in = make_inputs(d, 11, {1, 0}, {20, 9}, {17, 18, 19, 6, 7, 8});
  Tensor q = bytes_tensor(d.q_type, {2, 3, 4, 32}, in.qb.data());
  Tensor k = bytes_tensor(d.kv_type, {2, 20, 2, 32}, in.kb.data());
  Tensor v = bytes_tensor(d.kv_type, {2, 20, 2, 32}, in.vb.data());
  Tensor slot = bytes_tensor(DType::kI32, {2}, in.slot.data());
  Tensor pos = bytes_tensor(DType::kI32, {2, 3}, in.q_pos.data());
  Tensor len = bytes_tensor(DType::kI32, {2}, in.kv_len.data());
  Tensor bias = bytes_tensor(DType::kF32, {2, 3, 20}, in.bias.data());
  Tensor out = Tensor::zeros(DType::kF32, {2, 3, 4, 32});
  ASSERT_TRUE((*kernel)->run({&q, &k, &v, &slot, &pos, &len, &bias}, {&out}).ok());
  std::vector<double> tol;
  auto want = reference(d, in, &tol);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out.data<float>()[i], want[i], tol[i]) << i;
  // A bad slot at run time is a typed error.
  int32_t bad_slot[2] = {0, 2};
  Tensor slot_bad = bytes_tensor(DType::kI32, {2}, bad_slot);
  EXPECT_EQ((*kernel)->run({&q, &k, &v, &slot_bad, &pos, &len, &bias}, {&out}).kind(), ErrorKind::kOutOfRange);
}

// An i8 cache through the op binding: the scale operands follow the bias and reach the kernel.
TEST(NativeAttention, CompositeRunsKernelOnInt8Cache) {
  AttentionDesc d;
  d.batch = 2;
  d.q_len = 1;
  d.q_heads = 4;
  d.kv_heads = 2;
  d.head_dim = 32;
  d.num_slots = 2;
  d.capacity = 20;
  d.kv_type = DType::kI8;
  d.scale = 0.3f;
  d.has_bias = true;
  shlo::Function fn;
  shlo::Op op = attention_op(fn, d);
  auto kernel = rt::KernelRegistry::builtin().compile("composite:hlx.attention", op, fn);
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  Inputs in = make_inputs(d, 12, {1, 0}, {20, 9}, {19, 8});
  Tensor q = bytes_tensor(d.q_type, {2, 1, 4, 32}, in.qb.data());
  Tensor k = bytes_tensor(DType::kI8, {2, 20, 2, 32}, in.kb.data());
  Tensor v = bytes_tensor(DType::kI8, {2, 20, 2, 32}, in.vb.data());
  Tensor slot = bytes_tensor(DType::kI32, {2}, in.slot.data());
  Tensor pos = bytes_tensor(DType::kI32, {2, 1}, in.q_pos.data());
  Tensor len = bytes_tensor(DType::kI32, {2}, in.kv_len.data());
  Tensor bias = bytes_tensor(DType::kF32, {2, 1, 20}, in.bias.data());
  Tensor ks = bytes_tensor(DType::kF32, {2, 20, 2}, in.ks.data());
  Tensor vs = bytes_tensor(DType::kF32, {2, 20, 2}, in.vs.data());
  Tensor out = Tensor::zeros(DType::kF32, {2, 1, 4, 32});
  ASSERT_TRUE((*kernel)->run({&q, &k, &v, &slot, &pos, &len, &bias, &ks, &vs}, {&out}).ok());
  std::vector<double> tol;
  auto want = reference(d, in, &tol);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out.data<float>()[i], want[i], tol[i]) << i;
  {  // without the scale operands: refused at compile time, naming them
    shlo::Function fn2;
    shlo::Op op2 = attention_op(fn2, d);
    op2.operands.resize(op2.operands.size() - 2);
    auto r = rt::KernelRegistry::builtin().compile("composite:hlx.attention", op2, fn2);
    EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidArgument);
  }
  {  // scales of the wrong shape
    shlo::Function fn2;
    shlo::Op op2 = attention_op(fn2, d);
    fn2.value_types[size_t(op2.operands.back())].shape = {2, 20, 1};
    auto r = rt::KernelRegistry::builtin().compile("composite:hlx.attention", op2, fn2);
    EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(r.status().message().find("v_scale"), std::string::npos) << r.status().message();
  }
}

TEST(NativeAttention, CompileTimeChecks) {
  AttentionDesc d;
  d.batch = 1;
  d.q_len = 1;
  d.q_heads = 4;
  d.kv_heads = 2;
  d.head_dim = 16;
  d.num_slots = 1;
  d.capacity = 8;
  d.q_type = DType::kF32;
  d.kv_type = DType::kF32;
  d.scale = 1.f;
  {  // missing attribute
    shlo::Function fn;
    shlo::Op op = attention_op(fn, d);
    op.attrs[1].value.dict.erase(op.attrs[1].value.dict.begin());  // drop `scale`
    auto r = rt::KernelRegistry::builtin().compile("composite:hlx.attention", op, fn);
    EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(r.status().message().find("scale"), std::string::npos) << r.status().message();
  }
  {  // int where a float is required
    shlo::Function fn;
    shlo::Op op = attention_op(fn, d);
    op.attrs[1].value.dict[3].value = shlo::Attr::integer(0);
    EXPECT_EQ(rt::KernelRegistry::builtin().compile("composite:hlx.attention", op, fn).status().kind(),
              ErrorKind::kInvalidArgument);
  }
  {  // Hq not a multiple of Hkv
    AttentionDesc e = d;
    e.q_heads = 3;
    shlo::Function fn;
    shlo::Op op = attention_op(fn, e);
    EXPECT_EQ(rt::KernelRegistry::builtin().compile("composite:hlx.attention", op, fn).status().kind(),
              ErrorKind::kInvalidArgument);
  }
  {  // wrong result type
    shlo::Function fn;
    shlo::Op op = attention_op(fn, d);
    fn.value_types[size_t(op.results[0])].dtype = DType::kBF16;
    EXPECT_EQ(rt::KernelRegistry::builtin().compile("composite:hlx.attention", op, fn).status().kind(),
              ErrorKind::kInvalidArgument);
  }
}

}  // namespace
}  // namespace hlx
