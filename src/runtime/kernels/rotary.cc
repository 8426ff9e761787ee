// hlx.rotary (rotate_half convention). cos/sin are computed once per row for all heads, in f32
// from float(position) * inv_freq[i]. `out` may alias `x`: each (i, i + R/2) pair is read before
// either is written.
#include "runtime/kernels/rotary.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/kernels/cpu.h"
#include "runtime/kernels/internal.h"
#include "runtime/kernels/parallel.h"

namespace hlx::kernels {
namespace internal {
// rotary_avx512.cc (call only with AVX512F+BW): the head rotation, same arithmetic as below.
void rotate_half_f32_avx512(const float* x, const float* cs, const float* sn, int64_t half, float* y);
void rotate_half_bf16_avx512(const uint16_t* x, const float* cs, const float* sn, int64_t half, float* buf);
}  // namespace internal
namespace {

// cos/sin of float(pos) * inv_freq[i], i < half.
void trig_row(int32_t pos, const float* inv_freq, int64_t half, float* cs, float* sn) {
  const float p = float(pos);
  for (int64_t i = 0; i < half; ++i) {
    const float angle = p * inv_freq[i];
    cs[i] = std::cos(angle);
    sn[i] = std::sin(angle);
  }
}

// Per-thread memo of trig_row for positions below kMaxPos: a prefill sends the same positions
// through every layer's q and k (56 calls for 28 layers), and cos/sin were most of the kernel's
// time. Entries are keyed by the inv_freq values (models alternating two rope tables keep both).
// The stored values are trig_row's own results under the same FTZ/DAZ mode, so no bit changes.
class TrigCache {
 public:
  static constexpr int32_t kMaxPos = 8192;

  // The table for this inv_freq, made current (the least recently used one is replaced).
  void select(const float* inv_freq, int64_t half) {
    for (int k = 0; k < 2; ++k) {
      Entry& e = entries_[k];
      if (int64_t(e.inv.size()) == half && (half == 0 || std::memcmp(e.inv.data(), inv_freq, size_t(half) * 4) == 0)) {
        cur_ = &e;
        e.used = ++clock_;
        return;
      }
    }
    Entry& e = entries_[0].used <= entries_[1].used ? entries_[0] : entries_[1];
    e.inv.assign(inv_freq, inv_freq + half);
    e.table.clear();
    e.have.clear();
    e.used = ++clock_;
    cur_ = &e;
  }
  // cos then sin of `pos` (2 * half floats), or nullptr when pos is not cached.
  const float* row(int32_t pos) {
    if (pos < 0 || pos >= kMaxPos) return nullptr;
    Entry& e = *cur_;
    const int64_t half = int64_t(e.inv.size());
    if (size_t(pos) >= e.have.size()) {
      e.have.resize(size_t(pos) + 1, 0);
      e.table.resize(e.have.size() * size_t(2 * half));
    }
    float* t = e.table.data() + size_t(pos) * size_t(2 * half);
    if (!e.have[size_t(pos)]) {
      trig_row(pos, e.inv.data(), half, t, t + half);
      e.have[size_t(pos)] = 1;
    }
    return t;
  }

 private:
  struct Entry {
    std::vector<float> inv, table;
    std::vector<uint8_t> have;
    uint64_t used = 0;
  };
  Entry entries_[2];
  Entry* cur_ = nullptr;
  uint64_t clock_ = 0;
};

}  // namespace

Status rotary(int64_t rows, int64_t heads, int64_t head_dim, int64_t rotary_dim, DType x_type, const void* x,
              const int32_t* positions, const float* inv_freq, void* out) {
  if (rows < 0 || heads < 0 || head_dim <= 0 || rotary_dim < 0 || rotary_dim > head_dim || rotary_dim % 2)
    return make_error(ErrorKind::kInvalidArgument, "rotary: rows=", rows, " heads=", heads, " head_dim=", head_dim,
                      " rotary_dim=", rotary_dim, " (need even rotary_dim <= head_dim)");
  if (x_type != DType::kF32 && x_type != DType::kBF16)
    return make_error(ErrorKind::kUnsupported, "rotary: x type ", dtype_name(x_type), " (expected f32 or bf16)");
  const int64_t half = rotary_dim / 2;
  const int64_t row_elems = heads * head_dim;
  static const bool avx512 = cpu_features().avx512f && cpu_features().avx512bw;
  auto do_row = [&](int64_t r, TrigCache& cache, float* cs_buf, float* sn_buf, float* buf) {
    const float *cs = cs_buf, *sn = sn_buf;
    if (const float* t = cache.row(positions[r]))
      cs = t, sn = t + half;
    else
      trig_row(positions[r], inv_freq, half, cs_buf, sn_buf);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t base = r * row_elems + h * head_dim;
      if (x_type == DType::kF32) {
        const float* xs = static_cast<const float*>(x) + base;
        float* os = static_cast<float*>(out) + base;
        if (avx512) {
          internal::rotate_half_f32_avx512(xs, cs, sn, half, os);
        } else {
#pragma omp simd
          for (int64_t i = 0; i < half; ++i) {
            const float a = xs[i], b = xs[i + half];
            os[i] = a * cs[i] - b * sn[i];
            os[i + half] = b * cs[i] + a * sn[i];
          }
        }
        if (os != xs)
          for (int64_t i = rotary_dim; i < head_dim; ++i) os[i] = xs[i];
      } else {
        const uint16_t* xs = static_cast<const uint16_t*>(x) + base;
        if (avx512) {
          internal::rotate_half_bf16_avx512(xs, cs, sn, half, buf);
        } else {
#pragma omp simd
          for (int64_t i = 0; i < half; ++i) {
            const float a = f32_from_bits(uint32_t(xs[i]) << 16), b = f32_from_bits(uint32_t(xs[i + half]) << 16);
            buf[i] = a * cs[i] - b * sn[i];
            buf[i + half] = b * cs[i] + a * sn[i];
          }
        }
        bf16* os = static_cast<bf16*>(out) + base;
        internal::f32_to_bf16_n(buf, rotary_dim, os);
        if (static_cast<const void*>(os) != static_cast<const void*>(xs))
          for (int64_t i = rotary_dim; i < head_dim; ++i) os[i] = bf16{xs[i]};
      }
    }
  };
  // One decode row (16 heads x 128) is ~2k elements: below 32k the OpenMP fork costs more than it saves.
  const bool parallel = rows >= 2 && rows * row_elems >= (1 << 15);
  auto run_rows = [&](int64_t r0, int64_t r1) {
    internal::FtzDazScope ftz_daz;
    thread_local std::vector<float> cs, sn, buf;
    thread_local TrigCache cache;
    if (cs.size() < size_t(half)) cs.resize(size_t(half));
    if (sn.size() < size_t(half)) sn.resize(size_t(half));
    if (buf.size() < size_t(rotary_dim)) buf.resize(size_t(rotary_dim));
    cache.select(inv_freq, half);
    for (int64_t r = r0; r < r1; ++r) do_row(r, cache, cs.data(), sn.data(), buf.data());
  };
  if (parallel) {
    parallel_for(rows, std::max<int64_t>(1, (int64_t(1) << 14) / row_elems), run_rows);  // on the runtime pool
  } else {
    run_rows(0, rows);
  }
  return ok_status();
}

}  // namespace hlx::kernels
