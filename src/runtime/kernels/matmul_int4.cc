// Group-wise 4-bit weights (WeightFormat::kInt4 and checkpoints stored as 4-bit): packing, the
// activations' quantization, the portable kernel and the products. Decode streams the weight bytes
// once per token, so 4 bits plus two f32 per group of 128 is 3.6x fewer bytes than bf16. Layout
// and arithmetic: matmul_int4.h.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "core/tensor.h"
#include "runtime/kernels/cpu.h"
#include "runtime/kernels/internal.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/matmul_int4.h"
#include "runtime/kernels/matmul_int8.h"
#include "runtime/kernels/parallel.h"

namespace hlx::kernels {
namespace int4 {
namespace {

thread_local internal::ScratchBuffer tl_act, tl_row, tl_tile;

std::atomic<TileKernel> g_tile_kernel{TileKernel::kAuto};

// Portable product: rows [r0, r1) x block b, int32 group sums and the contract's f32 operations.
void rows_portable(int64_t r0, int64_t r1, const Acts& x, const Packed& w, int64_t b, DType c_type, void* c) {
  const int64_t pairs = w.group / 2, gb = group_bytes(w.group);
  const uint8_t* blk = w.data + b * w.block_stride();
  const int64_t n0 = b * kBlock, cols = std::min(kBlock, w.n - n0);
  for (int64_t r = r0; r < r1; ++r) {
    float sum[kBlock] = {};
    for (int64_t g = 0; g < w.groups; ++g) {
      const uint8_t* grp = blk + g * gb;
      const int32_t* a = x.row(r, g, w.group);
      int32_t acc[kBlock] = {};
      for (int64_t p = 0; p < pairs; ++p) {
        const uint8_t* line = grp + p * kLine;
        const int32_t a0 = int16_t(uint16_t(a[p])), a1 = int16_t(uint16_t(uint32_t(a[p]) >> 16));
        for (int64_t j = 0; j < kBlock; ++j) {
          const int64_t u = j / 32, jj = j % 16, hi = (j / 16) % 2;
          const uint8_t b0 = line[32 * u + 2 * jj], b1 = line[32 * u + 2 * jj + 1];
          acc[j] += a0 * (hi ? b0 >> 4 : b0 & 15) + a1 * (hi ? b1 >> 4 : b1 & 15);
        }
      }
      const float* s = reinterpret_cast<const float*>(grp + pairs * kLine);
      const float sa = x.sa[r * x.groups + g], sq = x.sq[r * x.groups + g];
      for (int64_t j = 0; j < kBlock; ++j)
        sum[j] = std::fma(s[kBlock + j], sq, std::fma(s[j], float(acc[j]) * sa, sum[j]));
    }
    for (int64_t j = 0; j < cols; ++j) {
      if (c_type == DType::kF32)
        static_cast<float*>(c)[r * w.n + n0 + j] = sum[j];
      else
        static_cast<bf16*>(c)[r * w.n + n0 + j] = f32_to_bf16(sum[j]);
    }
  }
}

// Row r of A quantized per group (matmul_int4.h) into q (kp / 2 pairs), sa and sq (groups each).
// With a permutation the row is first gathered in packed order into `tmp` (k f32, exact). Call
// under FTZ/DAZ.
void prepare_row(DType a_type, const void* a, int64_t r, int64_t k, const int32_t* perm, int64_t group, int64_t groups,
                 float* tmp, int32_t* q, float* sa, float* sq) {
  const void* src = a;
  int64_t at = r * k;
  if (perm) {
    for (int64_t i = 0; i < k; ++i) tmp[i] = internal::load_f32(a_type, a, r * k + perm[i]);
    src = tmp;
    a_type = DType::kF32;
    at = 0;
  }
  const int64_t gp = group / 2;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t g0 = g * group, len = std::min(group, k - g0);
    int32_t* qg = q + g * gp;
    float s;
    int32_t qsum = 0;  // |qsum| <= 128 * 32767: exact, also as a float
    if (int8::avx512_vnni()) {
      s = int8::quantize_act_avx512(a_type, src, at + g0, len, gp, qg);
      qsum = qsum_avx512(qg, gp);
    } else {
      s = int8::quantize_act(a_type, src, at + g0, len, gp, qg);
      for (int64_t p = 0; p < gp; ++p) qsum += int16_t(uint16_t(qg[p])) + int16_t(uint16_t(uint32_t(qg[p]) >> 16));
    }
    sa[g] = s;
    sq[g] = s * float(qsum);
  }
}

// AMX-INT8 tiles for the tiled product where the CPU has them (not under HLX_CPU=noamx), unless a
// test's set_tile_kernel says otherwise.
bool use_amx() { return g_tile_kernel.load(std::memory_order_relaxed) != TileKernel::kAvx512 && amx_available(); }

class Int4PackedWeight final : public PackedWeight {
 public:
  static Result<std::unique_ptr<PackedWeight>> create(const Int4Source& src) {
    const int64_t k = src.k, n = src.n, group = src.group;
    if (k <= 0 || n <= 0)
      return make_error(ErrorKind::kInvalidArgument, "PackedWeight::pack(int4): k=", k, " n=", n, " must be positive");
    if (group < 32 || group > 128 || group % 2 != 0)
      return make_error(ErrorKind::kUnsupported, "PackedWeight::pack(int4): group size ", group,
                        " (supported: even sizes 32..128)");
    if (!src.column) return make_error(ErrorKind::kInvalidArgument, "PackedWeight::pack(int4): no column source");
    if (!src.perm.empty()) {
      if (int64_t(src.perm.size()) != k)
        return make_error(ErrorKind::kInvalidArgument, "PackedWeight::pack(int4): permutation of ", src.perm.size(),
                          " entries for k=", k);
      std::vector<char> seen(size_t(k), 0);
      for (int32_t v : src.perm) {
        if (v < 0 || v >= k || seen[size_t(v)])
          return make_error(ErrorKind::kInvalidArgument, "PackedWeight::pack(int4): permutation entry ", v,
                            " out of range or repeated (k=", k, ")");
        seen[size_t(v)] = 1;
      }
    }
    std::unique_ptr<Int4PackedWeight> w(new Int4PackedWeight());
    w->k_ = k;
    w->n_ = n;
    w->p_.n = n;
    w->p_.group = group;
    w->p_.groups = (k + group - 1) / group;
    w->nblocks_ = (n + kBlock - 1) / kBlock;
    w->perm_ = src.perm;
    const int64_t kp = w->p_.groups * group, gb = group_bytes(group), pairs = group / 2;
    w->bytes_ = size_t(w->nblocks_ * w->p_.block_stride());
    w->data_ = allocate_packed(w->bytes_);
    uint8_t* data = static_cast<uint8_t*>(w->data_.get());
    std::memset(data, 0, w->bytes_);
    std::atomic<int64_t> bad_col{-1};
    std::mutex err_mu;
    Status err = ok_status();
    parallel_for(w->nblocks_, 1, [&](int64_t b0, int64_t b1) {
      std::vector<uint8_t> q(static_cast<size_t>(kp));
      std::vector<float> s(size_t(w->p_.groups)), m(size_t(w->p_.groups));
      for (int64_t b = b0; b < b1; ++b) {
        uint8_t* blk = data + b * w->p_.block_stride();
        for (int64_t j = 0; j < std::min(kBlock, n - b * kBlock); ++j) {
          std::fill(q.begin(), q.end(), uint8_t(0));
          Status st = src.column(b * kBlock + j, q.data(), s.data(), m.data());
          if (!st.ok()) {
            std::lock_guard<std::mutex> lock(err_mu);
            if (err.ok()) err = std::move(st);
            return;
          }
          const int64_t u = j / 32, jj = j % 16, shift = (j / 16) % 2 ? 4 : 0;
          for (int64_t g = 0; g < w->p_.groups; ++g) {
            if (!std::isfinite(s[size_t(g)]) || !std::isfinite(m[size_t(g)])) bad_col.store(b * kBlock + j);
            uint8_t* grp = blk + g * gb;
            for (int64_t p = 0; p < pairs; ++p)
              for (int64_t i = 0; i < 2; ++i)
                grp[p * kLine + 32 * u + 2 * jj + i] |= uint8_t((q[size_t(g * group + 2 * p + i)] & 15) << shift);
            float* so = reinterpret_cast<float*>(grp + pairs * kLine);
            so[j] = s[size_t(g)];
            so[kBlock + j] = m[size_t(g)];
          }
        }
        if (src.columns_done) src.columns_done(b * kBlock, std::min(n, (b + 1) * kBlock));
      }
    });
    HLX_RETURN_IF_ERROR(err);
    if (bad_col.load() >= 0)
      return make_error(ErrorKind::kInvalidArgument, "PackedWeight::pack(int4): column ", bad_col.load(), " of a ", k,
                        "x", n, " weight has a non-finite scale or min");
    return std::unique_ptr<PackedWeight>(std::move(w));
  }

