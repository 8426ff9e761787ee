// Int8 weights (WeightFormat::kInt8): per-output-channel symmetric quantization at pack time and
// the products over it. Decode is bound by the bytes of weights read per token, so int8 halves
// them against bf16; activations stay f32 (bf16 ones are widened), nothing else is quantized.
// Layout and arithmetic contract: matmul_int8.h.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "runtime/kernels/cpu.h"
#include "runtime/kernels/internal.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/matmul_int8.h"
#include "runtime/kernels/parallel.h"

namespace hlx::kernels {

namespace {
thread_local WeightFormat tl_format = WeightFormat::kAsStored;
}  // namespace

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kAsStored: return "as-stored";
    case WeightFormat::kInt8: return "int8";
  }
  return "unknown";
}

WeightFormat current_weight_format() { return tl_format; }
WeightFormatScope::WeightFormatScope(WeightFormat f) : saved_(tl_format) { tl_format = f; }
WeightFormatScope::~WeightFormatScope() { tl_format = saved_; }

namespace int8 {
namespace {

// Portable kernel (CPUs without AVX-512): `rows` rows x one block, straight from int8.
void rows_portable(int64_t rows, int64_t k, int64_t n, const float* a, const int8_t* q, const float* scale,
                   int64_t b, DType c_type, void* c) {
  const int8_t* blk = q + b * k * kBlock;
  const int64_t n0 = b * kBlock, cols = std::min(kBlock, n - n0);
  for (int64_t r = 0; r < rows; ++r) {
    float acc[kBlock] = {};
    const float* ar = a + r * k;
    for (int64_t kk = 0; kk < k; ++kk) {
      const float x = ar[kk];
      const int8_t* qp = blk + kk * kBlock;
      for (int64_t j = 0; j < kBlock; ++j) acc[j] += x * float(qp[j]);
    }
    for (int64_t j = 0; j < cols; ++j) {
      const float v = acc[j] * scale[n0 + j];
      if (c_type == DType::kF32) static_cast<float*>(c)[r * n + n0 + j] = v;
      else static_cast<bf16*>(c)[r * n + n0 + j] = f32_to_bf16(v);
    }
  }
}

thread_local internal::ScratchBuffer tl_act, tl_tile;

bool use_avx512() {
  static const bool ok = cpu_features().avx512f && cpu_features().avx512bw && cpu_features().avx512bf16;
  return ok;
}

class Int8PackedWeight final : public PackedWeight {
 public:
  static Result<std::unique_ptr<PackedWeight>> create(DType type, int64_t k, int64_t n, bool transposed,
                                                      const void* data) {
    std::unique_ptr<Int8PackedWeight> w(new Int8PackedWeight());
    w->k_ = k;
    w->n_ = n;
    w->nblocks_ = (n + kBlock - 1) / kBlock;
    w->q_ = allocate_aligned(size_t(w->nblocks_ * k * kBlock));
    w->scale_ = allocate_aligned(size_t(w->nblocks_ * kBlock) * 4);
    int8_t* q = static_cast<int8_t*>(w->q_.get());
    float* scale = static_cast<float*>(w->scale_.get());
    std::atomic<int64_t> bad_col{-1};
    const bool avx = use_avx512();
    parallel_for(w->nblocks_, 1, [&](int64_t b0, int64_t b1) {
      std::vector<float> col(static_cast<size_t>(k));
      std::vector<int8_t> rows(static_cast<size_t>(kBlock * k));  // the block as [64][K], then transposed
      for (int64_t b = b0; b < b1; ++b) {
        int8_t* blk = q + b * k * kBlock;
        const int64_t n0 = b * kBlock, cols = std::min(kBlock, n - n0);
        if (cols < kBlock) std::memset(rows.data(), 0, rows.size());
        for (int64_t j = cols; j < kBlock; ++j) scale[n0 + j] = 0.f;
        for (int64_t j = 0; j < cols; ++j) {
          // Column n0 + j as f32 (a contiguous row of the Hugging Face [N, K] layout).
          if (transposed) {
            internal::to_f32(type, static_cast<const char*>(data) + size_t((n0 + j) * k) * dtype_size(type), k,
                             col.data());
          } else {
            for (int64_t kk = 0; kk < k; ++kk) col[size_t(kk)] = internal::load_f32(type, data, kk * n + n0 + j);
          }
          // max |w| and whether every value is finite (|w| <= FLT_MAX is false for NaN and Inf),
          // in a form the compiler vectorizes.
          float maxabs = 0.f;
          int finite = 1;
          if (avx) {
            maxabs = maxabs_avx512(col.data(), k);
            finite = std::isfinite(maxabs);
          } else {
            for (int64_t kk = 0; kk < k; ++kk) {
              const float v = std::fabs(col[size_t(kk)]);
              finite &= int(v <= std::numeric_limits<float>::max());
              maxabs = maxabs < v ? v : maxabs;
            }
          }
          if (!finite) {
            bad_col.store(n0 + j);
            maxabs = 0.f;
          }
          const float s = maxabs / 127.f;
          scale[n0 + j] = s;
          int8_t* qr = rows.data() + j * k;
          if (s == 0.f) {
            std::memset(qr, 0, size_t(k));
          } else if (avx) {
            quantize_row_avx512(col.data(), k, s, qr);
          } else {
            // Round half to even (the default rounding mode), as numpy's rint; |w / s| <= 127
            // up to rounding, so the clamp only guards the last ulp.
            for (int64_t kk = 0; kk < k; ++kk)
              qr[kk] = int8_t(std::clamp(std::nearbyint(col[size_t(kk)] / s), -127.f, 127.f));
          }
        }
        // Transposed in 64 x 64 tiles, so reads and writes both stay in L1.
        for (int64_t k0 = 0; k0 < k; k0 += 64) {
          const int64_t k1 = std::min(k, k0 + 64);
          for (int64_t j = 0; j < kBlock; ++j)
            for (int64_t kk = k0; kk < k1; ++kk) blk[kk * kBlock + j] = rows[size_t(j * k + kk)];
        }
      }
    });
    if (bad_col.load() >= 0)
      return make_error(ErrorKind::kInvalidArgument, "PackedWeight::pack(int8): column ", bad_col.load(), " of a ", k,
                        "x", n, " weight has a non-finite value");
    return std::unique_ptr<PackedWeight>(std::move(w));
  }

