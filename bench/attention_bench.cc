// hlx.attention at Qwen3-0.6B-like shapes (16 q heads, 8 kv heads, head_dim 128, bf16 KV cache of
// capacity 8192): decode (T = 1) at several cache lengths, and causal prefill chunks, with bf16
// queries as the text models emit them over a bf16 cache and (4th argument 1) with f32 queries
// (the prefill kernel's hi + lo path; the models' Q before it was rounded). The decode rows at
// batch 1 and 8 with kv_len 80 (~ a short chat turn) are the shapes of a decode step.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "runtime/kernels/attention.h"

namespace {

using namespace hlx;

struct Setup {
  kernels::AttentionDesc d;
  std::vector<bf16> q;
  // Tensors: 64-byte aligned, as the engine's caches. In std::vector's 16-byte aligned storage every
  // 64-byte load straddled two lines (decode on one thread, Zen 5: 35-40 against 41-45 GB/s of K/V).
  Tensor k, v;
  std::vector<float> qf;
  std::vector<float> k_scale, v_scale;  // int8 KV: per (row, kv head)
  std::vector<int32_t> slot, q_pos, kv_len;
  std::vector<float> out;
};

// Slots, lengths, positions (the last T of len) and the output of a Setup.
void finish(Setup& s, int64_t batch, int64_t T, int64_t len) {
  for (int64_t b = 0; b < batch; ++b) {
    s.slot.push_back(int32_t(b));
    s.kv_len.push_back(int32_t(len));
    for (int64_t t = 0; t < T; ++t) s.q_pos.push_back(int32_t(len - T + t));
  }
  s.out.resize(static_cast<size_t>(batch * T * 16 * 128));
}

Setup make(int64_t batch, int64_t T, int64_t len, bool q_f32, bool i8 = false) {
  Setup s;
  auto& d = s.d;
  d.batch = batch;
  d.q_len = T;
  d.q_heads = 16;
  d.kv_heads = 8;
  d.head_dim = 128;
  d.num_slots = batch;
  d.capacity = 8192;
  d.q_type = q_f32 ? DType::kF32 : DType::kBF16;
  d.kv_type = i8 ? DType::kI8 : DType::kBF16;
  d.scale = 1.f / std::sqrt(128.f);
  d.causal = true;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  s.q.resize(static_cast<size_t>(batch * T * 16 * 128));
  for (auto& x : s.q) x = f32_to_bf16(u(rng));
  if (q_f32) {
    s.qf.resize(s.q.size());
    for (auto& x : s.qf) x = u(rng);
  }
  const size_t slot_elems = size_t(8192) * 8 * 128, cache = size_t(batch) * slot_elems;
  // Only the rows a slot holds get random values (filling all of 8 slots x 8192 rows took seconds).
  if (i8) {  // random codes; scales as for rows of values in [-1, 1]
    s.k = Tensor::zeros(DType::kI8, {int64_t(cache)});
    s.v = Tensor::zeros(DType::kI8, {int64_t(cache)});
    std::uniform_int_distribution<int> code(-127, 127);
    for (int64_t b = 0; b < batch; ++b)
      for (size_t i = 0; i < size_t(len) * 8 * 128; ++i) {
        s.k.data<int8_t>()[size_t(b) * slot_elems + i] = int8_t(code(rng));
        s.v.data<int8_t>()[size_t(b) * slot_elems + i] = int8_t(code(rng));
      }
    s.k_scale.assign(size_t(batch) * 8192 * 8, 1.f / 127);
    s.v_scale = s.k_scale;
    d.k_scale = s.k_scale.data();
    d.v_scale = s.v_scale.data();
    finish(s, batch, T, len);
    return s;
  }
  s.k = Tensor::zeros(DType::kBF16, {int64_t(cache)});
  s.v = Tensor::zeros(DType::kBF16, {int64_t(cache)});
  for (int64_t b = 0; b < batch; ++b)
    for (size_t i = 0; i < size_t(len) * 8 * 128; ++i) {
      s.k.data<bf16>()[size_t(b) * slot_elems + i] = f32_to_bf16(u(rng));
      s.v.data<bf16>()[size_t(b) * slot_elems + i] = f32_to_bf16(u(rng));
    }
  finish(s, batch, T, len);
  return s;
}

// Args: batch, T, kv_len, q f32, KV type (0 bf16; 1 int8, which the models give an f32 Q).
// Counters: KV GB/s (K+V bytes actually attended) and GFLOP/s (2 matmuls,
// causal mask counted as the visible half of the T x kv_len rectangle for prefill).
void BM_Attention(benchmark::State& state) {
  const int64_t B = state.range(0), T = state.range(1), len = state.range(2);
  Setup s = make(B, T, len, state.range(3) != 0, state.range(4) != 0);
  const void* q = s.qf.empty() ? static_cast<const void*>(s.q.data()) : s.qf.data();
  for (auto _ : state) {
    Status st = kernels::attention(s.d, q, s.k.raw(), s.v.raw(), s.slot.data(), s.q_pos.data(), s.kv_len.data(),
                                   nullptr, s.out.data());
    if (!st.ok()) return state.SkipWithError(st.to_string().c_str());
    benchmark::DoNotOptimize(s.out.data());
  }
  const double kv_bytes = double(B) * len * 8 * 128 * 2 * (s.d.kv_type == DType::kI8 ? 1 : 2);
  double pairs = double(B) * 16 * (T == 1 ? len : (double(T) * (len - T) + double(T) * (T + 1) / 2));
  state.counters["KV_GB/s"] =
      benchmark::Counter(kv_bytes, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["GFLOP/s"] =
      benchmark::Counter(pairs * 128 * 4, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["threads"] = omp_get_max_threads();
}
BENCHMARK(BM_Attention)
    ->Args({1, 1, 512, 0, 0})
    ->Args({1, 1, 2048, 0, 0})
    ->Args({1, 1, 8192, 0, 0})
    ->Args({4, 1, 2048, 0, 0})
    ->Args({1, 1, 80, 1, 0})
    ->Args({8, 1, 80, 1, 0})
    ->Args({1, 1, 512, 1, 0})
    ->Args({8, 1, 512, 1, 0})
    ->Args({1, 1, 2048, 1, 0})
    ->Args({8, 1, 2048, 1, 0})
    ->Args({1, 128, 128, 0, 0})
    ->Args({1, 512, 512, 0, 0})
    ->Args({1, 512, 2048, 0, 0})
    ->Args({1, 512, 512, 1, 0})
    ->Args({1, 2048, 2048, 0, 0})  // long-context prefill (issue 27): the whole causal triangle
    ->Args({1, 8192, 8192, 0, 0})
    ->Args({1, 2048, 2048, 1, 0})
    ->Args({1, 8192, 8192, 1, 0})
    ->Args({1, 2048, 2048, 1, 1})  // int8 KV (issue 27): prefill against the bf16 rows above
    ->Args({1, 8192, 8192, 1, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Decode as the engine runs it: the K/V of a layer were last read a whole step ago, behind every
// other layer's K/V and the weights, so they come from DRAM, not from the cache the loop above
// keeps them in. Here layer caches (f32 queries) are visited in turn: 28 of capacity 128 for the
// short contexts, and for long ones (issue 27) as many of capacity kv_len as make >= 512 MiB, so
// every call reads its K/V from DRAM. The time is per layer. Args: batch, kv_len, KV type (0 bf16,
// 1 int8: i8 codes + f32 scales per row and kv head). KV_GB/s is the K+V bytes attended per second
// (codes and scales for int8; the DRAM probe of `hlx bench` is the ceiling).
void BM_AttentionDecodeCold(benchmark::State& state) {
  const int64_t B = state.range(0), len = state.range(1), S = std::max<int64_t>(128, len);
  const bool i8 = state.range(2) != 0;
  const int64_t slot_elems = S * 8 * 128;
  const int64_t row_bytes = i8 ? 128 + 4 : 256;  // per row and kv head
  const int64_t layer_bytes = B * S * 8 * row_bytes * 2;
  const int64_t layers = S == 128 ? 28 : std::max<int64_t>(2, ((int64_t(512) << 20) + layer_bytes - 1) / layer_bytes);
  // Tensors, as the engine's caches: 2 MiB aligned and huge-page advised (std::vector's 4 KiB
  // pages made this a TLB benchmark: 3x slower).
  std::vector<Tensor> k, v, ks, vs;
  uint32_t x = 0x9e3779b9u;  // xorshift: values in [-1, 1) (mt19937 took seconds for GBs)
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return x;
  };
  auto fill = [&](Tensor& t) {
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      if (i8)
        t.data<int8_t>()[i] = int8_t(int32_t(next() >> 24) % 127);
      else
        t.data<bf16>()[i] = f32_to_bf16(float(int32_t(next())) * (1.f / 2147483648.f));
    }
  };
  for (int64_t l = 0; l < layers; ++l) {
    for (auto* c : {&k, &v}) {
      c->push_back(Tensor::empty(i8 ? DType::kI8 : DType::kBF16, {B * slot_elems}));
      fill(c->back());
    }
    if (i8)
      for (auto* c : {&ks, &vs}) {
        c->push_back(Tensor::empty(DType::kF32, {B * S * 8}));
        for (int64_t i = 0; i < B * S * 8; ++i) c->back().data<float>()[i] = 1.f / 127.f;
      }
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  kernels::AttentionDesc d;
  d.batch = B;
  d.q_len = 1;
  d.q_heads = 16;
  d.kv_heads = 8;
  d.head_dim = 128;
  d.num_slots = B;
  d.capacity = S;
  d.q_type = i8 ? DType::kF32 : DType::kBF16;  // as the text entries give it
  d.kv_type = i8 ? DType::kI8 : DType::kBF16;
  d.scale = 1.f / std::sqrt(128.f);
  d.causal = true;
  std::vector<float> q(size_t(B * 16 * 128)), out(q.size());
  for (auto& e : q) e = u(rng);
  std::vector<bf16> qb(q.size());
  for (size_t i = 0; i < q.size(); ++i) qb[i] = f32_to_bf16(q[i]);
  const void* qd = i8 ? static_cast<const void*>(q.data()) : static_cast<const void*>(qb.data());
  std::vector<int32_t> slot, pos, kv_len;
  for (int64_t b = 0; b < B; ++b) {
    slot.push_back(int32_t(B - 1 - b));      // rows need not be in slot order
    kv_len.push_back(int32_t(len - b % 3));  // slots of slightly different lengths
    pos.push_back(kv_len.back() - 1);
  }
  int64_t l = 0;
  for (auto _ : state) {
    if (i8) {
      d.k_scale = ks[size_t(l)].data<float>();
      d.v_scale = vs[size_t(l)].data<float>();
    }
    Status st = kernels::attention(d, qd, k[size_t(l)].raw(), v[size_t(l)].raw(), slot.data(), pos.data(),
                                   kv_len.data(), nullptr, out.data());
    if (!st.ok()) return state.SkipWithError(st.to_string().c_str());
    benchmark::DoNotOptimize(out.data());
    l = (l + 1) % layers;
  }
  state.counters["KV_GB/s"] = benchmark::Counter(
      double(B) * len * 8 * row_bytes * 2, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["threads"] = omp_get_max_threads();
}
BENCHMARK(BM_AttentionDecodeCold)
    ->Args({1, 80, 0})
    ->Args({8, 80, 0})
    ->Args({8, 120, 0})
    ->Args({1, 512, 0})
    ->Args({1, 1024, 0})
    ->Args({1, 2048, 0})
    ->Args({1, 4096, 0})
    ->Args({8, 512, 0})
    ->Args({1, 8192, 0})
    ->Args({1, 8192, 1})
    ->Args({8, 8192, 0})
    ->Args({8, 8192, 1})
    ->Args({1, 32768, 0})
    ->Args({1, 32768, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
