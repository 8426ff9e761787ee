// Int8 weights (WeightFormat::kInt8): per-output-channel symmetric quantization at pack time and
// the products over it. Decode is bound by the bytes of weights read per token, so int8 halves
// them against bf16; each product quantizes its activations to int16 per row and multiplies
// integer pairs (vpdpwssd on AVX512-VNNI). Layout and arithmetic contract: matmul_int8.h.
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
thread_local PackOptions tl_pack;
}  // namespace

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kAsStored:
      return "as-stored";
    case WeightFormat::kInt8:
      return "int8";
    case WeightFormat::kInt4:
      return "int4";
  }
  return "unknown";
}

PackOptions current_pack_options() { return tl_pack; }
PackScope::PackScope(PackOptions o) : saved_(tl_pack) { tl_pack = o; }
PackScope::~PackScope() { tl_pack = saved_; }

namespace int8 {

namespace {

// max |x[at + i]| over i < k (x of type t); NaN when some value is NaN or infinite. Portable twin of
// maxabs_avx512.
float maxabs_portable(DType t, const void* x, int64_t at, int64_t k) {
  float maxabs = 0.f;
  int finite = 1;
  for (int64_t i = 0; i < k; ++i) {
    const float v = std::fabs(internal::load_f32(t, x, at + i));
    finite &= int(v <= std::numeric_limits<float>::max());  // false for NaN and Inf
    maxabs = maxabs < v ? v : maxabs;
  }
  return finite ? maxabs : std::numeric_limits<float>::quiet_NaN();
}

}  // namespace

// Portable activation quantization (matmul_int8.h), run under FTZ/DAZ: the comparisons and the
// division then read an |a| below FLT_MIN as 0, as the AVX-512 version's instructions do.
float quantize_act(DType a_type, const void* a, int64_t at, int64_t len, int64_t pairs, int32_t* dst) {
  const float s = maxabs_portable(a_type, a, at, len) / 32767.f;  // NaN for a NaN/Inf row
  if (!(s > 0.f)) {                                               // zero (or flushed) row, or a NaN/Inf row
    std::memset(dst, 0, size_t(pairs) * 4);
    return s;
  }
  for (int64_t p = 0; p < pairs; ++p) {
    int32_t half[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      if (2 * p + i >= len) break;
      const float x = internal::load_f32(a_type, a, at + 2 * p + i);
      half[i] = int32_t(std::clamp(std::nearbyint(x / s), -32767.f, 32767.f));  // nearest even
    }
    dst[p] = int32_t(uint32_t(uint16_t(half[0])) | (uint32_t(uint16_t(half[1])) << 16));
  }
  return s;
}

namespace {

// Portable product (CPUs without AVX512-VNNI/BW): `rows` rows x block b with plain int32 sums in
// the contract's chunks. Row r's k-pair p is ap[r * row_stride + p * pair_stride] (either layout).
void rows_portable(int64_t rows, int64_t k, int64_t n, const int32_t* ap, int64_t row_stride, int64_t pair_stride,
                   const float* sa, const int8_t* q, const float* sw, int64_t b, DType c_type, void* c) {
  const int64_t pairs = pairs_of(k);
  const int8_t* blk = q + b * pairs * kLine;
  const int64_t n0 = b * kBlock, cols = std::min(kBlock, n - n0);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* ar = ap + r * row_stride;
    float sum[kBlock] = {};
    for (int64_t c0 = 0; c0 < pairs; c0 += kChunkPairs) {
      int32_t acc[kBlock] = {};
      for (int64_t p = c0; p < std::min(pairs, c0 + kChunkPairs); ++p) {
        const uint32_t x = uint32_t(ar[p * pair_stride]);
        const int32_t a0 = int16_t(uint16_t(x)), a1 = int16_t(uint16_t(x >> 16));
        const int8_t* line = blk + p * kLine;
        for (int64_t j = 0; j < kBlock; ++j) acc[j] += a0 * line[2 * j] + a1 * line[2 * j + 1];
      }
      for (int64_t j = 0; j < kBlock; ++j) sum[j] += float(acc[j]);
    }
    for (int64_t j = 0; j < cols; ++j) {
      const float v = (sum[j] * sa[r]) * sw[n0 + j];
      if (c_type == DType::kF32)
        static_cast<float*>(c)[r * n + n0 + j] = v;
      else
        static_cast<bf16*>(c)[r * n + n0 + j] = f32_to_bf16(v);
    }
  }
}

thread_local internal::ScratchBuffer tl_act, tl_row, tl_tile;

// Packing helpers need AVX-512 F/BW; the products also VNNI.
bool avx512_pack() {
  static const bool ok = cpu_features().avx512f && cpu_features().avx512bw;
  return ok;
}

float quantize_row_any(DType a_type, const void* a, int64_t row, int64_t k, int32_t* dst) {
  return avx512_vnni() ? quantize_act_avx512(a_type, a, row * k, k, pairs_of(k), dst)
                       : quantize_act(a_type, a, row * k, k, pairs_of(k), dst);
}

class Int8PackedWeight final : public PackedWeight {
 public:
  static Result<std::unique_ptr<PackedWeight>> create(DType type, int64_t k, int64_t n, bool transposed,
                                                      const void* data, SourceDone source_done) {
    std::unique_ptr<Int8PackedWeight> w(new Int8PackedWeight());
    w->k_ = k;
    w->n_ = n;
    w->nblocks_ = (n + kBlock - 1) / kBlock;
    const int64_t pairs = pairs_of(k);
    w->q_ = allocate_packed(size_t(w->nblocks_ * pairs * kLine));
    w->scale_ = allocate_packed(size_t(w->nblocks_ * kBlock) * 4);
    int8_t* q = static_cast<int8_t*>(w->q_.get());
    float* scale = static_cast<float*>(w->scale_.get());
    std::atomic<int64_t> bad_col{-1};
    const bool avx = avx512_pack();
    parallel_for(w->nblocks_, 1, [&](int64_t b0, int64_t b1) {
      std::vector<float> col(static_cast<size_t>(k));
      // The block as [64][2 * pairs] (a zero padded k for odd K), then interleaved into k-pair lines.
      const int64_t kp = 2 * pairs;
      std::vector<int8_t> rows(static_cast<size_t>(kBlock * kp), 0);
      for (int64_t b = b0; b < b1; ++b) {
        int8_t* blk = q + b * pairs * kLine;
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
          // max |w|; NaN when some value is NaN or infinite.
          float maxabs =
              avx ? maxabs_avx512(DType::kF32, col.data(), 0, k) : maxabs_portable(DType::kF32, col.data(), 0, k);
          if (std::isnan(maxabs)) {
            bad_col.store(n0 + j);
            maxabs = 0.f;
          }
          const float s = maxabs / 127.f;
          scale[n0 + j] = s;
          int8_t* qr = rows.data() + j * kp;
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
        if (transposed && source_done)
          source_done(static_cast<const char*>(data) + size_t(n0 * k) * dtype_size(type),
                      size_t(cols * k) * dtype_size(type));
        // Interleaved 32 k-pairs at a time, so reads and writes both stay in L1.
        for (int64_t p0 = 0; p0 < pairs; p0 += 32) {
          const int64_t p1 = std::min(pairs, p0 + 32);
          for (int64_t j = 0; j < kBlock; ++j)
            for (int64_t p = p0; p < p1; ++p) {
              blk[p * kLine + 2 * j] = rows[size_t(j * kp + 2 * p)];
              blk[p * kLine + 2 * j + 1] = rows[size_t(j * kp + 2 * p + 1)];
            }
        }
      }
    });
    if (bad_col.load() >= 0)
      return make_error(ErrorKind::kInvalidArgument, "PackedWeight::pack(int8): column ", bad_col.load(), " of a ", k,
                        "x", n, " weight has a non-finite value");
    return std::unique_ptr<PackedWeight>(std::move(w));
  }