  Status multiply(int64_t m, DType a_type, const void* a, DType c_type, void* c) const override {
    const Int4PackedWeight* self = this;
    return run(m, a_type, a, c_type, &self, &c, 1);
  }

  // C_i = A · W_i for `count` weights with the same K, group and permutation: A prepared once,
  // one parallel_for over the work items of all products. Each output is what multiply() gives.
  static Status run(int64_t m, DType a_type, const void* a, DType c_type, const Int4PackedWeight* const* w,
                    void* const* c, int count) {
    HLX_RETURN_IF_ERROR(internal::check_quantized_multiply("int4", m, a_type, c_type));
    if (m == 0 || count == 0) return ok_status();
    const Int4PackedWeight& w0 = *w[0];
    const int64_t k = w0.k_, group = w0.p_.group, groups = w0.p_.groups, kp = groups * group;
    const int32_t* perm = w0.perm_.empty() ? nullptr : w0.perm_.data();
    const bool avx = int8::avx512_vnni();  // int8's gate: the same instructions
    const bool stream = m <= kStreamMaxM;
    const bool amx = !stream && avx && use_amx();
    // AMX: the rows' hi / lo bytes after the int16 ones, rows padded to whole tiles.
    const int64_t hl_stride = amx ? amx_row_bytes(group, groups) : 0;
    const int64_t hl_rows = (m + kAmxTileRows - 1) / kAmxTileRows * kAmxTileRows;
    const size_t act_bytes = (size_t(m * kp) * 2 + size_t(m * groups) * 8 + 63) / 64 * 64;
    char* buf = static_cast<char*>(tl_act.get(act_bytes + size_t(amx ? hl_rows * hl_stride : 0) + 64));
    int32_t* q = reinterpret_cast<int32_t*>(buf);
    float* sa = reinterpret_cast<float*>(buf + size_t(m * kp) * 2);
    float* sq = sa + m * groups;
    uint8_t* hl = amx ? reinterpret_cast<uint8_t*>(buf + act_bytes) : nullptr;
    if (amx) std::memset(hl + m * hl_stride, 0, size_t((hl_rows - m) * hl_stride));
    Acts x;
    x.q = q;
    x.sa = sa;
    x.sq = sq;
    x.kp = kp;
    x.groups = groups;
    x.hl = hl;
    x.hl_stride = hl_stride;
    auto prep = [&](int64_t r0, int64_t r1) {
      internal::FtzDazScope ftz;
      float* tmp = perm ? static_cast<float*>(tl_row.get(size_t(k) * 4)) : nullptr;
      for (int64_t r = r0; r < r1; ++r) {
        prepare_row(a_type, a, r, k, perm, group, groups, tmp, q + r * (kp / 2), sa + r * groups, sq + r * groups);
        if (amx) split_act_amx(q + r * (kp / 2), groups, group, hl + r * hl_stride);
      }
    };
    const int64_t ib = stream_item_blocks(m);
    const int64_t tile_rows = amx ? kAmxTileRows : kTileRows, item_rows = amx ? kAmxItemRows : kItemTiles * kTileRows;
    const int64_t row_groups = stream ? 1 : (m + item_rows - 1) / item_rows;
    const int64_t group_rows = stream ? m : ((m + row_groups - 1) / row_groups + tile_rows - 1) / tile_rows * tile_rows;
    std::vector<int64_t> first(size_t(count) + 1, 0);
    for (int i = 0; i < count; ++i) {
      const int64_t nb = w[i]->nblocks_;
      first[size_t(i) + 1] = first[size_t(i)] + (stream ? (nb + ib - 1) / ib : row_groups * nb);
    }
    if (stream)
      prep(0, m);
    else
      parallel_for(m, 16, prep);
    parallel_for(first[size_t(count)], 1, [&](int64_t i0, int64_t i1) {
      internal::FtzDazScope ftz;
      for (int64_t item = i0; item < i1; ++item) {
        const int p = internal::part_of(first, item);
        const Int4PackedWeight& wp = *w[p];
        Packed pk = wp.p_;
        pk.data = static_cast<const uint8_t*>(wp.data_.get());
        const int64_t j = item - first[size_t(p)];
        if (stream) {
          const int64_t b0 = ib * j, b1 = std::min(ib * (j + 1), wp.nblocks_);
          if (avx)
            stream_avx512(m, x, pk, b0, b1, c_type, c[p]);
          else
            for (int64_t b = b0; b < b1; ++b) rows_portable(0, m, x, pk, b, c_type, c[p]);
        } else {
          const int64_t g = j / wp.nblocks_, b = j % wp.nblocks_;
          const int64_t r0 = g * group_rows, r1 = std::min(m, r0 + group_rows);
          if (r0 >= r1) continue;
          if (amx)
            tile_amx(r0, r1, x, pk, b, tl_tile.get(size_t(amx_scratch_bytes(group))), c_type, c[p]);
          else if (avx)
            tile_avx512(r0, r1, x, pk, b, tl_tile.get(size_t(tile_scratch_bytes(group))), c_type, c[p]);
          else
            rows_portable(r0, r1, x, pk, b, c_type, c[p]);
        }
      }
    });
    return ok_status();
  }

