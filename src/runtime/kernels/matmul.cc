// Matmuls through oneDNN 2.6 (the only file that includes oneDNN). oneDNN's C++ API throws
// dnnl::error; every call into it is wrapped so callers only ever see a Status.
#include "runtime/kernels/matmul.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/tensor.h"
#include "runtime/kernels/cpu.h"
#include "runtime/kernels/internal.h"
#include "runtime/kernels/parallel.h"

namespace hlx::kernels {

namespace internal {

void to_f32(DType t, const void* src, int64_t n, float* dst) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f32_from_bits(uint32_t(s[i]) << 16);
      return;
    }
    default: {
      const f16* s = static_cast<const f16*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
  }
}

void* ScratchBuffer::get(size_t bytes) {
  if (bytes > size) {
    buf = allocate_aligned(bytes);
    size = bytes;
  }
  return buf.get();
}

std::vector<int64_t> block_starts(const GemvTarget* targets, int count) {
  std::vector<int64_t> first{0};
  for (int t = 0; t < count; ++t) first.push_back(first.back() + (targets[t].n + 63) / 64);
  return first;
}

int part_of(const std::vector<int64_t>& first, int64_t i) {
  return int(std::upper_bound(first.begin(), first.end(), i) - first.begin()) - 1;
}

void f32_to_bf16_n(const float* src, int64_t n, bf16* dst) {
  if (cpu_features().avx512bf16) return f32_to_bf16_avx512(src, n, dst);
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

}  // namespace internal

namespace {

using dnnl::memory;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dt to_dnnl(DType t) { return t == DType::kBF16 ? dt::bf16 : dt::f32; }

// Per-thread scratch buffers (operand conversions and oneDNN's user-mode scratchpad).
thread_local internal::ScratchBuffer tl_scratchpad, tl_a, tl_b, tl_c, tl_tile;

// Converts `n` elements of `from` to `to` (f32 or bf16) into `dst`.
void convert(DType from, const void* src, int64_t n, DType to, void* dst) {
  if (from == to) {
    std::memcpy(dst, src, size_t(n) * dtype_size(to));
  } else if (to == DType::kF32) {
    internal::to_f32(from, src, n, static_cast<float*>(dst));
  } else if (from == DType::kF32) {
    internal::f32_to_bf16_n(static_cast<const float*>(src), n, static_cast<bf16*>(dst));
  } else {  // f16 -> bf16 through f32
    const f16* s = static_cast<const f16*>(src);
    bf16* d = static_cast<bf16*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(f16_to_f32(s[i]));
  }
}

dnnl::primitive_attr make_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// Runs `prim` on one thread's stream with a user scratchpad.
void execute(const dnnl::matmul::primitive_desc& pd, const dnnl::matmul& prim, const memory::desc& a_md, const void* a,
             const memory::desc& b_md, const void* b, const memory::desc& c_md, void* c) {
  thread_local dnnl::stream stream(engine());
  memory::desc sp_md = pd.scratchpad_desc();
  void* sp = tl_scratchpad.get(sp_md.get_size() + 64);
  memory am(a_md, engine(), const_cast<void*>(a));
  memory bm(b_md, engine(), const_cast<void*>(b));
  memory cm(c_md, engine(), c);
  memory spm(sp_md, engine(), sp);
  prim.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, spm}});
  stream.wait();
}

}  // namespace