  Status multiply(int64_t m, DType a_type, const void* a, DType c_type, void* c) const override {
    if ((a_type != DType::kF32 && a_type != DType::kBF16 && a_type != DType::kF16) ||
        (c_type != DType::kF32 && c_type != DType::kBF16))
      return make_error(ErrorKind::kUnsupported, "PackedWeight::multiply(int8): a=", dtype_name(a_type),
                        " c=", dtype_name(c_type), " (a f32/bf16/f16, c f32/bf16)");
    if (m < 0) return make_error(ErrorKind::kInvalidArgument, "PackedWeight::multiply: negative m=", m);
    if (m == 0) return ok_status();
    const float* af = static_cast<const float*>(a);
    if (a_type != DType::kF32) {
      float* buf = static_cast<float*>(tl_act.get(size_t(m * k_) * 4));
      internal::to_f32(a_type, a, m * k_, buf);
      af = buf;
    }
    const int8_t* q = static_cast<const int8_t*>(q_.get());
    const float* scale = static_cast<const float*>(scale_.get());
    const size_t c_size = dtype_size(c_type);
    const int64_t k = k_, n = n_;
    if (use_avx512() && m <= kStreamMaxM) {
      // Pairs of blocks per item (the kernel runs one or two rows over two blocks at once).
      const int64_t pairs = (nblocks_ + 1) / 2;
      parallel_for(pairs, 1, [&](int64_t p0, int64_t p1) {
        internal::FtzDazScope ftz;
        stream_avx512(m, k, n, af, q, scale, 2 * p0, std::min(2 * p1, nblocks_), c_type, c);
      });
      return ok_status();
    }
    // Items: (row chunk, block); the tiled kernel converts its block once per item. Chunks of
    // about equal size (multiples of its 6-row groups, at most kTileRows rows).
    const int64_t chunks = (m + kTileRows - 1) / kTileRows;
    const int64_t chunk_rows = std::min(kTileRows, ((m + chunks - 1) / chunks + 5) / 6 * 6);
    const int64_t row_chunks = (m + chunk_rows - 1) / chunk_rows;
    const bool avx = use_avx512();
    parallel_for(row_chunks * nblocks_, 1, [&](int64_t i0, int64_t i1) {
      internal::FtzDazScope ftz;
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t r0 = (i / nblocks_) * chunk_rows, b = i % nblocks_;
        const int64_t rows = std::min(chunk_rows, m - r0);
        void* cr = static_cast<char*>(c) + size_t(r0 * n) * c_size;
        if (avx) {
          float* scratch = static_cast<float*>(tl_tile.get(size_t(tile_scratch_floats()) * 4));
          tile_avx512(rows, k, n, af + r0 * k, q, scale, b, scratch, c_type, cr);
        } else {
          rows_portable(rows, k, n, af + r0 * k, q, scale, b, c_type, cr);
        }
      }
    });
    return ok_status();
  }

  size_t packed_bytes() const override { return int8_packed_bytes(k_, n_); }

 private:
  int64_t nblocks_ = 0;
  std::shared_ptr<void> q_;      // nblocks * K * 64 int8
  std::shared_ptr<void> scale_;  // nblocks * 64 f32
};

}  // namespace
}  // namespace int8

size_t int8_packed_bytes(int64_t k, int64_t n) {
  const int64_t cols = (n + int8::kBlock - 1) / int8::kBlock * int8::kBlock;
  return size_t(cols * k) + size_t(cols) * 4;  // int8 values + f32 scales
}

Result<std::unique_ptr<PackedWeight>> pack_int8(DType type, int64_t k, int64_t n, bool transposed,
                                                const void* data) {
  return int8::Int8PackedWeight::create(type, k, n, transposed, data);
}

}  // namespace hlx::kernels