  size_t packed_bytes() const override { return bytes_; }
  int64_t group() const { return p_.group; }
  const std::vector<int32_t>& perm() const { return perm_; }

 private:
  Packed p_;
  int64_t nblocks_ = 0;
  size_t bytes_ = 0;
  std::shared_ptr<void> data_;
  std::vector<int32_t> perm_;
};

}  // namespace

bool amx_available() {
  const CpuFeatures& f = cpu_features();
  return f.amx_int8 && f.avx512bw && int8::avx512_vnni();
}

void set_tile_kernel(TileKernel k) { g_tile_kernel.store(k, std::memory_order_relaxed); }

}  // namespace int4

size_t int4_packed_bytes(int64_t k, int64_t n, int64_t group) {
  const int64_t blocks = (n + int4::kBlock - 1) / int4::kBlock, groups = (k + group - 1) / group;
  return size_t(blocks * groups * int4::group_bytes(group));
}

Result<std::unique_ptr<PackedWeight>> pack_int4(const Int4Source& source) {
  return int4::Int4PackedWeight::create(source);
}

// Quantization at load: per group of `group` k and column n, m = min, s = (max - min) / 15,
// q = round((w - m) / s) clamped to [0, 15] (q = 0 where max == min: then w == m exactly).
Result<std::unique_ptr<PackedWeight>> pack_int4(DType type, int64_t k, int64_t n, bool transposed, const void* data,
                                                int64_t group, SourceDone source_done) {
  Int4Source src;
  src.k = k;
  src.n = n;
  src.group = group;
  src.column = [=](int64_t col, uint8_t* q, float* s, float* m) -> Status {
    std::vector<float> v(static_cast<size_t>(k));
    if (transposed)
      internal::to_f32(type, static_cast<const char*>(data) + size_t(col * k) * dtype_size(type), k, v.data());
    else
      for (int64_t kk = 0; kk < k; ++kk) v[size_t(kk)] = internal::load_f32(type, data, kk * n + col);
    for (int64_t g0 = 0; g0 < k; g0 += group) {
      const int64_t g1 = std::min(k, g0 + group);
      float lo = std::numeric_limits<float>::infinity(), hi = -lo;
      for (int64_t kk = g0; kk < g1; ++kk) {
        const float x = v[size_t(kk)];
        if (!std::isfinite(x))
          return make_error(ErrorKind::kInvalidArgument, "PackedWeight::pack(int4): column ", col, " of a ", k, "x", n,
                            " weight has a non-finite value at k=", kk);
        lo = std::min(lo, x);
        hi = std::max(hi, x);
      }
      const float sc = (hi - lo) / 15.f;
      s[g0 / group] = sc;
      m[g0 / group] = lo;
      for (int64_t kk = g0; kk < g1; ++kk)
        q[kk] = sc > 0.f ? uint8_t(std::clamp(std::nearbyint((v[size_t(kk)] - lo) / sc), 0.f, 15.f)) : uint8_t(0);
    }
    return ok_status();
  };
  if (transposed && source_done)
    src.columns_done = [=](int64_t n0, int64_t n1) {
      source_done(static_cast<const char*>(data) + size_t(n0 * k) * dtype_size(type),
                  size_t((n1 - n0) * k) * dtype_size(type));
    };
  return pack_int4(src);
}

Result<bool> multiply_grouped_int4(int64_t m, DType a_type, const void* a, DType c_type,
                                   const std::vector<GroupedProduct>& products) {
  std::vector<const int4::Int4PackedWeight*> w;
  std::vector<void*> c;
  for (const GroupedProduct& p : products) {
    const auto* q = dynamic_cast<const int4::Int4PackedWeight*>(p.weight);
    if (!q || q->k() != products[0].weight->k()) return false;
    if (!w.empty() && (q->group() != w[0]->group() || q->perm() != w[0]->perm())) return false;
    w.push_back(q);
    c.push_back(p.c);
  }
  HLX_RETURN_IF_ERROR(int4::Int4PackedWeight::run(m, a_type, a, c_type, w.data(), c.data(), int(w.size())));
  return true;
}

}  // namespace hlx::kernels