// oneDNN 2.6 implements bf16 matmul only on AVX512-capable CPUs (native BF16 or emulated on
// avx512_core); elsewhere 16-bit operands are widened to f32 and computed in f32.
bool bf16_matmul_available() {
  static const bool ok = [] {
    try {
      memory::desc a({4, 32}, dt::bf16, tag::ab), b({32, 32}, dt::bf16, tag::any), c({4, 32}, dt::f32, tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

namespace {

Status check_types(DType a, DType b, DType c) {
  auto ok_in = [](DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; };
  if (!ok_in(a) || !ok_in(b) || (c != DType::kF32 && c != DType::kBF16))
    return make_error(ErrorKind::kUnsupported, "matmul: unsupported types a=", dtype_name(a), " b=", dtype_name(b),
                      " c=", dtype_name(c), " (operands f32/bf16/f16, result f32/bf16)");
  return ok_status();
}

// ---- general batched matmul: primitives cached per shape/types/transposition ----

// oneDNN fixes a primitive's thread count when it is created, so the OpenMP limit is in the key.
struct GeneralKey {
  int64_t batch, m, n, k;
  int cty, cmp;
  bool bt;
  int threads;
  auto tie() const { return std::tie(batch, m, n, k, cty, cmp, bt, threads); }
  bool operator<(const GeneralKey& o) const { return tie() < o.tie(); }
};
struct GeneralPrim {
  memory::desc a_md, b_md, c_md;
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
};

std::mutex g_general_mu;
std::map<GeneralKey, std::shared_ptr<const GeneralPrim>> g_general;

}  // namespace

Status matmul(const MatmulDesc& d, const void* a, const void* b, void* c) {
  HLX_RETURN_IF_ERROR(check_types(d.a_type, d.b_type, d.c_type));
  if (d.batch < 0 || d.m < 0 || d.n < 0 || d.k < 0)
    return make_error(ErrorKind::kInvalidArgument, "matmul: negative dims batch=", d.batch, " m=", d.m, " n=", d.n,
                      " k=", d.k);
  if (d.batch == 0 || d.m == 0 || d.n == 0) return ok_status();
  if (d.k == 0) {
    std::memset(c, 0, size_t(d.batch * d.m * d.n) * dtype_size(d.c_type));
    return ok_status();
  }
  // Compute in bf16 only when both operands are 16-bit; anything with f32 computes in f32.
  DType cmp =
      (d.a_type != DType::kF32 && d.b_type != DType::kF32 && bf16_matmul_available()) ? DType::kBF16 : DType::kF32;
  const int64_t a_n = d.batch * d.m * d.k, b_n = d.batch * d.k * d.n;
  if (d.a_type != cmp) {
    void* buf = tl_a.get(size_t(a_n) * dtype_size(cmp));
    convert(d.a_type, a, a_n, cmp, buf);
    a = buf;
  }
  if (d.b_type != cmp) {
    void* buf = tl_b.get(size_t(b_n) * dtype_size(cmp));
    convert(d.b_type, b, b_n, cmp, buf);
    b = buf;
  }
  // oneDNN has no f32 x f32 -> bf16 matmul: compute f32 into scratch, then round.
  const DType c_run = cmp == DType::kF32 ? DType::kF32 : d.c_type;
  void* c_out = c;
  if (c_run != d.c_type) c = tl_c.get(size_t(d.batch * d.m * d.n) * 4);
  GeneralKey key{d.batch, d.m, d.n, d.k, int(c_run), int(cmp), d.b_transposed, omp_get_max_threads()};
  try {
    std::shared_ptr<const GeneralPrim> p;
    {
      std::lock_guard<std::mutex> lock(g_general_mu);
      auto it = g_general.find(key);
      if (it != g_general.end()) p = it->second;
    }
    if (!p) {
      auto np = std::make_shared<GeneralPrim>();
      np->a_md = memory::desc({d.batch, d.m, d.k}, to_dnnl(cmp), tag::abc);
      np->b_md = memory::desc({d.batch, d.k, d.n}, to_dnnl(cmp), d.b_transposed ? tag::acb : tag::abc);
      np->c_md = memory::desc({d.batch, d.m, d.n}, to_dnnl(c_run), tag::abc);
      dnnl::matmul::desc md(np->a_md, np->b_md, np->c_md);
      np->pd = dnnl::matmul::primitive_desc(md, make_attr(), engine());
      np->prim = dnnl::matmul(np->pd);
      std::lock_guard<std::mutex> lock(g_general_mu);
      p = g_general.emplace(key, std::move(np)).first->second;
    }
    execute(p->pd, p->prim, p->a_md, a, p->b_md, b, p->c_md, c);
    if (c != c_out)
      internal::f32_to_bf16_n(static_cast<const float*>(c), d.batch * d.m * d.n, static_cast<bf16*>(c_out));
  } catch (const dnnl::error& e) {
    return make_error(ErrorKind::kInternal, "matmul: oneDNN error for batch=", d.batch, " m=", d.m, " n=", d.n,
                      " k=", d.k, ": ", e.what());
  }
  return ok_status();
}

// ---- packed weights ----

namespace {

constexpr int64_t kDefaultStreamMaxM = 8;

// Products with M <= stream_max_m() run our AVX-512 BF16 weight-streaming kernel
// (matmul_avx512.cc) straight on oneDNN's packed BA16a64b2a layout; larger M run
// gemm_bf16_avx512 (gemm_avx512.cc) on the same layout, or oneDNN brgemm tiles (HLX_OWN_GEMM=0).
// Measured (bench BM_StreamBf16, 1 thread, bf16 N=K=2048, cycling 1 GiB of weights, machine load
// ~3): M=1 35.5 GB/s ours vs 31.7 GB/s oneDNN; M=4 33.7 vs 29.1 GB/s. Decode at 8 slots (M=8,
// `hlx bench`, load ~8): 117.9 ms/step here vs 207.1 ms/step on oneDNN tiles, so the default
// covers batches up to 8 (one DRAM pass: rows 4.. re-read each K chunk from L1). HLX_MATMUL_STREAM=0
// turns the kernel off and HLX_MATMUL_STREAM_MAX_M=<m> moves the crossover, for A/B runs.
int64_t stream_max_m() {
  static const int64_t m = [] {
    const char* e = std::getenv("HLX_MATMUL_STREAM_MAX_M");
    return e ? std::max<int64_t>(0, std::atoll(e)) : int64_t(kDefaultStreamMaxM);
  }();
  return m;
}

// HLX_MATMUL_STREAM=0 keeps every product on oneDNN (for A/B measurements).
bool stream_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("HLX_MATMUL_STREAM");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

// HLX_POOL_GEMM=0 runs larger-M products on oneDNN's own OpenMP threads (for A/B measurements).
bool pool_gemm_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("HLX_POOL_GEMM");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

// HLX_OWN_GEMM=0 runs larger-M products on oneDNN tiles (multiply_sliced) instead of our own
// AVX512-BF16 GEMM (gemm_avx512.cc), for A/B measurements.
bool own_gemm_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("HLX_OWN_GEMM");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

// Packs a bf16 [K, N] (or [N, K] when transposed) weight into oneDNN's BA16a64b2a layout (the
// layout streamable_kp() recognises): element (k, n) at (n / 64) * Kp * 64 + (k / 2) * 128 +
// (n % 64) * 2 + k % 2, zeros in the padding. oneDNN's reorder does the same but ran ~5 s for
// Qwen3-0.6B on one thread and collapsed on its OpenMP team under load; this runs on the pool,
// one 64-column block per item. A transposed source is read a block of rows at a time, each handed
// to `done` (if any) once packed.
void pack_ba16a64b2a(int64_t k, int64_t n, int64_t kp, bool transposed, const uint16_t* src, uint16_t* dst,
                     SourceDone done) {
  const int64_t nblocks = (n + 63) / 64;
  parallel_for(nblocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t nb = b0; nb < b1; ++nb) {
      uint16_t* blk = dst + nb * kp * 64;
      const int64_t n0 = nb * 64, cols = std::min<int64_t>(64, n - n0);
      if (cols < 64 || kp > k) std::memset(blk, 0, size_t(kp * 64) * 2);
      for (int64_t j = 0; j < cols; ++j) {
        uint16_t* d = blk + j * 2;
        if (transposed) {
          const uint16_t* row = src + (n0 + j) * k;  // contiguous along k
          int64_t kk = 0;
          for (; kk + 1 < k; kk += 2) {
            uint32_t pair;
            std::memcpy(&pair, row + kk, 4);
            std::memcpy(d + (kk / 2) * 128, &pair, 4);
          }
          if (kk < k) d[(kk / 2) * 128] = row[kk];
        } else {
          for (int64_t kk = 0; kk < k; ++kk) d[(kk / 2) * 128 + (kk & 1)] = src[kk * n + n0 + j];
        }
      }
      if (transposed && done) done(src + n0 * k, size_t(cols * k) * 2);
    }
  });
}

class DnnlPackedWeight final : public PackedWeight {
 public:
  // `cmp` is bf16 or f32; `data` is already in `cmp`.
  static Result<std::unique_ptr<PackedWeight>> create(DType cmp, int64_t k, int64_t n, bool transposed,
                                                      const void* data, ProductOrder order,
                                                      SourceDone source_done = nullptr) {
    std::unique_ptr<DnnlPackedWeight> w(new DnnlPackedWeight());
    w->k_ = k;
    w->n_ = n;
    w->cmp_ = cmp;
    try {
      // Layout chosen by oneDNN for a prefill-sized product; smaller M reuse it.
      memory::desc a_md({kRefM, k}, to_dnnl(cmp), tag::ab);
      memory::desc b_any({k, n}, to_dnnl(cmp), tag::any);
      memory::desc c_md({kRefM, n}, dt::f32, tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md), make_attr(), engine());
      w->packed_md_ = pd.weights_desc();
      w->impl_ = pd.impl_info_str();
      w->packed_ = allocate_packed(w->packed_md_.get_size());
      const int64_t blocked_kp = cmp == DType::kBF16 ? streamable_kp(w->packed_md_, k, n) : 0;
      if (blocked_kp > 0) {
        pack_ba16a64b2a(k, n, blocked_kp, transposed, static_cast<const uint16_t*>(data),
                        static_cast<uint16_t*>(w->packed_.get()), source_done);
      } else {
        memory src(memory::desc({k, n}, to_dnnl(cmp), transposed ? tag::ba : tag::ab), engine(),
                   const_cast<void*>(data));
        memory dst(w->packed_md_, engine(), w->packed_.get());
        dnnl::stream s(engine());
        dnnl::reorder(src, dst).execute(s, src, dst);
        s.wait();
      }
      w->layout_kp_ = blocked_kp;
      w->transposed_ = transposed;
      const int64_t kp = cpu_features().avx512bf16 ? blocked_kp : 0;
      w->stream_kp_ = stream_enabled() ? kp : 0;
      // Larger M on oneDNN's AMX tiles where rows may differ from the streaming kernel's: at Qwen3-VL-2B's
      // 448 x 448 encode 2.9x the own GEMM (Intel Xeon with AMX, 2026-12-02: 3,410 -> 1,175 ms).
      const bool amx = order == ProductOrder::kAnyOrder && cpu_features().amx_bf16;
      w->gemm_kp_ = own_gemm_enabled() && !amx ? kp : 0;
      // oneDNN tiles only without our GEMM (their primitives cost time at bind).
      w->slice_kp_ = pool_gemm_enabled() && w->gemm_kp_ == 0 ? kp : 0;
      // Tiles only when oneDNN runs them with a real kernel (not its reference fallback).
      if (w->slice_kp_ > 0 &&
          std::string(w->slice_prim(kTileM, std::min(n, kTileN), DType::kF32)->pd.impl_info_str()).rfind("ref", 0) == 0)
        w->slice_kp_ = 0;
    } catch (const dnnl::error& e) {
      return make_error(ErrorKind::kInternal, "PackedWeight::pack: oneDNN error for k=", k, " n=", n, ": ", e.what());
    }
    return std::unique_ptr<PackedWeight>(std::move(w));
  }

  Status multiply(int64_t m, DType a_type, const void* a, DType c_type, void* c) const override {
    HLX_RETURN_IF_ERROR(check_types(a_type, cmp_, c_type));
    if (m < 0) return make_error(ErrorKind::kInvalidArgument, "PackedWeight::multiply: negative m=", m);
    if (m == 0 || n_ == 0) return ok_status();
    if (a_type != cmp_) {
      void* buf = tl_a.get(size_t(m * k_) * dtype_size(cmp_));
      convert(a_type, a, m * k_, cmp_, buf);
      a = buf;
    }
    if (m <= stream_max_m() && stream_kp_ > 0) {
      internal::gemv_vnni_bf16_avx512(m, n_, k_, stream_kp_, static_cast<const bf16*>(a),
                                      static_cast<const bf16*>(packed_.get()), c_type, c);
      return ok_status();
    }
    if (gemm_kp_ > 0) {
      internal::gemm_bf16_avx512(m, n_, k_, gemm_kp_, static_cast<const bf16*>(a),
                                 static_cast<const bf16*>(packed_.get()), c_type, c);
      return ok_status();
    }
    if (slice_kp_ > 0) return multiply_sliced(m, a, c_type, c);
    try {
      // As in matmul(): f32 compute writes f32, rounded to bf16 afterwards when asked.
      const DType c_run = cmp_ == DType::kF32 ? DType::kF32 : c_type;
      void* c_dst = c_run == c_type ? c : tl_c.get(size_t(m * n_) * 4);
      std::shared_ptr<const Prim> p = prim_for(m, c_run);
      execute(p->pd, p->prim, p->a_md, a, packed_md_, packed_.get(), p->c_md, c_dst);
      if (c_dst != c) internal::f32_to_bf16_n(static_cast<const float*>(c_dst), m * n_, static_cast<bf16*>(c));
    } catch (const dnnl::error& e) {
      return make_error(ErrorKind::kInternal, "PackedWeight::multiply: oneDNN error for m=", m, " k=", k_, " n=", n_,
                        ": ", e.what());
    }
    return ok_status();
  }

  size_t packed_bytes() const override { return packed_md_.get_size(); }
  const std::string& impl() const { return impl_; }
  std::string layout() const { return slice_kp_ > 0 || stream_kp_ > 0 ? "BA16a64b2a" : "oneDNN blocked (other)"; }
  bool streams() const { return stream_kp_ > 0; }
  // For multiply_grouped: the streaming kernel's view of this weight (kp 0: not streamable).
  internal::GemvTarget stream_target(void* c) const {
    return {n_, stream_kp_, static_cast<const bf16*>(packed_.get()), c};
  }
  // For multiply_grouped at larger M: the own GEMM's view of this weight (kp 0: not available).
  internal::GemvTarget gemm_target(void* c) const { return {n_, gemm_kp_, static_cast<const bf16*>(packed_.get()), c}; }
  bool tiles() const { return slice_kp_ > 0; }
  bool own_gemm() const { return gemm_kp_ > 0; }

  // Element (k, n) of BA16a64b2a is at (n / 64) * Kp * 64 + (k / 2) * 128 + (n % 64) * 2 + k % 2.
  bool exact_rows() const override { return layout_kp_ > 0 && transposed_ && cmp_ == DType::kBF16; }
  void copy_row(int64_t n, void* out) const override {
    const uint16_t* src = static_cast<const uint16_t*>(packed_.get()) + (n / 64) * layout_kp_ * 64 + (n % 64) * 2;
    uint16_t* dst = static_cast<uint16_t*>(out);
    for (int64_t k = 0; k < k_; ++k) dst[k] = src[(k / 2) * 128 + k % 2];
  }

  // Larger M on the runtime's pool (parallel.h) instead of oneDNN's OpenMP team: the product is
  // cut into tiles of kTileM rows x kTileN columns, each run by a single-threaded oneDNN brgemm
  // primitive on a column slice of the packed weight (in BA16a64b2a a slice of whole 64-column
  // blocks is a contiguous sub-buffer with the same Kp), claimed dynamically, so a descheduled
  // thread never holds the others at a barrier.
  Status multiply_sliced(int64_t m, const void* a, DType c_type, void* c) const {
    const int64_t mt = (m + kTileM - 1) / kTileM, nt = (n_ + kTileN - 1) / kTileN;
    const size_t c_size = dtype_size(c_type);
    std::shared_ptr<const Prim> prims[2][2];  // [last row tile][last column tile]
    try {
      for (int lm = 0; lm < 2; ++lm)
        for (int ln = 0; ln < 2; ++ln) {
          const int64_t rows = lm ? m - (mt - 1) * kTileM : std::min(m, kTileM);
          const int64_t cols = ln ? n_ - (nt - 1) * kTileN : std::min(n_, kTileN);
          prims[lm][ln] = slice_prim(rows, cols, c_type);
        }
    } catch (const dnnl::error& e) {
      return make_error(ErrorKind::kInternal, "PackedWeight::multiply: oneDNN error for m=", m, " k=", k_, " n=", n_,
                        ": ", e.what());
    }
    std::atomic<bool> failed{false};
    std::string error;
    std::mutex error_mu;
    parallel_for(mt * nt, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t r = i / nt, t = i % nt;
        const Prim& p = *prims[r == mt - 1 ? 1 : 0][t == nt - 1 ? 1 : 0];
        const bf16* ap = static_cast<const bf16*>(a) + r * kTileM * k_;
        const bf16* wp = static_cast<const bf16*>(packed_.get()) + t * (kTileN / 64) * slice_kp_ * 64;
        char* cp = static_cast<char*>(c) + (r * kTileM * n_ + t * kTileN) * int64_t(c_size);
        const int64_t rows = p.c_md.dims()[0], cols = p.c_md.dims()[1];
        try {
          if (nt == 1) {  // the tile spans whole rows of C: write in place
            execute(p.pd, p.prim, p.a_md, ap, p.b_md, wp, p.c_md, cp);
          } else {
            // oneDNN 2.6's brgemm has no strided destination (it falls back to the reference
            // kernel), so a tile is computed densely and copied into C's rows.
            const size_t row_bytes = size_t(cols) * c_size;
            char* tile = static_cast<char*>(tl_tile.get(size_t(rows) * row_bytes));
            execute(p.pd, p.prim, p.a_md, ap, p.b_md, wp, p.c_md, tile);
            for (int64_t i = 0; i < rows; ++i)
              std::memcpy(cp + i * n_ * int64_t(c_size), tile + size_t(i) * row_bytes, row_bytes);
          }
        } catch (const dnnl::error& e) {
          std::lock_guard<std::mutex> lock(error_mu);
          if (!failed.exchange(true)) error = e.what();
        }
      }
    });
    if (failed)
      return make_error(ErrorKind::kInternal, "PackedWeight::multiply: oneDNN error for m=", m, " k=", k_, " n=", n_,
                        ": ", error);
    return ok_status();
  }

  // Padded K when `md` is oneDNN's BA16a64b2a layout (what our streaming kernel reads), else 0.
  static int64_t streamable_kp(const memory::desc& md, int64_t k, int64_t n) {
    const dnnl_memory_desc_t& c = md.data;
    if (c.format_kind != dnnl_blocked || c.ndims != 2) return 0;
    const auto& b = c.format_desc.blocking;
    if (b.inner_nblks != 3 || b.inner_blks[0] != 16 || b.inner_idxs[0] != 0 || b.inner_blks[1] != 64 ||
        b.inner_idxs[1] != 1 || b.inner_blks[2] != 2 || b.inner_idxs[2] != 0)
      return 0;
    const int64_t kp = c.padded_dims[0];
    if (kp % 32 != 0 || kp < k || c.padded_dims[1] % 64 != 0 || c.padded_dims[1] < n) return 0;
    if (b.strides[0] != 32 * 64 || b.strides[1] != kp * 64 || c.offset0 != 0) return 0;
    return kp;
  }

 private:
  static constexpr int64_t kRefM = 128;
  static constexpr int64_t kTileM = 128, kTileN = 256;  // kTileN: whole 64-column blocks
  struct Prim {
    memory::desc a_md, b_md, c_md;
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
  };

  // A single-threaded primitive for a [rows, K] x [K, cols] tile writing into C's row stride.
  std::shared_ptr<const Prim> slice_prim(int64_t rows, int64_t cols, DType c_type) const {
    std::tuple<int64_t, int, int> key{rows, int(c_type), -int(cols)};
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = prims_.find(key);
      if (it != prims_.end()) return it->second;
    }
    auto p = std::make_shared<Prim>();
    p->a_md = memory::desc({rows, k_}, to_dnnl(cmp_), tag::ab);
    p->b_md = memory::desc({k_, cols}, to_dnnl(cmp_), tag::BA16a64b2a);
    p->c_md = memory::desc({rows, cols}, to_dnnl(c_type), tag::ab);
    if (streamable_kp(p->b_md, k_, cols) != slice_kp_)
      throw dnnl::error(dnnl_unimplemented, "weight slice layout differs from the packed weight");
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);  // oneDNN sizes its thread team when the primitive is created
    try {
      p->pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(p->a_md, p->b_md, p->c_md), make_attr(), engine());
      p->prim = dnnl::matmul(p->pd);
    } catch (...) {
      omp_set_num_threads(saved);
      throw;
    }
    omp_set_num_threads(saved);
    std::lock_guard<std::mutex> lock(mu_);
    return prims_.emplace(key, std::move(p)).first->second;
  }

  std::shared_ptr<const Prim> prim_for(int64_t m, DType c_type) const {
    std::tuple<int64_t, int, int> key{m, int(c_type), omp_get_max_threads()};
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = prims_.find(key);
      if (it != prims_.end()) return it->second;
    }
    auto p = std::make_shared<Prim>();
    p->a_md = memory::desc({m, k_}, to_dnnl(cmp_), tag::ab);
    p->c_md = memory::desc({m, n_}, to_dnnl(c_type), tag::ab);
    p->pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(p->a_md, packed_md_, p->c_md), make_attr(), engine());
    p->prim = dnnl::matmul(p->pd);
    std::lock_guard<std::mutex> lock(mu_);
    return prims_.emplace(key, std::move(p)).first->second;
  }

  DType cmp_ = DType::kF32;
  memory::desc packed_md_;
  std::shared_ptr<void> packed_;
  std::string impl_;
  int64_t layout_kp_ = 0;    // > 0: packed_ is BA16a64b2a with this Kp (bf16, every bit kept)
  bool transposed_ = false;  // packed from an [N, K] source
  int64_t stream_kp_ = 0;    // > 0: small-M products run gemv_vnni_bf16_avx512 on packed_
  int64_t slice_kp_ = 0;     // > 0: larger products run multiply_sliced
  int64_t gemm_kp_ = 0;      // > 0: larger products run gemm_bf16_avx512 (before multiply_sliced)
  mutable std::mutex mu_;
  mutable std::map<std::tuple<int64_t, int, int>, std::shared_ptr<const Prim>> prims_;  // (m, c type, threads)
};

}  // namespace

