#include "engine/sampling.h"

#include <algorithm>
#if defined(__SSE4_1__)
#include <smmintrin.h>
#endif
#include <immintrin.h>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/kernels/vexp.h"

namespace hlx::engine {

namespace {

Status range_error(const char* field, double value, const char* range) {
  return make_error(ErrorKind::kInvalidArgument, "sampling.", field, " = ", value, " is outside ", range);
}

}  // namespace

Status validate_sampling(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0) return range_error("temperature", p.temperature, "[0, inf)");
  if (p.top_k < 0) return range_error("top_k", double(p.top_k), "[0, inf) (0 = off)");
  if (!std::isfinite(p.top_p) || p.top_p <= 0 || p.top_p > 1) return range_error("top_p", p.top_p, "(0, 1]");
  if (!std::isfinite(p.min_p) || p.min_p < 0 || p.min_p > 1) return range_error("min_p", p.min_p, "[0, 1]");
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0)
    return range_error("repetition_penalty", p.repetition_penalty, "(0, inf)");
  if (!std::isfinite(p.presence_penalty) || p.presence_penalty < -2 || p.presence_penalty > 2)
    return range_error("presence_penalty", p.presence_penalty, "[-2, 2]");
  if (!std::isfinite(p.frequency_penalty) || p.frequency_penalty < -2 || p.frequency_penalty > 2)
    return range_error("frequency_penalty", p.frequency_penalty, "[-2, 2]");
  if (p.logit_bias.size() > kMaxLogitBias)
    return make_error(ErrorKind::kInvalidArgument, "sampling.logit_bias has ", p.logit_bias.size(),
                      " entries, more than ", kMaxLogitBias);
  std::vector<int64_t> ids;
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0) return make_error(ErrorKind::kInvalidArgument, "sampling.logit_bias token id ", id, " is negative");
    if (!std::isfinite(bias) || bias < -100 || bias > 100)
      return make_error(ErrorKind::kInvalidArgument, "sampling.logit_bias[", id, "] = ", bias,
                        " is outside [-100, 100]");
    ids.push_back(id);
  }
  if (p.top_logprobs < 0 || p.top_logprobs > kMaxTopLogprobs)
    return range_error("top_logprobs", double(p.top_logprobs), "[0, 20]");
  if (p.top_logprobs > 0 && !p.logprobs)
    return make_error(ErrorKind::kInvalidArgument, "sampling.top_logprobs = ", p.top_logprobs,
                      " needs sampling.logprobs = true");
  std::sort(ids.begin(), ids.end());
  if (auto dup = std::adjacent_find(ids.begin(), ids.end()); dup != ids.end())
    return make_error(ErrorKind::kInvalidArgument, "sampling.logit_bias lists token id ", *dup, " twice");
  return ok_status();
}

int64_t argmax(std::span<const float> logits) {
  int64_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i])) continue;
    if (best < 0 || logits[i] > logits[size_t(best)]) best = int64_t(i);
  }
  if (best < 0 && !logits.empty()) best = 0;
  return best;
}

Sampler::Sampler(const SamplingParams& p) : params_(p), rng_(p.seed) {
  std::sort(params_.logit_bias.begin(), params_.logit_bias.end());  // penalized() looks them up
}

Result<Sampler> Sampler::create(const SamplingParams& params, std::span<const int64_t> prompt) {
  HLX_RETURN_IF_ERROR(validate_sampling(params));
  Sampler s(params);
  for (int64_t t : prompt) s.seen_[t] += 1;
  return s;
}

void Sampler::accept(int64_t token) {
  seen_[token] += 1;
  generated_[token] += 1;
}

std::vector<int64_t> Sampler::penalized_tokens(int64_t vocab) const {
  std::vector<int64_t> t;
  if (params_.repetition_penalty != 1.0f)
    for (const auto& [id, n] : seen_)
      if (id >= 0 && id < vocab) t.push_back(id);
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f)
    for (const auto& [id, n] : generated_)
      if (id >= 0 && id < vocab) t.push_back(id);
  for (const auto& [id, bias] : params_.logit_bias)
    if (id < vocab) t.push_back(id);
  std::sort(t.begin(), t.end());
  t.erase(std::unique(t.begin(), t.end()), t.end());
  return t;
}

float Sampler::penalized(int64_t token, float l) const {
  if (params_.repetition_penalty != 1.0f && seen_.count(token)) {
    const float r = params_.repetition_penalty;
    l = l > 0 ? l / r : l * r;
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    auto it = generated_.find(token);
    if (it != generated_.end())
      l -= params_.frequency_penalty * float(it->second) + (it->second > 0 ? params_.presence_penalty : 0.0f);
  }
  const auto& b = params_.logit_bias;
  auto it = std::lower_bound(b.begin(), b.end(), std::pair<int64_t, float>(token, -INFINITY));
  if (it != b.end() && it->first == token) l += it->second;
  return l;
}

void Sampler::apply_penalties(std::span<float> logits) const {
  for (int64_t t : penalized_tokens(int64_t(logits.size()))) logits[size_t(t)] = penalized(t, logits[size_t(t)]);
}