  Status multiply(int64_t m, DType a_type, const void* a, DType c_type, void* c) const override {
    const Int8PackedWeight* self = this;
    return run(m, a_type, a, c_type, &self, &c, 1);
  }

  // C_i = A · W_i for `count` weights with the same K: A quantized once, and one parallel_for over
  // the work items of all products (one pool start and one tail for q/k/v or gate/up). Each
  // output is computed exactly as multiply() alone computes it.
  static Status run(int64_t m, DType a_type, const void* a, DType c_type, const Int8PackedWeight* const* w,
                    void* const* c, int count) {
    HLX_RETURN_IF_ERROR(internal::check_quantized_multiply("int8", m, a_type, c_type));
    if (m == 0 || count == 0) return ok_status();
    const int64_t k = w[0]->k_, pairs = pairs_of(k);
    const bool avx = avx512_vnni();
    // Work items per product, and the first item of each.
    const bool stream = m <= kStreamMaxM;
    const int64_t tiles = (m + kTileRows - 1) / kTileRows, tile_words = pairs * kTileRows;
    const int64_t groups = (tiles + kItemTiles - 1) / kItemTiles;
    const int64_t group_tiles = (tiles + groups - 1) / groups;
    const int64_t ib = stream_item_blocks(m);
    std::vector<int64_t> first(size_t(count) + 1, 0);
    for (int i = 0; i < count; ++i) {
      const int64_t nb = w[i]->nblocks_;
      // Streaming AVX-512: runs of stream_item_blocks(m) blocks (streamed together, matmul_int8.h).
      const int64_t items = stream ? (avx ? (nb + ib - 1) / ib : nb) : groups * nb;
      first[size_t(i) + 1] = first[size_t(i)] + items;
    }
    const size_t c_size = dtype_size(c_type);
    if (stream) {
      // Stream layout: rows quantized here (a decode row is a few hundred ns of work).
      char* buf = static_cast<char*>(tl_act.get(size_t(m * pairs) * 4 + 64));
      int32_t* qa = reinterpret_cast<int32_t*>(buf);
      float* sa = reinterpret_cast<float*>(buf + size_t(m * pairs) * 4);
      {
        internal::FtzDazScope ftz;
        for (int64_t r = 0; r < m; ++r) sa[r] = quantize_row_any(a_type, a, r, k, qa + r * pairs);
      }
      parallel_for(first[size_t(count)], 1, [&](int64_t i0, int64_t i1) {
        internal::FtzDazScope ftz;
        for (int64_t item = i0; item < i1; ++item) {
          const int p = internal::part_of(first, item);
          const Int8PackedWeight& wp = *w[p];
          const int64_t j = item - first[size_t(p)];
          const int8_t* q = static_cast<const int8_t*>(wp.q_.get());
          const float* sw = static_cast<const float*>(wp.scale_.get());
          if (avx)
            stream_avx512(m, k, wp.n_, qa, sa, q, sw, ib * j, std::min(ib * (j + 1), wp.nblocks_), c_type, c[p]);
          else
            rows_portable(m, k, wp.n_, qa, pairs, 1, sa, q, sw, j, c_type, c[p]);
        }
      });
      return ok_status();
    }
    // Tile layout, quantized in parallel one register tile (6 rows) at a time.
    char* buf = static_cast<char*>(tl_act.get(size_t(tiles * tile_words) * 4 + size_t(m) * 4));
    int32_t* qa = reinterpret_cast<int32_t*>(buf);
    float* sa = reinterpret_cast<float*>(buf + size_t(tiles * tile_words) * 4);
    parallel_for(tiles, 1, [&](int64_t t0, int64_t t1) {
      internal::FtzDazScope ftz;
      int32_t* row = static_cast<int32_t*>(tl_row.get(size_t(pairs) * 4));
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t i = 0; i < kTileRows; ++i) {
          const int64_t r = t * kTileRows + i;
          int32_t* dst = qa + t * tile_words + i;
          if (r >= m) {
            for (int64_t p = 0; p < pairs; ++p) dst[p * kTileRows] = 0;
            continue;
          }
          sa[r] = quantize_row_any(a_type, a, r, k, row);
          for (int64_t p = 0; p < pairs; ++p) dst[p * kTileRows] = row[p];
        }
    });
    // Items: (group of register tiles, block) of each product, claimed one at a time; consecutive
    // items share the group, whose quantized rows stay in L2. Groups of about equal size, at most
    // kItemTiles tiles.
    parallel_for(first[size_t(count)], 1, [&](int64_t i0, int64_t i1) {
      internal::FtzDazScope ftz;
      for (int64_t item = i0; item < i1; ++item) {
        const int p = internal::part_of(first, item);
        const Int8PackedWeight& wp = *w[p];
        const int64_t j = item - first[size_t(p)], g = j / wp.nblocks_, b = j % wp.nblocks_;
        const int64_t t0 = g * group_tiles, t1 = std::min(tiles, t0 + group_tiles);
        const int8_t* q = static_cast<const int8_t*>(wp.q_.get());
        const float* sw = static_cast<const float*>(wp.scale_.get());
        if (avx) {
          void* scratch = tl_tile.get(size_t(tile_scratch_bytes()));
          tile_avx512(t0, t1, m, k, wp.n_, qa, sa, q, sw, b, scratch, c_type, c[p]);
        } else {
          for (int64_t t = t0; t < t1; ++t) {
            const int64_t r0 = t * kTileRows, rows = std::min(kTileRows, m - r0);
            rows_portable(rows, k, wp.n_, qa + t * tile_words, 1, kTileRows, sa + r0, q, sw, b, c_type,
                          static_cast<char*>(c[p]) + size_t(r0 * wp.n_) * c_size);
          }
        }
      }
    });
    return ok_status();
  }