MatmulPaths matmul_paths(ProductOrder order) {
  MatmulPaths p;
  std::vector<bf16> w(size_t(256) * 256, f32_to_bf16(0.f));
  auto packed = PackedWeight::pack(DType::kBF16, 256, 256, true, w.data(), WeightFormat::kAsStored, order);
  if (!packed.ok()) return p;
  const auto* d = dynamic_cast<const DnnlPackedWeight*>(packed->get());
  if (!d) return p;
  p.gemm_impl = d->impl();
  p.weight_layout = d->layout();
  p.stream_gemv = d->streams();
  p.stream_max_m = p.stream_gemv ? stream_max_m() : 0;
  p.pool_tiles = d->tiles();
  p.own_gemm = d->own_gemm();
  return p;
}

Result<std::unique_ptr<PackedWeight>> PackedWeight::pack(DType type, int64_t k, int64_t n, bool transposed,
                                                         const void* data, WeightFormat format, ProductOrder order,
                                                         SourceDone source_done) {
  if (type != DType::kF32 && type != DType::kBF16 && type != DType::kF16)
    return make_error(ErrorKind::kUnsupported, "PackedWeight::pack: weight type ", dtype_name(type),
                      " (expected f32, bf16 or f16)");
  if (k <= 0 || n <= 0)
    return make_error(ErrorKind::kInvalidArgument, "PackedWeight::pack: k=", k, " n=", n, " must be positive");
  if (format == WeightFormat::kInt8) return pack_int8(type, k, n, transposed, data, source_done);
  if (format == WeightFormat::kInt4) return pack_int4(type, k, n, transposed, data, kInt4LoadGroup, source_done);
  if (format != WeightFormat::kAsStored)
    return make_error(ErrorKind::kInvalidArgument, "PackedWeight::pack: unknown weight format ", int(format));
  // f16 weights are converted to bf16 once here: oneDNN 2.6 has no f16 matmul on CPUs without
  // AVX512-FP16, f16's range fits in bf16, and bf16 keeps the weight at 2 bytes (the decode cost);
  // the price is 3 mantissa bits (relative rounding <= 2^-8, the same as a bf16 checkpoint).
  if (type != DType::kF32 && !bf16_matmul_available()) {
    std::vector<float> tmp(static_cast<size_t>(k * n));
    internal::to_f32(type, data, k * n, tmp.data());
    return DnnlPackedWeight::create(DType::kF32, k, n, transposed, tmp.data(), order);
  }
  if (type == DType::kF16) {
    std::vector<bf16> tmp(static_cast<size_t>(k * n));
    convert(DType::kF16, data, k * n, DType::kBF16, tmp.data());
    return DnnlPackedWeight::create(DType::kBF16, k, n, transposed, tmp.data(), order);
  }
  return DnnlPackedWeight::create(type, k, n, transposed, data, order, source_done);
}