Result<std::vector<std::pair<int64_t, double>>> Sampler::candidates(std::span<const float> logits_in) const {
  if (logits_in.empty()) return make_error(ErrorKind::kInvalidArgument, "sampling an empty logits row");
  std::vector<float> logits(logits_in.begin(), logits_in.end());
  apply_penalties(logits);
  std::vector<std::pair<int64_t, double>> c;
  c.reserve(logits.size());
  const double inv_t = params_.temperature > 0 ? 1.0 / double(params_.temperature) : 1.0;
  for (size_t i = 0; i < logits.size(); ++i)
    if (std::isfinite(logits[i])) c.emplace_back(int64_t(i), double(logits[i]) * inv_t);
  if (c.empty()) return make_error(ErrorKind::kInvalidArgument, "no finite logit in a row of ", logits.size());
  auto order = [](const std::pair<int64_t, double>& a, const std::pair<int64_t, double>& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  };
  if (params_.temperature == 0) {
    // Greedy: the argmax of the penalized logits, lowest id on ties.
    auto best = *std::min_element(c.begin(), c.end(), order);
    return std::vector<std::pair<int64_t, double>>{{best.first, 1.0}};
  }
  if (params_.top_k > 0 && size_t(params_.top_k) < c.size()) {
    std::partial_sort(c.begin(), c.begin() + params_.top_k, c.end(), order);
    c.resize(size_t(params_.top_k));
  } else {
    std::sort(c.begin(), c.end(), order);
  }
  // Softmax over the kept candidates.
  const double mx = c.front().second;
  double sum = 0;
  for (auto& [id, x] : c) sum += (x = std::exp(x - mx));
  for (auto& [id, x] : c) x /= sum;
  if (params_.top_p < 1.0f) {
    double cum = 0;
    size_t keep = c.size();
    for (size_t i = 0; i < c.size(); ++i) {
      cum += c[i].second;
      if (cum >= double(params_.top_p)) {
        keep = i + 1;
        break;
      }
    }
    c.resize(keep);
  }
  if (params_.min_p > 0.0f) {
    const double floor = double(params_.min_p) * c.front().second;
    size_t keep = 1;
    while (keep < c.size() && c[keep].second >= floor) ++keep;
    c.resize(keep);
  }
  sum = 0;
  for (auto& [id, p] : c) sum += p;
  for (auto& [id, p] : c) p /= sum;
  return c;
}

double Sampler::uniform() { return double(rng_() >> 11) * 0x1.0p-53; }

// Greedy without candidates(): that copies the row, then builds a (id, double) pair per finite
// logit (2.4 MB at a 152k vocabulary) to take one minimum, ~0.5 ms a row, 8 rows a decode step at
// 8 slots. Same result: the lowest id with the largest finite penalized logit, where only the
// tokens the penalties touch can differ from the row (they are skipped by the scan and scored after).
Result<int64_t> Sampler::greedy(std::span<const float> logits) const {
  if (logits.empty()) return make_error(ErrorKind::kInvalidArgument, "sampling an empty logits row");
  const int64_t v = int64_t(logits.size());
  const std::vector<int64_t> touched = penalized_tokens(v);
  const float inf = std::numeric_limits<float>::infinity();
  int64_t best = -1;
  float bv = -inf;
  // The first of the largest finite values of [a, e), if above bv: its maximum, then the first
  // index holding it (two branch-free passes; -0 and +0 compare equal, so either finds the first).
  auto scan = [&](int64_t a, int64_t e) {
    const float* x = logits.data();
    float m = -inf;
    int64_t i = a;
#if defined(__SSE4_1__)
    const __m128i abs_mask = _mm_set1_epi32(0x7fffffff), inf_bits = _mm_set1_epi32(0x7f800000);
    const __m128 ninf = _mm_set1_ps(-inf);
    __m128 m4 = ninf;
    for (; i + 4 <= e; i += 4) {
      const __m128 v = _mm_loadu_ps(x + i);
      const __m128i finite = _mm_cmplt_epi32(_mm_and_si128(_mm_castps_si128(v), abs_mask), inf_bits);
      m4 = _mm_max_ps(m4, _mm_blendv_ps(ninf, v, _mm_castsi128_ps(finite)));
    }
    alignas(16) float lanes[4];
    _mm_store_ps(lanes, m4);
    for (float l : lanes) m = std::max(m, l);
#endif
    for (; i < e; ++i)
      if (x[i] > m && x[i] < inf) m = x[i];
    if (!(m > bv) || m == -inf) return;
    for (i = a; x[i] != m; ++i) {
    }
    bv = m;
    best = i;
  };
  int64_t from = 0;
  for (int64_t t : touched) {
    scan(from, t);
    from = t + 1;
  }
  scan(from, v);
  for (int64_t t : touched) {
    const float l = penalized(t, logits[size_t(t)]);
    if (std::isfinite(l) && (best < 0 || l > bv || (l == bv && t < best))) {
      bv = l;
      best = t;
    }
  }
  if (best < 0) return make_error(ErrorKind::kInvalidArgument, "no finite logit in a row of ", logits.size());
  return best;
}