  size_t packed_bytes() const override { return int8_packed_bytes(k_, n_); }

 private:
  int64_t nblocks_ = 0;
  std::shared_ptr<void> q_;      // nblocks * pairs * 128 int8
  std::shared_ptr<void> scale_;  // nblocks * 64 f32
};

}  // namespace

// BF16 too: a bf16 C is stored with vcvtneps2bf16 (VNNI without BF16: Cascade Lake, Ice Lake).
bool avx512_vnni() {
  static const bool ok = avx512_pack() && cpu_features().avx512vnni && cpu_features().avx512bf16;
  return ok;
}

}  // namespace int8

Status internal::check_quantized_multiply(const char* format, int64_t m, DType a_type, DType c_type) {
  if ((a_type != DType::kF32 && a_type != DType::kBF16 && a_type != DType::kF16) ||
      (c_type != DType::kF32 && c_type != DType::kBF16))
    return make_error(ErrorKind::kUnsupported, "PackedWeight::multiply(", format, "): a=", dtype_name(a_type),
                      " c=", dtype_name(c_type), " (a f32/bf16/f16, c f32/bf16)");
  if (m < 0) return make_error(ErrorKind::kInvalidArgument, "PackedWeight::multiply: negative m=", m);
  return ok_status();
}

size_t int8_packed_bytes(int64_t k, int64_t n) {
  const int64_t cols = (n + int8::kBlock - 1) / int8::kBlock * int8::kBlock;
  return size_t(cols * 2 * int8::pairs_of(k)) + size_t(cols) * 4;  // int8 k-pairs + f32 scales
}

Result<bool> multiply_grouped_int8(int64_t m, DType a_type, const void* a, DType c_type,
                                   const std::vector<GroupedProduct>& products) {
  std::vector<const int8::Int8PackedWeight*> w;
  std::vector<void*> c;
  for (const GroupedProduct& p : products) {
    const auto* q = dynamic_cast<const int8::Int8PackedWeight*>(p.weight);
    if (!q || q->k() != products[0].weight->k()) return false;
    w.push_back(q);
    c.push_back(p.c);
  }
  HLX_RETURN_IF_ERROR(int8::Int8PackedWeight::run(m, a_type, a, c_type, w.data(), c.data(), int(w.size())));
  return true;
}

Result<std::unique_ptr<PackedWeight>> pack_int8(DType type, int64_t k, int64_t n, bool transposed, const void* data,
                                                SourceDone source_done) {
  return int8::Int8PackedWeight::create(type, k, n, transposed, data, source_done);
}

}  // namespace hlx::kernels