Status multiply_grouped(int64_t m, DType a_type, const void* a, DType c_type,
                        const std::vector<GroupedProduct>& products) {
  for (size_t i = 0; i < products.size(); ++i) {
    if (!products[i].weight)
      return make_error(ErrorKind::kInvalidArgument, "multiply_grouped: product ", i, " has no weight");
    if (products[i].weight->k() != products[0].weight->k())
      return make_error(ErrorKind::kInvalidArgument, "multiply_grouped: product ", i,
                        " has k=", products[i].weight->k(), ", product 0 has k=", products[0].weight->k());
  }
  if (products.size() >= 2) {  // int8 weights have their own grouped run
    Result<bool> int8 = multiply_grouped_int8(m, a_type, a, c_type, products);
    if (!int8.ok()) return int8.status();
    if (*int8) return ok_status();
    Result<bool> int4 = multiply_grouped_int4(m, a_type, a, c_type, products);
    if (!int4.ok()) return int4.status();
    if (*int4) return ok_status();
  }
  // One job only when every product would take the same kernel on its own: the streaming kernel
  // (M <= stream_max_m()) or, for larger M, the own GEMM (one packing of A, one tail).
  const bool stream = m <= stream_max_m();
  std::vector<internal::GemvTarget> targets;
  for (const GroupedProduct& p : products) {
    const auto* d = dynamic_cast<const DnnlPackedWeight*>(p.weight);
    const internal::GemvTarget t = d ? (stream ? d->stream_target(p.c) : d->gemm_target(p.c)) : internal::GemvTarget{};
    if (t.kp == 0) break;
    targets.push_back(t);
  }
  if (m < 1 || products.size() < 2 || targets.size() != products.size()) {
    for (const GroupedProduct& p : products) HLX_RETURN_IF_ERROR(p.weight->multiply(m, a_type, a, c_type, p.c));
    return ok_status();
  }
  HLX_RETURN_IF_ERROR(check_types(a_type, DType::kBF16, c_type));
  const int64_t k = products[0].weight->k();
  if (a_type != DType::kBF16) {  // as multiply() does, once for the group
    void* buf = tl_a.get(size_t(m * k) * 2);
    convert(a_type, a, m * k, DType::kBF16, buf);
    a = buf;
  }
  if (stream)
    internal::gemv_vnni_bf16_avx512_grouped(m, k, static_cast<const bf16*>(a), targets.data(), int(targets.size()),
                                            c_type);
  else
    internal::gemm_bf16_avx512_grouped(m, k, static_cast<const bf16*>(a), targets.data(), int(targets.size()), c_type);
  return ok_status();
}

}  // namespace hlx::kernels