namespace {

// Sort key of a finite float: ascending key = descending value, -0 and +0 equal (as they compare).
inline uint32_t descending_key(float f) {
  uint32_t b;
  if (f == 0.0f) f = 0.0f;
  std::memcpy(&b, &f, 4);
  const uint32_t ascending = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return ~ascending;
}

inline float value_of_key(uint32_t key) {
  const uint32_t ascending = ~key;
  const uint32_t b = (ascending & 0x80000000u) ? (ascending & 0x7fffffffu) : ~ascending;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// LSD radix sort of 32-bit keys (3 passes of 11 bits; a pass is skipped when every key has the
// same digit there).
void radix_sort(std::vector<uint32_t>& v, std::vector<uint32_t>& tmp) {
  constexpr int kBits = 11, kBuckets = 1 << kBits, kPasses = 3;
  uint32_t hist[kPasses][kBuckets] = {};
  for (uint32_t k : v)
    for (int p = 0; p < kPasses; ++p) ++hist[p][(k >> (p * kBits)) & (kBuckets - 1)];
  tmp.resize(v.size());
  for (int p = 0; p < kPasses; ++p) {
    uint32_t* h = hist[p];
    if (h[(v.front() >> (p * kBits)) & (kBuckets - 1)] == v.size()) continue;
    uint32_t sum = 0;
    for (int b = 0; b < kBuckets; ++b) {
      const uint32_t n = h[b];
      h[b] = sum;
      sum += n;
    }
    for (uint32_t k : v) tmp[h[(k >> (p * kBits)) & (kBuckets - 1)]++] = k;
    v.swap(tmp);
  }
}

// --- bucketed_draw's pieces ---
//
// Buckets split the head by d = x - x_max (the old algorithm's own double), kBucketsHead of equal
// width over [-min(span, 40), 0]; bucket kBucketsHead holds the tail (d < kTailGap) and
// kBucketsHead + 1 the non-finite logits. The index is a non-decreasing function of -logit, so
// buckets list the sorted order (x desc, id asc) bucket by bucket, equal logits in one bucket.
constexpr double kTailGap = -40.0;  // exp(-40) = 4.2e-18 < 2^-55
constexpr int kBucketsHead = 4095;
constexpr size_t kBucketedMinRow = 2048;  // below this the sorted head is as fast
constexpr size_t kMaxBucketSort = 8192;   // a larger unsorted bucket gives up (a near-flat cluster)
// exp_poly's relative error: Taylor degree 8 on |r| <= ln2/2 leaves |r|^9/9! e^|r| < 2.8e-10,
// Horner and the reduction add ~20 ulps, and an FMA-contracted d moves exp(d) by < 1e-14. (The
// old sums' own bound is ~1.4e-10 at 152k; a tighter polynomial would settle few more draws.)
constexpr double kExpError = 5e-10;

constexpr double kLog2e = 0x1.71547652b82fep0, kLn2Hi = 0x1.62e42fee00000p-1, kLn2Lo = 0x1.a39ef35793c76p-33;
constexpr int kExpDegree = 8;
constexpr double kExpTaylor[kExpDegree + 1] = {1.0,       1.0,       1.0 / 2,    1.0 / 6,    1.0 / 24,
                                               1.0 / 120, 1.0 / 720, 1.0 / 5040, 1.0 / 40320};

// exp(x) for x in [kTailGap, 0] as head_pass_avx2 computes it, one at a time (same error bound):
// x = k ln2 + r (Cody-Waite: k ln2_hi is exact), exp(r) by its Taylor polynomial.
double exp_poly(double x) {
  const double k = std::nearbyint(x * kLog2e);
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  double p = kExpTaylor[kExpDegree];
  for (int j = kExpDegree - 1; j >= 0; --j) p = p * r + kExpTaylor[j];
  return std::ldexp(p, int(k));
}

// For each id of row[0, n) (n a multiple of 8): d = row * inv_t - xmax, its mass exp(d) (0
// outside the head) and bucket[id] (see above); counts and masses summed per bucket.
__attribute__((target("avx2,fma"))) void head_pass_avx2(const float* row, size_t n, double inv_t, double xmax,
                                                        double scale, uint16_t* bucket, uint32_t* bucket_count,
                                                        double* bucket_mass) {
  const __m256d vinv = _mm256_set1_pd(inv_t), vxmax = _mm256_set1_pd(xmax), vscale = _mm256_set1_pd(scale);
  const __m256d gap = _mm256_set1_pd(kTailGap), zero = _mm256_setzero_pd();
  const __m256d last_head = _mm256_set1_pd(kBucketsHead - 1), tail = _mm256_set1_pd(kBucketsHead),
                nonfinite = _mm256_set1_pd(kBucketsHead + 1);
  const __m256d log2e = _mm256_set1_pd(kLog2e), ln2_hi = _mm256_set1_pd(kLn2Hi), ln2_lo = _mm256_set1_pd(kLn2Lo);
  const __m128i abs_mask = _mm_set1_epi32(0x7fffffff), inf_bits = _mm_set1_epi32(0x7f800000);
  const double* c = kExpTaylor;
  alignas(32) double mass[512];
  // Blocks of 512: the histogram reads the block's stores back from L1 after they retired
  // (reading a lane just stored stalls on store forwarding); masses are not kept.
  for (size_t blk = 0; blk < n; blk += 512) {
    const size_t blk_end = std::min(n, blk + 512);
    for (size_t i = blk; i < blk_end; i += 4) {
      const __m128 f = _mm_loadu_ps(row + i);
      const __m128i finite32 = _mm_cmplt_epi32(_mm_and_si128(_mm_castps_si128(f), abs_mask), inf_bits);
      const __m256d finite = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(finite32));
      const __m256d d = _mm256_sub_pd(_mm256_mul_pd(_mm256_cvtps_pd(f), vinv), vxmax);
      const __m256d head = _mm256_and_pd(finite, _mm256_cmp_pd(d, gap, _CMP_GE_OQ));
      const __m256d x = _mm256_and_pd(d, head);  // 0 outside the head
      // exp(x) = 2^k exp(r), x = k ln2 + r (Cody-Waite), exp(r) by its Taylor polynomial.
      const __m256d k = _mm256_round_pd(_mm256_mul_pd(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m256d r = _mm256_fnmadd_pd(k, ln2_lo, _mm256_fnmadd_pd(k, ln2_hi, x));
      __m256d p = _mm256_set1_pd(c[kExpDegree]);
      for (int j = kExpDegree - 1; j >= 0; --j) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(c[j]));
      const __m256i two_k = _mm256_slli_epi64(
          _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k)), _mm256_set1_epi64x(1023)), 52);
      _mm256_store_pd(mass + (i - blk), _mm256_and_pd(_mm256_mul_pd(p, _mm256_castsi256_pd(two_k)), head));
      __m256d b = _mm256_min_pd(_mm256_mul_pd(_mm256_sub_pd(zero, x), vscale), last_head);
      b = _mm256_blendv_pd(nonfinite, _mm256_blendv_pd(tail, b, head), finite);
      const __m128i bi = _mm256_cvttpd_epi32(b);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(bucket + i), _mm_packus_epi32(bi, bi));
    }
    for (size_t j = blk; j < blk_end; ++j) {
      ++bucket_count[bucket[j]];
      bucket_mass[bucket[j]] += mass[j - blk];
    }
  }
}

// head_pass_avx2 8 at a time (n a multiple of 8).
__attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,fma"))) void head_pass_avx512(const float* row, size_t n,
                                                                                        double inv_t, double xmax,
                                                                                        double scale, uint16_t* bucket,
                                                                                        uint32_t* bucket_count,
                                                                                        double* bucket_mass) {
  const __m512d vinv = _mm512_set1_pd(inv_t), vxmax = _mm512_set1_pd(xmax), vscale = _mm512_set1_pd(scale);
  const __m512d gap = _mm512_set1_pd(kTailGap), zero = _mm512_setzero_pd();
  const __m512d last_head = _mm512_set1_pd(kBucketsHead - 1), tail = _mm512_set1_pd(kBucketsHead),
                nonfinite = _mm512_set1_pd(kBucketsHead + 1);
  const __m512d log2e = _mm512_set1_pd(kLog2e), ln2_hi = _mm512_set1_pd(kLn2Hi), ln2_lo = _mm512_set1_pd(kLn2Lo);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf_bits = _mm256_set1_epi32(0x7f800000);
  const double* c = kExpTaylor;
  alignas(64) double mass[512];
  const __mmask8 all = 0xff;  // maskz forms: GCC 12 warns on the plain ones' undefined passthrough
  for (size_t blk = 0; blk < n; blk += 512) {
    const size_t blk_end = std::min(n, blk + 512);
    for (size_t i = blk; i < blk_end; i += 8) {
      const __m256 f = _mm256_loadu_ps(row + i);
      const __mmask8 finite = _mm256_cmplt_epi32_mask(_mm256_and_si256(_mm256_castps_si256(f), abs_mask), inf_bits);
      const __m512d d = _mm512_sub_pd(_mm512_mul_pd(_mm512_maskz_cvtps_pd(all, f), vinv), vxmax);
      const __mmask8 head = finite & _mm512_cmp_pd_mask(d, gap, _CMP_GE_OQ);
      const __m512d x = _mm512_maskz_mov_pd(head, d);
      const __m512d k =
          _mm512_maskz_roundscale_pd(all, _mm512_mul_pd(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512d r = _mm512_fnmadd_pd(k, ln2_lo, _mm512_fnmadd_pd(k, ln2_hi, x));
      __m512d p = _mm512_set1_pd(c[kExpDegree]);
      for (int j = kExpDegree - 1; j >= 0; --j) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(c[j]));
      _mm512_store_pd(mass + (i - blk), _mm512_maskz_scalef_pd(head, p, k));  // p 2^k
      __m512d b = _mm512_maskz_min_pd(all, _mm512_mul_pd(_mm512_sub_pd(zero, x), vscale), last_head);
      b = _mm512_mask_blend_pd(finite, nonfinite, _mm512_mask_blend_pd(head, tail, b));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(bucket + i),
                       _mm256_cvtepi32_epi16(_mm512_maskz_cvttpd_epi32(all, b)));
    }
    for (size_t j = blk; j < blk_end; ++j) {
      ++bucket_count[bucket[j]];
      bucket_mass[bucket[j]] += mass[j - blk];
    }
  }
}

using HeadPass = void (*)(const float*, size_t, double, double, double, uint16_t*, uint32_t*, double*);

// The widest head pass this CPU runs (its n a multiple of 8), nullptr without AVX2 + FMA.
HeadPass head_pass() {
  static const HeadPass f = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw"))
      return &head_pass_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &head_pass_avx2;
    return HeadPass(nullptr);
  }();
  return f;
}

// Appends to `out` the ids whose bucket is in [lo, hi], ascending.
void ids_in_buckets(const uint16_t* bucket, size_t n, uint16_t lo, uint16_t hi, std::vector<uint32_t>& out) {
  size_t i = 0;
#if defined(__SSE4_1__)
  const __m128i vlo = _mm_set1_epi16(short(lo)), vhi = _mm_set1_epi16(short(hi));
  for (; i + 8 <= n; i += 8) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bucket + i));
    const __m128i in = _mm_cmpeq_epi16(_mm_min_epu16(_mm_max_epu16(v, vlo), vhi), v);
    uint32_t bits = uint32_t(_mm_movemask_epi8(in)) & 0x5555u;
    for (; bits; bits &= bits - 1) out.push_back(uint32_t(i + size_t(__builtin_ctz(bits)) / 2));
  }
#endif
  for (; i < n; ++i)
    if (bucket[i] >= lo && bucket[i] <= hi) out.push_back(uint32_t(i));
}

}  // namespace

// The old algorithm's choice without sorting the row. Every head token gets m = exp(d) (a
// polynomial, not libm's exp) and a bucket; per-bucket sums of m place each decision (top-p cut,
// min-p cut, the draw) in one bucket, whose tokens alone are sorted and walked. These estimates
// are not the old algorithm's floats, so a decision is taken only with a margin that provably
// covers both: against the exact real values R (ratios of sums of exp(d)), the old sequential
// sums are within (4n + 40) 2^-53 (n roundings per sum, two sums per ratio, two stages), ours
// within 2 kExpError + 2n 2^-53 (any summation order), and the tail it skips within n e^-40; eta
// below doubles their sum. A level (top_p, or u for the draw) is settled at the first position
// whose estimated cumulative share exceeds level + eta while the share before it is below
// level - eta; otherwise (the level within eta of a boundary: about 2 eta n of the draws over a
// flat row, 6e-4 at 152k) the caller takes the exact path with the same u. min-p is decided on
// d itself: p_k >= min_p p_0 iff e_k >= min_p up to a few ulps, so d vs ln(min_p) +- 1e-9
// settles it.
int64_t Sampler::bucketed_draw(std::span<const float> row, size_t finite, float mx, float mn, double* u_out) {
  const size_t n = row.size();
  const double inv_t = 1.0 / double(params_.temperature);
  const double xmax = double(mx) * inv_t;
  const double span = std::min(-kTailGap, xmax - double(mn) * inv_t);
  const double scale = span > 0 ? kBucketsHead / span : 0.0;
  constexpr size_t kB = kBucketsHead + 2;
  // count/bmass per bucket, then turned into begin[b] (first sorted position of bucket b) and
  // before[b] (mass of the buckets before b).
  std::vector<uint32_t>& begin = bucket_begin_;
  std::vector<double>& before = bucket_mass_;
  begin.assign(kB + 1, 0);
  before.assign(kB + 1, 0.0);
  bucket_.resize(n + 8);
  const size_t n8 = n & ~size_t(7);
  head_pass()(row.data(), n8, inv_t, xmax, scale, bucket_.data(), begin.data() + 1, before.data() + 1);
  if (n8 < n) {  // the last ids through the same code (identical rounding), padded with NaN
    float pad[8];
    std::fill(pad, pad + 8, NAN);
    std::copy(row.begin() + std::ptrdiff_t(n8), row.end(), pad);
    head_pass()(pad, 8, inv_t, xmax, scale, bucket_.data() + n8, begin.data() + 1, before.data() + 1);
  }
  for (size_t b = 0; b < kB; ++b) {
    begin[b + 1] += begin[b];
    before[b + 1] += before[b];
  }
  const double total = before[kBucketsHead];  // head mass; the top token alone gives 1
  auto mass = [&](uint32_t id) { return exp_poly(double(row[id]) * inv_t - xmax); };
  const double eta = (8.0 * double(finite) + 100.0) * 0x1.0p-53 + 4 * kExpError + double(finite) * 1e-17;

  // The ids of bucket b in sorted order (logit desc, id asc); false for a large unsorted bucket.
  auto bucket_ids = [&](size_t b, std::vector<uint32_t>& ids) {
    ids.clear();
    ids_in_buckets(bucket_.data(), n, uint16_t(b), uint16_t(b), ids);
    auto key = [&](uint32_t id) { return descending_key(row[id]); };
    bool in_order = true;
    for (size_t j = 1; in_order && j < ids.size(); ++j) in_order = key(ids[j - 1]) <= key(ids[j]);
    if (in_order) return true;
    if (ids.size() > kMaxBucketSort) return false;
    bucket_sort_.clear();
    for (uint32_t id : ids) bucket_sort_.push_back(uint64_t(key(id)) << 32 | id);
    std::sort(bucket_sort_.begin(), bucket_sort_.end());
    for (size_t j = 0; j < ids.size(); ++j) ids[j] = uint32_t(bucket_sort_[j]);
    return true;
  };
  // The first sorted position whose cumulative mass exceeds `level`, settled if the mass before
  // it is below level - margin and through it above level + margin; `upto` = mass through it.
  struct Spot {
    bool settled = false;
    size_t pos = 0;
    int64_t id = -1;
    double upto = 0;
  };
  std::vector<uint32_t>& ids = order_;
  auto locate = [&](double level, double margin) {
    Spot s;
    size_t b = 0;
    while (b < kBucketsHead && before[b + 1] <= level) ++b;
    if (b == kBucketsHead || !bucket_ids(b, ids)) return s;
    double cum = before[b];
    for (size_t j = 0; j < ids.size(); ++j) {
      const double prev = cum;
      cum += mass(ids[j]);
      if (cum > level) {
        s.settled = prev < level - margin && cum > level + margin;
        s.pos = begin[b] + j;
        s.id = ids[j];
        s.upto = cum;
        return s;
      }
    }
    return s;  // the bucket's sum rounded above its tokens' running sum: not settled
  };

  size_t keep = finite;  // kept prefix of the sorted order, and its mass
  double keep_mass = total;
  if (params_.top_p < 1.0f) {
    const Spot s = locate(double(params_.top_p) * total, eta * total);
    if (!s.settled) return -1;
    keep = s.pos + 1;
    keep_mass = s.upto;
  }
  if (params_.min_p > 0.0f) {
    const double theta = std::log(double(params_.min_p)), mu = 1e-9;
    auto bucket_of = [&](double d) { return size_t(std::clamp((0.0 - d) * scale, 0.0, double(kBucketsHead - 1))); };
    // One bucket of slack each side: the pass may have rounded d differently (FMA).
    const size_t lo = std::max<size_t>(bucket_of(theta + mu), 1) - 1;
    const size_t hi = std::min<size_t>(bucket_of(theta - mu) + 1, kBucketsHead - 1);
    ids.clear();
    ids_in_buckets(bucket_.data(), n, uint16_t(lo), uint16_t(hi), ids);
    size_t count = begin[lo];
    double m = before[lo];
    for (uint32_t id : ids) {
      const double d = double(row[id]) * inv_t - xmax;
      if (d == 0 || d >= theta + mu) {
        ++count;
        m += mass(id);
      } else if (!(d < theta - mu)) {
        return -1;
      }
    }
    if (count < keep) {
      keep = count;
      keep_mass = m;
    }
  }
  if (keep == 1) {
    if (!bucket_ids(0, ids)) return -1;
    *u_out = uniform();  // one draw per sampled token, whatever the row
    return ids[0];
  }
  const double u = uniform();
  *u_out = u;
  const Spot s = locate(u * keep_mass, eta * keep_mass);
  if (!s.settled || s.pos >= keep) return -1;
  return s.id;
}

// The same draw as candidates() + the loop in sample(), without their full sort of (id, double)
// pairs: first bucketed_draw (no sort; certifies its choice or gives up), else sorted_head_draw.
Result<int64_t> Sampler::sample_full_vocab(std::span<const float> logits_in) {
  std::span<const float> row = logits_in;
  if (!penalized_tokens(int64_t(logits_in.size())).empty()) {
    row_.assign(logits_in.begin(), logits_in.end());
    apply_penalties(row_);
    row = row_;
  }
  float mx = -std::numeric_limits<float>::infinity(), mn = std::numeric_limits<float>::infinity();
  size_t finite = 0, i = 0;
#if defined(__SSE4_1__)
  {
    const __m128i abs_mask = _mm_set1_epi32(0x7fffffff), inf_bits = _mm_set1_epi32(0x7f800000);
    const __m128 ninf = _mm_set1_ps(-std::numeric_limits<float>::infinity());
    __m128 vmx = ninf, vmn = _mm_sub_ps(_mm_setzero_ps(), ninf);
    __m128i count = _mm_setzero_si128();
    for (; i + 4 <= row.size(); i += 4) {
      const __m128 v = _mm_loadu_ps(row.data() + i);
      const __m128i fin = _mm_cmplt_epi32(_mm_and_si128(_mm_castps_si128(v), abs_mask), inf_bits);
      vmx = _mm_max_ps(vmx, _mm_blendv_ps(ninf, v, _mm_castsi128_ps(fin)));
      vmn = _mm_min_ps(vmn, _mm_blendv_ps(_mm_sub_ps(_mm_setzero_ps(), ninf), v, _mm_castsi128_ps(fin)));
      count = _mm_sub_epi32(count, fin);
    }
    alignas(16) float a[4], b[4];
    alignas(16) uint32_t c[4];
    _mm_store_ps(a, vmx);
    _mm_store_ps(b, vmn);
    _mm_store_si128(reinterpret_cast<__m128i*>(c), count);
    for (int j = 0; j < 4; ++j) {
      mx = std::max(mx, a[j]);
      mn = std::min(mn, b[j]);
      finite += c[j];
    }
  }
#endif
  for (; i < row.size(); ++i) {
    const float l = row[i];
    if (!std::isfinite(l)) continue;
    ++finite;
    mx = std::max(mx, l);
    mn = std::min(mn, l);
  }
  if (finite == 0) return make_error(ErrorKind::kInvalidArgument, "no finite logit in a row of ", row.size());
  if (params_.top_k > 0 && size_t(params_.top_k) < finite) return int64_t(-1);
  double u = -1;
  // Below 1e-16, min-p may keep part of the tail that sorted_head_draw leaves to the full path.
  if (finite >= kBucketedMinRow && head_pass() && (params_.min_p == 0.0f || params_.min_p >= 1e-16f)) {
    const int64_t t = bucketed_draw(row, finite, mx, mn, &u);
    if (t >= 0) return t;
  }
  return sorted_head_draw(row, finite, mx, u);
}

// Only the "head" (x - max >= kTailGap) is sorted, as bare 32-bit order keys of the logits
// (radix sort), and exponentiated; the id of the drawn position is recovered at the end (the r-th
// id holding that logit, ties being in id order). The tail cannot change any sum of the old
// algorithm: in descending order a term is added to a partial sum that already holds the first
// term (1 for the softmax sum, p_0 for the others), and a tail term is below 2^-55 of that first
// term, under half an ulp of the partial sum, so the addition rounds back to the same value. Hence
// the softmax sum, the top-p cut, the renormalisation and the draw's cumulation equal the old ones
// bit for bit; the tail only matters as "the last kept candidate" (the draw's rounding fallback),
// the overall last in (x desc, id asc) order, found by a scan. One case is left to the full path:
// min-p keeping the whole head and maybe part of the tail (-1, no RNG draw done then; never
// when u >= 0 was drawn by bucketed_draw, which leaves min_p < 1e-16 alone).
int64_t Sampler::sorted_head_draw(std::span<const float> logits, size_t finite, float mx, double u_drawn) {
  const double inv_t = 1.0 / double(params_.temperature);
  const double xmax = double(mx) * inv_t;
  std::vector<uint32_t>& head = head_;
  head.clear();
  head.reserve(finite);
  double tail_max = -std::numeric_limits<double>::infinity();  // largest x - xmax in the tail
  for (float l : logits) {
    if (!std::isfinite(l)) continue;
    const double d = double(l) * inv_t - xmax;
    if (d >= kTailGap)
      head.push_back(descending_key(l));
    else
      tail_max = std::max(tail_max, d);
  }
  const size_t tail = finite - head.size();
  int64_t last = -1;  // smallest finite logit, largest id among equals: last in sorted order
  if (tail > 0)
    for (size_t i = 0; i < logits.size(); ++i)
      if (std::isfinite(logits[i]) && (last < 0 || logits[i] <= logits[size_t(last)])) last = int64_t(i);
  if (head.size() > 256)
    radix_sort(head, sort_tmp_);
  else
    std::sort(head.begin(), head.end());
  // Softmax over the head in sorted order (the tail adds nothing to the sum); equal logits share
  // one exp.
  std::vector<double>& p = head_p_;
  p.resize(head.size());
  double sum = 0, e = 0;
  for (size_t i = 0; i < head.size(); ++i) {
    if (i == 0 || head[i] != head[i - 1]) e = std::exp(double(value_of_key(head[i])) * inv_t - xmax);
    sum += (p[i] = e);
  }
  for (double& x : p) x /= sum;
  size_t keep = head.size();
  bool keep_tail = tail > 0;
  if (params_.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < head.size(); ++i) {
      cum += p[i];
      if (cum >= double(params_.top_p)) {
        keep = i + 1;
        keep_tail = false;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {
    const double floor = double(params_.min_p) * p[0];
    size_t k = 1;
    while (k < keep && p[k] >= floor) ++k;
    if (k < keep) {
      keep = k;
      keep_tail = false;
    } else if (keep_tail) {
      if (std::exp(tail_max) / sum >= floor) return int64_t(-1);  // min-p would keep some of the tail
      keep_tail = false;
    }
  }
  // The id at sorted position i: the r-th (in id order) of the logits holding that value.
  auto id_at = [&](size_t i) -> int64_t {
    size_t first = i;
    while (first > 0 && head[first - 1] == head[i]) --first;
    size_t r = i - first;
    for (size_t id = 0; id < logits.size(); ++id)
      if (std::isfinite(logits[id]) && descending_key(logits[id]) == head[i] && r-- == 0) return int64_t(id);
    return -1;  // unreachable: the key came from this row
  };
  if (keep + (keep_tail ? tail : 0) == 1) {
    if (u_drawn < 0) uniform();  // one draw per sampled token, whatever the row
    return id_at(0);
  }
  sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += p[i];
  const double u = u_drawn >= 0 ? u_drawn : uniform();
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += p[i] / sum;
    if (u < cum) return id_at(i);
  }
  return keep_tail ? last : id_at(keep - 1);  // rounding: u within the last ulp of 1
}

Result<int64_t> Sampler::sample(std::span<const float> logits) {
  if (params_.temperature == 0) return greedy(logits);
  if (params_.top_k == 0 || size_t(params_.top_k) >= logits.size()) {
    HLX_ASSIGN_OR_RETURN(int64_t t, sample_full_vocab(logits));
    if (t >= 0) return t;
  }
  HLX_ASSIGN_OR_RETURN(auto c, candidates(logits));
  if (c.size() == 1) {
    uniform();  // one draw per sampled token, whatever the row
    return c.front().first;
  }
  const double u = uniform();
  double cum = 0;
  for (const auto& [id, p] : c) {
    cum += p;
    if (u < cum) return id;
  }
  return c.back().first;  // rounding: u within the last ulp of 1
}

Result<int64_t> Sampler::next(std::span<const float> logits, std::optional<TokenLogprobs>* lp) {
  HLX_ASSIGN_OR_RETURN(int64_t t, sample(logits));
  if (lp && params_.logprobs) {
    HLX_ASSIGN_OR_RETURN(TokenLogprobs l, logprobs(logits, t, params_.top_logprobs));
    *lp = std::move(l);
  }
  accept(t);
  return t;
}

// Two passes over the row: the maximum and the top ids (a sorted list of at most `top`, which a
// logit enters only when above its last: one compare per id in the common case), then the sum of
// exp(x - max) in double. log-sum-exp = max + log(sum).
Result<TokenLogprobs> Sampler::logprobs(std::span<const float> logits, int64_t chosen, int64_t top) {
  if (logits.empty()) return make_error(ErrorKind::kInvalidArgument, "logprobs of an empty logits row");
  if (chosen < 0 || chosen >= int64_t(logits.size()))
    return make_error(ErrorKind::kInvalidArgument, "logprobs: token ", chosen, " is outside a row of ", logits.size());
  top = std::clamp<int64_t>(top, 0, kMaxTopLogprobs);
  std::span<const float> row = logits;
  if (!penalized_tokens(int64_t(logits.size())).empty()) {
    lp_row_.assign(logits.begin(), logits.end());
    apply_penalties(lp_row_);
    row = lp_row_;
  }
  const float inf = std::numeric_limits<float>::infinity();
  float mx = -inf;
  std::vector<std::pair<int64_t, float>> best;  // (id, logit), logit desc, id asc
  best.reserve(size_t(top) + 1);
  // Only a logit above `thr` can change the maximum or enter the top list: the list's last once
  // it is full (the maximum is its first), else the maximum itself.
  float thr = -inf;
  auto visit = [&](size_t i) {
    const float x = row[i];
    if (!(x > thr && x < inf)) return;  // NaN and infinities take no part
    mx = std::max(mx, x);
    // Ids come in ascending order, so an equal logit never displaces an earlier id.
    if (top > 0 && (int64_t(best.size()) < top || x > best.back().second)) {
      auto at = std::upper_bound(best.begin(), best.end(), x,
                                 [](float v, const std::pair<int64_t, float>& b) { return v > b.second; });
      best.insert(at, {int64_t(i), x});
      if (int64_t(best.size()) > top) best.pop_back();
    }
    thr = top == 0 ? mx : (int64_t(best.size()) == top ? best.back().second : -inf);
  };
  size_t i = 0;
#if defined(__SSE4_1__)
  {  // four logits at a time; most blocks hold nothing above thr
    const __m128i abs_mask = _mm_set1_epi32(0x7fffffff), inf_bits = _mm_set1_epi32(0x7f800000);
    const __m128 ninf = _mm_set1_ps(-inf);
    for (; i + 4 <= row.size(); i += 4) {
      const __m128 v = _mm_loadu_ps(row.data() + i);
      const __m128i finite = _mm_cmplt_epi32(_mm_and_si128(_mm_castps_si128(v), abs_mask), inf_bits);
      const __m128 x = _mm_blendv_ps(ninf, v, _mm_castsi128_ps(finite));
      if (_mm_movemask_ps(_mm_cmpgt_ps(x, _mm_set1_ps(thr))) == 0) continue;
      for (size_t j = i; j < i + 4; ++j) visit(j);
    }
  }
#endif
  for (; i < row.size(); ++i) visit(i);
  if (mx == -inf) return make_error(ErrorKind::kInvalidArgument, "logprobs: no finite logit in a row of ", row.size());
  // exp(x - max) through the runtime's vector exp (1 ulp), summed in double (std::exp in double
  // over 152k logits cost twice this whole function; bench/sampling_bench.cc BM_Logprobs).
  double sum = 0;
  constexpr size_t kChunk = 1024;
  alignas(64) float buf[kChunk];
  for (size_t i0 = 0; i0 < row.size(); i0 += kChunk) {
    const size_t len = std::min(kChunk, row.size() - i0);
    for (size_t j = 0; j < len; ++j) {
      const float x = row[i0 + j];
      buf[j] = (x > -inf && x < inf) ? x - mx : -inf;  // exp(-inf) = 0: non-finite logits take no part
    }
    kernels::exp_f32(buf, buf, int64_t(len));
    double acc[8] = {};
    size_t j = 0;
    for (; j + 8 <= len; j += 8)
      for (size_t l = 0; l < 8; ++l) acc[l] += double(buf[j + l]);
    for (; j < len; ++j) acc[0] += double(buf[j]);
    for (double a : acc) sum += a;
  }
  const double lse = double(mx) + std::log(sum);
  TokenLogprobs out;
  out.token = chosen;
  const float c = row[size_t(chosen)];
  out.logprob = (c > -inf && c < inf) ? double(c) - lse : -double(inf);
  out.top.reserve(best.size());
  for (const auto& [id, x] : best) out.top.emplace_back(id, double(x) - lse);
  return out;
}

Result<std::vector<double>> Sampler::distribution(std::span<const float> logits) const {
  HLX_ASSIGN_OR_RETURN(auto c, candidates(logits));
  std::vector<double> out(logits.size(), 0.0);
  for (const auto& [id, p] : c) out[size_t(id)] = p;
  return out;
}

}  // namespace hlx::engine
